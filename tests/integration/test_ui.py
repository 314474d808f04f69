"""The MLflow side of the dashboard on a real store: per-trial system metrics through MLflow's own
monitor, the experiment's kind and trials view, and `spec-sweep ui`'s lean server as real processes.

On a machine without an NVIDIA GPU the monitor must log CPU, memory, disk and network metrics and
no GPU metric; with one (NVML answers), each GPU's memory, utilisation and power too
(`tests/gpu/test_gpu_telemetry.py` checks the values against an allocation).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from mlflow.tracking import MlflowClient

from spec_sweep.core.config import baseline_config
from spec_sweep.core.outcome import FailureMode
from spec_sweep.errors import SpecSweepError
from spec_sweep.node.gpu import list_gpus
from spec_sweep.present.names import run_name
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec
from spec_sweep.store.tracker import Tracker
from spec_sweep.ui import UiServer, start_ui_server

ROOT = Path(__file__).resolve().parents[2]
CPU = "system/cpu_utilization_percentage"
MEM = "system/system_memory_usage_megabytes"


def _wait(predicate: object, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def spec() -> SweepSpec:
    return load_spec(ROOT / "sweeps" / "allreduce.yaml")


@pytest.fixture
def store(tmp_path: Path) -> str:
    (tmp_path / "mlruns").mkdir()
    return f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


def _monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "SystemMetricsMonitor" and t.is_alive()]


def test_trial_logs_system_metrics_over_its_life(spec: SweepSpec, store: str) -> None:
    tracker = Tracker(store, spec.experiment, system_metrics_interval_s=0.2)
    parent, _ = tracker.start_sweep(spec, state_id="s1", simulate=True)
    config = {**baseline_config(spec), "cuda-graph-max-bs": 64}
    name = run_name("t0001", config, baseline_config(spec))
    run_id = tracker.start_trial(parent, trial_id="t0001", config=config, run_name=name)
    client = MlflowClient(store)
    # Sampled while the trial runs, not only at its end.
    assert _wait(lambda: len(client.get_metric_history(run_id, CPU)) >= 3, timeout=30)
    assert tracker.finish_trial(
        run_id,
        failure_mode=FailureMode.NONE,
        metrics={"output_throughput": 80.0},
        reason="",
        elapsed_s=1.0,
    )
    assert _monitor_threads() == []
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "t0001 cgbs=64"
    history = client.get_metric_history(run_id, MEM)
    steps = [m.step for m in history]
    assert steps == sorted(set(steps))
    assert len(steps) >= 4  # the samples while it ran, plus the one at its end
    assert all(m.value > 0 for m in history)
    gpu = sorted(k for k in run.data.metrics if k.startswith("system/gpu_"))
    if list_gpus():
        assert {
            "system/gpu_0_memory_usage_megabytes",
            "system/gpu_0_utilization_percentage",
        } <= set(gpu)
        assert "system/gpu_0_power_usage_watts" in gpu
    else:  # no NVML here: the rest is logged, no GPU metric, no error
        assert gpu == []
    # The sweep's own metrics sit beside the system ones.
    assert run.data.metrics["output_throughput"] == 80.0


def test_a_trial_shorter_than_one_interval_still_has_a_sample(spec: SweepSpec, store: str) -> None:
    tracker = Tracker(store, spec.experiment, system_metrics_interval_s=60.0)
    parent, _ = tracker.start_sweep(spec, state_id="s2", simulate=True)
    client = MlflowClient(store)
    finished = tracker.start_trial(parent, trial_id="t0001", config={"ep-size": 8})
    tracker.finish_trial(
        finished, failure_mode=FailureMode.OOM, metrics={}, reason="oom", elapsed_s=0.1
    )
    killed = tracker.start_trial(parent, trial_id="t0002", config={"ep-size": 1})
    tracker.kill_run(killed)
    for run_id in (finished, killed):
        assert len(client.get_metric_history(run_id, CPU)) == 1
    assert client.get_run(killed).info.status == "KILLED"
    assert _monitor_threads() == []
    reused = tracker.start_trial(parent, trial_id="t0003", config={}, system_metrics=False)
    tracker.finish_trial(
        reused, failure_mode=FailureMode.NONE, metrics={}, reason="", elapsed_s=0.0
    )
    assert client.get_metric_history(reused, CPU) == []


def test_interval_set_where_the_tracker_is_made_travels_with_it(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pickle

    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.5")
    tracker = Tracker(store, "e")
    monkeypatch.delenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")
    assert pickle.loads(pickle.dumps(tracker)).system_metrics_interval_s == 0.5
    assert Tracker(store, "e").system_metrics_interval_s == 5.0


def test_sweep_experiment_opens_on_its_trials(spec: SweepSpec, store: str) -> None:
    tracker = Tracker(store, spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="s3", simulate=True)
    client = MlflowClient(store)
    experiment = client.get_experiment(tracker.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.spec-sweep-{parent}"])
    assert view["searchFilter"] == f"tags.`mlflow.parentRunId` = '{parent}'"
    assert view["orderByKey"] == "metrics.`feasible_output_throughput`"
    assert f"params.`{next(iter(spec.params))}`" in view["selectedColumns"]
    note = client.get_run(parent).data.tags["mlflow.note.content"]
    assert note.startswith(spec.description.strip())
    view_path = (
        f"/experiments/{tracker.experiment_id}/runs?workflowType=machine_learning&"
        f"viewStateShareKey=spec-sweep-{parent}"
    )
    assert f"(#{view_path})" in note
    assert f"runs/{parent}/artifactPath/report/report.html" in note
    # An experiment made before experiments had a kind gets one; another kind is left alone.
    old = client.create_experiment("old")
    Tracker(store, "old").experiment_id  # noqa: B018
    assert client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    other = client.create_experiment("genai", tags={"mlflow.experimentKind": "genai_development"})
    Tracker(store, "genai").experiment_id  # noqa: B018
    assert client.get_experiment(other).tags["mlflow.experimentKind"] == "genai_development"


# -- spec-sweep ui ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def ui(spec: SweepSpec, store: str, tmp_path: Path) -> Iterator[tuple[UiServer, str]]:
    tracker = Tracker(store, spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="s4", simulate=True)
    tracker.finish_sweep(parent)
    server = start_ui_server(store, port=_free_port(), log_path=tmp_path / "ui.log")
    try:
        yield server, parent
    finally:
        server.stop()


def test_ui_server_is_lean_and_links_the_trials(ui: tuple[UiServer, str]) -> None:
    server, parent = ui
    assert server.url.endswith(
        f"/runs?workflowType=machine_learning&viewStateShareKey=spec-sweep-{parent}"
    )
    assert server.url.startswith(f"{server.base_url}/#/experiments/")
    assert server.experiment == "allreduce"
    assert httpx.get(f"{server.base_url}/", timeout=10).status_code == 200
    procs = [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(True)]
    commands = [" ".join(p.cmdline()) for p in procs]
    assert len(procs) == 2, commands  # `mlflow server` and its one uvicorn worker
    assert not any("huey" in c or "_job_runner" in c or "spawn_main" in c for c in commands)
    assert any("--workers 1" in c for c in commands)
    pids = [p.pid for p in procs]
    server.stop()
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids
    )


def test_ui_on_a_store_without_sweeps_serves_the_ui(store: str) -> None:
    server = start_ui_server(store, port=_free_port())
    try:
        assert server.experiment is None
        assert server.url == f"{server.base_url}/"
    finally:
        server.stop()


def test_ui_on_a_busy_port_says_so(store: str, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SpecSweepError, match=f"could not listen on port {port}: it is in use"):
            start_ui_server(store, port=port, log_path=tmp_path / "ui.log")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ui_command_line_prints_the_trials_url(spec: SweepSpec, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "mlruns").mkdir(parents=True)
    store = f"sqlite:///{project / 'mlruns' / 'mlflow.db'}"
    tracker = Tracker(store, spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="s5", simulate=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "spec_sweep", "ui", "--port", str(_free_port())],
        cwd=project,
        env={**os.environ, "SPEC_SWEEP_PROJECT_DIR": str(project)},  # the session sets its own
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # As from a terminal: Ctrl-C interrupts. A test run started in the background by a
        # non-interactive shell has SIGINT ignored, and an ignored SIGINT survives exec.
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "trials of the latest sweep of 'allreduce'" in first, first
        url = proc.stdout.readline().strip()
        assert url.endswith(f"viewStateShareKey=spec-sweep-{parent}")
        assert httpx.get(url.split("#")[0], timeout=10).status_code == 200
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0  # normally about a second: SIGKILL follows SIGTERM after 3 s


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_ui_server_stops_when_spec_sweep_ui_is_killed(store: str, signum: int) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spec_sweep",
            "ui",
            "--port",
            str(_free_port()),
            "--tracking-uri",
            store,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert "MLflow UI at" in proc.stdout.readline()
        server = psutil.Process(proc.pid).children(recursive=True)
        assert len(server) == 2  # `mlflow server` and its worker
        proc.send_signal(signum)
        proc.wait(30)
        assert _wait(lambda: not [p for p in server if _running(p)], timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
