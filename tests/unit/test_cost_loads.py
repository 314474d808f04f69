"""Cost per token, GPU-hours against a grid, winners per load, goodput bisection, agreement."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import harness
import pytest

from spec_sweep.cost import cost_metrics, grid_size, objective_throughput_metric
from spec_sweep.errors import SpecError
from spec_sweep.failures import FailureMode
from spec_sweep.goodput import bisect_highest, sla_holds
from spec_sweep.loads import load_and_cost_lines, per_load_answer, sweep_cost
from spec_sweep.quality import agreement
from spec_sweep.spec import ParamSpec
from spec_sweep.tracking import TrialRecord

_CLOCK = [0]


def _record(
    trial_id: str, config: dict[str, Any], metrics: dict[str, float], elapsed_s: float = 60.0
) -> TrialRecord:
    _CLOCK[0] += 1000
    return TrialRecord(
        run_id=f"run-{trial_id}",
        trial_id=trial_id,
        status="FINISHED",
        config=config,  # type: ignore[arg-type]
        failure_mode=FailureMode.NONE,
        metrics=metrics,
        elapsed_s=elapsed_s,
        start_time=_CLOCK[0],
        end_time=_CLOCK[0] + 500,
    )


def test_cost_per_million_tokens_comes_from_the_node_price_and_the_objective_levels_throughput(
    tmp_path: Path,
) -> None:
    spec = harness.make_spec(
        tmp_path,
        node={"cost_per_hour": 98.32},
        workload={"concurrency": [1, 32]},
        objective={"metric": "output_throughput_c32"},
    )
    assert objective_throughput_metric(spec) == "output_throughput_c32"
    metrics = {"output_throughput_c1": 80.0, "output_throughput_c32": 1000.0}
    # 98.32 $/h over 1000 tok/s x 3600 s/h = 3.6 M tok/h -> 27.311 $/M tokens
    assert cost_metrics(spec, metrics) == {"usd_per_million_tokens": pytest.approx(27.311111)}
    assert cost_metrics(spec, {"output_throughput_c1": 80.0}) == {}
    unpriced = harness.make_spec(tmp_path)
    assert cost_metrics(unpriced, {"output_throughput": 80.0}) == {}


@pytest.mark.parametrize("bad", [-1, 0, "cheap", ".inf"])
def test_a_bad_node_cost_is_a_one_line_spec_error(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SpecError) as err:
        harness.make_spec(tmp_path, node={"cost_per_hour": bad})
    text = str(err.value)
    assert "node.cost_per_hour" in text
    assert "\n" not in text.strip()


def test_goodput_needs_an_sla_and_the_sla_names_level_metrics(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="needs 'sla'"):
        harness.make_spec(tmp_path, workload={"goodput": {"max_concurrency": 8}})
    with pytest.raises(SpecError, match="not a level metric"):
        harness.make_spec(tmp_path, workload={"sla": {"itl_p95_ms": 50}})
    with pytest.raises(SpecError, match="swap them"):
        harness.make_spec(
            tmp_path,
            workload={
                "sla": {"itl_p99_ms": 50},
                "goodput": {"min_concurrency": 9, "max_concurrency": 8},
            },
        )
    spec = harness.make_spec(
        tmp_path,
        workload={"sla": {"itl_p99_ms": 50}, "goodput": {"max_concurrency": 8}},
        objective={"metric": "goodput_throughput"},
    )
    assert objective_throughput_metric(spec) == "goodput_throughput"


def test_grid_size_counts_conditional_parameters_only_where_active(tmp_path: Path) -> None:
    spec = harness.make_spec(tmp_path)  # search_spaces/speculative.yaml
    params = spec.params
    brute = set()
    keys = list(params)
    for combo in itertools.product(*(params[k].values() for k in keys)):
        config = dict(zip(keys, combo, strict=True))
        if config["speculative-algorithm"] is None:
            config = {"speculative-algorithm": None}
        brute.add(tuple(sorted((k, repr(v)) for k, v in config.items())))
    assert grid_size(params) == len(brute) == 1 + 7 * 4 * 4
    assert grid_size({"x": ParamSpec.model_validate({"float": [0.1, 0.9]})}) is None


def test_sweep_cost_sets_gpu_hours_against_the_grid_at_the_mean_trial_time(tmp_path: Path) -> None:
    spec = harness.make_spec(tmp_path, node={"cost_per_hour": 40.0})
    records = [
        _record("t0000", {"speculative-algorithm": None}, {"output_throughput": 80.0}, 300.0),
        _record("t0001", {"speculative-algorithm": "EAGLE3"}, {"output_throughput": 50.0}, 600.0),
    ]
    cost = sweep_cost(spec, records)
    assert cost.gpu_hours == pytest.approx(900 * 8 / 3600)
    assert cost.mean_trial_s == 450.0
    assert cost.grid_size == 113
    assert cost.grid_gpu_hours == pytest.approx(113 * 450 * 8 / 3600)
    assert cost.usd == pytest.approx(40 * 900 / 3600)
    assert cost.grid_usd == pytest.approx(40 * 113 * 450 / 3600)
    assert "113 configurations" in cost.sentence()


_PLAIN = {"speculative-algorithm": None}
_EAGLE = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3}


def test_per_load_answer_names_each_levels_winner_and_the_speculative_crossover(
    tmp_path: Path,
) -> None:
    spec = harness.make_spec(
        tmp_path,
        workload={"concurrency": [1, 4, 16, 64]},
        objective={"metric": "output_throughput_c1"},
    )
    records = [
        _record(
            "t0000",
            _PLAIN,
            {f"output_throughput_c{c}": v for c, v in ((1, 80), (4, 300), (16, 1000), (64, 3000))},
        ),
        _record(
            "t0001",
            _EAGLE,
            {f"output_throughput_c{c}": v for c, v in ((1, 140), (4, 420), (16, 990), (64, 2000))},
        ),
        _record("t0002", {**_PLAIN, "x": 1}, {"output_throughput_c16": 1005.0}),
    ]
    answer = per_load_answer(spec, records)
    assert answer is not None
    assert [(w.concurrency, w.trial_id, w.speculative) for w in answer.winners] == [
        (1, "t0001", True),
        (4, "t0001", True),
        (16, "t0002", False),
        (64, "t0000", False),
    ]
    assert answer.crossover == 16
    assert "stops paying at concurrency 16" in answer.sentence()
    lines = load_and_cost_lines(spec, records)
    assert "  c1: t0001 140 (speculative)" in lines
    # One level only: no per-load answer.
    assert per_load_answer(harness.make_spec(tmp_path), records) is None


def test_no_crossover_when_speculative_decoding_never_wins_or_always_wins(tmp_path: Path) -> None:
    spec = harness.make_spec(
        tmp_path, workload={"concurrency": [1, 8]}, objective={"metric": "output_throughput_c8"}
    )
    always = [
        _record("t0000", _PLAIN, {"output_throughput_c1": 80, "output_throughput_c8": 500}),
        _record("t0001", _EAGLE, {"output_throughput_c1": 90, "output_throughput_c8": 600}),
    ]
    answer = per_load_answer(spec, always)
    assert answer is not None
    assert answer.crossover is None
    assert answer.sentence() == "speculative decoding wins at every measured level"
    never = [
        _record("t0000", _PLAIN, {"output_throughput_c1": 80, "output_throughput_c8": 500}),
        _record("t0001", _EAGLE, {"output_throughput_c1": 70, "output_throughput_c8": 400}),
    ]
    answer = per_load_answer(spec, never)
    assert answer is not None
    assert answer.crossover is None
    assert answer.sentence() == "speculative decoding wins at no measured level"


def test_bisect_highest_finds_the_last_level_that_holds_in_few_probes() -> None:
    for limit in range(0, 40):
        probed: list[int] = []

        def holds(c: int, limit: int = limit, probed: list[int] = probed) -> bool:
            probed.append(c)
            return c <= limit

        found = bisect_highest(1, 32, holds)
        assert found == (None if limit < 1 else min(limit, 32))
        assert len(probed) <= 7
    assert bisect_highest(4, 4, lambda c: True) == 4


def test_sla_holds_only_when_every_bound_is_measured_and_met() -> None:
    sla = {"ttft_p99_ms": 2000.0, "itl_p99_ms": 50.0}
    assert sla_holds(sla, {"ttft_p99_ms": 1999.0, "itl_p99_ms": 50.0}) == (True, "")
    ok, why = sla_holds(sla, {"ttft_p99_ms": 2500.0})
    assert not ok
    assert why == "ttft_p99_ms 2500 > 2000; itl_p99_ms not measured"


def test_agreement_is_the_mean_common_prefix_over_the_first_n_tokens() -> None:
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
    assert agreement(ref, ref, tokens=4) == (1.0, None)
    got = [[1, 2, 3, 4], [5, 0, 7, 8], [9, 9, 9, 9, 1]]
    # prompt 1 diverges at its 2nd token: 1/4; later equal tokens do not count back.
    assert agreement(ref, got, tokens=4) == (pytest.approx((1 + 0.25 + 1) / 3), 1)
    assert agreement(ref, [[1, 2], [5, 6, 7, 8], [9, 9, 9, 9]], tokens=4)[0] == pytest.approx(
        (0.5 + 1 + 1) / 3
    )
    with pytest.raises(ValueError, match="reference outputs"):
        agreement(ref, ref[:2], tokens=4)
