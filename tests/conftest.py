"""Fixtures: one Ray cluster per session, temp projects, nothing shared with the user.

The suite runs in two pytest-xdist workers (pyproject.toml), each its own session: everything
below (project folder, Ray token, Ray head) exists once per worker.

- Isolation: the whole session runs with its own project folder (`SPEC_SWEEP_PROJECT_DIR`, so
  no test reads or writes the user's `mlruns/` or `.spec_sweep/`), without the user's
  `RAY_ADDRESS` or `MLFLOW_*` settings, and with a Ray head whose every port is chosen free
  (a sweep or `spec-sweep ui` of the user's may run beside the suite). Simulated nodes boot at
  time scale 0 (env `SPEC_SWEEP_SIM_TIME_SCALE`, inherited by every server the tests start).
- The spec template and the helpers (`make_spec`, `wait_until`, ...) are in `harness.py`.
- `ray_cluster`: a real local head started with `ray start` (8 logical GPUs and one
  `spec_sweep_node`, like one GPU node) in its own temp dir; in-process sweeps connect to it and
  subprocess drivers join it with `--address`. Every fixture stops what it starts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import ROOT, free_port, ray_port_args, stop_ray_processes

os.environ.setdefault("SPEC_SWEEP_SIM_TIME_SCALE", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Nothing of the user's: their cluster, their Ray token, their tracking server, their project.
for _name in (
    "RAY_ADDRESS",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_RUN_ID",
):
    os.environ.pop(_name, None)
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="spec_sweep-tests-"))
os.environ["SPEC_SWEEP_PROJECT_DIR"] = str(_SESSION_DIR)
# The session's Ray head and every driver joining it (in-process or as a subprocess) use Ray's
# token authentication with the session's own token: generated here, in the session's folder,
# so nothing is read from or written to the user's ~/.ray (where Ray looks by default, and
# where `ray start --head` in token mode fails when no token is there).
SESSION_RAY_TOKEN = _SESSION_DIR / "ray_auth_token"
SESSION_RAY_TOKEN.write_text(secrets.token_hex(32))
SESSION_RAY_TOKEN.chmod(0o600)
os.environ["RAY_AUTH_TOKEN_PATH"] = str(SESSION_RAY_TOKEN)
os.environ["RAY_AUTH_MODE"] = "token"


@pytest.fixture(scope="session", autouse=True)
def _session_dir() -> Iterator[Path]:
    """The session's project folder (removed at the end)."""
    yield _SESSION_DIR
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


def _worker_port_range() -> list[str]:
    """Under pytest-xdist (`-n 2` in pyproject.toml) each worker runs its own session and Ray
    head: give each head its own slice of Ray's worker ports (10002-19999 by default), so two
    heads never hand their workers the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return []
    width = (19999 - 10002 + 1) // count
    low = 10002 + int(worker[2:]) * width
    return [f"--min-worker-port={low}", f"--max-worker-port={low + width - 1}"]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A real local Ray head (8 logical GPUs, one spec_sweep_node); yields its address."""
    import ray

    ray_bin = str(Path(sys.executable).parent / "ray")
    port = free_port()
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
        *ray_port_args(port),
        *_worker_port_range(),
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


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp project root (state and mlruns/ go here) with the repo's sweeps and fragments."""
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPEC_SWEEP_PROJECT_DIR", str(tmp_path))
    return tmp_path
