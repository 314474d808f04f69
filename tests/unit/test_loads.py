"""GPU-hours against a grid and the winner per load (core.loads), and their summary lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import harness
import pytest

from spec_sweep.core.history import History
from spec_sweep.core.loads import lost_attempt_seconds, per_load_answer, sweep_cost
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.sweep_view import SweepView

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


_PLAIN = {"speculative-algorithm": None}
_EAGLE = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3}


def test_sweep_cost_sets_gpu_hours_against_the_grid_at_the_mean_trial_time(tmp_path: Path) -> None:
    spec = harness.make_spec(tmp_path, node={"cost_per_hour": 40.0})
    records = [
        _record("t0000", {"speculative-algorithm": None}, {"output_throughput": 80.0}, 300.0),
        _record("t0001", {"speculative-algorithm": "EAGLE3"}, {"output_throughput": 50.0}, 600.0),
    ]
    cost = sweep_cost(History(spec, records))
    assert cost.gpu_hours == pytest.approx(900 * 8 / 3600)
    assert cost.mean_trial_s == 450.0
    assert cost.grid_size == 113
    assert cost.grid_gpu_hours == pytest.approx(113 * 450 * 8 / 3600)
    assert cost.usd == pytest.approx(40 * 900 / 3600)
    assert cost.grid_usd == pytest.approx(40 * 113 * 450 / 3600)
    assert "113 configurations" in cost.sentence()


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
    answer = per_load_answer(History(spec, records))
    assert answer is not None
    assert [(w.concurrency, w.trial_id, w.speculative) for w in answer.winners] == [
        (1, "t0001", True),
        (4, "t0001", True),
        (16, "t0002", False),
        (64, "t0000", False),
    ]
    assert answer.crossover == 16
    assert "stops paying at concurrency 16" in answer.sentence()
    lines = SweepView.of(History(spec, records)).load_and_cost_lines()
    assert "  c1: t0001 140 (speculative)" in lines
    # One level only: no per-load answer.
    assert per_load_answer(History(harness.make_spec(tmp_path), records)) is None


def test_no_crossover_when_speculative_decoding_never_wins_or_always_wins(tmp_path: Path) -> None:
    spec = harness.make_spec(
        tmp_path, workload={"concurrency": [1, 8]}, objective={"metric": "output_throughput_c8"}
    )
    always = [
        _record("t0000", _PLAIN, {"output_throughput_c1": 80, "output_throughput_c8": 500}),
        _record("t0001", _EAGLE, {"output_throughput_c1": 90, "output_throughput_c8": 600}),
    ]
    answer = per_load_answer(History(spec, always))
    assert answer is not None
    assert answer.crossover is None
    assert answer.sentence() == "speculative decoding wins at every measured level"
    never = [
        _record("t0000", _PLAIN, {"output_throughput_c1": 80, "output_throughput_c8": 500}),
        _record("t0001", _EAGLE, {"output_throughput_c1": 70, "output_throughput_c8": 400}),
    ]
    answer = per_load_answer(History(spec, never))
    assert answer is not None
    assert answer.crossover is None
    assert answer.sentence() == "speculative decoding wins at no measured level"


def test_a_lost_attempt_held_the_node_until_its_last_sign_of_life() -> None:
    start = 1_000_000_000_000
    hour = 3_600_000

    def attempt(status: str, end: int | None = None, elapsed: float | None = None) -> TrialRecord:
        return TrialRecord(
            run_id="r",
            trial_id="t0003",
            status=status,
            config={},
            failure_mode=None,
            metrics={},
            reason="",
            elapsed_s=elapsed,
            start_time=start,
            end_time=end,
        )

    def lost(record: TrialRecord, seen: int | None) -> float | None:
        return lost_attempt_seconds(
            record, last_seen_ms=seen, now_ms=start + 3 * hour, timeout_s=900
        )

    # left RUNNING by a killed driver, resumed three hours later: 20 s, not three hours
    assert lost(attempt("RUNNING"), start + 20_000) == pytest.approx(20.0)
    assert lost(attempt("RUNNING"), None) == 0.0  # no sign of life after its start
    # closed at an earlier resume's time, hours after its last sign of life: timed again
    assert lost(attempt("KILLED", end=start + 2 * hour), start + 30_000) == pytest.approx(30.0)
    # closed in time (Ctrl-C, node lost), or timed already: its own times stand
    assert lost(attempt("KILLED", end=start + 60_000), start + 55_000) is None
    assert lost(attempt("KILLED", end=start + 2 * hour, elapsed=40.0), start + 30_000) is None
    assert lost(attempt("RUNNING", elapsed=12.0), start + 30_000) is None
