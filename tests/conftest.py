"""Shared fixtures: one Ray cluster per test session, fast simulated boots, temp MLflow stores.

The simulated node boots at time scale 0 in tests (env `SPEC_SWEEP_SIM_TIME_SCALE`, inherited by
every server the tests start). The Ray cluster is a real local head started with `ray start`
(8 logical GPUs and one `spec_sweep_node`, like one GPU node); in-process sweeps connect to it
and subprocess drivers join it with `--address`. Every fixture stops what it starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPEC_SWEEP_SIM_TIME_SCALE", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# The session's Ray head and every driver joining it (in-process or as a subprocess) use Ray's
# token authentication explicitly (Ray 2.60 enables it on `ray start` when a token exists).
os.environ.setdefault("RAY_AUTH_MODE", "token")

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real local Ray head (8 logical GPUs, one spec_sweep_node); yields its address."""
    import ray

    ray_bin = str(Path(sys.executable).parent / "ray")
    port = _free_port()
    temp = Path("/tmp") / f"ray-specsweep-{os.getpid()}"
    args = [
        ray_bin,
        "start",
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        "--num-gpus=8",
        '--resources={"spec_sweep_node": 1}',
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]
    started = subprocess.run(args, capture_output=True, text=True, timeout=180)
    if started.returncode != 0:
        stop_ray_processes(temp)
        pytest.fail(f"ray start failed: {started.stdout[-2000:]}{started.stderr[-2000:]}")
    address = f"127.0.0.1:{port}"
    try:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        yield address
    finally:
        ray.shutdown()
        stop_ray_processes(temp)
        shutil.rmtree(temp, ignore_errors=True)


def stop_ray_processes(temp_dir: Path) -> None:
    """Stop the Ray processes of one cluster (found by its temp dir), not every Ray on the host.

    `ray stop` would also stop clusters that other test sessions on this machine are using.
    """
    import psutil

    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(temp_dir) in cmdline and proc.pid not in spared:
            roots.append(proc)
    procs = {p.pid: p for p in roots}
    for root in roots:
        try:
            for child in root.children(recursive=True):
                procs[child.pid] = child
        except psutil.Error:
            continue
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=10)


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp project root (state and mlruns/ go here) with the repo's sweeps and fragments."""
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPEC_SWEEP_PROJECT_DIR", str(tmp_path))
    return tmp_path


def wait_until(predicate: object, *, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll `predicate()` until true or timeout (the only clock use in tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False
