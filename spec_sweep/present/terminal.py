"""What the user sees when a sweep ends: the summary on the terminal (rich).

This module renders a `sweep_view.SweepView` as the end-of-run summary: the ranked top
configurations (with the constraints each breaks, when the objective has constraints), failures
by mode, the winner per concurrency level and the cost, the quality gate's verdicts, the
confirmation table with its verdict and drift, one configuration for every load
(`adaptive_view`), the configuration to launch as a ready-to-paste command, where to look in
MLflow and the report, and why the run stopped when it did not finish. The live table is `live`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from spec_sweep.core.names import SPEEDUP_METRIC
from spec_sweep.core.verdict import Verdict
from spec_sweep.present.adaptive_view import adaptive_lines
from spec_sweep.present.names import config_summary, shown_value
from spec_sweep.present.sweep_view import SweepView, is_lossy
from spec_sweep.spec import SweepSpec

__all__ = ["SweepSummary", "print_summary"]

_TOP = 5


class _State(Protocol):
    @property
    def path(self) -> Path: ...


class SweepSummary(Protocol):
    """How a sweep run ended (the driver's `SweepOutcome` has all of it)."""

    @property
    def state(self) -> _State: ...
    @property
    def parent_run_id(self) -> str: ...
    @property
    def view(self) -> SweepView: ...
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
    def warnings(self) -> list[str]: ...
    @property
    def converged(self) -> str | None: ...


def print_summary(console: Console, outcome: SweepSummary) -> None:
    """Print the end-of-run summary of a sweep run."""
    view = outcome.view
    spec = view.spec
    parts: list[Any] = [_ranking(view)]
    if view.failures:
        counts = ", ".join(f"{mode} {n}" for mode, n in sorted(view.failures.items()))
        parts.append(Text(f"failures: {counts}"))
    parts += [Text(line) for line in view.fidelity_lines()]
    parts += [Text(line) for line in view.load_and_cost_lines()]
    parts += [Text(line) for line in view.quality_lines()]
    parts += [Text(line) for line in view.hours_lines()]
    if view.verdict is not None:
        parts += _verdict_lines(spec, view.verdict)
    adaptive_file = getattr(outcome, "adaptive_file", None)
    parts += adaptive_lines(view, config_path=str(adaptive_file) if adaptive_file else None)
    parts += _pick_lines(view)
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
    ending = _ending(spec, outcome, finished=view.finished)
    if ending is not None:
        parts.append(ending)
    console.print(Group(*parts))


def _ranking(view: SweepView) -> Table:
    """The top configurations, in the one ranking order."""
    spec = view.spec
    metric = spec.objective.metric
    table = Table(
        title=f"top configurations ({len(view.ranked)} measured of {view.finished} trials)"
    )
    columns = ["rank", "trial", metric, "speed-up", "configuration"]
    if spec.objective.constraints:
        columns.insert(4, "constraints")
    for column in columns:
        table.add_column(column)
    for row in view.top(_TOP):
        record = row.record
        up = record.metrics.get(SPEEDUP_METRIC)
        cells = [
            str(row.rank),
            record.trial_id + (" (lossy)" if is_lossy(record) else ""),
            shown_value(record.metrics, metric),
            f"x{up:.3f}" if up is not None else "",
            config_summary(record.config, width=70),
        ]
        if spec.objective.constraints:
            cells.insert(4, "broken: " + ", ".join(row.broken) if row.broken else "ok")
        table.add_row(*cells)
    return table


def _pick_lines(view: SweepView) -> list[Text]:
    """The configuration to launch: the recommendation, else the best single measurement."""
    pick = view.pick
    if pick is None:
        return [Text("\nno trial met the objective's constraints yet")]
    command = Text("  " + view.command(pick.config))
    lossy = [Text(line, style="yellow") for line in view.lossy_lines()]
    if pick.recommended:
        return [Text(f"\nrecommended: {pick.trial_id}; launch it with:"), command, *lossy]
    best = view.best
    assert best is not None
    value = view.history.value(best)
    up = best.metrics.get(SPEEDUP_METRIC)
    line = f"\nbest: {best.trial_id} {view.spec.objective.metric} = {value:.4g}"
    if up is not None:
        line += f" (x{up:.3f} over the baseline)"
    return [Text(line), Text("launch it with:"), command, *lossy]


def _ending(spec: SweepSpec, outcome: SweepSummary, *, finished: int) -> Text | None:
    """Why the run stopped before its end, if it did."""
    if outcome.environment:
        return Text(
            f"\nstopped: the node cannot start a server, whatever the configuration "
            f"({outcome.environment}). Nothing was recorded against a configuration; "
            "fix the node, then run the same command again to resume",
            style="red",
        )
    if outcome.interrupted:
        return Text(
            f"\ninterrupted after {finished}/{spec.budget.trials} trials: "
            "run the same command again to resume",
            style="yellow",
        )
    if outcome.out_of_time:
        return Text(
            f"\nbudget.max_hours ({spec.budget.max_hours:g} h) used up after "
            f"{finished}/{spec.budget.trials} trials: run the same command again to continue",
            style="yellow",
        )
    if outcome.exhausted:
        return Text(f"\nsearch space exhausted after {finished} distinct configurations")
    if outcome.converged:
        return Text(
            f"\nsearch stopped before its budget of {spec.budget.trials}: {outcome.converged}"
        )
    return None


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
