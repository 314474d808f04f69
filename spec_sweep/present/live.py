"""What the user sees while a sweep runs: a live table of its trials (rich).

This module owns the live display: a table of trials (configuration summary, state, objective
with its within-boot interval, speed-up, failure mode) with the best so far in its title (the
best search trial that meets the constraints, by `core.objective.Objective`; a trial booted with
dummy weights, `budget.fidelity.mode: two`, is marked and never the best), instead of Ray's
raw log stream, and one-line notes (resuming, confirming). Without a terminal it prints one
line per finished trial instead. It is told about trials through plain calls and
`core.outcome.TrialReport`s; it imports no Ray. The end-of-run summary is `terminal`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table

from spec_sweep.core.config import Config
from spec_sweep.core.ids import is_repeat
from spec_sweep.core.names import FIDELITY_DUMMY, SPEEDUP_METRIC, TAG_FIDELITY
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import TrialReport
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.names import config_summary, shown_value
from spec_sweep.spec import SweepSpec

__all__ = ["SweepProgress"]

_MAX_ROWS = 14


@dataclass
class _Row:
    trial_id: str
    config: Config
    state: str = "running"
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    mode: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    dummy: bool = False


class SweepProgress:
    """A live trial table for one sweep run; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        """Draw on `console` (stdout by default)."""
        self.console = console or Console(soft_wrap=True, highlight=False)
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._spec: SweepSpec | None = None

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
        if reattached:
            self._print(f"resuming {spec.name}: {len(finished)}/{spec.budget.trials} trials done")
        else:
            self._print(
                f"sweep {spec.name}: {spec.budget.trials} trials, {spec.searcher.kind} search, "
                f"objective {spec.objective.mode} {spec.objective.metric}"
            )
        if spec.budget.fidelity.two:
            self._print(
                "two fidelities: search trials boot with dummy weights, a tree's acceptance and "
                "the top configurations with real ones; the budget counts both"
            )
        for record in finished:
            mode = record.failure_mode.value if record.failure_mode else "?"
            self._rows[record.trial_id] = _Row(
                record.trial_id,
                record.config,
                state="done",
                ended=time.monotonic(),
                mode=mode,
                metrics=dict(record.metrics),
                dummy=record.tags.get(TAG_FIDELITY) == FIDELITY_DUMMY,
            )
        self._refresh()

    def started(self, trial_id: str, config: Config, *, fidelity: str | None = None) -> None:
        """A trial was launched (`fidelity`: `dummy` on a boot with dummy weights, whose value
        is never the best and whose row says so)."""
        with self._lock:
            self._rows[trial_id] = _Row(trial_id, config, dummy=fidelity == FIDELITY_DUMMY)
        self._refresh()

    def finished(self, trial_id: str, report: TrialReport) -> None:
        """A trial ended (classified, or interrupted)."""
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.ended = time.monotonic()
            row.metrics = dict(report.metrics)
            if report.interrupted:
                row.state = "interrupted"
                row.mode = "environment" if report.environment else "interrupted"
            else:
                row.state = "done"
                row.mode = report.failure_mode.value if report.failure_mode else ""
        if self._live is None:
            self._print(self._line(row))
        self._refresh()

    def retrying(self, trial_id: str) -> None:
        """The trial's node or worker was lost: it is retried once, elsewhere."""
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.state = "retrying"
            row.mode, row.metrics = "node_lost", {}
        if self._live is None:
            self._print(f"{trial_id} node_lost (retrying on another node)")
        self._refresh()

    def errored(self, trial_id: str, error: str) -> None:
        """The machinery around a trial failed."""
        del error  # the row says so; the error file is in Tune's folder
        with self._lock:
            row = self._rows.setdefault(trial_id, _Row(trial_id, {}))
            row.state = "error"
            row.ended = time.monotonic()
            row.mode, row.metrics = "error", {}
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
        """The best search trial so far that meets the constraints."""
        if self._spec is None:
            return None
        objective = Objective.of(self._spec)
        scored = [
            (row, value)
            for row in self._rows.values()
            if row.mode == "none"
            and not row.dummy
            and not is_repeat(row.trial_id)
            and (value := objective.value(row.metrics)) is not None
            and objective.meets(row.metrics)
        ]
        if not scored:
            return None
        return min(scored, key=lambda rv: objective.key(rv[1]))[0]

    def _line(self, row: _Row) -> str:
        metric = self._spec.objective.metric if self._spec else "output_throughput"
        value = shown_value(row.metrics, metric)
        shown = f"{metric}={value}" if value else ""
        up = row.metrics.get(SPEEDUP_METRIC)
        up_text = f" x{up:.3f}" if up is not None else ""
        mode = row.mode or "?"
        weights = " (dummy weights)" if row.dummy else ""
        line = f"{row.trial_id} {mode:<15} {shown}{up_text}  {config_summary(row.config)}"
        return line + weights

    def _render(self) -> Table:
        spec = self._spec
        metric = spec.objective.metric if spec else "objective"
        best = self._best()
        done = sum(1 for r in self._rows.values() if r.state != "running")
        title = f"{spec.name if spec else ''}: {done}/{spec.budget.trials if spec else '?'} trials"
        if spec is not None and spec.budget.fidelity.two:
            dummies = sum(1 for r in self._rows.values() if r.dummy and r.state != "running")
            title += f" ({dummies} with dummy weights; the budget counts both fidelities)"
        if best is not None:
            title += f" | best {best.trial_id}: {best.metrics[metric]:.4g}"
        table = Table(title=title, expand=False)
        for column in ("trial", "configuration", "state", metric, "speed-up", "failure"):
            table.add_column(column)
        rows = sorted(self._rows.values(), key=lambda r: r.trial_id)[-_MAX_ROWS:]
        for row in rows:
            up = row.metrics.get(SPEEDUP_METRIC)
            state = row.state
            if state == "running":
                state = f"running {time.monotonic() - row.started:.0f}s"
            if row.dummy:
                state += " (dummy)"
            style = "green" if best is row else ("red" if row.mode not in ("", "none") else "")
            table.add_row(
                row.trial_id,
                config_summary(row.config, width=48),
                state,
                shown_value(row.metrics, metric),
                f"x{up:.3f}" if up is not None else "",
                "" if row.mode == "none" else row.mode,
                style=style,
            )
        return table
