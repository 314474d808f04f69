"""Level and trial metrics from per-request records (docs/design.md, "MLflow layout")."""

from __future__ import annotations

import math

import pytest

from spec_sweep.core.names import level_of
from spec_sweep.node.client import BenchResult, LevelResult, RequestOutput
from spec_sweep.node.metrics import (
    bench_metrics,
    decode_cycle,
    level_intervals,
    level_metrics,
    percentile,
)
from spec_sweep.spec_metrics import LEVEL_METRICS


def _ok(
    tokens: int = 10,
    *,
    ttft: float = 0.1,
    latency: float = 1.0,
    itl: list[float] | None = None,
    verify: int | None = None,
) -> RequestOutput:
    return RequestOutput(
        prompt_tokens=5,
        output_tokens=tokens,
        ttft_s=ttft,
        itl_s=itl if itl is not None else [0.1] * (tokens - 1),
        latency_s=latency,
        spec_verify_ct=verify,
    )


def _failed(message: str = "HTTP 500: boom") -> RequestOutput:
    return RequestOutput(output_tokens=0, latency_s=0.01, error=message)


def _level(
    *outputs: RequestOutput,
    concurrency: int = 1,
    duration: float = 2.0,
    server_accept: float | None = None,
    hung: bool = False,
) -> LevelResult:
    return LevelResult(
        concurrency=concurrency,
        outputs=outputs,
        duration_s=duration,
        server_accept_length=server_accept,
        hung=hung,
    )


def _bench(*levels: LevelResult) -> BenchResult:
    errors = [o.error for lv in levels for o in lv.outputs if o.error]
    return BenchResult(
        levels=levels,
        prompt_source="builtin text prompts (50)",
        hung=any(lv.hung for lv in levels),
        error_count=len(errors),
        first_error=errors[0] if errors else None,
    )


# ---------------------------------------------------------------------------------------------
# percentile


def test_percentile_matches_numpy_linear() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 0) == 15.0
    assert percentile(values, 100) == 50.0
    assert percentile(values, 50) == 35.0
    assert percentile(values, 40) == pytest.approx(29.0)  # numpy.percentile(values, 40)
    assert percentile(values, 99) == pytest.approx(49.6)  # numpy.percentile(values, 99)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # order does not matter
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_percentile_edge_cases() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], -1)


# ---------------------------------------------------------------------------------------------
# level_metrics


def test_throughput_counts_successful_requests_over_wall_time() -> None:
    level = _level(_ok(10), _ok(30), _failed(), duration=4.0)
    metrics = level_metrics(level)
    assert metrics["output_throughput"] == pytest.approx(40 / 4.0)
    assert metrics["request_throughput"] == pytest.approx(2 / 4.0)


def test_latency_percentiles_in_milliseconds() -> None:
    outputs = [_ok(3, ttft=t, itl=[g, g]) for t, g in ((0.1, 0.01), (0.2, 0.02), (0.3, 0.03))]
    metrics = level_metrics(_level(*outputs, _failed()))
    assert metrics["ttft_p50_ms"] == pytest.approx(200.0)
    assert metrics["ttft_p99_ms"] == pytest.approx(298.0)
    # ITL pools every token of every request: [10, 10, 20, 20, 30, 30] ms.
    assert metrics["itl_p50_ms"] == pytest.approx(20.0)
    assert metrics["itl_p99_ms"] == pytest.approx(30.0)


def test_decode_speed_is_per_request_median() -> None:
    outputs = [
        _ok(11, ttft=0.5, latency=1.5),  # 10 tokens in 1.0 s -> 10 tok/s
        _ok(21, ttft=0.5, latency=1.5),  # 20 tok/s
        _ok(41, ttft=0.5, latency=1.5),  # 40 tok/s
        _ok(1, ttft=0.5, latency=0.5),  # a single token has no decode phase: skipped
    ]
    assert level_metrics(_level(*outputs))["decode_speed_p50"] == pytest.approx(20.0)


def test_accept_length_from_meta_info_preferred() -> None:
    # Decode tokens (the prefill token excluded) per verify step, summed over requests:
    # (12 - 1 + 21 - 1) / (5 + 10), what SGLang's avg_spec_accept_length counts.
    level = _level(_ok(12, verify=5), _ok(21, verify=10), server_accept=9.9)
    assert level_metrics(level)["accept_length"] == pytest.approx(31 / 15)


