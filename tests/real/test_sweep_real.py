"""A whole sweep on real GPUs: Ray Tune + Optuna + MLflow + real SGLang, SIGKILLed once, resumed.

`python -m spec_sweep.run <spec>` runs as a user runs it (its own local Ray, an MLflow store under
the test's folder), where `<spec>` is `sweeps/real_h200_smollm2.yaml` (the real checkpoint) or
`sweeps/real_h200.yaml` (dummy weights), rendered by real_harness.py for the chosen SGLang
version, with the budget of this test: `SPEC_SWEEP_REAL_SWEEP_TRIALS` search trials (default 8),
no confirmation boots and no baseline re-measure. Once `SPEC_SWEEP_REAL_KILL_AFTER` trials
(default 2) have finished, the driver is SIGKILLed in the middle of the next one; the same command
then resumes and finishes the budget. Checked: every trial of the budget has exactly one FINISHED
child run, no finished trial ran twice, no server is left, and the GPUs hold no memory of ours
afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from real_harness import ROOT, model_kind, render_spec, sglang_version

TRIALS = int(os.environ.get("SPEC_SWEEP_REAL_SWEEP_TRIALS", "8"))
KILL_AFTER = int(os.environ.get("SPEC_SWEEP_REAL_KILL_AFTER", "2"))
SWEEPS = {"smollm2": "real_h200_smollm2.yaml", "dummy": "real_h200.yaml"}


def _uri(store: Path) -> str:
    return f"sqlite:///{store / 'mlflow.db'}"  # the product's default kind of store


def _runs(store: Path) -> list[object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=_uri(store))
    runs = []
    for experiment in client.search_experiments():
        runs += client.search_runs([experiment.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId")]


def _finished(store: Path) -> int:
    return sum(1 for r in _runs(store) if r.info.status == "FINISHED")  # type: ignore[attr-defined]


def _servers(state: Path | None = None) -> list[psutil.Process]:
    """Running SGLang servers; with `state`, only those this sweep launched (by their ports:
    other tests may run servers on the other GPU at the same time)."""
    ports = None
    if state is not None:
        ports = {
            cmd.read_text().split("--port ")[1].split()[0]
            for cmd in state.glob("*/trials/*/attempt*/command.txt")
        }
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "sglang.launch_server" not in cmdline:
            continue
        port = cmdline[cmdline.index("--port") + 1] if "--port" in cmdline else None
        if ports is None or port in ports:
            found.append(proc)
    return found


def test_real_sweep_killed_once_and_resumed(model: Path, out_dir: Path, tmp_path: Path) -> None:
    assert 1 <= KILL_AFTER < TRIALS, (KILL_AFTER, TRIALS)
    store = tmp_path / "mlruns"
    state = tmp_path / "state"
    spec = render_spec(
        ROOT / "sweeps" / SWEEPS[model_kind()],
        out_dir / "specs" / f"sweep-{sglang_version()}-{model_kind()}.yaml",
        budget={"trials": TRIALS, "confirm": 0, "remeasure_baseline": False},
    )
    command = [
        sys.executable, "-m", "spec_sweep.run", str(spec),
        "--trials", str(TRIALS), "--state-dir", str(state), "--tracking-uri", _uri(store),
    ]  # fmt: skip
    log = (out_dir / "logs" / "sweep-first.log").open("w")
    driver = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline and driver.poll() is None:
        if (store / "mlflow.db").exists() and _finished(store) >= KILL_AFTER and _servers(state):
            break
        time.sleep(2)
    assert driver.poll() is None, "the sweep ended before it could be killed"
    finished_before = _finished(store)
    time.sleep(5)  # inside the next trial's boot
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    log.close()

    started = time.monotonic()
    try:
        with (out_dir / "logs" / "sweep-resume.log").open("w") as log2:
            resumed = subprocess.run(
                command, cwd=ROOT, stdout=log2, stderr=subprocess.STDOUT, timeout=2400, check=False
            )
    finally:  # the trials' folders (server logs, bench.json, quality.json) for the record
        shutil.copytree(state, out_dir / "sweep-state", dirs_exist_ok=True)
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
    assert not _servers(state), "a server outlived the sweep"
    from spec_sweep.node.gpu import gpu_processes

    # The GPUs this sweep could see (CUDA_VISIBLE_DEVICES) hold nothing any more.
    assert not gpu_processes(), "GPU memory still held after the sweep"
