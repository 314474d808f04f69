"""`node.boot_phases`: a boot's phases and memory facts from real SGLang logs and answers.

The logs are the real ones under tests/fixtures/sglang/ (0.5.13 on a 2 x H200 machine with a
1.1B dummy Llama; 0.5.17 on one H200 with SmolLM2-135M), the `/server_info` answer is the real
0.5.17 one; the simulated node's boot logs (played in this process at time scale 0) must parse
to the phases it says it spent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC, boot_metric
from spec_sweep.node.boot_phases import from_startup_time, parse_boot, parse_startup_line
from spec_sweep.sim.boot import boot_node
from spec_sweep.sim.cli import parse_command_line
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import plan_node
from spec_sweep.sim.profiles import load_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


def _log(version: str, name: str) -> str:
    return (FIXTURES / version / name).read_text(errors="replace")


def test_0_5_13_baseline_phases_from_its_log_lines() -> None:
    boot = parse_boot(_log("0.5.13", "baseline-0.log"))
    assert boot.source == "log lines"
    assert boot.seconds == pytest.approx(
        {"init": 0.24, "load_weight": 0.10, "cuda_graph": 1.54, "piecewise_cuda_graph": 6.34}
    )
    # "Load weight begin. avail mem=139.13 GB" / "Load weight end. ... mem usage=1.46 GB."
    assert (boot.avail_gib, boot.weights_gib) == (139.13, 1.46)
    assert boot.startup_time is None


def test_0_5_13_eagle_counts_draft_graphs_and_keeps_the_targets_memory() -> None:
    boot = parse_boot(_log("0.5.13", "eagle3-s2-k1-d3.log"))
    # target 1.26 s, draft 3.93 s, draft extend 0.91 s
    assert boot.seconds["cuda_graph"] == pytest.approx(1.26 + 3.93 + 0.91)
    assert boot.seconds["load_weight"] == pytest.approx(0.09 + 0.00)
    assert boot.weights_gib == 1.46  # the target's, not the draft's 0.22


def test_tensor_parallel_phases_are_the_slowest_ranks() -> None:
    boot = parse_boot(_log("0.5.13", "tp2-ring-custom.log"))
    # TP0 13.72 s / TP1 14.99 s init; TP0 0.10 / TP1 0.21 s weights; 52.42 / 52.37 s graphs
    assert boot.seconds["init"] == pytest.approx(14.99)
    assert boot.seconds["load_weight"] == pytest.approx(0.21)
    assert boot.seconds["cuda_graph"] == pytest.approx(52.42)
    assert boot.weights_gib == 0.73


def test_failed_boots_keep_the_phases_they_reached() -> None:
    low = parse_boot(_log("0.5.13", "oom-low.log"))
    assert set(low.seconds) == {"init", "load_weight"}
    assert low.weights_gib == 1.46
    assert parse_boot(_log("0.5.13", "reject-ngram-page.log")).seconds == {}
    high = parse_boot(_log("0.5.17", "oom-high.log"))
    assert set(high.seconds) == {"init", "load_weight"}  # died inside the capture


def test_0_5_17_uses_its_startup_timings_line() -> None:
    boot = parse_boot(_log("0.5.17", "baseline-1.log"))
    assert boot.source == "startup timings line"
    # load_weight=0.20, kv_cache_allocation=0.04, cuda_graph decode=2.25; init from its line
    assert boot.seconds == pytest.approx(
        {"init": 0.02, "load_weight": 0.20, "kv_cache": 0.04, "cuda_graph": 2.25}
    )
    assert boot.startup_time is not None
    assert boot.startup_time["scheduler_e2e"] == pytest.approx(7.72)
    assert (boot.avail_gib, boot.weights_gib) == (139.13, 0.27)
    ngram = parse_boot(_log("0.5.17", "ngram-d8.log"))
    assert ngram.seconds["cuda_graph"] == pytest.approx(4.51)  # target verify
    assert ngram.seconds["kv_cache"] == pytest.approx(1.12)


def test_server_info_startup_time_wins_over_the_log() -> None:
    info = json.loads((FIXTURES / "0.5.17" / "streams" / "base-server_info.json").read_text())
    boot = parse_boot(_log("0.5.17", "baseline-1.log"), server_info=info)
    assert boot.source == "server_info"
    assert boot.seconds["load_weight"] == pytest.approx(info["startup_time"]["load_weight"])
    assert boot.seconds["cuda_graph"] == pytest.approx(5.2999, abs=1e-3)
    assert boot.seconds["init"] == pytest.approx(0.02)  # only the log has it
    assert from_startup_time({"cuda_graph": {"decode": 1.0, "draft_decode": 2.0}}) == {
        "cuda_graph": 3.0
    }


def test_the_startup_line_parses_to_server_infos_shape() -> None:
    line = (
        "Engine startup timings (s): load_weight=0.20, kv_cache_allocation=0.04, "
        "scheduler_e2e=7.72, cuda_graph={prefill=0.00, decode=2.25, target_verify=0.00, "
        "draft_prefill=0.00, draft_decode=0.00, draft_extend=0.00}, tokenizer_e2e=29.52"
    )
    parsed = parse_startup_line(line)
    assert parsed == {
        "load_weight": 0.2,
        "kv_cache_allocation": 0.04,
        "scheduler_e2e": 7.72,
        "cuda_graph": {
            "prefill": 0.0,
            "decode": 2.25,
            "target_verify": 0.0,
            "draft_prefill": 0.0,
            "draft_decode": 0.0,
            "draft_extend": 0.0,
        },
        "tokenizer_e2e": 29.52,
    }
    assert parse_startup_line("Load weight end. elapsed=0.2 s") is None


def test_metrics_put_the_untimed_rest_in_other() -> None:
    boot = parse_boot(_log("0.5.17", "baseline-1.log"))
    metrics = boot.metrics(boot_s=51.853)  # the measured boot of that trial
    assert metrics[boot_metric("load_weight")] == 0.2
    assert metrics[boot_metric("other")] == pytest.approx(51.853 - 2.51, abs=1e-3)
    assert metrics[AVAIL_METRIC] == 139.13
    assert metrics[WEIGHTS_METRIC] == 0.27
    assert boot_metric("other") not in parse_boot("").metrics(boot_s=3.0)


def _sim_log(version: str, tmp_path: Path, *extra: str) -> str:
    argv = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8",
            "--sim-profile", "h200-nvlink-x8", "--sim-sglang-version", version, *extra]  # fmt: skip
    options, config = parse_command_line(argv, {"SPEC_SWEEP_SIM_TIME_SCALE": "0"})
    profile = load_profile(options.profile)
    plan = plan_node(profile, config)
    path = tmp_path / f"{version}.log"
    with path.open("wb") as handle:
        log = SimLog(out_fd=handle.fileno(), err_fd=handle.fileno())
        result = asyncio.run(
            boot_node(options=options, plan=plan, profile=profile, log=log, workers=None)  # type: ignore[arg-type]
        )
    assert result is not None
    return path.read_text()


@pytest.mark.parametrize("version", ["0.5.13", "0.5.23"])
def test_the_simulated_nodes_phases_parse_to_what_it_spent(version: str, tmp_path: Path) -> None:
    profile = load_profile("h200-nvlink-x8")
    boot = parse_boot(_sim_log(version, tmp_path))
    assert boot.seconds["init"] == pytest.approx(profile.boot.init_distributed)
    assert boot.seconds["load_weight"] == pytest.approx(profile.boot.load_weights)
    assert boot.seconds["cuda_graph"] > 0
    assert boot.avail_gib is not None
    assert boot.weights_gib is not None
    assert boot.weights_gib < boot.avail_gib
    if version == "0.5.23":
        assert boot.source == "startup timings line"
        assert boot.startup_time is not None
        assert boot.startup_time["scheduler_e2e"] == pytest.approx(boot.timed_s, abs=0.02)
    else:
        assert boot.seconds["piecewise_cuda_graph"] > 0
