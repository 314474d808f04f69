"""The metric names of the MLflow layout: what a trial of a workload can report.

This module owns the names of the measured metrics (docs/design.md, "MLflow layout"): those
measured once per concurrency level (suffixed `_c<N>` when several levels run), the ones with a
95% within-boot interval, those measured once per trial, and `metric_names`, every name a
trial of a workload reports. The spec checks objectives, constraints and SLAs against them; the
replay table has one column each. Standard library only.
"""

from __future__ import annotations

from typing import Protocol

__all__ = [
    "BASE_METRICS",
    "INTERVAL_METRICS",
    "INTERVAL_NAMES",
    "LEVEL_METRICS",
    "QUALITY_METRICS",
    "metric_names",
]


#: Metrics measured once per concurrency level (suffixed `_c<N>` when several levels are run).
LEVEL_METRICS: tuple[str, ...] = (
    "output_throughput",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "decode_speed_p50",
    "accept_length",
    # ms per decode cycle with the first token's time taken out (`node.metrics.decode_cycle`):
    # what a dummy-weight boot of the configuration tells as well as a real one
    "decode_cycle_ms",
)
#: Level metrics that also get a 95% within-boot interval, `<metric>_ci_low` / `_ci_high`.
INTERVAL_METRICS: tuple[str, ...] = ("output_throughput", "request_throughput")
#: The interval metrics' names, per level metric of `INTERVAL_METRICS`.
INTERVAL_NAMES: tuple[str, ...] = tuple(
    f"{m}{s}" for m in INTERVAL_METRICS for s in ("_ci_low", "_ci_high")
)
#: Metrics of the output-quality gate, once per judged trial (docs/concepts/quality-gate.md).
QUALITY_METRICS: tuple[str, ...] = (
    "quality_deficit",
    "quality_lossy",
    "quality_confident_share",
    "quality_near_tie_flips",
    "quality_first_divergence",
    "quality_agreement",
)
#: Metrics measured once per trial.
BASE_METRICS: tuple[str, ...] = ("speedup_vs_baseline", "boot_s", "gpu_mem_peak_gib")


class Workload(Protocol):
    """What the metric names depend on of a workload (`spec.WorkloadSpec`)."""

    @property
    def multi_level(self) -> bool: ...
    @property
    def concurrency(self) -> tuple[int, ...]: ...
    @property
    def goodput(self) -> object | None: ...


def metric_names(workload: Workload, *, cost: bool = False, quality: bool = False) -> list[str]:
    """Every metric name a trial of this workload can report (docs/design.md, "MLflow layout").

    Args:
        workload: The workload (levels, goodput).
        cost: `node.cost_per_hour` is set: trials report `usd_per_million_tokens`.
        quality: the quality gate is on: trials report `QUALITY_METRICS`.
    """
    names = list(BASE_METRICS)
    level = [*LEVEL_METRICS, *INTERVAL_NAMES]
    if workload.multi_level:
        names += [f"{m}_c{c}" for c in workload.concurrency for m in level]
    else:
        names += level
    if workload.goodput is not None:
        names += ["goodput_concurrency", "goodput_throughput"]
    if cost:
        names.append("usd_per_million_tokens")
    if quality:
        names += QUALITY_METRICS
    return names
