"""A small speculative-decoding performance model, fitted from the speculative trials of a sweep.

This module owns the physics a sweep uses to rank EAGLE trees it has not tried, the same
physics as the report's break-even diagnosis: a cycle emits `L` tokens (the accept length) and
costs `steps` draft steps, one verify forward over the draft tokens and a fixed part, so
throughput is proportional to `L / cost`.

* **Acceptance by depth and width**: depth `d` (0-based) is accepted, given the shallower ones
  were, with `1 - (1 - a * r**d) * (1 - g)**(w_d - 1)`, where `w_d` is how many draft tokens sit
  at that depth (they fill depths first, then widen them up to top-k, as SGLang keeps the
  best-scored candidates). `a`, `r`, `g` are fitted (least squares on a grid) to the
  `accept_length` the trials measured; before any is measured, a typical EAGLE-3 head
  (a = 0.7, r = 0.9, g = 0.25) stands in.
* **Cycle cost by draft tokens and steps**: `cost = c0 + c1 * steps * (1 + 0.08 (topk - 1)) +
  c2 * draft_tokens`, fitted (non-negative least squares over the few terms) to the measured
  `accept_length / throughput` of each trial, which is proportional to its cycle time; a step
  whose tokens (`concurrency x draft tokens`) exceed the captured CUDA-graph size pays the
  eager factor, fitted the same way once such a trial ran (1.6 before).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SpecModel", "TreeObservation", "accept_length", "depth_widths"]

_PRIOR = (0.7, 0.9, 0.25)
_GRID_A = tuple(x / 100 for x in range(30, 97, 3))
_GRID_R = tuple(x / 100 for x in range(70, 101, 3))
_GRID_G = tuple(x / 100 for x in range(0, 71, 5))
_TOPK_COST = 0.08
_EAGER_PRIOR = 1.6
#: The (a, r, g) grid as arrays, in `itertools.product` order (the fit scans it at once).
_GRID = np.asarray(list(itertools.product(_GRID_A, _GRID_R, _GRID_G))).T


def depth_widths(steps: int, topk: int, draft_tokens: int) -> list[int]:
    """Draft tokens per depth: one per depth first, then widening from the top to `topk`."""
    nodes = max(0, draft_tokens - 1)
    widths = [1 if d < nodes else 0 for d in range(steps)]
    left = nodes - sum(widths)
    for d in range(steps):
        extra = min(left, max(0, topk - widths[d]))
        widths[d] += extra
        left -= extra
    return widths


def accept_length(a: float, r: float, g: float, widths: Sequence[int]) -> float:
    """Expected tokens per cycle (the bonus token included) of a tree with these widths."""
    length, prob = 1.0, 1.0
    for d, width in enumerate(widths):
        if width == 0:
            break
        p = min(0.999, a * r**d)
        prob *= 1.0 - (1.0 - p) * (1.0 - g) ** (width - 1)
        length += prob
    return length


def _grid_accept_length(widths: Sequence[int]) -> np.ndarray:
    """`accept_length` at every (a, r, g) of the fitting grid at once."""
    a, r, g = _GRID
    length, prob = np.ones(a.shape), np.ones(a.shape)
    for d, width in enumerate(widths):
        if width == 0:
            break
        p = np.minimum(0.999, a * r**d)
        prob = prob * (1.0 - (1.0 - p) * (1.0 - g) ** (width - 1))
        length = length + prob
    return length


@dataclass(frozen=True)
class TreeObservation:
    """One measured speculative trial."""

    steps: int
    topk: int
    draft_tokens: int
    throughput: float
    accept_length: float | None
    eager: bool = False


class SpecModel:
    """Predicted throughput of EAGLE trees, relative to the measured ones (same system knobs)."""

    def __init__(self, observations: Sequence[TreeObservation]) -> None:
        """Fit acceptance and cycle cost to the observations (priors when there are none)."""
        self.observations = list(observations)
        self.accept = self._fit_accept()
        self.cost, self.eager = self._fit_cost()

    def _fit_accept(self) -> tuple[float, float, float]:
        data = [
            (depth_widths(o.steps, o.topk, o.draft_tokens), o.accept_length)
            for o in self.observations
            if o.accept_length is not None and o.accept_length > 0
        ]
        if not data:
            return _PRIOR
        a, r, g = _GRID
        err = np.zeros(a.shape)
        for widths, obs in data:
            err += (_grid_accept_length(widths) - obs) ** 2
        # A weak pull to the prior keeps one observation from fixing three parameters.
        err += 0.02 * ((a - _PRIOR[0]) ** 2 + (r - _PRIOR[1]) ** 2 + (g - _PRIOR[2]) ** 2)
        i = int(np.argmin(err))  # the first of equal errors, as a scan in grid order keeps
        return float(a[i]), float(r[i]), float(g[i])

    def _features(self, steps: int, topk: int, draft_tokens: int) -> list[float]:
        return [1.0, steps * (1.0 + _TOPK_COST * (topk - 1)), float(draft_tokens)]

    def _fit_cost(self) -> tuple[tuple[float, float, float], float]:
        rows, costs, eager = [], [], []
        for o in self.observations:
            if o.throughput <= 0:
                continue
            length = o.accept_length or self.length(o.steps, o.topk, o.draft_tokens)
            rows.append(self._features(o.steps, o.topk, o.draft_tokens))
            costs.append(length / o.throughput)
            eager.append(o.eager)
        if not rows:
            return (1.0, 0.08, 0.02), _EAGER_PRIOR
        x, y, e = np.asarray(rows), np.asarray(costs), np.asarray(eager)
        graphed = ~e
        prior = np.asarray([1.0, 0.08, 0.02])
        base = y[graphed] if graphed.any() else y / _EAGER_PRIOR
        xg = x[graphed] if graphed.any() else x
        # Ridge toward the prior's shape, scaled to the data: stable with one or two trials.
        scale = float(np.median(base / (xg @ prior)))
        coef = _nonnegative_ridge(xg, base, prior * scale, weight=0.3 * scale)
        eager_factor = _EAGER_PRIOR
        if e.any():
            ratios = y[e] / np.maximum(x[e] @ coef, 1e-12)
            eager_factor = float(np.clip(np.median(ratios), 1.0, 4.0))
        return (float(coef[0]), float(coef[1]), float(coef[2])), eager_factor

    def length(self, steps: int, topk: int, draft_tokens: int) -> float:
        """Predicted accept length of a tree."""
        a, r, g = self.accept
        return accept_length(a, r, g, depth_widths(steps, topk, draft_tokens))

    def throughput(self, steps: int, topk: int, draft_tokens: int, *, eager: bool = False) -> float:
        """Predicted throughput of a tree, in the units of the observations."""
        cost = float(np.dot(self.cost, self._features(steps, topk, draft_tokens)))
        if eager:
            cost *= self.eager
        return self.length(steps, topk, draft_tokens) / max(cost, 1e-12)


def _nonnegative_ridge(
    x: np.ndarray, y: np.ndarray, prior: np.ndarray, *, weight: float
) -> np.ndarray:
    """argmin |x b - y|^2 + weight^2 |b - prior|^2 / |prior|^2, b >= 0 (active set on 3 terms)."""
    n = x.shape[1]
    scale = np.maximum(np.abs(prior), 1e-12)
    free = list(range(n))
    coef = prior.copy()
    for _ in range(n + 1):
        xa = np.vstack([x[:, free], np.diag(weight / scale[free])])
        ya = np.concatenate([y - x @ _masked(coef, free), weight / scale[free] * prior[free]])
        sol, *_ = np.linalg.lstsq(xa, ya, rcond=None)
        coef = _masked(coef, free)
        coef[free] = sol
        negative = [i for i in free if coef[i] < 0]
        if not negative:
            return coef
        for i in negative:
            coef[i] = 0.0
            free.remove(i)
        if not free:
            break
    return np.asarray(np.maximum(coef, 0.0))


def _masked(coef: np.ndarray, free: Sequence[int]) -> np.ndarray:
    out = coef.copy()
    out[list(free)] = 0.0
    return out
