"""Confirmation boots and per-trial intervals in a whole sweep: real Ray, MLflow, the simulator.

The top configurations are booted again through the same Ray Tune trial path after the search
budget, recorded as child runs tagged `spec_sweep.confirms`, and the verdict (winner, interval,
confirmation budget, drift) lands on the parent run (docs/design.md, "Confirmation").
"""

from __future__ import annotations

import csv
from pathlib import Path

import harness
import pytest
from mlflow.tracking import MlflowClient

from spec_sweep.core.names import TAG_CONFIRMS as CONFIRM_TAG
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import SweepOutcome, sweep

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _run_small_sweep(
    project_dir: Path, name: str, budget: dict[str, object]
) -> tuple[SweepOutcome, str]:
    """A 3-trial simulated sweep over one knob; returns its outcome and tracking URI."""
    spec = harness.make_spec(
        project_dir / "sweeps",
        name=name,
        node={"sim_profile": "h200-nvlink-x8"},
        search_space={
            "include": [],
            "params": {"cuda-graph-max-bs": {"choices": [64, 128, 512], "default": 512}},
        },
        baseline=harness.DROP,
        workload={"output_len": 8, "num_prompts": 4},
        budget={"trials": 3, **budget},
    )
    uri = f"sqlite:///{project_dir / 'mlruns' / f'{name}.db'}"
    outcome = sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=project_dir / ".spec_sweep",
        tracking_uri=uri,
    )
    return outcome, uri


def test_confirmation_boots_are_child_runs_and_decide_the_winner(project_dir: Path) -> None:
    budget = {
        "confirm": 2,
        "confirm_repeats": 1,
        "confirm_max_repeats": 1,
        "remeasure_baseline": True,
        "remeasure_every": 2,
    }
    outcome, uri = _run_small_sweep(project_dir, "confirm", budget)
    # The search's own records stay the budget; the confirmation boots are extra.
    assert sorted(r.trial_id for r in outcome.records) == ["t0000", "t0001", "t0002"]
    verdict = outcome.verdict
    assert verdict is not None
    ids = {c.trial_id for c in verdict.candidates}
    # The baseline was booted again after the second search trial (remeasure_every: 2); as a
    # candidate that fresh boot is its confirmation boot too. Each candidate gets one fresh
    # boot, then the baseline once more at the very end (drift).
    expected = ["t0000.r1", "t0000.r2"] + [f"{c}.r1" for c in sorted(ids - {"t0000"})]
    assert verdict.spent == len(expected)
    assert verdict.drift is not None
    assert verdict.drift.boots == 2  # the re-measure during the search and the one at the end
    winner = verdict.winner
    assert winner is not None
    assert winner.ci_low <= winner.mean <= winner.ci_high
    # A fresh boot of the same configuration measures differently (run-to-run noise per boot).
    assert winner.values[0] != winner.values[1]
    assert verdict.drift is not None

    client = MlflowClient(uri)
    parent = client.get_run(outcome.parent_run_id)
    assert parent.data.metrics["confirm_trials"] == len(expected)  # 3 or 4: is t0000 a candidate?
    assert parent.data.metrics["winner_output_throughput"] == pytest.approx(winner.mean)
    assert parent.data.metrics["winner_output_throughput_ci_low"] == pytest.approx(winner.ci_low)
    assert parent.data.tags["spec_sweep.confirm_verdict"] == verdict.label
    assert parent.data.tags["spec_sweep.recommended"] in {c.trial_id for c in verdict.candidates}
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{outcome.parent_run_id}'"
    )
    repeats = {
        r.data.tags["spec_sweep.trial_id"]: r for r in children if CONFIRM_TAG in r.data.tags
    }
    assert sorted(repeats) == sorted(expected)
    order = sorted(repeats, key=lambda t: repeats[t].info.start_time)
    assert order[0] == "t0000.r1"
    assert order[-1] == "t0000.r2"
    search_starts = [
        r.info.start_time for r in children if r.data.tags["spec_sweep.trial_id"] == "t0002"
    ]
    assert repeats["t0000.r1"].info.start_time < min(search_starts)  # during the search
    for trial_id, run in repeats.items():
        assert run.data.tags[CONFIRM_TAG] == trial_id.split(".")[0]
        assert run.data.tags["spec_sweep.kind"] == "trial"
        m = run.data.metrics
        assert m["output_throughput_ci_low"] <= m["output_throughput"]
        assert m["output_throughput"] <= m["output_throughput_ci_high"]
    launched = sorted(
        p.parent.parent.name for p in outcome.state.path.glob("trials/*/*/command.txt")
    )
    assert len(launched) == 3 + len(expected)  # every search trial and boot was launched
    assert outcome.report is not None
    html = outcome.report.read_text()
    assert "<h2>Confirmation</h2>" in html
    assert verdict.label in html
    assert "confirmation boot(s) after the search budget" in html
    csv_rows = (outcome.report.parent / "trials.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 1 + 3  # the replay table holds the search's trials only
    # So does `spec-sweep export`: one row per searched configuration, no confirmation boots.
    from spec_sweep.cli import main

    exported = project_dir / "export.csv"
    spec_file = project_dir / "sweeps" / "confirm.yaml"
    assert main(["export", str(spec_file), "-o", str(exported), "--tracking-uri", uri,
                 "--state-dir", str(project_dir / ".spec_sweep")]) == 0  # fmt: skip
    assert len(exported.read_text().strip().splitlines()) == 1 + 3
    # With --repeats the confirmation boots follow, oldest first; a replay reads the first rows.
    assert main(["export", str(spec_file), "-o", str(exported), "--tracking-uri", uri,
                 "--state-dir", str(project_dir / ".spec_sweep"), "--repeats"]) == 0  # fmt: skip
    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 + len(expected)
    boots = [float(row["output_throughput"]) for row in rows[3:]]
    assert boots == [repeats[t].data.metrics["output_throughput"] for t in order]


def test_max_hours_bounds_the_whole_run_not_each_batch(project_dir: Path) -> None:
    # With `remeasure_every` the search runs as several Tune batches; `budget.max_hours` is one
    # deadline for all of them (checked before each batch), not a fresh allowance per batch.
    budget = {"remeasure_baseline": True, "remeasure_every": 1, "max_hours": 1e-7}  # 0.36 ms
    outcome, uri = _run_small_sweep(project_dir, "deadline", budget)
    assert outcome.new_trials == 0
    assert outcome.out_of_time
    assert not outcome.interrupted
    assert outcome.verdict is None
    parent = MlflowClient(uri).get_run(outcome.parent_run_id)
    assert parent.info.status == "KILLED"  # unfinished: the same command resumes it
