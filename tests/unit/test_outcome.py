"""How a trial ended, in its two travelling shapes (core.outcome): result.json and Tune's dict."""

from __future__ import annotations

import json

from spec_sweep.core.outcome import REUSABLE_MODES, FailureMode, TrialReport, TrialResult


def test_result_json_round_trip() -> None:
    result = TrialResult(
        trial_id="t0003",
        config={"cuda-graph-max-bs": 64, "env.NCCL_ALGO": None},
        failure_mode=FailureMode.OOM,
        reason="OOM: CUDA out of memory",
        metrics={"boot_s": 3.0},
        command=("python", "-m", "sglang.launch_server"),
        env={"NCCL_ALGO": "Ring"},
        log_path="/tmp/server.log",
        elapsed_s=12.5,
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["failure_mode"] == "oom"
    assert TrialResult.from_dict(data) == result
    # Fields a newer writer added are ignored by an older reader.
    assert TrialResult.from_dict({**data, "future_field": 1}) == result
    assert not result.ok


def test_tune_dict_round_trip_keeps_the_keys_tune_and_the_searcher_read() -> None:
    report = TrialReport(
        trial_id="t0002",
        failure_mode=FailureMode.NONE,
        reason="",
        metrics={"output_throughput": 88.0, "speedup_vs_baseline": 1.1},
        time_trial_s=3.0,
        time_record_s=0.5,
    )
    data = report.to_tune()
    assert data["failure_mode"] == "none"
    assert data["output_throughput"] == 88.0  # metrics at the top level, as Tune expects
    assert data["from_record"] is False
    back = TrialReport.from_tune({**data, "timestamp": 1, "done": True, "config": {}})
    assert back.failure_mode is FailureMode.NONE
    assert back.metrics["output_throughput"] == 88.0
    assert (back.time_trial_s, back.time_record_s) == (3.0, 0.5)
    assert back.ended


def test_an_interrupted_trial_has_no_outcome_to_learn_from() -> None:
    stopped = TrialReport(trial_id="t0004", interrupted=True, reason="interrupted")
    assert stopped.to_tune() == {"trial_id": "t0004", "interrupted": True, "reason": "interrupted"}
    environment = TrialReport(
        trial_id="t0005", interrupted=True, environment="no GPU", reason="no GPU"
    )
    back = TrialReport.from_tune(environment.to_tune())
    assert back.environment == "no GPU"
    assert not back.ended
    assert TrialReport.from_tune(None).failure_mode is None


def test_reusable_modes_are_the_ones_asking_again_would_not_change() -> None:
    assert FailureMode.NONE in REUSABLE_MODES
    assert FailureMode.HANG not in REUSABLE_MODES
    assert FailureMode.NODE_LOST not in REUSABLE_MODES
