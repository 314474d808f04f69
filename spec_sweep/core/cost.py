"""What a configuration and a sweep cost: dollars per million tokens and GPU-hours against a grid.

This module owns the cost arithmetic (docs/spec/node.md, "Cost"): a trial's `usd_per_million_tokens`
from the node's `cost_per_hour` and the output throughput at the objective's concurrency level (the
whole node serves that throughput for that price), and the size of a full grid over the search
space, counted exactly (conditional parameters only multiply where they are active), so the report
can set the GPU-hours a sweep used against what the grid would have used at the same mean trial
time. Pure: standard library and the spec only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from spec_sweep.core.config import is_active, ordered_keys
from spec_sweep.core.names import COST_METRIC, level_of
from spec_sweep.spec import ParamSpec, Scalar, SweepSpec

__all__ = ["COST_METRIC", "cost_metrics", "grid_size", "objective_throughput_metric"]


def objective_throughput_metric(spec: SweepSpec) -> str:
    """The output-throughput metric at the objective's concurrency level.

    With one level that is `output_throughput`; with a level list it is the level the objective
    names (`itl_p99_ms_c32` -> `output_throughput_c32`), else the highest level (the most
    tokens per hour the node was seen to serve). A goodput objective uses `goodput_throughput`.
    """
    metric = spec.objective.metric
    if metric.startswith("goodput_"):
        return "goodput_throughput"
    if not spec.workload.multi_level:
        return "output_throughput"
    level = level_of(metric) or max(spec.workload.concurrency)
    return f"output_throughput_c{level}"


def cost_metrics(spec: SweepSpec, metrics: Mapping[str, float]) -> dict[str, float]:
    """`{"usd_per_million_tokens": x}` for a measured trial, or `{}` without a cost or throughput.

    x = cost_per_hour / (tokens per second x 3600) x 1e6.
    """
    price = spec.node.cost_per_hour
    tput = metrics.get(objective_throughput_metric(spec))
    if price is None or tput is None or not math.isfinite(tput) or tput <= 0:
        return {}
    return {COST_METRIC: round(price / (tput * 3600.0) * 1e6, 6)}


def grid_size(params: Mapping[str, ParamSpec]) -> int | None:
    """Distinct configurations of a full grid over `params`, or None if a range is continuous.

    Conditional parameters (`when:`) count only in the configurations where they are active:
    every combination of the parameters other parameters depend on is enumerated, the inactive
    ones dropped (so two combinations that differ only in an inactive value count once), and the
    other active parameters multiply.
    """
    if any(p.kind == "float" and p.step is None for p in params.values()):
        return None
    order = ordered_keys(params)
    deciders = [k for k in order if any(k in p.when for p in params.values())]
    others = [k for k in order if k not in deciders]
    sizes = {k: len(params[k].values()) for k in others}
    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for combo in itertools.product(*(params[k].values() for k in deciders)):
        config: dict[str, Scalar] = {}
        for key, value in zip(deciders, combo, strict=True):
            if is_active(params[key], config):
                config[key] = value
        count = 1
        for key in others:
            if is_active(params[key], config):
                count *= sizes[key]
        seen[tuple((k, repr(v)) for k, v in config.items())] = count
    return sum(seen.values())
