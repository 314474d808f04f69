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
from typing import Any

import harness

from spec_sweep.core.config import baseline_config, resolve_config
from spec_sweep.core.outcome import FailureMode, TrialResult
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


def test_the_quality_gate_passes_identical_and_equivalent_outputs_and_fails_lossy_and_wrong(
    tmp_path: Path,
) -> None:
    """The baseline again and benign flags give identical outputs, speculative trees flip near
    ties only (the simulator decides ties below 0.05 nats by the numerics): equivalent; an fp8
    KV cache flips wider ties (below 0.5 nats): lossy, `wrong_output` without
    `quality.allow_lossy`; a tree whose outputs the simulator corrupts from token 2 is wrong."""
    spec = harness.make_spec(
        tmp_path,
        search_space={"include": ["speculative.yaml", "memory.yaml"]},
        quality={"num_prompts": 8, "tokens": 32},
    )
    trials = tmp_path / "trials"
    corrupt = {"SPEC_SWEEP_SIM_CORRUPT_OUTPUT": "speculative-num-steps=2"}

    def run(trial_id: str, config: dict[str, object], on: SweepSpec = spec) -> TrialResult:
        return run_trial(
            on,
            resolve_config(on, config, what="test"),
            trial_dir=trials / trial_id / "attempt1",
            trial_id=trial_id,
            simulate=True,
            extra_env=corrupt,
            state_dir=tmp_path,
        )

    def record(trial_id: str) -> dict[str, Any]:
        path = trials / trial_id / "attempt1" / "quality.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    base = run("t0000", {})
    assert base.failure_mode is FailureMode.NONE, base.reason
    assert len(record("t0000")["top_logprobs"][0]) == 32
    identical = {
        "quality_agreement": 1.0,
        "quality_confident_share": 0.0,
        "quality_near_tie_flips": 0.0,
        "quality_first_divergence": 32.0,
        "quality_deficit": 0.0,
        "quality_lossy": 0.0,
    }
    for trial_id, config in [
        ("t0001", {}),  # the baseline in a second boot
        ("t0002", {"cuda-graph-max-bs": 64, "mem-fraction-static": 0.85}),
    ]:
        same = run(trial_id, config)
        assert same.failure_mode is FailureMode.NONE, same.reason
        assert {k: same.metrics[k] for k in identical} == identical

    flips = 0
    eagle = {"speculative-algorithm": "EAGLE3", "speculative-eagle-topk": 1}
    for trial_id, steps in [("t0003", 3), ("t0004", 4)]:
        tree = run(trial_id, {**eagle, "speculative-num-steps": steps})
        assert tree.failure_mode is FailureMode.NONE, tree.reason
        assert tree.metrics["quality_confident_share"] == 0.0
        assert tree.metrics["quality_lossy"] == 0.0
        assert tree.metrics["quality_deficit"] <= spec.quality.max_equivalent_deficit  # type: ignore[union-attr]
        flips += int(tree.metrics["quality_near_tie_flips"])
        for flip in record(trial_id)["diverging"]:
            assert flip["verdict"] == "near_tie"
            assert flip["gap"] < 0.05  # the simulator's near ties
            assert flip["baseline_ids"][: flip["position"]] == flip["trial_ids"][: flip["position"]]
    assert flips >= 1  # other numerics flip some near ties: the gate lets them pass

    node = spec.node.model_copy(
        update={"server_args": {**spec.node.server_args, "kv-cache-dtype": "fp8_e5m2"}}
    )
    fp8 = run("t0006", {}, spec.model_copy(update={"node": node}))
    assert fp8.failure_mode is FailureMode.WRONG_OUTPUT, fp8.reason
    assert fp8.metrics["quality_lossy"] == 1.0
    assert fp8.reason.startswith("wrong output: lossy (deficit ")
    assert "set quality.allow_lossy to keep lossy configurations" in fp8.reason

    bad = run("t0005", {**eagle, "speculative-num-steps": 2, "speculative-num-draft-tokens": 2})

    assert bad.failure_mode is FailureMode.WRONG_OUTPUT, bad.reason
    assert bad.metrics["output_throughput"] > 0  # it was measured, and fast
    assert bad.metrics["quality_confident_share"] >= 0.5
    assert bad.metrics["quality_first_divergence"] == 2.0
    assert bad.metrics["quality_lossy"] == 0.0
    assert bad.reason.startswith("wrong output: wrong (deficit ")
    assert "where the baseline was confident" in bad.reason
    first = record("t0005")["first_diverging"]
    assert (first["verdict"], first["position"]) == ("confident", 2)
    assert first["baseline_ids"][:2] == first["trial_ids"][:2]
    assert first["baseline_ids"][2] != first["trial_ids"][2]
    assert first["baseline_text"]
    assert first["trial_text"]
