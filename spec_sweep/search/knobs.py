"""The system-knob model: an additive (ridge) model of the measured trials' log objective.

Each measured trial's log objective is fitted as an intercept plus one effect per (parameter,
value) it had, with a ridge penalty so a value seen once moves little (`fit_effects`). The
searcher's system-knob steps rank the best trial's one-knob changes by it, and every measured
trial whose values were all measured before tests it (`Effects.predict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_sweep.spec import Scalar

__all__ = ["RIDGE", "Effects", "fit_effects"]

#: Ridge penalty of the additive model.
RIDGE = 0.3


@dataclass(frozen=True)
class Effects:
    """The fitted model: intercept and each (parameter, repr(value))'s effect on log objective."""

    intercept: float = 0.0
    effects: dict[tuple[str, str], float] = field(default_factory=dict)

    def get(self, item: tuple[str, str], default: float = 0.0) -> float:
        """One value's effect (`default` when it was never measured)."""
        return self.effects.get(item, default)

    def knows(self, config: Mapping[str, Scalar]) -> bool:
        """Whether every value of `config` was measured in the fit."""
        return bool(self.effects) and all((k, repr(v)) in self.effects for k, v in config.items())

    def total(self, config: Mapping[str, Scalar]) -> float:
        """The sum of `config`'s value effects (log objective, the intercept left out)."""
        return sum(self.get((k, repr(v))) for k, v in config.items())

    def predict(self, config: Mapping[str, Scalar]) -> float:
        """The predicted objective of `config` (max-mode units)."""
        return math.exp(self.intercept + self.total(config))


def fit_effects(trials: Sequence[tuple[Mapping[str, Scalar], float]]) -> Effects:
    """Ridge estimates from (configuration, positive objective) pairs (empty: fewer than two)."""
    ok = [(c, v) for c, v in trials if v > 0]
    if len(ok) < 2:
        return Effects()
    items = sorted({(k, repr(v)) for c, _ in ok for k, v in c.items()})
    index = {item: i for i, item in enumerate(items)}
    x = np.zeros((len(ok), len(items) + 1))
    y = np.zeros(len(ok))
    for row, (config, value) in enumerate(ok):
        x[row, -1] = 1.0
        for k, v in config.items():
            x[row, index[(k, repr(v))]] = 1.0
        y[row] = math.log(value)
    penalty = np.full(len(items) + 1, RIDGE)
    penalty[-1] = 1e-6
    coef = np.linalg.solve(x.T @ x + np.diag(penalty), x.T @ y)
    return Effects(float(coef[-1]), {item: float(coef[i]) for item, i in index.items()})
