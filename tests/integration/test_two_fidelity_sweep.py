"""A two-fidelity sweep end to end (`budget.fidelity.mode: two`): real Ray, MLflow, the simulator.

Search trials boot the simulated node with `--load-format dummy`, a speculative tree's first
dummy boot that came up is booted again with real weights for its acceptance, the top
configuration by predicted value is promoted to a real boot, and the confirmation and the
verdict see real boots only (docs/concepts/two-fidelities.md). A sweep stopped (Ctrl-C) before
an acceptance boot finished resumes from the record and runs that boot first.
"""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path
from typing import Any

import harness
import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from spec_sweep.core.names import (
    FIDELITY_DUMMY,
    FIDELITY_REAL,
    ROLE_ACCEPTANCE,
    ROLE_PROMOTED,
    TAG_CONFIRMS,
    TAG_FAILURE,
    TAG_FIDELITY,
    TAG_FIDELITY_ROLE,
    TAG_RECOMMENDED,
    TAG_TRIAL_ID,
)
from spec_sweep.core.outcome import TrialReport
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import SweepOutcome, sweep
from spec_sweep.present.live import SweepProgress

pytestmark = pytest.mark.usefixtures("ray_cluster")

BUDGET: dict[str, Any] = {
    "trials": 5,
    "confirm": 2,
    "confirm_repeats": 1,
    "confirm_max_repeats": 1,
    "fidelity": {"mode": "two", "accept_boots": 1, "accept_cap": 2, "promote": 1},
}


def _spec(project_dir: Path, name: str, **budget: Any) -> Any:
    return harness.make_spec(
        project_dir / "sweeps",
        name=name,
        workload={"output_len": 16, "num_prompts": 2},
        budget={**BUDGET, **budget},
    )


def _sweep(
    project_dir: Path, spec: Any, uri: str, progress: SweepProgress | None = None
) -> SweepOutcome:
    return sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=project_dir / ".spec_sweep",
        tracking_uri=uri,
        progress=progress,
    )


def _runs(uri: str, parent: str) -> dict[str, Any]:
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_run(parent).info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
    )
    return {r.data.tags[TAG_TRIAL_ID]: r for r in runs if r.info.status == "FINISHED"}


def _command(outcome: SweepOutcome, trial_id: str) -> str:
    """The server command the trial's last attempt launched (its folder's `command.txt`)."""
    found = sorted((outcome.state.trials_dir / trial_id).glob("attempt*/command.txt"))
    return found[-1].read_text() if found else ""


def _check_two_fidelities(outcome: SweepOutcome, uri: str, spec: Any) -> None:
    runs = _runs(uri, outcome.parent_run_id)
    tags = {tid: r.data.tags for tid, r in runs.items()}
    fidelity = {tid: t.get(TAG_FIDELITY) for tid, t in tags.items()}
    role = {tid: t.get(TAG_FIDELITY_ROLE) for tid, t in tags.items()}
    # the baseline and every confirmation boot with real weights
    assert fidelity["t0000"] == FIDELITY_REAL
    assert all(fidelity[t] == FIDELITY_REAL for t in tags if TAG_CONFIRMS in tags[t])
    dummies = [t for t, f in fidelity.items() if f == FIDELITY_DUMMY]
    assert dummies, fidelity
    commands = {tid: _command(outcome, tid) for tid in tags}
    for tid in dummies:
        assert "--load-format dummy" in commands[tid], commands[tid]
    # a dummy trial that came up carries the objective it predicts, never a speed-up
    predicted = "predicted_output_throughput"
    up = [t for t in dummies if tags[t].get(TAG_FAILURE) == "none"]
    assert up
    for tid in up:
        assert runs[tid].data.metrics[predicted] > 0
        assert "speedup_vs_baseline" not in runs[tid].data.metrics
    # the first speculative tree whose dummy came up was booted again with real weights, and
    # at most accept_cap trees in all
    acceptance = [t for t, r in role.items() if r == ROLE_ACCEPTANCE]
    assert 1 <= len(acceptance) <= spec.budget.fidelity.accept_cap
    for tid in acceptance:
        assert fidelity[tid] == FIDELITY_REAL
        assert runs[tid].data.metrics["accept_length"] > 1.0
        assert "--load-format" not in commands[tid]
        twins = [t for t in up if runs[t].data.params == runs[tid].data.params]
        assert twins, "an acceptance boot repeats a dummy trial's configuration"
    # the top configuration by prediction was promoted to a real boot
    promoted = [t for t, r in role.items() if r == ROLE_PROMOTED]
    best = max(up, key=lambda t: runs[t].data.metrics[predicted])
    real_params = [runs[t].data.params for t in tags if fidelity[t] == FIDELITY_REAL]
    assert runs[best].data.params in real_params
    assert len(promoted) <= 1
    # budget.trials counts the search trials of both fidelities; promotion comes on top
    search = [t for t in tags if TAG_CONFIRMS not in tags[t] and role[t] != ROLE_PROMOTED]
    assert len(search) == spec.budget.trials
    # the verdict and the recommendation: real boots only
    verdict = outcome.verdict
    assert verdict is not None
    assert verdict.candidates
    assert all(fidelity[c.trial_id] == FIDELITY_REAL for c in verdict.candidates)
    assert verdict.recommended is not None
    assert fidelity[verdict.recommended.trial_id] == FIDELITY_REAL
    parent = MlflowClient(uri).get_run(outcome.parent_run_id)
    assert fidelity[parent.data.tags[TAG_RECOMMENDED]] == FIDELITY_REAL
    assert outcome.history.best is not None
    assert fidelity[outcome.history.best.trial_id] == FIDELITY_REAL


