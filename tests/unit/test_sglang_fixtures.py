"""The classifier, the log watcher and the simulator's texts against what real SGLang printed.

`tests/fixtures/sglang/0.5.13/` holds server logs from real SGLang 0.5.13 boots on H200s (the
tests/real matrix; `cases.json` says what each was and how it must be classified). Nothing here
was written by our simulator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.classify import classify, find_fatal
from spec_sweep.sim import texts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.13"
CASES: list[dict[str, Any]] = json.loads((FIXTURES / "cases.json").read_text())


def _log(name: str) -> str:
    return (FIXTURES / name).read_text()


def _shape(text: str) -> str:
    """A message with its numbers and sizes blanked, to compare wording, not values."""
    return re.sub(r"\d+(?:\.\d+)?", "N", text)


@pytest.mark.parametrize("case", CASES, ids=[c["log"] for c in CASES])
def test_real_logs_are_classified_as_what_happened(case: dict[str, Any]) -> None:
    result = classify(log_text=_log(case["log"]), exit_code=case["exit_code"], ready=case["ready"])
    assert result.mode is FailureMode(case["mode"]), result
    if "reason" in case:
        assert case["reason"] in result.reason


@pytest.mark.parametrize("case", [c for c in CASES if c["mode"] == "none"], ids=lambda c: c["log"])
def test_the_watcher_never_kills_a_healthy_real_boot(case: dict[str, Any]) -> None:
    fatal = [line for line in _log(case["log"]).splitlines() if find_fatal(line) is not None]
    assert fatal == []


def test_the_simulator_prints_the_real_ready_and_memory_lines() -> None:
    assert texts.READY_LINE in _log("baseline-0.log")
    assert texts.NOT_ENOUGH_MEMORY in _log("oom-low.log")


def test_the_simulated_torch_oom_reads_like_the_real_one() -> None:
    real = next(
        line.split("OutOfMemoryError: ", 1)[1]
        for line in _log("oom-high.log").splitlines()
        if line.startswith("torch.OutOfMemoryError: ")
    )
    sim = texts.torch_oom_message(
        tried_gib=0.09,
        gpu=0,
        total_gib=139.8,
        free_gib=0.04,
        in_use_gib=139.75,
        allocated_gib=138.83,
        reserved_unallocated_gib=0.19,
        private_pool_gib=0.002,
    )
    assert _shape(sim) == _shape(real)


def test_the_simulated_decode_line_has_the_real_fields() -> None:
    # The simulator's engine formats decode lines field by field as below (engine._log_decode);
    # every real decode line, speculative or not, must have the same fields in the same order.
    shape = re.compile(
        r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, "
        r"(?:accept len: [\d.]+, accept rate: [\d.]+, )?cuda graph: (?:True|False), "
        r"gen throughput \(token/s\): [\d.]+, #queue-req: \d+$"
    )
    lines = [
        line.split("] ", 1)[1]
        for name in ("baseline-0.log", "ngram-d8.log")
        for line in _log(name).splitlines()
        if "Decode batch" in line
    ]
    assert lines
    assert all(shape.match(line) for line in lines), [x for x in lines if not shape.match(x)]
    assert any("accept len" in line for line in lines)
