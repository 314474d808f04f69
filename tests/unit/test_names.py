"""How trials and configurations are named for people: MLflow run names (present.names)."""

from __future__ import annotations

from typing import Any

from spec_sweep.present.names import run_name

BASELINE: dict[str, Any] = {
    "speculative-algorithm": None,
    "cuda-graph-max-bs": 512,
    "mem-fraction-static": 0.88,
    "env.NCCL_ALGO": None,
    "disable-custom-all-reduce": False,
    "enable-flashinfer-allreduce-fusion": False,
    "enable-torch-symm-mem": False,
    "ep-size": 1,
}


def test_run_name_shows_what_differs_from_the_baseline() -> None:
    config = {**BASELINE, "cuda-graph-max-bs": 64, "mem-fraction-static": 0.9}
    assert run_name("t0010", config, BASELINE) == "t0010 cgbs=64 mem=0.9"
    assert run_name("t0000", BASELINE, BASELINE) == "t0000 baseline"


def test_run_name_of_an_eagle3_trial() -> None:
    config = {
        **BASELINE,
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
    }
    assert run_name("t0008", config, BASELINE) == "t0008 EAGLE3 s3 k1 d4"
    head = {
        **BASELINE,
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "lmsys/SGLang-EAGLE3-Qwen3-SpecForge",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
    }
    assert run_name("t0009", head, BASELINE) == (
        "t0009 EAGLE3 draft=SGLang-EAGLE3-Qwen3-SpecForge s3 k1 d4"
    )


def test_run_name_spells_flags_and_nulls() -> None:
    config = {
        **BASELINE,
        "disable-custom-all-reduce": True,
        "enable-torch-symm-mem": True,
        "env.NCCL_ALGO": "Ring",
        "ep-size": 8,
        "moe-a2a-backend": "flashinfer",
    }
    name = run_name("t0003", config, BASELINE)
    assert name == "t0003 nccl=Ring no-custom-ar symm-mem ep=8 a2a=flashinfer"
    back = {**config, "env.NCCL_ALGO": None, "ep-size": 1}
    assert run_name("t0004", back, config) == "t0004 nccl=default ep=1"
    assert run_name("t0005", BASELINE, {**BASELINE, "speculative-algorithm": "EAGLE3"}) == (
        "t0005 no-spec"
    )


def test_run_name_of_unknown_parameters_is_short_and_readable() -> None:
    config = {
        **BASELINE,
        "chunked-prefill-size": 8192,
        "enable-mixed-chunk": True,
        "env.SGLANG_MY_KNOB": "x",
        "schedule-policy": "lpm",
    }
    assert run_name("t0001", config, BASELINE) == (
        "t0001 cps=8192 mixed-chunk sglang-my-knob=x schedule-policy=lpm"
    )


def test_run_name_is_stable_and_unique_per_attempt() -> None:
    config = {**BASELINE, "cuda-graph-max-bs": 128}
    first = run_name("t0002", config, BASELINE)
    assert run_name("t0002", config, dict(BASELINE)) == first
    assert run_name("t0002", config, BASELINE, attempt=2) == f"{first} #2"
    assert run_name("t0003", config, BASELINE) != first
    # No baseline known (a manual trial of an old caller): every parameter, still short.
    assert run_name("t0002", {"cuda-graph-max-bs": 128}, None) == "t0002 cgbs=128"
    assert len(run_name("t0002", {f"p{i}": "x" * 40 for i in range(20)}, None)) <= 250
