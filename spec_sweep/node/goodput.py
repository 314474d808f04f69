"""SLA goodput: the highest concurrency at which a booted server still meets the spec's SLA.

This module owns the goodput search of one trial (docs/spec/workload.md, "SLA and goodput"): within
the boot the benchmark already uses, levels between `workload.goodput.min_concurrency` and
`max_concurrency` are measured one at a time and bisected (`bisect_highest`: the SLA holds at low
load and stops holding past saturation, so the boundary is found in about log2(max - min) + 2
levels). A level holds when every `workload.sla` bound is met (`ttft_p99_ms <= 2000`, ...) and no
request failed. The trial reports `goodput_concurrency` (0 when even the lowest level misses the
SLA), `goodput_throughput` (output tokens/s at that level) and, per measured level N,
`goodput_holds_cN` and `goodput_<metric>_cN` for the SLA's metrics and the throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from spec_sweep.node.client import run_benchmark_sync
from spec_sweep.node.metrics import level_metrics
from spec_sweep.spec import WorkloadSpec

__all__ = ["GoodputLevel", "GoodputResult", "bisect_highest", "find_goodput", "sla_holds"]


@dataclass(frozen=True)
class GoodputLevel:
    """One measured level of the bisection.

    Attributes:
        concurrency: Requests in flight.
        metrics: The level's metrics (unsuffixed names of `spec_metrics.LEVEL_METRICS`).
        holds: Whether the SLA held.
        why: What broke the SLA (empty when it held).
    """

    concurrency: int
    metrics: dict[str, float]
    holds: bool
    why: str


@dataclass(frozen=True)
class GoodputResult:
    """The bisection's outcome.

    Attributes:
        levels: The levels measured, in the order measured.
        concurrency: The highest level that held (None: not even the lowest).
        hung: A level hung (the server stopped answering); the search stopped there.
    """

    levels: tuple[GoodputLevel, ...]
    concurrency: int | None
    hung: bool

    def metrics(self) -> dict[str, float]:
        """The trial metrics of the goodput search (module docstring)."""
        out: dict[str, float] = {}
        by_level = {lv.concurrency: lv for lv in self.levels}
        for level in self.levels:
            out[f"goodput_holds_c{level.concurrency}"] = 1.0 if level.holds else 0.0
            for name, value in level.metrics.items():
                out[f"goodput_{name}_c{level.concurrency}"] = value
        if self.hung:
            return out
        best = by_level.get(self.concurrency) if self.concurrency is not None else None
        out["goodput_concurrency"] = float(self.concurrency or 0)
        out["goodput_throughput"] = best.metrics.get("output_throughput", 0.0) if best else 0.0
        return out


def sla_holds(sla: Mapping[str, float], metrics: Mapping[str, float]) -> tuple[bool, str]:
    """Whether every SLA bound holds; a metric that was not measured breaks it."""
    broken = []
    for name, bound in sla.items():
        value = metrics.get(name)
        if value is None:
            broken.append(f"{name} not measured")
        elif value > bound:
            broken.append(f"{name} {value:.4g} > {bound:.4g}")
    return not broken, "; ".join(broken)


def bisect_highest(lo: int, hi: int, holds: Callable[[int], bool]) -> int | None:
    """The highest level in [lo, hi] where `holds` is true, assuming it holds up to a point.

    `lo` is tried first (None if it fails), then `hi` (returned if it holds), then the midpoints
    between the highest level that held and the lowest that failed.
    """
    if not holds(lo):
        return None
    if lo == hi or holds(hi):
        return hi
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        if holds(mid):
            good = mid
        else:
            bad = mid
    return good


class _Hung(Exception):
    pass


def find_goodput(
    base_url: str,
    workload: WorkloadSpec,
    *,
    model_path: str,
    request_timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> GoodputResult:
    """Bisect the concurrency range of `workload.goodput` against `workload.sla` on one server.

    Each level sends `max(num_prompts, concurrency)` requests, without a warm-up (the benchmark
    before it warmed the server up).
    `headers` go with every request (the server's API key).

    Raises:
        ValueError: the workload has no `goodput` block.
    """
    if workload.goodput is None:
        raise ValueError("find_goodput needs workload.goodput")
    levels: list[GoodputLevel] = []

    def holds(concurrency: int) -> bool:
        level_workload = workload.model_copy(
            update={
                "concurrency": (concurrency,),
                "warmup_prompts": 0,
                "num_prompts": max(workload.num_prompts, concurrency),
            }
        )
        bench = run_benchmark_sync(
            base_url,
            level_workload,
            model_path=model_path,
            request_timeout_s=request_timeout_s,
            headers=headers,
        )
        level = bench.levels[0] if bench.levels else None
        metrics = level_metrics(level) if level is not None else {}
        if bench.hung:
            levels.append(GoodputLevel(concurrency, metrics, False, "the server hung"))
            raise _Hung
        if bench.error_count:
            ok, why = False, f"{bench.error_count} requests failed: {bench.first_error}"
        else:
            ok, why = sla_holds(workload.sla, metrics)
        levels.append(GoodputLevel(concurrency, metrics, ok, why))
        return ok

    g = workload.goodput
    try:
        best = bisect_highest(g.min_concurrency, g.max_concurrency, holds)
    except _Hung:
        return GoodputResult(levels=tuple(levels), concurrency=None, hung=True)
    return GoodputResult(levels=tuple(levels), concurrency=best, hung=False)