def test_accept_length_falls_back_to_server() -> None:
    level = _level(_ok(12), _ok(12, verify=0), server_accept=2.75)
    assert level_metrics(level)["accept_length"] == 2.75


def test_accept_length_absent_without_speculation() -> None:
    metrics = level_metrics(_level(_ok(12), _ok(12)))
    assert "accept_length" not in metrics
    assert set(metrics) == set(LEVEL_METRICS) - {"accept_length"}


# ---------------------------------------------------------------------------------------------
# decode_cycle


def test_decode_cycle_takes_the_first_token_out() -> None:
    # 11 tokens in 0.35 s a request: the first after 0.1 s, the other 10 in 5 cycles of 2
    assert decode_cycle(11 / 0.35, 1, 2.0, 0.1, 11) == pytest.approx(0.05)
    # 4 requests at once take 4 times the level's time per request
    assert decode_cycle(44 / 0.35, 4, 2.0, 0.1, 11) == pytest.approx(0.05)
    # plain decoding: one token a cycle
    assert decode_cycle(11 / 0.6, 1, 1.0, 0.1, 11) == pytest.approx(0.05)


def test_decode_cycle_is_the_same_for_boots_that_accept_differently() -> None:
    # one cycle of 50 ms and a first token of 100 ms: a draft that accepts 3 tokens a cycle
    # and one that accepts nothing (a dummy draft) give different throughputs, one cycle
    cycle, ttft, length = 0.05, 0.1, 33
    for accept in (1.0, 3.0):
        throughput = length / (ttft + (length - 1) / accept * cycle)
        assert decode_cycle(throughput, 1, accept, ttft, length) == pytest.approx(cycle)


@pytest.mark.parametrize(
    ("throughput", "concurrency", "accept", "ttft", "length"),
    [
        pytest.param(11 / 0.35, 1, 2.0, 0.5, 11, id="first-token-longer-than-request"),
        pytest.param(0.0, 1, 1.0, 0.1, 11, id="no-throughput"),
        pytest.param(10.0, 0, 1.0, 0.1, 11, id="no-concurrency"),
        pytest.param(10.0, 1, 0.0, 0.1, 11, id="no-acceptance"),
        pytest.param(10.0, 1, 1.0, 0.1, 1, id="one-token"),
        pytest.param(10.0, 1, 1.0, -0.1, 11, id="negative-ttft"),
    ],
)
def test_decode_cycle_refuses_values_out_of_range(
    throughput: float, concurrency: int, accept: float, ttft: float, length: int
) -> None:
    with pytest.raises(ValueError, match="decode_cycle"):
        decode_cycle(throughput, concurrency, accept, ttft, length)


def test_level_decode_cycle_from_the_levels_figures() -> None:
    # 2 requests of 11 tokens at concurrency 2 in 1.0 s, TTFT 0.1 s, 10 verify steps each
    level = _level(_ok(11, verify=10), _ok(11, verify=10), concurrency=2, duration=1.0)
    metrics = level_metrics(level)
    assert metrics["accept_length"] == pytest.approx(1.0)
    expected = decode_cycle(22 / 1.0, 2, 1.0, 0.1, 11) * 1000.0
    assert metrics["decode_cycle_ms"] == pytest.approx(expected)
    assert metrics["decode_cycle_ms"] == pytest.approx(90.0)  # (1.0 s - 0.1 s) / 10 cycles


def test_level_decode_cycle_uses_the_accept_length() -> None:
    # 5 verify steps for the 10 tokens after the first: two tokens a cycle, half as many cycles
    level = _level(_ok(11, verify=5), _ok(11, verify=5), concurrency=2, duration=1.0)
    metrics = level_metrics(level)
    assert metrics["accept_length"] == pytest.approx(2.0)
    assert metrics["decode_cycle_ms"] == pytest.approx(180.0)


def test_level_decode_cycle_absent_when_the_first_token_is_all() -> None:
    metrics = level_metrics(_level(_ok(1), _ok(1)))
    assert "decode_cycle_ms" not in metrics
    assert "output_throughput" in metrics


