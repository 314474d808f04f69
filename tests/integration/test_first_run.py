"""A new user's first run: an empty home folder, no Ray state, no token of ours.

The suite's own Ray cluster uses the session's token (`conftest.py`); these tests run the
product as a user would instead, in subprocesses whose home folder is empty and whose
environment has no Ray auth settings at all: `spec-sweep run --simulate` (which starts its own
local Ray), `spec-sweep ui`, and `--address` to a cluster started with token authentication,
joined with the user's token (and refused, with a one-line error, without it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from harness import DROP, free_port, ray_port_args, stop_ray_processes, write_spec

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).parent / "ray")
_OURS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _user_env(home: Path, project: Path) -> dict[str, str]:
    """A new user's shell: an empty home and XDG folders, no Ray settings of the suite's."""
    env = {k: v for k, v in os.environ.items() if k not in _OURS and not k.startswith("XDG_")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SPEC_SWEEP_PROJECT_DIR=str(project))
    return env


def _spec(project: Path) -> Path:
    return write_spec(
        project,
        name="firstrun",
        search_space={"include": ["memory.yaml"]},
        baseline={"speculative-algorithm": DROP, "cuda-graph-max-bs": 512},
        budget={"trials": 2},
    )


@pytest.fixture
def project(project_dir: Path) -> Path:
    return project_dir


def _spec_sweep(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spec_sweep", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_first_sweep_and_ui_work_on_an_empty_home(project: Path, tmp_path: Path) -> None:
    env = _user_env(tmp_path / "home", project)
    spec = _spec(project)
    done = _spec_sweep("run", str(spec), "--simulate", env=env, cwd=project)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "best: t0" in done.stdout

    ui = subprocess.Popen(
        [sys.executable, "-m", "spec_sweep", "ui", "--port", str(free_port())],
        env=env,
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    try:
        assert ui.stdout is not None
        first = ui.stdout.readline()
        assert "trials of the latest sweep of 'firstrun'" in first, first
        url = ui.stdout.readline().strip()
        assert httpx.get(url.split("#")[0], timeout=10).status_code == 200
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        assert ui.wait(30) == 0


def test_address_joins_a_token_cluster_with_the_users_token(project: Path, tmp_path: Path) -> None:
    user = _user_env(tmp_path / "user", project)
    # The user's token, made as Ray's docs say: `ray get-auth-token --generate` (~/.ray).
    subprocess.run([RAY, "get-auth-token", "--generate"], env=user, capture_output=True, check=True)
    assert (tmp_path / "user" / ".ray" / "auth_token").is_file()
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # Ray's socket paths stay short
    head = [
        RAY,
        "start",
        "--head",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--num-gpus=8",
        '--resources={"spec_sweep_node": 1}',
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        *ray_port_args(port),
    ]
    started = subprocess.run(
        head, env={**user, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=180
    )
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        spec = _spec(project)
        address = f"127.0.0.1:{port}"
        joined = _spec_sweep(
            "run", str(spec), "--simulate", "--address", address, env=user, cwd=project
        )
        assert joined.returncode == 0, joined.stdout[-2000:] + joined.stderr[-2000:]
        assert "best: t0" in joined.stdout

        # Another user, no token: refused in one line that says what to do.
        stranger = _user_env(tmp_path / "stranger", project)
        # Ray's driver retries the refused connection about once a second, 20 times by default,
        # before ray.init raises the ConnectionError the product turns into its one line;
        # Ray's own `RAY_gcs_server_port_wait_time_s` sets that count (2 tries: ~2 s, not ~20 s).
        stranger["RAY_gcs_server_port_wait_time_s"] = "2"
        refused = _spec_sweep(
            "run",
            str(spec),
            "--simulate",
            "--address",
            address,
            "--fresh",
            env=stranger,
            cwd=project,
        )
        assert refused.returncode == 1
        error = refused.stderr.strip().splitlines()[-1]
        assert error.startswith("spec-sweep: error: could not join the Ray cluster at " + address)
        assert "this machine has no token" in error
        assert "~/.ray/auth_token" in error
    finally:
        stop_ray_processes(temp)
        shutil.rmtree(temp, ignore_errors=True)
