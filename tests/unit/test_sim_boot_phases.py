"""The simulated node's boot phases against the real SGLang logs and sources.

Every line that times a boot phase is read back with a pattern that must also match the real
SGLang 0.5.13 logs under ``tests/fixtures/sglang/0.5.13/`` (so the simulator's lines are the real
ones, not look-alikes); the phases the lines time must add up to the scheduler's start-up time,
and 0.5.17+'s ``startup_time`` / "Engine startup timings" must carry SGLang's keys. The boot is
played in this process at time scale 0, its log written to a file.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from spec_sweep.sim.boot import GRAPH_PHASES, BootResult, boot_node, has_startup_time
from spec_sweep.sim.cli import parse_command_line
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import plan_node
from spec_sweep.sim.profiles import load_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "0.5.13"
H200 = [
    "--model-path",
    "deepseek-ai/DeepSeek-V3",
    "--tp-size",
    "8",
    "--sim-profile",
    "h200-nvlink-x8",
]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
N = r"-?\d+(?:\.\d+)?"

#: Lines that time a phase in 0.5.13, as the real logs print them: name -> pattern (group 1 is
#: the seconds where the line has them).
PHASES_0_5_13 = {
    "init": rf"Init torch distributed ends\. elapsed=({N}) s, mem usage={N} GB$",
    "load": rf"Load weight end\. elapsed=({N}) s, type=\w+, (?:quant=\S+, )?avail mem={N} GB, "
    rf"mem usage={N} GB\.$",
    "kv": rf"KV Cache is allocated\. dtype: \S+, #tokens: \d+, "
    rf"(?:KV size: {N} GB|K size: {N} GB, V size: {N} GB)$",
    "capture": rf"Capture cuda graph end\. Time elapsed: ({N}) s\. mem usage={N} GB\. "
    rf"avail mem={N} GB\.$",
    "draft": rf"Capture draft cuda graph end\. Time elapsed: ({N}) s\. mem usage={N} GB\. "
    rf"avail mem={N} GB\.$",
    "draft_extend": rf"Capture draft extend cuda graph end\. Time elapsed: ({N}) s\. "
    rf"mem usage={N} GB\. avail mem={N} GB\.$",
    "piecewise": rf"Capture piecewise CUDA graph end\. Time elapsed: ({N}) s\. mem usage={N} GB\. "
    rf"avail mem={N} GB\.$",
    "compile": rf"Compiling a graph for dynamic shape takes ({N}) s$",
    "piecewise_sizes": r"Capture cuda graph num tokens \[[\d, ]+\]$",
}


def _messages(text: str) -> list[str]:
    """The messages of SGLang log records (``[time( TPn)] message``), progress bars skipped."""
    out = []
    for raw in text.splitlines():
        for piece in re.split(r"(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] )", raw):
            match = re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP(\d+))?\] (.*)$", piece)
            if match and match.group(1) in (None, "0"):
                out.append(match.group(2))
    return out


REAL = [m for log in sorted(FIXTURES.glob("*.log")) for m in _messages(log.read_text())]


@pytest.mark.parametrize("name", sorted(PHASES_0_5_13))
def test_every_phase_pattern_is_read_from_the_real_logs(name: str) -> None:
    assert any(re.match(PHASES_0_5_13[name], m) for m in REAL), name


def _boot(argv: list[str], tmp_path: Path) -> tuple[BootResult, list[str]]:
    options, config = parse_command_line(argv, {"SPEC_SWEEP_SIM_TIME_SCALE": "0"})
    profile = load_profile(options.profile)
    plan = plan_node(profile, config)
    assert plan.failure is None, plan.failure
    path = tmp_path / "boot.log"
    with path.open("wb") as handle:
        log = SimLog(out_fd=handle.fileno(), err_fd=handle.fileno())
        result = asyncio.run(
            boot_node(options=options, plan=plan, profile=profile, log=log, workers=None)  # type: ignore[arg-type]
        )
    assert result is not None
    return result, _messages(path.read_text())


def _seconds(messages: list[str], pattern: str) -> list[float]:
    return [float(m.group(1)) for m in map(re.compile(pattern).match, messages) if m]


@pytest.mark.parametrize("spec", [[], EAGLE], ids=["baseline", "eagle3"])
def test_0_5_13_boot_prints_the_real_phase_lines_and_they_add_up(
    spec: list[str], tmp_path: Path
) -> None:
    result, messages = _boot([*H200, "--sim-sglang-version", "0.5.13", *spec], tmp_path)
    for name in ("init", "load", "kv", "capture", "piecewise", "compile", "piecewise_sizes"):
        assert any(re.match(PHASES_0_5_13[name], m) for m in messages), name
    timed = ["init", "load", "capture", "piecewise"] + (["draft", "draft_extend"] if spec else [])
    total = sum(sum(_seconds(messages, PHASES_0_5_13[name])) for name in timed)
    # kv allocation prints no time in 0.5.13; everything else the scheduler does is in a line.
    assert total + result.kv_cache_s == pytest.approx(result.scheduler_e2e_s)
    # the compile is part of the piecewise capture's time
    assert _seconds(messages, PHASES_0_5_13["compile"])[0] < result.piecewise_s
    assert not any(m.startswith("Engine startup timings") for m in messages)
    assert not has_startup_time("0.5.13")


def test_piecewise_capture_follows_0_5_13s_rules(tmp_path: Path) -> None:
    # Kimi-K2.5 is multimodal: 0.5.13 turns the piecewise graph off (the PCIe profile's model).
    _, kimi = _boot(["--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
                     "--sim-sglang-version", "0.5.13"], tmp_path)  # fmt: skip
    assert not any(m.startswith("Capture piecewise") for m in kimi)
    _, off = _boot([*H200, "--sim-sglang-version", "0.5.13", "--disable-piecewise-cuda-graph"],
                   tmp_path)  # fmt: skip
    assert not any(m.startswith("Capture piecewise") for m in off)
    _, new = _boot(H200, tmp_path)
    assert not any(m.startswith("Capture piecewise") for m in new)


def _timings(line: str) -> dict[str, Any]:
    """Parse "Engine startup timings (s): ..." back into ``startup_time``'s shape."""
    match = re.match(
        rf"Engine startup timings \(s\): load_weight=({N}), kv_cache_allocation=({N}), "
        rf"scheduler_e2e=({N}), cuda_graph=\{{(.*)\}}, tokenizer_e2e=({N})$",
        line,
    )
    assert match, line
    graphs = dict(part.split("=") for part in match.group(4).split(", "))
    return {
        "load_weight": float(match.group(1)),
        "kv_cache_allocation": float(match.group(2)),
        "scheduler_e2e": float(match.group(3)),
        "cuda_graph": {k: float(v) for k, v in graphs.items()},
        "tokenizer_e2e": float(match.group(5)),
    }


