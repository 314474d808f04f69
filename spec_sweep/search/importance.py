"""Parameter importances: which knobs moved the objective, by Optuna's evaluators.

`importances` rebuilds an Optuna study from measured trials (`sampling.add_finished`, as a
resumed sweep does) and asks Optuna's fANOVA and PED-ANOVA evaluators which of the parameters
that varied mattered; the report draws them. An evaluator that fails is named in a note, never
an error.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.search import sampling
from spec_sweep.spec import SweepSpec

__all__ = ["MIN_IMPORTANCE_TRIALS", "Importances", "importances"]

#: Fewest measured trials for which parameter importances are computed.
MIN_IMPORTANCE_TRIALS = 4


@dataclass(frozen=True)
class Importances:
    """Parameter importances of one group of trials, by evaluator (normalised to sum 1)."""

    title: str
    by_evaluator: dict[str, dict[str, float]]
    trials: int


def importances(
    spec: SweepSpec, records: Sequence[TrialRecord], *, title: str
) -> tuple[Importances | None, str]:
    """Optuna's parameter importances over measured trials (or a note saying why not)."""
    objective = Objective.of(spec)
    measured = [
        (r, v)
        for r in records
        if r.failure_mode is FailureMode.NONE and (v := objective.value(r.metrics)) is not None
    ]
    if len(measured) < MIN_IMPORTANCE_TRIALS:
        return None, (
            f"{title}: {len(measured)} measured trials, importances need at least "
            f"{MIN_IMPORTANCE_TRIALS}"
        )
    common = set(spec.params)
    for record, _ in measured:
        common &= set(record.config)
    varied = [
        k
        for k in spec.params
        if k in common and len({json.dumps(r.config[k]) for r, _ in measured}) > 1
    ]
    if not varied:
        return None, f"{title}: no parameter took more than one value in every measured trial"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=objective.direction)
    for record, value in measured:
        sampling.add_finished(
            study,
            spec,
            record.config,
            value=value,
            failed=False,
            constraints=objective.violations(record.metrics),
            trial_id=record.trial_id,
        )
    evaluators: list[tuple[str, Callable[[], Any]]] = [
        ("fANOVA", lambda: optuna.importance.FanovaImportanceEvaluator(seed=0)),
        ("PED-ANOVA", lambda: optuna.importance.PedAnovaImportanceEvaluator()),
    ]
    found: dict[str, dict[str, float]] = {}
    errors: list[str] = []
    for name, make in evaluators:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = optuna.importance.get_param_importances(
                    study, evaluator=make(), params=varied
                )
        except Exception as exc:  # an evaluator's own limits must not stop the report
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        cleaned = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
        if cleaned:
            found[name] = cleaned
    note = "; ".join(errors)
    if not found:
        return None, f"{title}: no importance evaluator succeeded ({note})"
    return Importances(title=title, by_evaluator=found, trials=len(measured)), note
