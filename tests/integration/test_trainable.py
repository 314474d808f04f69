"""A tracking error while recording never costs a finished trial, nor runs it again.

The trial runs on the simulated node through the real trainable (`run_and_record`) against a
real MLflow store whose artifact folder is broken after the sweep started (the experiment's
artifact directory replaced by a file, so writing the trial's artifacts fails in MLflow). The
outcome is saved beside the trial before recording; when the store works again, the retry
(what Ray Tune or a resumed sweep does) records the saved outcome without a second launch.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import make_spec

from spec_sweep.core import names
from spec_sweep.core.config import baseline_config
from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.errors import TrialError
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate import trainable
from spec_sweep.orchestrate.trainable import TrialContext, run_and_record
from spec_sweep.store.tracker import Tracker

pytestmark = pytest.mark.usefixtures("ray_cluster")


class _Backoff:
    """`time` for the trainable module: its retry backoff is recorded, not slept (0.5 + 1 + 2 s
    a failed recording); every other clock call is the real one."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def backoff(monkeypatch: pytest.MonkeyPatch) -> _Backoff:
    clock = _Backoff()
    monkeypatch.setattr(trainable, "time", clock)
    return clock


def _sweep(project_dir: Path, name: str) -> tuple[Any, Tracker, str, TrialContext]:
    """A two-trial sweep on the simulated node: its spec, tracker, parent run and trial context."""
    spec = make_spec(project_dir / "sweeps", name=name, budget={"trials": 2})
    tracker = Tracker(f"sqlite:///{project_dir / 'mlruns' / 'mlflow.db'}", spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id=name, simulate=True)
    ctx = TrialContext(
        backend=SimBackend(spec, grace_s=2.0),
        tracker=tracker,
        parent_run_id=parent,
        trials_dir=project_dir / "trials",
        state_dir=project_dir,
    )
    return spec, tracker, parent, ctx


def test_a_store_error_while_recording_keeps_the_trial(
    project_dir: Path, backoff: _Backoff
) -> None:
    spec, tracker, parent, ctx = _sweep(project_dir, "record")
    trials = ctx.trials_dir
    config = {**baseline_config(spec), names.CONFIG_TRIAL_ID: "t0000", names.CONFIG_ATTEMPT: 1}

    artifacts = project_dir / "mlruns" / "artifacts" / spec.experiment
    shutil.rmtree(artifacts)
    artifacts.write_text("not a folder: the store cannot write artifacts now")
    with pytest.raises(TrialError, match="recording it in the tracking store failed"):
        run_and_record(dict(config), ctx)
    assert backoff.slept == [0.5, 1.0, 2.0]  # three tries, with the backoff between them
    saved = trials / "t0000" / "attempt1" / names.RESULT_FILE
    assert json.loads(saved.read_text())["failure_mode"] == "none"
    log = trials / "t0000" / "attempt1" / "server.log"
    launched = log.stat().st_mtime_ns
    (record,) = tracker.attempts(parent, "t0000")
    assert record.status == "RUNNING"  # not finished: nothing half-recorded counts

    artifacts.unlink()  # the store works again; Tune retries the trial
    out = run_and_record(dict(config), ctx)
    assert out["failure_mode"] == "none"
    assert out["output_throughput"] > 0
    assert log.stat().st_mtime_ns == launched  # not launched again
    assert sorted(p.name for p in (trials / "t0000").iterdir()) == ["attempt1"]
    (record,) = tracker.attempts(parent, "t0000")
    assert record.status == "FINISHED"
    assert record.metrics["output_throughput"] == out["output_throughput"]
    assert record.metrics["speedup_vs_baseline"] == 1.0


