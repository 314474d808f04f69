"""`core.memory`: SGLang's memory rule before a boot, against the real logs' boots.

Every real boot under tests/fixtures/sglang/ (0.5.13 and 0.5.17 on H200s) is checked: with the
memory facts of that version's baseline log, the rule predicts the low-end OOM (the
`--mem-fraction-static 0.001` boots, which failed for real) and nothing that booted, nor the
high-end OOMs (CUDA-graph capture), which it never claims to know.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import harness
import pytest

from spec_sweep.core.memory import (
    PRE_MARGIN,
    Observation,
    facts_for,
    observations,
    predict_oom,
)
from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC
from spec_sweep.node.boot_phases import parse_boot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
BASELINE = {"0.5.13": "baseline-0.log", "0.5.17": "baseline-1.log"}


def _facts(version: str, config: dict[str, object]) -> Observation:
    boot = parse_boot((FIXTURES / version / BASELINE[version]).read_text(errors="replace"))
    assert boot.avail_gib is not None
    assert boot.weights_gib is not None
    return Observation("t0000", config, boot.avail_gib, boot.weights_gib)


def _cases() -> list[tuple[str, dict[str, object]]]:
    out = []
    for version in BASELINE:
        for case in json.loads((FIXTURES / version / "cases.json").read_text()):
            text = (FIXTURES / version / case["log"]).read_text(errors="replace")
            if (found := re.search(r"mem_fraction_static=([\d.]+)", text)) is not None:
                out.append((version, {**case, "mem": float(found[1])}))
    return out


@pytest.mark.parametrize(
    ("version", "case"), _cases(), ids=lambda v: str(v.get("log", v)) if isinstance(v, dict) else v
)
def test_predicts_exactly_the_real_low_end_ooms(
    version: str, case: dict[str, object], tmp_path: Path
) -> None:
    spec = harness.make_spec(
        tmp_path, search_space={"include": ["memory.yaml"]}, baseline=harness.DROP
    )
    seen = [_facts(version, {"mem-fraction-static": 0.8})]
    why = predict_oom(spec, {"mem-fraction-static": case["mem"]}, seen)
    low_end = case["mode"] == "oom" and "high" not in str(case["log"])
    assert (why is not None) == low_end, (case["log"], why)
    if why is not None:
        assert "t0000" in why


def test_the_boundary_is_the_weights_over_the_free_memory(tmp_path: Path) -> None:
    spec = harness.make_spec(
        tmp_path, search_space={"include": ["memory.yaml"]}, baseline=harness.DROP
    )
    seen = [Observation("t0000", {"mem-fraction-static": 0.8}, avail_gib=80.0, weights_gib=60.0)]
    facts = facts_for({"mem-fraction-static": 0.7}, seen)
    assert facts is not None
    assert facts.pre_gib == pytest.approx(80.0 * (1 + PRE_MARGIN))
    edge = facts.weights_gib / facts.pre_gib  # 59.99 / 81.6 = 0.735
    assert predict_oom(spec, {"mem-fraction-static": round(edge - 0.01, 3)}, seen) is not None
    assert predict_oom(spec, {"mem-fraction-static": round(edge + 0.01, 3)}, seen) is None
    # SGLang's own minimum viable fraction here would be 60/80 = 0.75: the margin keeps every
    # prediction below it
    assert edge < 60.0 / 80.0


def test_only_trials_that_load_the_same_weights_count(tmp_path: Path) -> None:
    spec = harness.make_spec(
        tmp_path, search_space={"include": ["memory.yaml"]}, baseline=harness.DROP
    )
    seen = [Observation("t0003", {"tp-size": 8, "cuda-graph-max-bs": 512}, 80.0, 60.0)]
    # a smaller CUDA graph, speculative decoding, another NCCL algorithm: same weights
    same = {"tp-size": 8, "cuda-graph-max-bs": 64, "speculative-algorithm": "EAGLE3",
            "env.NCCL_ALGO": "Ring", "mem-fraction-static": 0.5}  # fmt: skip
    assert predict_oom(spec, same, seen) is not None
    # another tensor-parallel size or a quantization: other weights on each GPU, no prediction
    assert predict_oom(spec, {**same, "tp-size": 4}, seen) is None
    assert predict_oom(spec, {**same, "quantization": "fp8"}, seen) is None
    # no fraction set anywhere: SGLang picks its own from the GPU
    assert predict_oom(spec, {"tp-size": 8}, seen) is None
    assert predict_oom(spec, same, []) is None


def test_observations_come_from_the_records_metrics(tmp_path: Path) -> None:
    rec = harness.record("t0000", {"mem-fraction-static": 0.8}, 80.0,
                         **{AVAIL_METRIC: 139.13, WEIGHTS_METRIC: 0.27})  # fmt: skip
    failed = harness.record("t0001", {"mem-fraction-static": 0.99}, None)  # logged nothing
    assert observations([rec, failed]) == [
        Observation("t0000", {"mem-fraction-static": 0.8}, 139.13, 0.27)
    ]
