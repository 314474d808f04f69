"""The goodput bisection and the output-quality gate, through `run_trial` on the simulated node.

The saturation point the goodput search must find is derived from the simulator's own
performance model (`PerfModel.step_ms` of the booted configuration): the node captures CUDA
graphs up to batch 12, past which a decode step runs eagerly and the inter-token latency jumps;
the SLA's ITL bound sits between the two, so the highest concurrency that meets it is where the
model says the step time crosses the bound. Output corruption is injected through the
simulator's `--sim-corrupt-output` (env `SPEC_SWEEP_SIM_CORRUPT_OUTPUT`), never by patching our
code.
"""

from __future__ import annotations

import json
from pathlib import Path

import harness

from spec_sweep.core.config import baseline_config, resolve_config
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.command import build_command
from spec_sweep.node.trial import run_trial
from spec_sweep.sim.cli import parse_command_line
from spec_sweep.sim.model import plan_node
from spec_sweep.sim.perf import PerfModel
from spec_sweep.sim.profiles import load_profile
from spec_sweep.spec import SweepSpec

_GRAPH_BS = 12


def _model_step_ms(spec: SweepSpec) -> PerfModel:
    """The simulator's performance model of the baseline as the trial launches it."""
    command = build_command(
        spec, baseline_config(spec), port=31000, host="127.0.0.1", simulate=True
    )
    options, config = parse_command_line(list(command.argv[3:]), dict(command.env))
    profile = load_profile(options.profile)
    return PerfModel(profile, plan_node(profile, config))


def test_goodput_bisection_finds_the_simulated_saturation_point_within_one_level(
    tmp_path: Path,
) -> None:
    node = {"server_args": {"tp-size": 8, "cuda-graph-max-bs": _GRAPH_BS}}
    spec = harness.make_spec(tmp_path, node=node)
    perf = _model_step_ms(spec)
    step = [perf.step_ms(c) * perf.boot_factor for c in range(1, 33)]
    bound = (step[_GRAPH_BS - 1] + step[_GRAPH_BS]) / 2
    expected = max(c for c in range(1, 33) if step[c - 1] <= bound)
    workload = {
        # The median: a p99 of ~150 gaps measured on a shared 2-core machine catches client
        # scheduling stalls of 10 ms and more, which say nothing about the server.
        "sla": {"itl_p50_ms": round(bound, 3)},
        "goodput": {"min_concurrency": 1, "max_concurrency": 32},
    }
    spec = harness.make_spec(tmp_path, node=node, workload=workload)

    result = run_trial(spec, baseline_config(spec), trial_dir=tmp_path / "t", simulate=True)

    assert result.failure_mode is FailureMode.NONE, result.reason
    found = int(result.metrics["goodput_concurrency"])
    assert abs(found - expected) <= 1, (found, expected, bound, result.metrics)
    assert (
        result.metrics["goodput_throughput"]
        == result.metrics[f"goodput_output_throughput_c{found}"]
    )
    probed = json.loads((tmp_path / "t" / "goodput.json").read_text())["levels"]
    assert [lv["concurrency"] for lv in probed][:2] == [1, 32]  # the ends first, then bisection
    assert len(probed) <= 8
    assert all(result.metrics[f"goodput_holds_c{lv['concurrency']}"] in (0.0, 1.0) for lv in probed)


def test_a_flag_that_corrupts_outputs_ends_as_wrong_output_and_the_baseline_agrees_with_itself(
    tmp_path: Path,
) -> None:
    spec = harness.make_spec(tmp_path, quality={"num_prompts": 4, "tokens": 16})
    trials = tmp_path / "trials"
    corrupt = {"SPEC_SWEEP_SIM_CORRUPT_OUTPUT": "speculative-algorithm=EAGLE3"}

    def run(trial_id: str, config: dict[str, object]) -> object:
        return run_trial(
            spec,
            resolve_config(spec, config, what="test"),
            trial_dir=trials / trial_id / "attempt1",
            trial_id=trial_id,
            simulate=True,
            extra_env=corrupt,
        )

    base = run("t0000", {})
    assert base.failure_mode is FailureMode.NONE, base.reason  # type: ignore[attr-defined]
    again = run("t0001", {})  # the baseline in a second boot: greedy outputs must agree
    assert again.failure_mode is FailureMode.NONE, again.reason  # type: ignore[attr-defined]
    assert again.metrics["quality_agreement"] == 1.0  # type: ignore[attr-defined]

    bad = run("t0002", {"speculative-algorithm": "EAGLE3"})

    assert bad.failure_mode is FailureMode.WRONG_OUTPUT, bad.reason  # type: ignore[attr-defined]
    assert bad.metrics["output_throughput"] > 0  # type: ignore[attr-defined]  # it was fast
    # The first two tokens of every prompt agree, then the corrupted path: 2 / 16.
    assert bad.metrics["quality_agreement"] == 0.125  # type: ignore[attr-defined]
    record = json.loads((trials / "t0002" / "attempt1" / "quality.json").read_text())
    first = record["first_diverging"]
    assert first["prompt_index"] == 0
    assert first["baseline_ids"][:2] == first["trial_ids"][:2]
    assert first["baseline_ids"][2] != first["trial_ids"][2]
    assert first["baseline_text"]
    assert first["trial_text"]
    assert "wrong output" in bad.reason  # type: ignore[attr-defined]
