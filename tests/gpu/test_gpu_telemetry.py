"""A trial's GPU telemetry on a real NVIDIA GPU: while a trial's child run is open, a child process
takes GPU memory through the CUDA driver API (the allocating child of `test_gpu_guard.py`), and
MLflow's system-metrics monitor, started by `Tracker.start_trial`, must log GPU 0's memory rising
by about the allocation, its utilisation and its power. Skipped where NVML finds no GPU."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_gpu_guard import _CHILD

from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.gpu import list_gpus
from spec_sweep.store.tracker import Tracker

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not list_gpus(), reason="no NVIDIA GPU visible to NVML"),
]

_ALLOC_GIB = 4
_MEM = "system/gpu_0_memory_usage_megabytes"


def _history(client: MlflowClient, run_id: str, key: str) -> list[float]:
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_trial_logs_gpu_memory_utilisation_and_power(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    tracker = Tracker(uri, "gpu-telemetry", system_metrics_interval_s=0.5)
    parent = client.create_run(tracker.experiment_id).info.run_id
    run_id = tracker.start_trial(parent, trial_id="t0001", config={"mem-fraction-static": 0.9})
    deadline = time.monotonic() + 30
    while len(_history(client, run_id, _MEM)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "0", str(_ALLOC_GIB << 30)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "allocated"
        before = len(_history(client, run_id, _MEM))
        while len(_history(client, run_id, _MEM)) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait(30)
    tracker.finish_trial(run_id, failure_mode=FailureMode.NONE, metrics={}, reason="", elapsed_s=1)
    memory = _history(client, run_id, _MEM)
    print(f"\n{_MEM}: {memory}")
    assert len(memory) >= 4
    assert max(memory) - memory[0] >= 0.9 * _ALLOC_GIB * 2**30 / 1e6
    metrics = client.get_run(run_id).data.metrics
    for name in ("utilization_percentage", "power_usage_watts", "memory_usage_percentage"):
        assert f"system/gpu_0_{name}" in metrics
    assert metrics["system/gpu_0_power_usage_watts"] > 0
