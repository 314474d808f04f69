"""Replay backend and cross-sweep reuse, through the real sweep path (Ray, MLflow, searcher).

A live simulated sweep is exported as a replay table (docs/design.md, "Replay table") and replayed:
the replayed sweep's MLflow layout equals the live one's and its outcomes are the recorded ones.
With `budget.reuse`, a second sweep on the same node fingerprint launches nothing.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import make_spec
from mlflow.tracking import MlflowClient

from spec_sweep.core.config import config_key
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.backends import make_backend
from spec_sweep.orchestrate.driver import SweepOutcome, sweep
from spec_sweep.spec import SweepSpec
from spec_sweep.store.replay import export_columns, export_rows, write_csv

pytestmark = pytest.mark.usefixtures("ray_cluster")

ROOT = Path(__file__).resolve().parents[2]


def write_spec(
    project: Path, name: str, *, trials: int = 6, reuse: bool = False, output_len: int = 16
) -> SweepSpec:
    return make_spec(
        project / "sweeps",
        name=name,
        search_space={
            "params": {"mem-fraction-static": {"choices": [0.88, 0.97], "default": 0.88}}
        },
        workload={"output_len": output_len, "warmup_prompts": 0},
        budget={"trials": trials, "reuse": reuse},
        searcher={"seed": 3},
    )


def run(
    project: Path,
    spec: SweepSpec,
    *,
    simulate: bool = False,
    replay: Path | None = None,
    **kwargs: Any,
) -> SweepOutcome:
    return sweep(
        spec,
        backend=make_backend(spec, simulate=simulate, replay=replay, grace_s=2.0),
        state_dir=project / ".spec_sweep",
        tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}",
        report=False,
        **kwargs,
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SweepSpec, SweepOutcome, Path]:
    project = tmp_path_factory.mktemp("replay")
    shutil.copytree(ROOT / "search_spaces", project / "search_spaces")
    (project / "sweeps").mkdir()
    spec = write_spec(project, "live")
    outcome = run(project, spec, simulate=True)
    table = project / "live.csv"
    write_csv(table, export_columns(spec), export_rows(spec, outcome.history.done))
    return project, spec, outcome, table


def child_runs(project: Path, experiment: str) -> list[Any]:
    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("spec_sweep.kind") == "trial"]


def layout(project: Path, run: Any) -> dict[str, Any]:
    client = MlflowClient(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    tags = set(run.data.tags) - {
        "mlflow.runName",
        "spec_sweep.log_excerpt",
        "mlflow.user",
        "mlflow.source.name",
        "mlflow.source.type",
        "spec_sweep.prompt_source",
    }
    return {
        "status": run.info.status,
        "tags": tags,
        "params": dict(run.data.params),
        "metrics": {k for k in run.data.metrics if not k.startswith("system/")},
        "artifacts": {a.path for a in client.list_artifacts(run.info.run_id)},
        "failure_mode": run.data.tags["failure_mode"],
    }


def test_export_is_a_replay_table(live: tuple[Path, SweepSpec, SweepOutcome, Path]) -> None:
    _, spec, _outcome, table = live
    with table.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == spec.budget.trials
    assert list(rows[0])[: len(spec.params)] == list(spec.params)
    assert "output_throughput" in rows[0]
    assert rows[0]["failure_mode"] == "none"
    modes = {r["failure_mode"] for r in rows}
    assert "oom" in modes  # mem-fraction-static 0.97


def test_replayed_sweep_has_the_live_layout_and_outcomes(
    live: tuple[Path, SweepSpec, SweepOutcome, Path],
) -> None:
    project, _, outcome, table = live
    spec = write_spec(project, "replayed")
    replayed = run(project, spec, replay=table)
    live_runs = {
        json.dumps(json.loads(r.data.tags["spec_sweep.config"]), sort_keys=True): r
        for r in child_runs(project, "live")
    }
    replay_runs = child_runs(project, "replayed")
    assert len(replay_runs) == spec.budget.trials
    # Same seed, same recorded outcomes: the search takes the same path.
    assert {config_key(r.config) for r in replayed.records} == {
        config_key(r.config) for r in outcome.records
    }
    for run_ in replay_runs:
        key = json.dumps(json.loads(run_.data.tags["spec_sweep.config"]), sort_keys=True)
        original = live_runs[key]
        assert layout(project, run_) == layout(project, original)
        # The live trials' system metrics describe the node while they ran; a replay runs none.
        assert not [k for k in run_.data.metrics if k.startswith("system/")]
        for name, value in original.data.metrics.items():
            if name != "boot_s" and not name.startswith("system/"):
                assert run_.data.metrics[name] == pytest.approx(value, rel=1e-9), name
    # Nothing was launched: the trial folders hold the replay's note, not a server log.
    for log in (replayed.state.path / "trials").glob("*/attempt*/server.log"):
        assert log.read_text().startswith("[replay]")


def test_configuration_missing_from_the_table_is_invalid_args_naming_it(
    live: tuple[Path, SweepSpec, SweepOutcome, Path],
) -> None:
    project, _, _, table = live
    path = project / "sweeps" / "live.yaml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spec_sweep",
            "trial",
            str(path),
            "--replay",
            str(table),
            "--set",
            "speculative-algorithm=EAGLE3",
            "--set",
            "speculative-num-steps=7",
            "--set",
            "speculative-eagle-topk=8",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if out["failure_mode"] == "invalid_args":
        assert "has no row for configuration" in out["log_excerpt"]
        assert '"speculative-num-steps": 7' in out["log_excerpt"]
    else:  # the live sweep happened to measure exactly this configuration
        assert out["failure_mode"] in {m.value for m in FailureMode}


def test_reused_trials_launch_nothing(live: tuple[Path, SweepSpec, SweepOutcome, Path]) -> None:
    project, _, _, _ = live
    # A workload of its own: a node fingerprint no earlier sweep of this store measured.
    first = run(
        project, write_spec(project, "reuse-a", trials=4, reuse=True, output_len=12), simulate=True
    )
    launched = list((first.state.path / "trials").glob("*/attempt*/command.txt"))
    assert len(launched) == 4
    second = run(
        project, write_spec(project, "reuse-b", trials=4, reuse=True, output_len=12), simulate=True
    )
    assert not (second.state.path / "trials").exists() or not list(
        (second.state.path / "trials").glob("*/attempt*/command.txt")
    )
    runs = child_runs(project, "reuse-b")
    assert len(runs) == 4
    originals = {r.info.run_id for r in child_runs(project, "reuse-a")}
    for run_ in runs:
        assert run_.data.tags["spec_sweep.reused_from"] in originals
        assert run_.info.status == "FINISHED"
    assert {r.failure_mode for r in second.records} == {r.failure_mode for r in first.records}
