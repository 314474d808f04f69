"""A trial as the store holds it, and its MLflow tags and params both ways (core.record)."""

from __future__ import annotations

import json

from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import (
    config_params,
    kill_tags,
    outcome_tags,
    param_value,
    record_from_run,
    trial_tags,
)

CONFIG = {"cuda-graph-max-bs": 64, "env.NCCL_ALGO": None, "disable-custom-all-reduce": True}


def test_a_trial_run_written_and_read_back() -> None:
    tags = trial_tags(
        parent_run_id="p",
        trial_id="t0007.r1",
        config=CONFIG,
        attempt=2,
        fingerprint="fp",
        confirms="t0007",
    )
    assert tags["mlflow.parentRunId"] == "p"
    assert tags["spec_sweep.kind"] == "trial"
    assert json.loads(tags["spec_sweep.config"]) == CONFIG
    assert tags["spec_sweep.attempt"] == "2"
    assert tags["spec_sweep.confirms"] == "t0007"
    tags |= outcome_tags(
        failure_mode=FailureMode.NONE,
        reason="ok HF_TOKEN=hf_secret",
        elapsed_s=12.3456,
        secrets=["hf_secret"],
        prompt_source="builtin",
        log_excerpt="x" * 5000,
    )
    assert tags["spec_sweep.reason"] == "ok HF_TOKEN=***"
    assert tags["spec_sweep.elapsed_s"] == "12.346"
    assert len(tags["spec_sweep.log_excerpt"]) == 4000
    record = record_from_run(
        run_id="r",
        status="FINISHED",
        tags=tags,
        metrics={"output_throughput": 88.0, "system/cpu_utilization_percentage": 50.0},
        start_time=1000,
        end_time=2000,
    )
    assert record.trial_id == "t0007.r1"
    assert record.config == CONFIG
    assert record.failure_mode is FailureMode.NONE
    assert record.metrics == {"output_throughput": 88.0}  # the node's telemetry is left out
    assert record.elapsed_s == 12.346
    assert record.finished
    assert record.measured
    assert not record.search


def test_a_run_without_an_outcome_is_not_finished() -> None:
    record = record_from_run(
        run_id="r",
        status="KILLED",
        tags={**trial_tags(trial_id="t0001", config={}), **kill_tags("lost")},
        metrics={},
        start_time=None,
        end_time=None,
    )
    assert record.failure_mode is None
    assert not record.finished
    assert record.reason == "lost"
    assert kill_tags("x", failure_mode=FailureMode.NODE_LOST)["failure_mode"] == "node_lost"


def test_params_spell_values_as_the_spec_does() -> None:
    assert param_value(None) == "null"
    assert param_value(True) == "true"
    assert param_value(0.88) == "0.88"
    assert config_params({"env.HF_TOKEN": "hf_secret"}, ["hf_secret"]) == {"env.HF_TOKEN": "***"}
    manual = trial_tags(trial_id="x", config={}, attempt=None, manual=True)
    assert "spec_sweep.attempt" not in manual
    assert "mlflow.parentRunId" not in manual
    assert manual["spec_sweep.manual"] == "true"
