"""The objective: what "better" means for a sweep (pure).

This module owns `Objective`, made once from the spec: the objective metric's value of a
measured trial, its direction (`max` or `min`, and Optuna's `maximize` / `minimize`), which of
two values is better, the speed-up over the baseline (> 1 is better in both directions) and
the constraint values Optuna sees (<= 0 feasible). Every module that compares trials does it
through this class (`history.History` ranks with it), so none of them spells the direction
out again. Standard library and the spec only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spec_sweep.core.names import SPEEDUP_METRIC
from spec_sweep.spec import BoundSpec, SweepSpec

__all__ = ["Objective"]


@dataclass(frozen=True)
class Objective:
    """A metric to maximise or minimise, with optional constraints on other metrics.

    Attributes:
        metric: The objective metric.
        mode: `max` or `min`.
        constraints: Metric name -> bound a trial must meet to count as the answer.
    """

    metric: str
    mode: str = "max"
    constraints: Mapping[str, BoundSpec] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: SweepSpec) -> Objective:
        """The sweep's objective (`objective:` in the spec)."""
        o = spec.objective
        return cls(metric=o.metric, mode=o.mode, constraints=dict(o.constraints))

    @property
    def sign(self) -> float:
        """+1 when larger values are better, -1 when smaller ones are."""
        return 1.0 if self.mode == "max" else -1.0

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        """Optuna's name for the direction."""
        return "maximize" if self.mode == "max" else "minimize"

    def value(self, metrics: Mapping[str, float]) -> float | None:
        """The objective metric of a measured trial (None if not measured or not finite)."""
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(value):
            return None
        return float(value)

    def key(self, value: float) -> float:
        """A sort key: the better the value, the smaller the key."""
        return -self.sign * value

    def better(self, a: float, b: float | None) -> bool:
        """Whether `a` is strictly better than `b` (anything beats None)."""
        return b is None or self.sign * a > self.sign * b

    def speedup(self, value: float | None, baseline: float | None) -> float | None:
        """Speed-up over the baseline on the objective metric (> 1 is better in both modes)."""
        if value is None or baseline is None or value <= 0 or baseline <= 0:
            return None
        return value / baseline if self.mode == "max" else baseline / value

    def speedup_metrics(
        self, metrics: Mapping[str, float], baseline: float | None
    ) -> dict[str, float]:
        """`{"speedup_vs_baseline": x}` for a measured trial's metrics, or `{}` when not defined.

        Args:
            metrics: The trial's metrics (empty or without the objective for a failed trial).
            baseline: The baseline's objective value (None while the baseline is not measured).
        """
        up = self.speedup(self.value(metrics), baseline)
        return {} if up is None else {SPEEDUP_METRIC: round(up, 4)}

    def violations(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """Optuna constraint values (<= 0 feasible) of the objective's constraints."""
        out: dict[str, float] = {}
        for name, bound in self.constraints.items():
            value = metrics.get(name)
            out[name] = 1.0 if value is None else bound.violation(value)
        return out

    def broken(self, metrics: Mapping[str, float]) -> list[str]:
        """The constraints a trial's metrics break."""
        return [name for name, v in self.violations(metrics).items() if v > 0]

    def meets(self, metrics: Mapping[str, float]) -> bool:
        """Whether a trial's metrics meet every constraint of the objective."""
        return all(v <= 0 for v in self.violations(metrics).values())
