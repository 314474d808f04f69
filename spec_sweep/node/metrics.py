"""Trial metrics from the client's per-request records (docs/design.md, "MLflow layout").

This module owns the arithmetic that turns a `BenchResult` into the level metrics of
`spec_metrics.LEVEL_METRICS`: output and request throughput over each level's wall time, TTFT and
ITL percentiles, per-request decode speed, speculative accept length and the decode cycle with the
first token taken out (`decode_cycle`), suffixed `_c<N>` when a workload runs several concurrency
levels. It follows SGLang's `bench_serving.py`: only successful
requests count, percentiles interpolate linearly between closest ranks (numpy's default), and token
counts are the server's. A metric that cannot be measured is left out, never NaN. Pure standard
library, no I/O.

Each level's throughputs also get a 95% interval from its per-request figures
(`output_throughput_ci_low`, `output_throughput_ci_high`, the same for `request_throughput`): a
seeded bootstrap over the level's successful requests of the ratio (tokens or requests) / (summed
request latency), applied to the measured throughput. It says how well this boot's throughput is
known; it cannot see boot-to-boot spread, which only repeated boots measure (`search.confirm`).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spec_sweep.core.names import CI_HIGH, CI_LOW
from spec_sweep.spec_metrics import INTERVAL_METRICS

if TYPE_CHECKING:
    from spec_sweep.node.client import BenchResult, LevelResult

__all__ = [
    "INTERVAL_METRICS",
    "bench_metrics",
    "decode_cycle",
    "level_intervals",
    "level_metrics",
    "percentile",
]

_RESAMPLES = 400
_LEVEL = 0.95


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile of `values`, interpolating linearly (numpy's default method).

    Args:
        values: The sample, in any order.
        q: The percentile, from 0 to 100.

    Returns:
        The percentile, or None for an empty sample.

    Raises:
        ValueError: `q` is outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def decode_cycle(
    throughput: float, concurrency: int, accept: float, ttft_s: float, output_len: float
) -> float:
    """Seconds per decode cycle with the first token taken out.

    A request's time (`concurrency x output_len / throughput`) less its time to first token,
    over the cycles that made the other `output_len - 1` tokens (`(output_len - 1) / accept`).

    The first token is taken out because it comes from the prefill, not from a decode cycle:
    spread over the cycles (`concurrency x accept / throughput`), its time would weigh more in
    a boot that needs more cycles for the same tokens. A dummy-weight draft accepts nothing
    (accept 1.0), so such a per-token cycle of a dummy boot would read differently from the real
    boot of the same configuration even when their cycles are the same; with the first token
    out the two agree (within 2.6% at concurrency 1 on SGLang 0.5.17, H100:
    docs/evidence/two-fidelity.md), which is what lets a dummy-weight boot tell the cycle.

    Args:
        throughput: Output tokens per second of all `concurrency` requests together.
        concurrency: Requests decoding at once.
        accept: Tokens emitted per cycle (1.0 without speculative decoding).
        ttft_s: Time to first token, seconds (the median of the level).
        output_len: Output tokens per request.

    Returns:
        The decode cycle, seconds.

    Raises:
        ValueError: A value is out of range, or the first token took the whole request.
    """
    if not (throughput > 0 and concurrency > 0 and accept > 0 and output_len > 1):
        raise ValueError(
            f"decode_cycle: throughput {throughput}, concurrency {concurrency}, accept {accept}, "
            f"output_len {output_len}: give throughput, concurrency, accept > 0, output_len > 1"
        )
    per_request = concurrency * output_len / throughput
    if not 0 <= ttft_s < per_request:
        raise ValueError(
            f"decode_cycle: ttft {ttft_s} s against {per_request} s a request: "
            "give 0 <= ttft < request"
        )
    return (per_request - ttft_s) * accept / (output_len - 1)


def level_metrics(level: LevelResult) -> dict[str, float]:
    """The metrics of one concurrency level, named as in `spec_metrics.LEVEL_METRICS` (unsuffixed).

    - `output_throughput`: output tokens of successful requests / level wall time (tok/s).
    - `request_throughput`: successful requests / level wall time (req/s).
    - `ttft_p50_ms`, `ttft_p99_ms`: time to first token.
    - `itl_p50_ms`, `itl_p99_ms`: inter-token latency over all tokens of all requests.
    - `decode_speed_p50`: median over requests of (output_tokens - 1) / (latency - ttft), tok/s.
    - `accept_length`: tokens committed per speculative verify step, over the requests whose
      `meta_info` reports `spec_verify_ct`: sum(completion_tokens - 1) / sum(spec_verify_ct).
      The first token comes from the prefill, not from a verify step, so it is left out; this is
      what SGLang's scheduler counter `avg_spec_accept_length` measures (restricted to this
      level's requests). SGLang's per-request `meta_info.spec_accept_length`
      (completion_tokens / spec_verify_ct) counts the prefill token and reads about
      1 / spec_verify_ct too high (+0.8 % at 128 output tokens and accept length 2).
      Without verify counts, the server's `avg_spec_accept_length` (read after the level; it
      accumulates since boot or the last cache flush); absent for a non-speculative server.
    - `decode_cycle_ms`: `decode_cycle` of the level's output throughput, concurrency, accept
      length (1.0 when absent), median TTFT and mean output tokens per successful request, in
      milliseconds; absent when a request has fewer than two tokens on average or the first
      token took the whole request.

    A hung level has no metrics (its wall time includes the wait for the timeout), and neither
    has a level without a successful request.

    Args:
        level: The level's records.

    Returns:
        Metric name -> value, only for the metrics that could be measured.
    """
    ok = [o for o in level.outputs if o.error is None]
    if level.hung or not ok:
        return {}
    metrics: dict[str, float] = {}
    if level.duration_s > 0:
        metrics["output_throughput"] = sum(o.output_tokens for o in ok) / level.duration_s
        metrics["request_throughput"] = len(ok) / level.duration_s
    ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
    itls = [gap for o in ok for gap in o.itl_s]
    for name, sample in (("ttft", ttfts), ("itl", itls)):
        for q in (50, 99):
            value = percentile(sample, q)
            if value is not None:
                metrics[f"{name}_p{q}_ms"] = value * 1000.0
    speeds = [
        (o.output_tokens - 1) / (o.latency_s - o.ttft_s)
        for o in ok
        if o.ttft_s is not None and o.output_tokens > 1 and o.latency_s > o.ttft_s
    ]
    speed = percentile(speeds, 50)
    if speed is not None:
        metrics["decode_speed_p50"] = speed
    verified = [o for o in ok if o.spec_verify_ct is not None and o.spec_verify_ct > 0]
    if verified:
        steps = sum(o.spec_verify_ct or 0 for o in verified)
        metrics["accept_length"] = sum(o.output_tokens - 1 for o in verified) / steps
    elif level.server_accept_length is not None:
        metrics["accept_length"] = level.server_accept_length
    ttft = metrics.get("ttft_p50_ms")
    throughput = metrics.get("output_throughput")
    if ttft is not None and throughput is not None:
        tokens = sum(o.output_tokens for o in ok) / len(ok)
        accept = metrics.get("accept_length", 1.0)
        with contextlib.suppress(ValueError):
            cycle = decode_cycle(throughput, level.concurrency, accept, ttft / 1000.0, tokens)
            metrics["decode_cycle_ms"] = cycle * 1000.0
    return {name: value for name, value in metrics.items() if math.isfinite(value)}


def level_intervals(level: LevelResult, metrics: dict[str, float]) -> dict[str, float]:
    """95% intervals of a level's throughputs, from a bootstrap over its requests.

    A level's throughput is (tokens) / (wall time), and with a steady concurrency the wall time
    is proportional to the summed request latency, so the throughput is a ratio estimator: the
    bootstrap resamples the successful requests (seeded, 400 times), takes the ratio
    sum(tokens) / sum(latency) of each resample, and scales the measured throughput by the
    2.5th and 97.5th percentiles of (resampled ratio / measured ratio).

    Args:
        level: The level's records.
        metrics: `level_metrics(level)` (unsuffixed names).

    Returns:
        `<metric>_ci_low`, `<metric>_ci_high` for the metrics of `INTERVAL_METRICS` that were
        measured; empty when fewer than two requests succeeded.
    """
    ok = [o for o in level.outputs if o.error is None and o.latency_s > 0]
    if len(ok) < 2 or level.hung:
        return {}
    lat = [o.latency_s for o in ok]
    numerators = {
        "output_throughput": [float(o.output_tokens) for o in ok],
        "request_throughput": [1.0] * len(ok),
    }
    rng = random.Random(len(ok))
    draws = [[rng.randrange(len(ok)) for _ in ok] for _ in range(_RESAMPLES)]
    out: dict[str, float] = {}
    total_lat = sum(lat)
    tail = (1.0 - _LEVEL) / 2.0 * 100.0
    for name in INTERVAL_METRICS:
        value = metrics.get(name)
        num = numerators[name]
        if value is None or sum(num) <= 0:
            continue
        ratio = sum(num) / total_lat
        rel = [sum(num[i] for i in d) / sum(lat[i] for i in d) / ratio for d in draws]
        lo, hi = percentile(rel, tail), percentile(rel, 100.0 - tail)
        if lo is None or hi is None:
            continue
        out[name + CI_LOW] = value * min(lo, 1.0)
        out[name + CI_HIGH] = value * max(hi, 1.0)
    return out


def bench_metrics(bench: BenchResult, *, multi_level: bool) -> dict[str, float]:
    """The level metrics of a whole benchmark, suffixed `_c<N>` when it ran several levels.

    Args:
        bench: The benchmark's result.
        multi_level: `workload.multi_level`: whether names carry the `_c<N>` suffix.

    Returns:
        Metric name -> value; metrics that could not be measured are absent.

    Raises:
        ValueError: `multi_level` is False but the benchmark ran several levels.
    """
    if not multi_level and len(bench.levels) > 1:
        raise ValueError(
            f"{len(bench.levels)} concurrency levels ran but multi_level is False: "
            "pass workload.multi_level"
        )
    metrics: dict[str, float] = {}
    for level in bench.levels:
        suffix = f"_c{level.concurrency}" if multi_level else ""
        measured = level_metrics(level)
        measured.update(level_intervals(level, measured))
        for name, value in measured.items():
            metrics[f"{name}{suffix}"] = value
    return metrics
