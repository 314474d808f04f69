"""What the user sees while a sweep runs and when it ends (rich).

This module owns the terminal: a live table of trials (configuration summary, state,
throughput, speed-up, failure mode) with the best so far in its title, instead of Ray's raw log
stream; then the end-of-sweep summary: ranked top configurations, failures by mode, the best
configuration as a ready-to-paste `python -m sglang.launch_server ...` command and where to look
in the MLflow UI. It reads trial results as plain dicts and records; it imports no Ray.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from spec_sweep.loads import load_and_cost_lines
from spec_sweep.metrics import CI_HIGH, CI_LOW
from spec_sweep.search.confirm import Verdict
from spec_sweep.search.objective import (
    best_record,
    constraint_violations,
    objective_value,
    ranked_records,
)
from spec_sweep.space import Config, build_command, redact, secret_values
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import TrialRecord

__all__ = ["SweepProgress", "SweepSummary", "config_summary"]

_MAX_ROWS = 14


def config_summary(config: Mapping[str, Any], *, width: int = 60) -> str:
    """A short one-line description of a configuration (flags set, env vars)."""
    parts = []
    for key, value in config.items():
        if value is None or value is False:
            continue
        name = key.removeprefix("speculative-").removeprefix("env.")
        parts.append(name if value is True else f"{name}={value}")
    text = " ".join(parts) or "(defaults)"
    return text if len(text) <= width else text[: width - 1] + "…"


class _State(Protocol):
    @property
    def path(self) -> Path: ...


class SweepSummary(Protocol):
    """What the end-of-run summary shows (the driver's `SweepOutcome` has all of it)."""

    @property
    def state(self) -> _State: ...
    @property
    def parent_run_id(self) -> str: ...
    @property
    def records(self) -> list[TrialRecord]: ...
    @property
    def interrupted(self) -> bool: ...
    @property
    def exhausted(self) -> bool: ...
    @property
    def report(self) -> Path | None: ...
    @property
    def report_error(self) -> str | None: ...
    @property
    def environment(self) -> str | None: ...
    @property
    def out_of_time(self) -> bool: ...
    @property
    def verdict(self) -> Verdict | None: ...
    @property
    def warnings(self) -> list[str]: ...


def shown_value(metrics: Mapping[str, Any], metric: str) -> str:
    """`1234 ±0.8%`: a metric with the half width of its 95% within-boot interval, if known."""
    value = metrics.get(metric)
    if not isinstance(value, int | float):
        return ""
    lo, hi = metrics.get(metric + CI_LOW), metrics.get(metric + CI_HIGH)
    if isinstance(lo, int | float) and isinstance(hi, int | float) and value > 0:
        return f"{value:.4g} ±{(hi - lo) / 2 / value:.1%}"
    return f"{value:.4g}"


@dataclass
class _Row:
    trial_id: str
    config: Config
    state: str = "running"
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    result: dict[str, Any] = field(default_factory=dict)


class SweepProgress:
    """A live trial table for one sweep run; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        """Draw on `console` (stdout by default)."""
        self.console = console or Console(soft_wrap=True, highlight=False)
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._spec: SweepSpec | None = None
        self._done_before = 0

    def __enter__(self) -> SweepProgress:
        if self.console.is_terminal:
            self._live = Live(
                self._render(), console=self.console, refresh_per_second=2, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            self._live = None

    def begin(self, spec: SweepSpec, *, finished: Sequence[TrialRecord], reattached: bool) -> None:
        """The sweep starts (or resumes with `finished` trials already done)."""
        self._spec = spec
        self._done_before = len(finished)
        if reattached:
            self._print(f"resuming {spec.name}: {len(finished)}/{spec.budget.trials} trials done")
        else:
            self._print(
                f"sweep {spec.name}: {spec.budget.trials} trials, {spec.searcher.kind} search, "
                f"objective {spec.objective.mode} {spec.objective.metric}"
            )
        for record in finished:
            row = _Row(record.trial_id, record.config, state="done", ended=time.monotonic())
            row.result = {
                "failure_mode": record.failure_mode.value if record.failure_mode else "?",
                **record.metrics,
            }
            self._rows[record.trial_id] = row
        self._refresh()

    def started(self, trial_id: str, config: Config) -> None:
        """A trial was launched."""
        with self._lock:
            self._rows[trial_id] = _Row(trial_id, config)
        self._refresh()

    def finished(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """A trial reached a classified outcome."""
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.state = "interrupted" if result.get("interrupted") else "done"
            row.ended = time.monotonic()
            row.result = dict(result)
            if result.get("interrupted"):
                row.result["failure_mode"] = (
                    "environment" if result.get("environment") else "interrupted"
                )
        if self._live is None:
            self._print(self._line(row))
        self._refresh()

    def retrying(self, trial_id: str) -> None:
        """The trial's node or worker was lost: it is retried once, elsewhere."""
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.state = "retrying"
            row.result = {"failure_mode": "node_lost"}
        if self._live is None:
            self._print(f"{trial_id} node_lost (retrying on another node)")
        self._refresh()

    def errored(self, trial_id: str, error: str) -> None:
        """The machinery around a trial failed."""
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.state = "error"
            row.ended = time.monotonic()
            row.result = {"failure_mode": "error", "reason": error}
        self._refresh()

    def note(self, text: str) -> None:
        """A line of news (e.g. the confirmation phase starting)."""
        self._print(text)

    def _print(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text)
        else:
            self.console.print(text)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _best(self) -> _Row | None:
        spec = self._spec
        if spec is None:
            return None
        sign = 1.0 if spec.objective.mode == "max" else -1.0
        scored = [
            r
            for r in self._rows.values()
            if r.result.get("failure_mode") == "none"
            and isinstance(r.result.get(spec.objective.metric), int | float)
        ]
        return max(scored, key=lambda r: sign * r.result[spec.objective.metric], default=None)

    def _line(self, row: _Row) -> str:
        metric = self._spec.objective.metric if self._spec else "output_throughput"
        mode = row.result.get("failure_mode", "?")
        value = shown_value(row.result, metric)
        shown = f"{metric}={value}" if value else ""
        up = row.result.get("speedup_vs_baseline")
        up_text = f" x{up:.3f}" if isinstance(up, int | float) else ""
        return f"{row.trial_id} {mode:<15} {shown}{up_text}  {config_summary(row.config)}"

    def _render(self) -> Table:
        spec = self._spec
        metric = spec.objective.metric if spec else "objective"
        best = self._best()
        done = sum(1 for r in self._rows.values() if r.state != "running")
        title = f"{spec.name if spec else ''}: {done}/{spec.budget.trials if spec else '?'} trials"
        if best is not None:
            title += f" | best {best.trial_id}: {best.result[metric]:.4g}"
        table = Table(title=title, expand=False)
        for column in ("trial", "configuration", "state", metric, "speed-up", "failure"):
            table.add_column(column)
        rows = sorted(self._rows.values(), key=lambda r: r.trial_id)[-_MAX_ROWS:]
        for row in rows:
            up = row.result.get("speedup_vs_baseline")
            mode = str(row.result.get("failure_mode", ""))
            state = row.state
            if state == "running":
                state = f"running {time.monotonic() - row.started:.0f}s"
            style = "green" if best is row else ("red" if mode not in ("", "none") else "")
            table.add_row(
                row.trial_id,
                config_summary(row.config, width=48),
                state,
                shown_value(row.result, metric),
                f"x{up:.3f}" if isinstance(up, int | float) else "",
                "" if mode == "none" else mode,
                style=style,
            )
        return table

    def summary(self, spec: SweepSpec, outcome: SweepSummary) -> None:
        """The end-of-run summary."""
        console = self.console
        records = [r for r in outcome.records if r.finished]
        latest: dict[str, TrialRecord] = {}
        for record in records:
            latest.setdefault(record.trial_id, record)
        finished = list(latest.values())
        metric = spec.objective.metric
        ranked = ranked_records(spec, finished)
        table = Table(
            title=f"top configurations ({len(ranked)} measured of {len(finished)} trials)"
        )
        columns = ["rank", "trial", metric, "speed-up", "configuration"]
        if spec.objective.constraints:
            columns.insert(4, "constraints")
        for column in columns:
            table.add_column(column)
        for rank, record in enumerate(ranked[:5], start=1):
            up = record.metrics.get("speedup_vs_baseline")
            cells = [
                str(rank),
                record.trial_id,
                shown_value(record.metrics, metric),
                f"x{up:.3f}" if up is not None else "",
                config_summary(record.config, width=70),
            ]
            if spec.objective.constraints:
                violations = constraint_violations(spec, record.metrics)
                broken = [name for name, v in violations.items() if v > 0]
                cells.insert(4, "broken: " + ", ".join(broken) if broken else "ok")
            table.add_row(*cells)
        parts: list[Any] = [table]
        counts = Counter(r.failure_mode.value for r in finished if r.failure_mode)
        failures = {k: v for k, v in counts.items() if k != "none"}
        if failures:
            parts.append(
                Text(
                    "failures: " + ", ".join(f"{mode} {n}" for mode, n in sorted(failures.items()))
                )
            )
        parts += [Text(line) for line in load_and_cost_lines(spec, outcome.records)]
        verdict = outcome.verdict
        if verdict is not None:
            parts += _verdict_lines(spec, verdict)
        best = best_record(spec, outcome.records)
        if verdict is not None and verdict.recommended is not None:
            parts.append(Text(f"\nrecommended: {verdict.recommended.trial_id}; launch it with:"))
            command = build_command(spec, verdict.recommended.config).shell()
            parts.append(Text("  " + redact(command, secret_values(spec))))
        elif best is not None:
            value = objective_value(spec, best.metrics)
            up = best.metrics.get("speedup_vs_baseline")
            parts.append(
                Text(
                    f"\nbest: {best.trial_id} {metric} = {value:.4g}"
                    + (f" (x{up:.3f} over the baseline)" if up is not None else "")
                )
            )
            parts.append(Text("launch it with:"))
            command = build_command(spec, best.config).shell()
            parts.append(Text("  " + redact(command, secret_values(spec))))
        else:
            parts.append(Text("\nno trial met the objective's constraints yet"))
        ui = f"spec-sweep ui {spec.source}" if spec.source else "spec-sweep ui"
        parts.append(
            Text(
                f"\nMLflow: experiment {spec.experiment!r}, parent run {outcome.parent_run_id} "
                f"(`{ui}` serves the UI and prints the URL of its trials, best first); "
                f"state: {outcome.state.path}"
            )
        )
        for warning in outcome.warnings:
            parts.append(Text(f"warning: {warning}", style="yellow"))
        if outcome.report is not None:
            parts.append(Text(f"report: {outcome.report}"))
        elif outcome.report_error:
            parts.append(Text(f"report not built: {outcome.report_error}", style="yellow"))
        if outcome.environment:
            parts.append(
                Text(
                    f"\nstopped: the node cannot start a server, whatever the configuration "
                    f"({outcome.environment}). Nothing was recorded against a configuration; "
                    "fix the node, then run the same command again to resume",
                    style="red",
                )
            )
        elif outcome.interrupted:
            parts.append(
                Text(
                    f"\ninterrupted after {len(finished)}/{spec.budget.trials} trials: "
                    "run the same command again to resume",
                    style="yellow",
                )
            )
        elif outcome.out_of_time:
            parts.append(
                Text(
                    f"\nbudget.max_hours ({spec.budget.max_hours:g} h) used up after "
                    f"{len(finished)}/{spec.budget.trials} trials: run the same command again "
                    "to continue",
                    style="yellow",
                )
            )
        elif outcome.exhausted:
            parts.append(
                Text(f"\nsearch space exhausted after {len(finished)} distinct configurations")
            )
        console.print(Group(*parts))


def _verdict_lines(spec: SweepSpec, verdict: Verdict) -> list[Any]:
    """The confirmation table and its verdict for the summary."""
    metric = spec.objective.metric
    table = Table(
        title=f"confirmation: {verdict.spent} extra boot(s); {verdict.label} "
        "(pooled boots, 95% interval from the between-boot spread)"
    )
    for column in ("trial", f"{metric} pooled", "95% interval", "boots", "flags changed"):
        table.add_column(column)
    for c in verdict.candidates:
        table.add_row(
            c.trial_id,
            f"{c.mean:.4g}",
            f"{c.ci_low:.4g} - {c.ci_high:.4g}",
            ", ".join(f"{v:.4g}" for v in c.values),
            str(c.changed_flags),
        )
    lines: list[Any] = [table, Text(verdict.reason)]
    if verdict.drift is not None:
        d = verdict.drift
        lines.append(
            Text(
                f"baseline drift: {d.describe()}"
                + (": the node changed under the sweep" if d.beyond_noise else ""),
                style="yellow" if d.beyond_noise else "",
            )
        )
    return lines
