"""Per-load answers and the sweep's cost: pure functions over a sweep's history.

This module owns two questions the report and the end-of-run summary answer
(docs/spec/workload.md, "Concurrency levels"; docs/spec/node.md, "Cost"):

- With a concurrency list, which configuration wins at each level, and the level at which
  speculative decoding stops paying (the crossover): the lowest level, above one where the best
  speculative trial beat the best plain one, at which the best plain trial is at least as good.
- What the sweep cost against a full grid over the same space: GPU-hours used (every attempt
  of a search trial) and the grid's size x the mean trial time x the node's GPUs, with dollars
  when `node.cost_per_hour` is set.

It draws and writes nothing (`present` words them). Standard library and the spec only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from spec_sweep.core.cost import grid_size
from spec_sweep.core.history import History, is_dummy
from spec_sweep.core.names import COST_METRIC
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.spec import SweepSpec

__all__ = [
    "LevelWinner",
    "LoadAnswer",
    "SweepCost",
    "lost_attempt_seconds",
    "per_load_answer",
    "sweep_cost",
]

_LEVEL = re.compile(r"_c\d+$")


@dataclass(frozen=True)
class LevelWinner:
    """The best measured trial at one concurrency level.

    Attributes:
        concurrency: The level.
        trial_id: The winning trial.
        value: Its value of the level metric.
        speculative: Whether the winner runs speculative decoding.
        best_plain: The best non-speculative trial's value at this level (None: none measured).
        best_speculative: The best speculative trial's value at this level (None: none measured).
    """

    concurrency: int
    trial_id: str
    value: float
    speculative: bool
    best_plain: float | None
    best_speculative: float | None


@dataclass(frozen=True)
class LoadAnswer:
    """Winners per level and where speculative decoding stops paying.

    Attributes:
        metric: The level metric compared (`output_throughput`, or the objective's base metric).
        mode: `max` or `min`.
        winners: One per level that has a measured trial, in level order.
        crossover: The lowest level, above a level where speculative decoding won, at which the
            best plain configuration is at least as good (None: no such level was measured).
    """

    metric: str
    mode: str
    winners: tuple[LevelWinner, ...]
    crossover: int | None

    def sentence(self) -> str:
        """One line for the summary and the report."""
        if self.crossover is not None:
            return (
                f"speculative decoding stops paying at concurrency {self.crossover} "
                f"(on {self.metric})"
            )
        spec_wins = [w.concurrency for w in self.winners if w.speculative]
        if spec_wins and len(spec_wins) == len(self.winners):
            return "speculative decoding wins at every measured level"
        if not spec_wins and any(w.best_speculative is not None for w in self.winners):
            return "speculative decoding wins at no measured level"
        return "no crossover measured"


@dataclass(frozen=True)
class SweepCost:
    """GPU-hours (and dollars) of the sweep against a full grid over the same space.

    Attributes:
        attempts: Trial attempts counted.
        gpu_hours: GPU-hours every attempt used (failed and interrupted ones included).
        mean_trial_s: Mean wall time of an attempt.
        grid_size: Distinct configurations of a full grid (None: a range is continuous).
        grid_gpu_hours: grid_size x mean trial time x GPUs per node (None without a grid).
        usd: What the sweep cost at `node.cost_per_hour` (None without a price).
        grid_usd: What the grid would cost (None without a price or a grid).
        best_usd_per_million_tokens: The best trial's cost per million output tokens.
    """

    attempts: int
    gpu_hours: float
    mean_trial_s: float | None
    grid_size: int | None
    grid_gpu_hours: float | None
    usd: float | None
    grid_usd: float | None
    best_usd_per_million_tokens: float | None

    def sentence(self) -> str:
        """One line for the summary and the report."""
        text = f"{self.attempts} trial attempts used {self.gpu_hours:.3g} GPU-hours"
        if self.usd is not None:
            text += f" (${self.usd:,.2f})"
        if self.grid_size is None:
            return text + "; a full grid is unbounded (a float range has no step)"
        text += f"; a full grid of {self.grid_size} configurations"
        if self.grid_gpu_hours is not None:
            text += f" would take about {self.grid_gpu_hours:.3g} GPU-hours"
            if self.grid_usd is not None:
                text += f" (${self.grid_usd:,.2f})"
            text += " at the same mean trial time"
        return text


def _speculative(spec: SweepSpec, record: TrialRecord) -> bool:
    value: object = record.config.get("speculative-algorithm")
    if value is None and "speculative-algorithm" not in record.config:
        value = spec.node.server_args.get("speculative-algorithm")
    return isinstance(value, str) and bool(value)


def _level_metric(spec: SweepSpec) -> tuple[str, str]:
    """The base metric compared at each level, and its direction."""
    objective = spec.objective.metric
    base = _LEVEL.sub("", objective)
    if _LEVEL.search(objective):
        return base, spec.objective.mode
    return "output_throughput", "max"


def per_load_answer(history: History) -> LoadAnswer | None:
    """Winners per concurrency level and the speculative crossover (None with one level).

    Only finished, measured search trials count (the objective's constraints do not: each
    level is compared on its own metric).
    """
    spec = history.spec
    if not spec.workload.multi_level:
        return None
    metric, mode = _level_metric(spec)
    level = Objective(metric=metric, mode=mode)
    # a dummy-weight boot (`budget.fidelity.mode: two`) measured no level's throughput
    measured = [r for r in history.done if r.failure_mode is FailureMode.NONE and not is_dummy(r)]
    winners: list[LevelWinner] = []
    for concurrency in sorted(spec.workload.concurrency):
        name = f"{metric}_c{concurrency}"
        scored = [
            (r, r.metrics[name])
            for r in measured
            if name in r.metrics and math.isfinite(r.metrics[name])
        ]
        if not scored:
            continue
        best, value = min(scored, key=lambda rv: level.key(rv[1]))
        plain = [v for r, v in scored if not _speculative(spec, r)]
        specs = [v for r, v in scored if _speculative(spec, r)]
        winners.append(
            LevelWinner(
                concurrency=concurrency,
                trial_id=best.trial_id,
                value=value,
                speculative=_speculative(spec, best),
                best_plain=min(plain, key=level.key) if plain else None,
                best_speculative=min(specs, key=level.key) if specs else None,
            )
        )
    crossover: int | None = None
    paid = False
    for w in winners:
        if w.best_plain is None or w.best_speculative is None:
            continue
        if level.better(w.best_speculative, w.best_plain):
            paid = True
        elif paid:
            crossover = w.concurrency
            break
    return LoadAnswer(metric=metric, mode=mode, winners=tuple(winners), crossover=crossover)


def attempt_seconds(record: TrialRecord) -> float | None:
    """Wall time of one attempt: its own measure, else its run's (None while it runs)."""
    if record.elapsed_s is not None:
        return record.elapsed_s
    if record.end_time is not None and record.start_time:
        return max(0.0, (record.end_time - record.start_time) / 1000.0)
    return None


def lost_attempt_seconds(
    record: TrialRecord, last_seen_ms: int | None, now_ms: int, timeout_s: float
) -> float | None:
    """The node time of an attempt lost with its driver, to record when a resumed driver closes
    it (None: its run's own times stand).

    An attempt the store still holds as RUNNING when a driver resumes, or one an earlier resume
    closed without a time of its own, held the node until its last sign of life (the last
    metric logged into its run: the system-metrics monitor samples every few seconds while the
    driver lives), not until the resume, which may come hours later. Without any sign of life
    it counts nothing. A closed attempt is left alone unless its run's end is more than
    `timeout_s` (the trial timeout) past its last sign of life: longer than any attempt could
    have gone unseen. With `last_seen_ms` None the answer is None only for attempts that no
    sign of life could make lost (so a caller can skip reading their runs).
    """
    if record.status not in ("RUNNING", "KILLED") or record.elapsed_s is not None:
        return None
    if not record.start_time:
        return None
    seen = max(record.start_time, last_seen_ms or record.start_time)
    if record.status != "RUNNING":
        if record.end_time is None or record.end_time - seen <= timeout_s * 1000.0:
            return None
    elif now_ms <= seen:
        return None
    return (seen - record.start_time) / 1000.0


def sweep_cost(history: History) -> SweepCost:
    """The sweep's GPU-hours (every attempt of a search trial) against a full grid at the same
    mean trial time."""
    spec = history.spec
    seconds = [s for r in history.search if (s := attempt_seconds(r)) is not None]
    gpus = spec.node.gpus
    total_s = sum(seconds)
    mean_s = total_s / len(seconds) if seconds else None
    size = grid_size(spec.params)
    grid_h = size * mean_s * gpus / 3600.0 if size is not None and mean_s is not None else None
    price = spec.node.cost_per_hour
    best = history.best
    best_cost = best.metrics.get(COST_METRIC) if best is not None else None
    return SweepCost(
        attempts=len(seconds),
        gpu_hours=total_s * gpus / 3600.0,
        mean_trial_s=mean_s,
        grid_size=size,
        grid_gpu_hours=grid_h,
        usd=price * total_s / 3600.0 if price is not None else None,
        grid_usd=(
            price * size * mean_s / 3600.0
            if price is not None and size is not None and mean_s is not None
            else None
        ),
        best_usd_per_million_tokens=best_cost,
    )
