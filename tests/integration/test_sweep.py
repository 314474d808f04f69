"""Whole sweeps: real Ray (session cluster), a real MLflow store under tmp_path, the simulator.

Checks the contracts of docs/design.md, "How a sweep runs" and "MLflow layout": the baseline runs
first, failed trials reach Optuna as FAIL with a violated constraint, no configuration is launched
twice, the MLflow layout field by field, and the sweep reaches the write-up's conclusion on the PCIe
profile (EAGLE-3 loses) and the opposite one on the H200 profile.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import harness
import pytest
import yaml
from mlflow.tracking import MlflowClient

from spec_sweep.core.config import baseline_config, config_key
from spec_sweep.core.outcome import FailureMode
from spec_sweep.errors import SpecSweepError
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import SweepOutcome, sweep
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

pytestmark = pytest.mark.usefixtures("ray_cluster")


PCIE_EXTRA = """\
    cuda-graph-max-bs: {choices: [128, 512], default: 512}
    mem-fraction-static: {choices: [0.88, 0.97], default: 0.88}
"""


def make_spec(
    project: Path,
    *,
    name: str,
    profile: str = "rtx-pro-6000-pcie-x8",
    extra: str = PCIE_EXTRA,
    trials: int = 8,
    seed: int = 0,
    output_len: int = 48,
    num_prompts: int = 2,
) -> SweepSpec:
    return harness.make_spec(
        project / "sweeps",
        name=name,
        node={"env": {"HF_TOKEN": "hf_supersecretvalue"}, "sim_profile": profile},
        search_space={"params": yaml.safe_load(textwrap.dedent(extra))},
        workload={"output_len": output_len, "num_prompts": num_prompts},
        budget={"trials": trials},
        searcher={"seed": seed},
    )


def run(project: Path, spec: SweepSpec, **kwargs: Any) -> SweepOutcome:
    return sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=project / ".spec_sweep",
        tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}",
        **kwargs,
    )


def launches(outcome: SweepOutcome) -> list[dict[str, Any]]:
    """Every server launch of the sweep (one trial folder attempt each), with its config."""
    out = []
    for command in sorted((outcome.state.path / "trials").glob("*/attempt*/command.txt")):
        out.append({"dir": command.parent, "command": command.read_text()})
    return out


@pytest.fixture(scope="module")
def pcie(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepSpec, SweepOutcome, Path]:
    import shutil

    root = Path(__file__).resolve().parents[2]
    project = tmp_path_factory.mktemp("pcie")
    shutil.copytree(root / "sweeps", project / "sweeps")
    shutil.copytree(root / "search_spaces", project / "search_spaces")
    # Four requests of 48 tokens (about 2.4 s measured a trial, not 0.6 s): the conclusion below
    # rests on a 7% difference, which a tenth of a second lost to a loaded host (between two
    # requests, after the last one) must not undo.
    # No report: nothing here reads it (test_report checks the report of such a sweep).
    spec = make_spec(project, name="pcie", trials=10, output_len=48, num_prompts=4)
    return spec, run(project, spec, report=False), project


def test_sweep_runs_the_budget_baseline_first(pcie: tuple[SweepSpec, SweepOutcome, Path]) -> None:
    spec, outcome, _ = pcie
    records = [r for r in outcome.records if r.finished]
    assert len(records) == spec.budget.trials
    first = min(records, key=lambda r: r.start_time)
    assert first.trial_id == "t0000"
    assert first.config == baseline_config(spec)
    assert sorted(r.trial_id for r in records) == [f"t{i:04d}" for i in range(10)]


def test_no_configuration_launched_twice(pcie: tuple[SweepSpec, SweepOutcome, Path]) -> None:
    _spec, outcome, _ = pcie
    keys = [config_key(r.config) for r in outcome.records if r.finished]
    assert len(keys) == len(set(keys))
    assert len(launches(outcome)) == len(keys)


def test_failures_reach_optuna_as_fail_with_constraint(
    pcie: tuple[SweepSpec, SweepOutcome, Path],
) -> None:
    from optuna.trial import TrialState

    from spec_sweep.search.sampling import history_trials

    spec, outcome, _ = pcie
    failed = [r for r in outcome.records if r.finished and r.failure_mode is not FailureMode.NONE]
    assert failed, "mem-fraction-static 0.97 should fail (OOM) at least once in 10 trials"
    # OOM from mem-fraction-static 0.97; a draft tree too large for its top-k crashes capture.
    assert FailureMode.OOM in {r.failure_mode for r in failed}
    assert {r.failure_mode for r in failed} <= {FailureMode.OOM, FailureMode.CRASH}
    trials = history_trials(outcome.study)
    assert len(trials) == spec.budget.trials
    fail_states = [t for t in trials if t.state == TrialState.FAIL]
    assert len(fail_states) == len(failed)
    assert all(t.constraints.get("failed") == 1.0 for t in fail_states)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert all(t.constraints.get("failed") == 0.0 for t in complete)
    assert all(t.state != TrialState.PRUNED for t in outcome.study.trials)


def test_mlflow_layout(pcie: tuple[SweepSpec, SweepOutcome, Path]) -> None:
    spec, _outcome, project = pcie
    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("pcie")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("spec_sweep.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("spec_sweep.kind") == "trial"]
    assert len(parents) == 1
    assert len(children) == spec.budget.trials
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert "best_output_throughput" in parent.data.metrics
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"spec.json", "pcie.yaml"} <= parent_files
    for child in children:
        tags = child.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        assert tags["spec_sweep.trial_id"].startswith("t")
        mode = FailureMode(tags["failure_mode"])
        config = json.loads(tags["spec_sweep.config"])
        assert set(child.data.params) == set(config)
        for key, value in config.items():
            if value is None or isinstance(value, bool):
                shown = {None: "null", True: "true", False: "false"}[value]
            else:
                shown = str(value)
            assert child.data.params[key] == shown
        files = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"server.log", "command.txt"} <= files
        command = client.download_artifacts(child.info.run_id, "command.txt")
        text = Path(command).read_text()
        assert "hf_supersecretvalue" not in text
        assert "HF_TOKEN='<secret: HF_TOKEN>'" in text
        metrics = child.data.metrics
        if mode is FailureMode.NONE:
            assert "bench.json" in files
            for name in (
                "output_throughput",
                "request_throughput",
                "ttft_p50_ms",
                "ttft_p99_ms",
                "itl_p50_ms",
                "itl_p99_ms",
                "decode_speed_p50",
                "boot_s",
                "speedup_vs_baseline",
            ):
                assert name in metrics, name
            if config.get("speculative-algorithm"):
                assert metrics["accept_length"] > 1.0
        else:
            assert "output_throughput" not in metrics
            assert tags["spec_sweep.reason"]


def test_pcie_conclusion_is_the_writeups(pcie: tuple[SweepSpec, SweepOutcome, Path]) -> None:
    from spec_sweep.core.history import History

    spec, outcome, _ = pcie
    history = History(spec, outcome.records)
    # Every trial, in the failure message: what the search took and measured on this machine.
    trials = "\n".join(
        f"{r.trial_id} {r.failure_mode} {r.config} output {r.metrics.get('output_throughput')}"
        f" decode {r.metrics.get('decode_speed_p50')}"
        for r in history.done
    )
    best = history.best
    assert best is not None, trials
    assert best.config.get("speculative-algorithm") is None, trials
    # The write-up's tuned setting: graph size 128 (89.5 tok/s against the default 512's 82,
    # test_sim_model pins the figures). Compared with the baseline measured in the same run, not
    # with 89.5: paced tokens decode slower on a loaded machine (84.5 read in one CI run).
    assert best.config["cuda-graph-max-bs"] == 128, trials
    baseline = next(r for r in outcome.records if r.trial_id == "t0000")
    assert baseline.config["cuda-graph-max-bs"] == 512
    assert best.metrics["decode_speed_p50"] > 1.03 * baseline.metrics["decode_speed_p50"], trials
    eagle = [
        r
        for r in outcome.records
        if r.finished
        and r.failure_mode is FailureMode.NONE
        and r.config.get("speculative-algorithm") == "EAGLE3"
    ]
    assert eagle, "the sweep should have measured some EAGLE-3 trials"
    base_value = history.objective.value(baseline.metrics)
    assert base_value is not None
    for record in eagle:
        value = history.objective.value(record.metrics)
        assert value is not None
        assert value < base_value
        assert record.metrics["speedup_vs_baseline"] < 1.0


def test_h200_eagle3_wins(project_dir: Path) -> None:
    from spec_sweep.core.history import History

    extra = "    cuda-graph-max-bs: {choices: [128, 512], default: 512}\n"
    # 16 tokens a request: EAGLE-3's lead at concurrency 1 shows in a short answer too (the best
    # chain measures ~2.3x the baseline at 16 tokens, ~2.4x at 48), at a third of the paced time.
    spec = make_spec(
        project_dir, name="h200", profile="h200-nvlink-x8", extra=extra, trials=8, output_len=16
    )
    outcome = run(project_dir, spec, report=False)  # the report's H200 verdict: test_report
    history = History(spec, outcome.records)
    best = history.best
    assert best is not None
    assert best.config.get("speculative-algorithm") == "EAGLE3"
    assert best.metrics["speedup_vs_baseline"] > 1.3


def test_a_trial_no_node_can_hold_is_refused_and_leaves_nothing(project_dir: Path) -> None:
    """Ray Tune would keep such a trial PENDING forever: the sweep refuses it before anything
    starts, and a refused start leaves no state folder and no MLflow store behind."""
    make_spec(project_dir, name="toobig", trials=2)
    path = project_dir / "sweeps" / "toobig.yaml"
    path.write_text(path.read_text().replace("gpus: 8", "gpus: 16"))
    spec = load_spec(path)
    message = (
        r"no node of the Ray cluster can hold a trial \(node.gpus = 16\); "
        r"nodes: .*: 8 GPUs: start worker nodes with --num-gpus 16"
    )
    with pytest.raises(SpecSweepError, match=message):
        run(project_dir, spec)
    assert not (project_dir / ".spec_sweep" / "toobig").exists()
    assert not (project_dir / "mlruns" / "mlflow.db").exists()


def test_a_node_that_cannot_start_any_server_stops_the_sweep(project_dir: Path) -> None:
    """An install missing a package SGLang imports (seen for real: jsonschema) fails every
    configuration alike: the sweep stops at the first such trial, records nothing against the
    configuration and stays resumable, instead of burning its budget."""
    spec = harness.make_spec(
        project_dir / "sweeps",
        name="envfault",
        node={"env": {"SPEC_SWEEP_SIM_FAULT": "missing-module=jsonschema"}},
        budget={"trials": 4},
    )
    outcome = run(project_dir, spec)
    assert outcome.environment is not None
    assert "No module named 'jsonschema'" in outcome.environment
    assert "t0000" in outcome.environment
    assert not outcome.interrupted
    assert len(launches(outcome)) == 1  # stopped at once
    (record,) = outcome.records
    assert record.status == "KILLED"  # not a result: the trial runs again on resume
    client = MlflowClient(tracking_uri=f"sqlite:///{project_dir / 'mlruns' / 'mlflow.db'}")
    run_data = client.get_run(record.run_id).data
    assert run_data.tags["failure_mode"] == "environment"
    parent = client.get_run(outcome.parent_run_id)
    assert parent.info.status == "KILLED"  # resumable
    assert not outcome.state.path.joinpath("trials", "t0000", "attempt1", "result.json").exists()
