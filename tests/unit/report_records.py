"""Hand-built records of a PCIe-like sweep, for the tests of the report and the replay table."""

from __future__ import annotations

from pathlib import Path

import yaml
from harness import DROP, make_spec

from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.spec import SweepSpec


def report_spec(
    tmp_path: Path, *, concurrency: str = "1", objective: str = "output_throughput"
) -> SweepSpec:
    eagle = {"speculative-algorithm": "EAGLE3"}
    return make_spec(
        tmp_path,
        name="rep",
        description="report unit test",
        node={
            "model": "/models/target",
            "draft_model": "/models/draft",
            "env": {"HF_TOKEN": "hf_secret_value_123"},
            "boot_timeout_s": DROP,
            "request_timeout_s": DROP,
            "sim_profile": DROP,
        },
        search_space={
            "include": DROP,
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {"int": [1, 7], "default": 3, "when": eagle},
                "speculative-num-draft-tokens": {
                    "choices": [2, 4, 8],
                    "default": 4,
                    "when": eagle,
                },
                "cuda-graph-max-bs": {"choices": [128, 512], "default": 512},
                "mem-fraction-static": {"float": [0.7, 0.92], "step": 0.01, "default": 0.88},
                "disable-custom-all-reduce": {"choices": [False, True], "default": False},
            },
        },
        workload={
            "output_len": 32,
            "concurrency": yaml.safe_load(concurrency),
            "warmup_prompts": DROP,
        },
        objective={"metric": objective},
        budget={"trials": 10, "max_concurrent": 1, "trial_timeout_s": DROP},
    )


CLOCK = [1_000]


def make_record(
    trial_id: str,
    config: dict[str, object],
    *,
    mode: FailureMode = FailureMode.NONE,
    metrics: dict[str, float] | None = None,
    reason: str = "",
    excerpt: str = "",
    elapsed_s: float = 60.0,
) -> TrialRecord:
    CLOCK[0] += 1000
    tags = {"spec_sweep.log_excerpt": excerpt} if excerpt else {}
    return TrialRecord(
        run_id=f"run-{trial_id}",
        trial_id=trial_id,
        status="FINISHED",
        config=dict(config),  # type: ignore[arg-type]
        failure_mode=mode,
        metrics=dict(metrics or {}),
        reason=reason,
        elapsed_s=elapsed_s,
        start_time=CLOCK[0],
        end_time=CLOCK[0] + 500,
        tags=tags,
    )


PLAIN = {
    "speculative-algorithm": None,
    "cuda-graph-max-bs": 512,
    "mem-fraction-static": 0.88,
    "disable-custom-all-reduce": False,
}


def eagle_config(steps: int, tokens: int, **extra: object) -> dict[str, object]:
    return {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "speculative-num-draft-tokens": tokens,
        "cuda-graph-max-bs": 128,
        "mem-fraction-static": 0.88,
        "disable-custom-all-reduce": False,
        **extra,
    }


def trial_metrics(
    thr: float, *, speed: float, accept: float | None = None, lat: float = 50.0
) -> dict[str, float]:
    out = {
        "output_throughput": thr,
        "decode_speed_p50": speed,
        "ttft_p99_ms": lat,
        "itl_p99_ms": 1000.0 / speed,
        "boot_s": 3.0,
    }
    if accept is not None:
        out["accept_length"] = accept
    return out


def pcie_sweep() -> list[TrialRecord]:
    """A PCIe-like sweep: baseline 82 tok/s, tuned 89.5, EAGLE-3 at ~54, two failures."""
    return [
        make_record("t0000", PLAIN, metrics=trial_metrics(80.0, speed=82.0)),
        make_record(
            "t0001",
            {**PLAIN, "cuda-graph-max-bs": 128},
            metrics=trial_metrics(87.0, speed=89.5, lat=45.0),
        ),
        make_record(
            "t0002",
            eagle_config(3, 4),
            metrics=trial_metrics(52.0, speed=54.0, accept=2.5, lat=40.0),
        ),
        make_record(
            "t0003",
            eagle_config(5, 8),
            metrics=trial_metrics(48.0, speed=50.0, accept=2.8, lat=60.0),
        ),
        make_record(
            "t0004",
            {**PLAIN, "disable-custom-all-reduce": True, "mem-fraction-static": 0.92},
            mode=FailureMode.OOM,
            reason="OOM: torch.OutOfMemoryError: CUDA out of memory",
            excerpt="Capture cuda graph begin\ntorch.OutOfMemoryError: CUDA out of memory.",
        ),
        make_record(
            "t0005",
            eagle_config(7, 8),
            mode=FailureMode.ASSERTION,
            reason="assertion: AssertionError: draft tokens",
            excerpt="AssertionError: speculative_num_draft_tokens too large",
        ),
    ]