@pytest.mark.parametrize("spec", [[], EAGLE], ids=["baseline", "eagle3"])
def test_0_5_23_prints_init_parallel_and_startup_timings_that_add_up(
    spec: list[str], tmp_path: Path
) -> None:
    result, messages = _boot([*H200, *spec], tmp_path)
    init = _seconds(messages, rf"Init parallel ends\. elapsed=({N}) s$")
    load = _seconds(messages, rf"Load weight end\. elapsed=({N}) s, ")
    graphs = _seconds(
        messages, rf"Capture [\w ]+ CUDA graph end\. (?:bs=\[[\d, ]+\], )?elapsed=({N}) s, "
    )
    assert len(init) == 1
    assert len(load) == (2 if spec else 1)
    lines = [m for m in messages if m.startswith("Engine startup timings")]
    assert len(lines) == 1
    startup = _timings(lines[0])
    served = result.startup_time()
    assert startup["cuda_graph"] == pytest.approx(served.pop("cuda_graph"), abs=0.005)
    assert {k: v for k, v in startup.items() if k != "cuda_graph"} == pytest.approx(
        served, abs=0.005
    )
    assert list(startup["cuda_graph"]) == list(GRAPH_PHASES)
    assert startup["load_weight"] == pytest.approx(sum(load))
    assert sum(startup["cuda_graph"].values()) == pytest.approx(sum(graphs))
    assert startup["scheduler_e2e"] == pytest.approx(
        init[0] + sum(load) + startup["kv_cache_allocation"] + sum(graphs)
    )
    assert startup["tokenizer_e2e"] > startup["scheduler_e2e"]
    assert (startup["cuda_graph"]["target_verify"] > 0) == bool(spec)
    assert (startup["cuda_graph"]["decode"] > 0) != bool(spec)


def test_startup_time_has_sglangs_keys_and_serialises() -> None:
    assert has_startup_time("0.5.17")
    assert not has_startup_time("0.5.16")
    startup = BootResult().startup_time()
    assert set(startup) == {
        "load_weight", "kv_cache_allocation", "scheduler_e2e", "cuda_graph", "tokenizer_e2e",
    }  # fmt: skip
    assert startup["cuda_graph"] == dict.fromkeys(
        ["prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"], 0.0
    )
    assert json.loads(json.dumps(startup)) == startup


def test_adaptive_boot_builds_a_state_per_other_candidate(tmp_path: Path) -> None:
    config = tmp_path / "adaptive.json"
    config.write_text(
        json.dumps({"1": {"candidate_steps": [1, 3, 5]}, "32": {"candidate_steps": [0, 1]}})
    )
    result, messages = _boot(
        [*H200, "--speculative-algorithm", "EAGLE3", "--speculative-adaptive",
         "--speculative-adaptive-config", str(config)],
        tmp_path,
    )  # fmt: skip
    assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5]" in messages
    built = [m for m in messages if m.startswith("Built adaptive runtime state")]
    assert [re.match(r"Built adaptive runtime state steps=(\d+):", m).group(1) for m in built] == [  # type: ignore[union-attr]
        "0", "1", "5",
    ]  # fmt: skip
    assert all(
        re.match(rf"Built adaptive runtime state steps=\d+: elapsed={N}s, mem={N}GB$", m)
        for m in built
    )
    # the states' capture time is in startup_time (0.5.23 _additional_graph_time_usage)
    state_time = sum(_seconds(messages, rf"Built adaptive runtime state steps=\d+: elapsed=({N})s"))
    assert state_time > 0
    assert sum(result.cuda_graph_s.values()) > state_time


def test_no_new_boot_line_looks_fatal_to_the_log_watcher(tmp_path: Path) -> None:
    from spec_sweep.node.classify import find_fatal

    config = tmp_path / "adaptive.json"
    config.write_text(
        json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}})
    )
    lines: list[str] = []
    for argv in (
        [*H200, "--sim-sglang-version", "0.5.13", *EAGLE],
        [*H200, "--speculative-algorithm", "EAGLE3", "--speculative-adaptive",
         "--speculative-adaptive-config", str(config)],
    ):  # fmt: skip
        lines += _boot(argv, tmp_path)[1]
    assert [m for m in lines if find_fatal(f"[2026-01-01 00:00:00 TP0] {m}") is not None] == []