@pytest.mark.usefixtures("backoff")
def test_a_saved_outcome_closed_by_a_resumed_driver_is_recorded_not_run(project_dir: Path) -> None:
    """The driver died after the trial saved its outcome, before the record was complete: the
    resumed driver closed the attempt's run KILLED; the retry records the outcome in that run."""
    spec, tracker, parent, ctx = _sweep(project_dir, "resumed")
    trials = ctx.trials_dir
    config = {**baseline_config(spec), names.CONFIG_TRIAL_ID: "t0000", names.CONFIG_ATTEMPT: 1}
    artifacts = project_dir / "mlruns" / "artifacts" / spec.experiment
    shutil.rmtree(artifacts)
    artifacts.write_text("not a folder")
    with pytest.raises(TrialError):
        run_and_record(dict(config), ctx)
    artifacts.unlink()
    (record,) = tracker.attempts(parent, "t0000")
    tracker.kill_run(record.run_id)  # what a resumed driver does with a RUNNING run
    launched = (trials / "t0000" / "attempt1" / "server.log").stat().st_mtime_ns

    out = run_and_record({**config, names.CONFIG_ATTEMPT: 2}, ctx)
    assert out["failure_mode"] == "none"
    assert (trials / "t0000" / "attempt1" / "server.log").stat().st_mtime_ns == launched
    assert sorted(p.name for p in (trials / "t0000").iterdir()) == ["attempt1"]
    (after,) = tracker.attempts(parent, "t0000")
    assert after.run_id == record.run_id
    assert after.status == "FINISHED"


@pytest.mark.usefixtures("backoff")
def test_a_saved_crash_by_sigkill_is_run_again_not_recorded(project_dir: Path) -> None:
    """A driver killed during the baseline's boot: its dying worker saw the server killed with
    it and saved a crash (exit -9, as a clean-clone CI run of test_resume left it). The retry does
    not charge that kill to the configuration: the lost attempt is closed and the trial runs."""
    spec, tracker, parent, ctx = _sweep(project_dir, "killed")
    trials = ctx.trials_dir
    base = baseline_config(spec)
    lost = trainable._open(ctx, "t0000", base, 1, ctx.backend.fingerprint(), system_metrics=False)
    folder = trials / "t0000" / "attempt1"
    folder.mkdir(parents=True)
    (folder / names.RUN_ID_FILE).write_text(lost)
    killed = TrialResult(
        trial_id="t0000",
        config=base,
        failure_mode=FailureMode.CRASH,
        reason="crash: exited with code -9 (SIGKILL) before ready",
        exit_code=-9,
        elapsed_s=0.153,
    )
    (folder / names.RESULT_FILE).write_text(json.dumps(killed.to_dict()))

    config = {**base, names.CONFIG_TRIAL_ID: "t0000", names.CONFIG_ATTEMPT: 2}
    out = run_and_record(config, ctx)
    assert out["failure_mode"] == "none"
    assert out["output_throughput"] > 0
    assert sorted(p.name for p in (trials / "t0000").iterdir()) == ["attempt1", "attempt2"]
    first, second = sorted(tracker.attempts(parent, "t0000"), key=lambda r: r.start_time)
    assert first.run_id == lost
    assert first.status == "KILLED"
    assert first.failure_mode is FailureMode.NODE_LOST
    assert second.status == "FINISHED"
    assert second.failure_mode is FailureMode.NONE

    # A crash the engine explained is still the configuration's, even by SIGKILL (SGLang's own
    # kill_process_tree after an exception; another sweep, so the record above does not answer
    # it): recorded from the saved outcome, not run again.
    parent2, _ = tracker.start_sweep(spec, state_id="crashed", simulate=True)
    ctx2 = replace(ctx, parent_run_id=parent2, trials_dir=project_dir / "trials2")
    other = trainable._open(ctx2, "t0000", base, 1, ctx.backend.fingerprint(), system_metrics=False)
    folder2 = ctx2.trials_dir / "t0000" / "attempt1"
    folder2.mkdir(parents=True)
    (folder2 / names.RUN_ID_FILE).write_text(other)
    crashed = replace(
        killed, reason=killed.reason + "; last exception: RuntimeError: CUDA error: an illegal "
        "memory access was encountered",
    )  # fmt: skip
    (folder2 / names.RESULT_FILE).write_text(json.dumps(crashed.to_dict()))
    out = run_and_record(dict(config), ctx2)
    assert out["failure_mode"] == "crash"
    assert sorted(p.name for p in folder2.parent.iterdir()) == ["attempt1"]
    (record,) = tracker.attempts(parent2, "t0000")
    assert record.run_id == other
    assert record.status == "FINISHED"
