"""The test harness: one spec factory, one Ray cluster per session, nothing shared with the user.

- Isolation: the whole session runs with its own project folder (`SPEC_SWEEP_PROJECT_DIR`, so
  no test reads or writes the user's `mlruns/` or `.spec_sweep/`), without the user's
  `RAY_ADDRESS` or `MLFLOW_*` settings, and with a Ray head whose every port is chosen free
  (a sweep or `spec-sweep ui` of the user's may run beside the suite). Simulated nodes boot at
  time scale 0 (env `SPEC_SWEEP_SIM_TIME_SCALE`, inherited by every server the tests start).
- `make_spec` / `write_spec`: the one spec template (the write-up's PCIe node, SGLang 0.5.13,
  a small builtin workload) with keyword overrides merged into it.
- `ray_cluster`: a real local head started with `ray start` (8 logical GPUs and one
  `spec_sweep_node`, like one GPU node) in its own temp dir; in-process sweeps connect to it and
  subprocess drivers join it with `--address`. Every fixture stops what it starts.
- `wait_until`: the only way tests wait for something (no bare sleeps).
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ.setdefault("SPEC_SWEEP_SIM_TIME_SCALE", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# The session's Ray head and every driver joining it (in-process or as a subprocess) use Ray's
# token authentication explicitly (Ray 2.60 enables it on `ray start` when a token exists).
os.environ.setdefault("RAY_AUTH_MODE", "token")
# Nothing of the user's: their cluster, their tracking server, their project folder.
for _name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
    os.environ.pop(_name, None)
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="spec_sweep-tests-"))
os.environ["SPEC_SWEEP_PROJECT_DIR"] = str(_SESSION_DIR)

ROOT = Path(__file__).resolve().parent.parent

#: The one spec template (the write-up's PCIe node); tests override what they need.
BASE_SPEC: dict[str, Any] = {
    "name": "test",
    "node": {
        "backend": "sglang",
        "model": "moonshotai/Kimi-K2.5",
        "draft_model": "lightseekorg/kimi-k2.5-eagle3",
        "gpus": 8,
        "sglang_version": "0.5.13",
        "server_args": {"tp-size": 8},
        "boot_timeout_s": 60,
        "request_timeout_s": 30,
        "sim_profile": "rtx-pro-6000-pcie-x8",
    },
    "search_space": {"include": ["speculative.yaml"]},
    "baseline": {"speculative-algorithm": None},
    "workload": {
        "dataset": "builtin",
        "output_len": 16,
        "num_prompts": 2,
        "concurrency": 1,
        "warmup_prompts": 1,
    },
    "objective": {"metric": "output_throughput", "mode": "max"},
    "budget": {"trials": 4, "trial_timeout_s": 120},
    "searcher": {"kind": "tpe", "seed": 0},
}

#: A value that removes a key of the template (e.g. `search_space={"include": DROP}`).
DROP = object()


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if value is DROP:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def spec_data(**sections: Any) -> dict[str, Any]:
    """The template with `sections` merged in (mappings merge key by key, DROP removes)."""
    return _merge(BASE_SPEC, sections)


def write_spec(directory: Path, *, file: str | None = None, **sections: Any) -> Path:
    """Write `<directory>/<file or name.yaml>` from the template; fragments resolve from the
    repo's `search_spaces/` (or the directory's own, if it has one)."""
    data = spec_data(**sections)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (file or f"{data['name']}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def make_spec(directory: Path, *, file: str | None = None, **sections: Any) -> Any:
    """`load_spec(write_spec(directory, file=file, **sections))`."""
    from spec_sweep.spec_load import load_spec

    return load_spec(write_spec(directory, file=file, **sections))


def free_port() -> int:
    """A port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    predicate: Callable[[], object], *, timeout: float = 10.0, interval: float = 0.05
) -> bool:
    """Poll `predicate()` until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def ray_port_args() -> list[str]:
    """The port options of `ray start`, each a free port (none of Ray's fixed defaults).

    (No Ray Client server runs: it needs `ray[client]`, which is not installed.)
    """
    return [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]


@pytest.fixture(scope="session", autouse=True)
def _session_dir() -> Iterator[Path]:
    """The session's project folder (removed at the end)."""
    yield _SESSION_DIR
    shutil.rmtree(_SESSION_DIR, ignore_errors=True)


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
        *ray_port_args(),
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

    `ray stop` would also stop clusters that other test sessions (or the user) are using.
    """
    from spec_sweep.procs import kill_processes_matching

    kill_processes_matching(str(temp_dir), grace_s=10.0)


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp project root (state and mlruns/ go here) with the repo's sweeps and fragments."""
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPEC_SWEEP_PROJECT_DIR", str(tmp_path))
    return tmp_path
