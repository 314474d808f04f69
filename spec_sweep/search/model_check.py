"""Whether a search model's predictions hold on this node: predicted against measured, per trial.

This module owns the rule that takes a model's turns away from it when it is wrong. Every trial
the model can predict is a test: before the trial is told to the model, the model (fitted on the
trials before it) predicts what the trial measures (`ModelCheck.record`: one or more predicted
and measured quantities, each with the noise it is allowed). A quantity misses when
`|log(measured / predicted)|` is beyond its tolerance, `max(floor, Z_NOISE x the trial's own
relative noise)` (the within-boot 95% interval's half width when the trial has one, else the
floor alone); a trial misses when any of its quantities does. The model is **distrusted** once
`MISSES` of its last `WINDOW` checks missed, and **trusted again** once its last `HITS` checks
hit; while it is distrusted its turns go to model-free exploration, and it keeps being tested on
those trials, so it earns its turns back where it predicts well.

The constants were chosen on the tuning seeds of both landscape families
(`benchmarks/search_efficiency.py --family tuning`), never on the test seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["HITS", "MISSES", "WINDOW", "Z_NOISE", "Check", "ModelCheck", "Quantity"]

#: Checks looked back over; misses among them that distrust the model.
WINDOW = 3
MISSES = 2
#: Consecutive hits that trust a distrusted model again.
HITS = 2
#: A miss is beyond this many times the trial's own relative noise (and beyond the floor).
Z_NOISE = 2.0


@dataclass(frozen=True)
class Quantity:
    """One predicted quantity of a trial and what was measured.

    Attributes:
        name: What it is (`throughput`, `accept_length`, `objective`).
        predicted: The model's prediction, made without this trial.
        measured: What the trial measured.
        floor: The least relative error that counts as a miss for this quantity.
        noise: The trial's own relative noise on it (0: unknown, the floor alone).
    """

    name: str
    predicted: float
    measured: float
    floor: float
    noise: float = 0.0

    @property
    def error(self) -> float:
        """log(measured / predicted); 0 when either is not positive."""
        if self.predicted <= 0 or self.measured <= 0:
            return 0.0
        return math.log(self.measured / self.predicted)

    @property
    def tolerance(self) -> float:
        """The relative error beyond which this quantity misses."""
        return max(self.floor, Z_NOISE * self.noise)

    @property
    def missed(self) -> bool:
        """Whether the prediction missed the measurement by more than the noise allows."""
        return abs(self.error) > self.tolerance


@dataclass(frozen=True)
class Check:
    """One trial's test of the model."""

    trial: str
    quantities: tuple[Quantity, ...]

    @property
    def missed(self) -> bool:
        """Whether any quantity missed."""
        return any(q.missed for q in self.quantities)


@dataclass
class ModelCheck:
    """A model's record of predictions on this node, and whether its turns are its own."""

    name: str
    checks: list[Check] = field(default_factory=list)
    trusted: bool = True
    switches: list[tuple[int, bool]] = field(default_factory=list)  # (check index, trusted)

    def record(self, trial: str, quantities: Sequence[Quantity]) -> Check | None:
        """Record one trial's predictions against its measurements; update the trust."""
        if not quantities:
            return None
        check = Check(trial, tuple(quantities))
        self.checks.append(check)
        recent = [c.missed for c in self.checks[-WINDOW:]]
        if self.trusted and sum(recent) >= MISSES:
            self._switch(False)
        elif not self.trusted and not any(c.missed for c in self.checks[-HITS:]):
            self._switch(True)
        return check

    def typical_miss(self, name: str) -> float:
        """The root mean square of the logged errors of quantity `name` (0 before any)."""
        errors = [q.error for c in self.checks for q in c.quantities if q.name == name]
        return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0

    def _switch(self, trusted: bool) -> None:
        self.trusted = trusted
        self.switches.append((len(self.checks), trusted))