def test_failed_requests_do_not_count() -> None:
    level = _level(_ok(10, ttft=0.1), RequestOutput(output_tokens=50, ttft_s=5.0, error="x"))
    metrics = level_metrics(level)
    assert metrics["ttft_p99_ms"] == pytest.approx(100.0)
    assert metrics["output_throughput"] == pytest.approx(10 / 2.0)


def test_no_success_no_metrics() -> None:
    assert level_metrics(_level(_failed(), _failed())) == {}
    assert level_metrics(_level()) == {}


def test_hung_level_has_no_metrics() -> None:
    assert level_metrics(_level(_ok(10), _failed("timed out"), hung=True)) == {}


def test_metrics_are_never_nan() -> None:
    level = _level(_ok(1, ttft=None, itl=[]), duration=0.0)  # type: ignore[arg-type]
    metrics = level_metrics(level)
    assert metrics == {}
    assert all(math.isfinite(v) for v in metrics.values())


# ---------------------------------------------------------------------------------------------
# bench_metrics


def test_single_level_is_unsuffixed() -> None:
    metrics = bench_metrics(_bench(_level(_ok(10), concurrency=8)), multi_level=False)
    assert "output_throughput" in metrics
    assert all(level_of(name) is None for name in metrics)
    assert "decode_cycle_ms" in metrics


def test_multi_level_suffixes() -> None:
    bench = _bench(
        _level(_ok(10), concurrency=1, duration=1.0),
        _level(_ok(10), _ok(10), concurrency=8, duration=1.0, server_accept=2.0),
    )
    metrics = bench_metrics(bench, multi_level=True)
    assert metrics["output_throughput_c1"] == pytest.approx(10.0)
    assert metrics["output_throughput_c8"] == pytest.approx(20.0)
    assert metrics["accept_length_c8"] == 2.0
    assert "accept_length_c1" not in metrics
    assert "output_throughput" not in metrics
    assert all(name.endswith(("_c1", "_c8")) for name in metrics)


def test_multi_level_single_level_still_suffixed() -> None:
    bench = _bench(_level(_ok(10), concurrency=4))
    assert "output_throughput_c4" in bench_metrics(bench, multi_level=True)


def test_failed_level_is_omitted() -> None:
    bench = _bench(
        _level(_ok(10), concurrency=1),
        _level(_failed(), _failed(), concurrency=8),
    )
    metrics = bench_metrics(bench, multi_level=True)
    assert "output_throughput_c1" in metrics
    assert not any(name.endswith("_c8") for name in metrics)


def test_no_levels_no_metrics() -> None:
    assert bench_metrics(_bench(), multi_level=True) == {}


def test_several_levels_need_multi_level() -> None:
    bench = _bench(_level(_ok(), concurrency=1), _level(_ok(), concurrency=2))
    with pytest.raises(ValueError, match="multi_level"):
        bench_metrics(bench, multi_level=False)


def _timed_level(latencies: list[float], tokens: int = 64) -> LevelResult:
    outs = tuple(
        RequestOutput(output_tokens=tokens, ttft_s=0.01, itl_s=[], latency_s=lat)
        for lat in latencies
    )
    return LevelResult(
        concurrency=1,
        outputs=outs,
        duration_s=sum(latencies),
        server_accept_length=None,
        hung=False,
    )


def test_interval_brackets_value_and_narrows_with_steadier_requests() -> None:
    noisy = _timed_level([0.08, 0.09, 0.1, 0.11, 0.12, 0.08, 0.1, 0.12] * 2)
    steady = _timed_level([0.099, 0.1, 0.101, 0.1] * 4)
    widths = []
    for level in (noisy, steady):
        m = level_metrics(level)
        ci = level_intervals(level, m)
        value = m["output_throughput"]
        assert ci["output_throughput_ci_low"] < value < ci["output_throughput_ci_high"]
        assert ci["request_throughput_ci_low"] < m["request_throughput"]
        widths.append((ci["output_throughput_ci_high"] - ci["output_throughput_ci_low"]) / value)
    assert widths[0] > 5 * widths[1]
    # identical requests: the throughput is known exactly from this boot
    exact = _timed_level([0.1] * 8)
    m = level_metrics(exact)
    ci = level_intervals(exact, m)
    assert ci["output_throughput_ci_low"] == pytest.approx(m["output_throughput"])
    assert level_intervals(_timed_level([0.1]), level_metrics(_timed_level([0.1]))) == {}
