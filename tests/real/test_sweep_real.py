"""A whole sweep on real GPUs: Ray Tune + Optuna + MLflow + real SGLang, SIGKILLed once, resumed.

`python -m spec_sweep.run sweeps/real_h200.yaml` runs as a user runs it (its own local Ray, an
MLflow store under the test's folder). Once at least two trials have finished, the driver is
SIGKILLed in the middle of the next one; the same command then resumes and finishes the budget.
Checked: every trial of the budget has exactly one FINISHED child run, no finished trial ran
twice, no server is left, and the GPUs hold no memory of ours afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from real_harness import ROOT

TRIALS = 8


def _runs(store: Path) -> list[object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    runs = []
    for experiment in client.search_experiments():
        runs += client.search_runs([experiment.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId")]


def _finished(store: Path) -> int:
    return sum(1 for r in _runs(store) if r.info.status == "FINISHED")  # type: ignore[attr-defined]


def _servers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "sglang.launch_server" in cmdline:
            found.append(proc)
    return found


def test_real_sweep_killed_once_and_resumed(model: Path, out_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "mlruns"
    state = tmp_path / "state"
    command = [
        sys.executable, "-m", "spec_sweep.run", "sweeps/real_h200.yaml",
        "--trials", str(TRIALS), "--state-dir", str(state), "--tracking-uri", store.as_uri(),
    ]  # fmt: skip
    log = (out_dir / "logs" / "sweep-first.log").open("w")
    driver = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline and driver.poll() is None:
        if store.exists() and _finished(store) >= 2 and _servers():
            break
        time.sleep(2)
    assert driver.poll() is None, "the sweep ended before it could be killed"
    finished_before = _finished(store)
    time.sleep(5)  # inside the next trial's boot
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    log.close()

    started = time.monotonic()
    with (out_dir / "logs" / "sweep-resume.log").open("w") as log2:
        resumed = subprocess.run(
            command, cwd=ROOT, stdout=log2, stderr=subprocess.STDOUT, timeout=2400, check=False
        )
    resume_log = (out_dir / "logs" / "sweep-resume.log").read_text()
    assert resumed.returncode == 0, resume_log[-3000:]
    assert "resuming" in resume_log
    runs = _runs(store)
    finished = [r for r in runs if r.info.status == "FINISHED"]  # type: ignore[attr-defined]
    trial_ids = [r.data.tags.get("spec_sweep.trial_id") for r in finished]  # type: ignore[attr-defined]
    print(
        f"finished before kill {finished_before}; after resume {len(finished)} "
        f"({time.monotonic() - started:.0f} s); runs {len(runs)}"
    )
    assert len(finished) == TRIALS
    assert len(set(trial_ids)) == len(trial_ids)
    assert not _servers(), "a server outlived the sweep"
    try:
        from spec_sweep.gpu import gpu_processes

        leftovers = gpu_processes()
    except Exception as exc:  # pragma: no cover - NVML trouble is reported, not hidden
        pytest.fail(f"NVML: {exc}")
    assert not leftovers, f"GPU memory still held: {leftovers}"
