"""The objective of a sweep: values, speed-ups, constraints and the best trial (pure).

This module owns what "better" means for a sweep's records: the objective metric of a measured
trial, the speed-up over the baseline (> 1 is better whatever the direction), the constraint
values Optuna sees (<= 0 feasible), the finished record of each trial id, and the best finished
trial that meets the constraints. The trainable, the driver, the live display and the report all
use these functions, so they agree on every number. No Ray, no MLflow client, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from spec_sweep.failures import FailureMode
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import TrialRecord

__all__ = [
    "BASELINE_ID",
    "SPEEDUP_METRIC",
    "best_metrics",
    "best_record",
    "constraint_violations",
    "finished_in_order",
    "latest_finished",
    "meets_constraints",
    "objective_value",
    "ranked_records",
    "speedup",
    "speedup_metrics",
    "trial_name",
]

#: The id of the baseline trial (evaluated first by every sweep).
BASELINE_ID = "t0000"
#: The metric every measured trial gets once the baseline is measured.
SPEEDUP_METRIC = "speedup_vs_baseline"


def trial_name(index: int) -> str:
    """The id of the `index`-th trial of a sweep (`t0000` is the baseline)."""
    return f"t{index:04d}"


def objective_value(spec: SweepSpec, metrics: Mapping[str, float]) -> float | None:
    """The objective metric of a measured trial (None if not measured or not finite)."""
    value = metrics.get(spec.objective.metric)
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def speedup(spec: SweepSpec, value: float | None, baseline: float | None) -> float | None:
    """Speed-up over the baseline on the objective metric (> 1 is better in both modes)."""
    if value is None or baseline is None or value <= 0 or baseline <= 0:
        return None
    return value / baseline if spec.objective.mode == "max" else baseline / value


def speedup_metrics(
    spec: SweepSpec, metrics: Mapping[str, float], baseline: float | None
) -> dict[str, float]:
    """`{"speedup_vs_baseline": x}` for a measured trial's metrics, or `{}` when not defined.

    Args:
        spec: The sweep.
        metrics: The trial's metrics (empty or without the objective for a failed trial).
        baseline: The baseline's objective value (None while the baseline is not measured).
    """
    up = speedup(spec, objective_value(spec, metrics), baseline)
    return {} if up is None else {SPEEDUP_METRIC: round(up, 4)}


def constraint_violations(spec: SweepSpec, metrics: Mapping[str, float]) -> dict[str, float]:
    """Optuna constraint values (<= 0 feasible) of the objective's constraints."""
    out: dict[str, float] = {}
    for name, bound in spec.objective.constraints.items():
        value = metrics.get(name)
        out[name] = 1.0 if value is None else bound.violation(value)
    return out


def latest_finished(records: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
    """Finished trials by trial id (one each: the first finished record of each id)."""
    out: dict[str, TrialRecord] = {}
    for record in records:
        if record.finished and record.trial_id not in out:
            out[record.trial_id] = record
    return out


def finished_in_order(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """One finished record per trial id, in the order the trials started."""
    return sorted(latest_finished(records).values(), key=lambda r: (r.start_time, r.trial_id))


def meets_constraints(spec: SweepSpec, metrics: Mapping[str, float]) -> bool:
    """Whether a trial's metrics meet every constraint of the objective."""
    return all(v <= 0 for v in constraint_violations(spec, metrics).values())


def ranked_records(spec: SweepSpec, records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The measured trials (one finished record per id), best first: the one ranking rule.

    Measured (no failure, the objective known), then meeting the constraints before breaking
    them, then the objective in its direction (ties: the earlier trial first). The summary's
    table, the `best:` line and the report all rank with this, so rank 1 is the best trial
    whenever one meets the constraints.
    """
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    measured = [
        (r, v)
        for r in finished_in_order(records)
        if r.failure_mode is FailureMode.NONE
        and (v := objective_value(spec, r.metrics)) is not None
    ]
    measured.sort(key=lambda rv: (not meets_constraints(spec, rv[0].metrics), -sign * rv[1]))
    return [r for r, _ in measured]


def best_record(spec: SweepSpec, records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The best finished trial that meets the constraints (rank 1 of `ranked_records`)."""
    ranked = ranked_records(spec, records)
    if ranked and meets_constraints(spec, ranked[0].metrics):
        return ranked[0]
    return None


def best_metrics(spec: SweepSpec, records: Sequence[TrialRecord]) -> dict[str, float]:
    """`{"best_<objective metric>": value}` for the sweep's parent run, or `{}`."""
    best = best_record(spec, records)
    if best is None:
        return {}
    value = objective_value(spec, best.metrics)
    return {f"best_{spec.objective.metric}": value} if value is not None else {}
