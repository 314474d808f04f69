"""When a search has converged: `budget.until: converged` (pure).

A sweep's budget is a number of trials, but the answer is often found well before it is spent;
every trial after that is a boot of minutes of a whole node that changes nothing. With
`budget.until: converged` the search stops when both hold:

- **the last `budget.patience` trials brought nothing**: none of them raised the best feasible
  value by more than the measured noise;
- **the models predict nothing better**: no untried configuration the searcher's models can
  rank (the additive model of the system knobs, the speculative-decoding model of the trees,
  `search.spec_guide.SpecGuide.predicted_gain`) is predicted above the best by more than the
  noise. A model with too little evidence to say (the speculative branch alive with fewer than
  two measured trees) keeps the search going.

The noise is what the sweep measured: the median relative half width of the measured trials'
95% within-boot intervals of the objective, never below `verdict.RESOLUTION` (1%), the
smallest difference a sweep ranks. `budget.trials` stays the cap. Then the sweep confirms as
it does after a spent budget. Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spec_sweep.core.names import CI_HIGH, CI_LOW

__all__ = ["FLOOR", "Convergence", "convergence", "search_noise"]

#: The smallest relative difference worth more trials (`verdict.RESOLUTION`).
FLOOR = 0.01


@dataclass(frozen=True)
class Convergence:
    """Whether the search has converged, and why (or why not)."""

    converged: bool
    reason: str


def search_noise(metrics: Sequence[Mapping[str, float]], objective: str) -> float:
    """The measured noise: the median relative half width of the objective's within-boot 95%
    intervals over the measured trials, at least `FLOOR`."""
    halves = []
    for m in metrics:
        value, lo, hi = m.get(objective), m.get(objective + CI_LOW), m.get(objective + CI_HIGH)
        if value and lo is not None and hi is not None and value > 0:
            halves.append((hi - lo) / 2.0 / value)
    return max(FLOOR, statistics.median(halves)) if halves else FLOOR


def _improvement(old: float | None, new: float | None, *, maximize: bool) -> float:
    """How much `new` beats `old`, relative (inf from nothing to something)."""
    if new is None:
        return 0.0
    if old is None or old == 0:
        return math.inf
    return (new - old) / abs(old) if maximize else (old - new) / abs(old)


def _best(values: Sequence[float | None], *, maximize: bool) -> float | None:
    ok = [v for v in values if v is not None]
    if not ok:
        return None
    return max(ok) if maximize else min(ok)


def convergence(
    values: Sequence[float | None],
    *,
    maximize: bool,
    noise: float,
    predicted_gain: float | None,
    patience: int,
    min_trials: int = 0,
) -> Convergence:
    """Whether a search has converged (see the module doc).

    Args:
        values: Each finished search trial's objective value, in order (None: failed or
            breaking a constraint).
        maximize: The objective's direction.
        noise: The measured relative noise (`search_noise`).
        predicted_gain: The most the models predict an untried configuration beats the best by
            (relative); None when no model can rank what is left (only the patience counts);
            `math.inf` when a model lacks the evidence to say.
        patience: Trials that must have brought nothing.
        min_trials: Trials before any stop (the screening design, at least).
    """
    n = len(values)
    if n < max(min_trials, patience + 1):
        return Convergence(
            False, f"{n} trials: too few to judge (at least {max(min_trials, patience + 1)})"
        )
    before = _best(values[: n - patience], maximize=maximize)
    after = _best(values, maximize=maximize)
    gain = _improvement(before, after, maximize=maximize)
    if gain > noise:
        return Convergence(
            False, f"the last {patience} trials raised the best by {gain:.1%} (> {noise:.1%} noise)"
        )
    if predicted_gain is not None and predicted_gain > noise:
        said = "cannot say yet" if math.isinf(predicted_gain) else f"predict +{predicted_gain:.1%}"
        return Convergence(False, f"the models {said} above the best (> {noise:.1%} noise)")
    models = (
        "no model ranks what is left"
        if predicted_gain is None
        else f"the models predict at most {predicted_gain:+.1%} above the best"
    )
    return Convergence(
        True,
        f"converged after {n} trials: the last {patience} raised the best by no more than the "
        f"{noise:.1%} noise and {models}",
    )
