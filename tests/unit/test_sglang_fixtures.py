"""The classifier, the log watcher and the simulator's texts against what real SGLang printed.

`tests/fixtures/sglang/<version>/` holds server logs from real SGLang boots on H200s (0.5.13 with
a dummy-weight Llama, 0.5.17 with the real SmolLM2-135M checkpoint; the tests/real matrix;
`cases.json` says what each was and how it must be classified). Nothing here was written by our
simulator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.classify import classify, find_child_failed, find_fatal
from spec_sweep.sim import texts

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
VERSIONS = ("0.5.13", "0.5.17")
FIXTURES = ROOT / "0.5.13"
CASES: list[dict[str, Any]] = [
    {**case, "version": version}
    for version in VERSIONS
    for case in json.loads((ROOT / version / "cases.json").read_text())
]


def _log(name: str, version: str = "0.5.13") -> str:
    return (ROOT / version / name).read_text()


def _case_id(case: dict[str, Any]) -> str:
    return f"{case['version']}/{case['log']}"


def _shape(text: str) -> str:
    """A message with its numbers and sizes blanked, to compare wording, not values."""
    return re.sub(r"\d+(?:\.\d+)?", "N", text)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_real_logs_are_classified_as_what_happened(case: dict[str, Any]) -> None:
    log = _log(case["log"], case["version"])
    result = classify(
        log_text=log,
        exit_code=case["exit_code"],
        ready=case["ready"],
        child_failed=case.get("child_failed"),
    )
    assert result.mode is FailureMode(case["mode"]), result
    if "reason" in case:
        assert case["reason"] in result.reason


@pytest.mark.parametrize("case", [c for c in CASES if c["mode"] == "none"], ids=_case_id)
def test_the_watcher_never_kills_a_healthy_real_boot(case: dict[str, Any]) -> None:
    log = _log(case["log"], case["version"])
    fatal = [line for line in log.splitlines() if find_fatal(line) is not None]
    assert fatal == []


@pytest.mark.parametrize("case", [c for c in CASES if c["mode"] == "none"], ids=_case_id)
def test_a_healthy_real_boot_says_a_process_failed_only_once_it_is_stopped(
    case: dict[str, Any],
) -> None:
    # SGLang prints its SIGQUIT line when the trial stops the server: after the last request
    lines = _log(case["log"], case["version"]).splitlines()
    failed = [i for i, line in enumerate(lines) if find_child_failed(line) is not None]
    served = [i for i, line in enumerate(lines) if '"POST /' in line]
    assert served
    assert all(i > served[-1] for i in failed)


@pytest.mark.parametrize("case", [c for c in CASES if "child_failed" in c], ids=_case_id)
def test_the_watcher_sees_the_real_failed_process_line(case: dict[str, Any]) -> None:
    found = [find_child_failed(line) for line in _log(case["log"], case["version"]).splitlines()]
    assert case["child_failed"] in found


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
        for version, name in [
            ("0.5.13", "baseline-0.log"),
            ("0.5.13", "ngram-d8.log"),
            ("0.5.17", "baseline-1.log"),
            ("0.5.17", "ngram-d8.log"),
        ]
        for line in _log(name, version).splitlines()
        if "Decode batch" in line
    ]
    assert lines
    assert all(shape.match(line) for line in lines), [x for x in lines if not shape.match(x)]
    assert any("accept len" in line for line in lines)


def test_the_simulated_0_5_17_low_end_oom_reads_like_the_real_one() -> None:
    real = next(
        line.split("ValueError: ", 1)[1]
        for line in _log("oom-low.log", "0.5.17").splitlines()
        if line.startswith("ValueError: Loaded weights")
    )
    sim = texts.weights_leave_no_kv_message(0.001, available_gib=140.6, pre_load_gib=140.9)
    assert _shape(sim) == _shape(real)


def test_the_simulated_startup_timings_line_and_server_info_are_the_real_ones() -> None:
    from spec_sweep.sim.boot import BootResult  # the simulated node's own boot phases

    boot = BootResult(load_weight_s=0.2, kv_cache_s=0.04)
    boot.add_graph("decode", 2.25)
    boot.finish(spawn_s=21.8)
    real_line = next(
        line.split("] ", 1)[1]
        for line in _log("baseline-1.log", "0.5.17").splitlines()
        if "Engine startup timings" in line
    )
    assert _shape(boot.timings_line()) == _shape(real_line)
    info = json.loads((ROOT / "0.5.17" / "streams" / "base-server_info.json").read_text())
    real, sim = info["startup_time"], boot.startup_time()
    assert set(real) == set(sim)
    assert set(real["cuda_graph"]) == set(sim["cuda_graph"])


def test_the_simulated_adaptive_lines_read_like_the_real_ones() -> None:
    """SGLang 0.5.17's adaptive mode, on the H200 with a per-batch-size config: the simulator's
    "Built adaptive runtime state" and "Switch adaptive runtime state" lines have the real
    wording (numbers aside)."""
    from spec_sweep.sim import adaptive

    log = _log("adaptive-per-batch.log", "0.5.17")
    real = {
        _shape(line.split("] ", 1)[-1]) for line in log.splitlines() if "adaptive runtime" in line
    }
    built = adaptive.BUILT_LINE.format(steps=1, elapsed=4.28, mem=0.16)
    switch = adaptive.SWITCH_LINE.format(old=5, new=3, old_dt=6, new_dt=4)
    assert _shape(built) in real
    assert _shape(switch) in real
    assert "speculative_adaptive disabled" not in log


def test_the_simulated_crash_diagnostics_read_like_the_real_ones() -> None:
    log = _log("eagle3-crash-s5-k2-d4.log", "0.5.17")
    assert texts.RUNNING_SIGQUIT_LINE in log
    assert texts.CRASH_DIAGNOSTICS_LINE in log
    assert texts.COREDUMP_WAIT_LINE.format(60.0) in log


def test_the_simulated_short_tree_crash_reads_like_the_real_one() -> None:
    real = _log("eagle3-crash-s5-k2-d4.log", "0.5.17")
    assert texts.compact_size_error(4, 6) in real
    for path, lineno, func, code in texts.VERIFY_COMPACT:
        assert f'sglang/{path}", line {lineno}, in {func}\n    {code}' in real