class _StopAfter(SweepProgress):
    """The live display, which sends this process a Ctrl-C (SIGINT) once `trial_id` ended."""

    def __init__(self, trial_id: str) -> None:
        super().__init__(Console(file=io.StringIO()))
        self.trial_id = trial_id

    def finished(self, trial_id: str, report: TrialReport) -> None:
        super().finished(trial_id, report)
        if trial_id == self.trial_id:
            os.kill(os.getpid(), signal.SIGINT)


def test_a_two_fidelity_sweep_stopped_before_an_acceptance_boot_resumes_and_recommends_a_real_one(
    project_dir: Path,
) -> None:
    # Ctrl-C right after the first dummy trial whose tree needs a real boot for its
    # acceptance, before that boot finished: the resumed run re-plans the acceptance boot from
    # the record, tells a fresh searcher the dummy trials' predictions, searches on, promotes
    # and confirms; the whole record is then checked as any two-fidelity sweep's (one test:
    # a second, uninterrupted sweep would double the runtime and check nothing more).
    uri = f"sqlite:///{project_dir / 'mlruns' / 'resume.db'}"
    spec = _spec(project_dir, "two-resume", trials=4)
    stopped = sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=project_dir / ".spec_sweep",
        tracking_uri=uri,
        progress=_StopAfter("t0001"),
    )
    assert stopped.interrupted
    runs = _runs(uri, stopped.parent_run_id)
    assert sorted(runs) == ["t0000", "t0001"]
    assert runs["t0001"].data.tags[TAG_FIDELITY] == FIDELITY_DUMMY
    assert runs["t0001"].data.tags[TAG_FAILURE] == "none"
    assert runs["t0001"].data.params.get("speculative-algorithm") == "EAGLE3"

    shown = io.StringIO()  # a live display: Tune pickles the source, never the display
    outcome = _sweep(project_dir, spec, uri, SweepProgress(Console(file=shown, width=200)))
    assert not outcome.interrupted
    assert "resuming two-resume: 2/4 trials done" in shown.getvalue()
    assert outcome.report_error is None
    assert outcome.report is not None
    html = Path(outcome.report).read_text()
    assert 'id="fidelity"' in html  # the report says which fidelity measured what
    _check_two_fidelities(outcome, uri, spec)
    runs = _runs(uri, outcome.parent_run_id)
    boots = sorted(
        t for t, r in runs.items() if r.data.tags.get(TAG_FIDELITY_ROLE) == ROLE_ACCEPTANCE
    )
    assert boots[0] == "t0002"  # the boot the stopped run never finished, run first
    assert runs["t0002"].data.params == runs["t0001"].data.params
