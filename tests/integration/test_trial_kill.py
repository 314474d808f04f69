"""A trial's server never outlives the process that runs the trial (docs/design.md, "Server
launch").

Each test starts a small driver process that calls `run_trial` on the simulated node with the
`hang-after=0` fault (the server becomes ready, then the benchmark's first request never gets an
answer, so the driver stays inside `run_trial`), waits until the server is ready, reads the
server record the launcher writes (`trial_dir/server.json`: pid and process group), kills the
driver with SIGKILL, and checks that every process of the server's group is gone within a few
seconds. The launcher sets `PR_SET_PDEATHSIG` on the server, which fires when the *thread* that
launched it ends, and the simulator's workers die with their parent; so the driver runs
`run_trial` either on its main thread or on another thread (as a Ray worker does), and the test
checks that this thread is still alive right before the kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from harness import wait_until

from spec_sweep.node.procs import group_pids
from spec_sweep.node.server import kill_recorded_servers

ROOT = Path(__file__).resolve().parents[2]
READY = "The server is fired up and ready to roll!"

_DRIVER = textwrap.dedent(
    """
    import json, sys, threading
    from pathlib import Path

    from spec_sweep.core.config import baseline_config
    from spec_sweep.spec_load import load_spec
    from spec_sweep.node.trial import run_trial

    spec_path, trial_dir, where = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    spec = load_spec(spec_path)


    def on_launch(server):
        info = {"tid": threading.get_native_id(), "thread": threading.current_thread().name}
        (trial_dir / "launcher.json").write_text(json.dumps(info))


    def trial():
        run_trial(
            spec,
            baseline_config(spec),
            trial_dir=trial_dir,
            simulate=True,
            extra_env={"SPEC_SWEEP_SIM_FAULT": "hang-after=0"},
            on_launch=on_launch,
        )


    if where == "thread":
        worker = threading.Thread(target=trial, name="trial-worker")
        worker.start()
        worker.join()
    else:
        trial()
    """
)


def _write_spec(tmp_path: Path) -> Path:
    """A sweep on the simulated PCIe node whose benchmark waits up to 300 s per request."""
    raw = {
        "name": "kill-test",
        "node": {
            "backend": "sglang",
            "model": "moonshotai/Kimi-K2.5",
            "gpus": 8,
            "sglang_version": "0.5.23",
            "server_args": {"tp-size": 8, "trust-remote-code": True},
            "boot_timeout_s": 60,
            "request_timeout_s": 300,
            "sim_profile": "rtx-pro-6000-pcie-x8",
        },
        "search_space": {
            "params": {"mem-fraction-static": {"float": [0.7, 0.92], "default": 0.88}}
        },
        "workload": {
            "dataset": "builtin",
            "output_len": 16,
            "num_prompts": 2,
            "concurrency": 1,
            "warmup_prompts": 0,
        },
        "budget": {"trials": 1, "trial_timeout_s": 3600},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def start_driver(tmp_path: Path) -> Iterator[Callable[[str, Path], subprocess.Popen[bytes]]]:
    """Starts driver processes; at the end kills those still alive and any recorded server."""
    drivers: list[subprocess.Popen[bytes]] = []

    def start(where: str, trial_dir: Path) -> subprocess.Popen[bytes]:
        trial_dir.mkdir(parents=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
        env.pop("SPEC_SWEEP_SIM_FAULT", None)
        script = tmp_path / "driver.py"
        script.write_text(_DRIVER)
        with (tmp_path / f"driver-{where}.log").open("wb") as out:
            driver = subprocess.Popen(
                [sys.executable, str(script), str(_write_spec(tmp_path)), str(trial_dir), where],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        if driver.poll() is None:
            driver.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(timeout=10)
    kill_recorded_servers(tmp_path, grace_s=1.0)


def _driver_output(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in tmp_path.glob("driver-*.log"))


@pytest.mark.parametrize("where", ["main-thread", "thread"])
def test_sigkill_of_the_trial_driver_leaves_no_server_process(
    tmp_path: Path,
    start_driver: Callable[[str, Path], subprocess.Popen[bytes]],
    where: str,
) -> None:
    trial_dir = tmp_path / "trial"
    driver = start_driver(where, trial_dir)
    record_path = trial_dir / "server.json"
    launcher_path = trial_dir / "launcher.json"
    log_path = trial_dir / "server.log"

    def server_ready() -> bool:
        assert driver.poll() is None, f"driver exited early:\n{_driver_output(tmp_path)}"
        return (
            record_path.exists()
            and launcher_path.exists()
            and log_path.exists()
            and READY in log_path.read_text(errors="replace")
        )

    assert wait_until(server_ready, timeout=60), _driver_output(tmp_path)
    record = json.loads(record_path.read_text())
    pgid = int(record["pgid"])
    launcher = json.loads(launcher_path.read_text())
    expected_thread = "trial-worker" if where == "thread" else "MainThread"
    assert launcher["thread"] == expected_thread
    # The server (main process and its scheduler/detokenizer workers) runs, and the thread that
    # launched it is still alive: PR_SET_PDEATHSIG has not fired yet.
    assert wait_until(lambda: len(group_pids(pgid)) >= 3, timeout=10), group_pids(pgid)
    assert Path(f"/proc/{driver.pid}/task/{launcher['tid']}").exists()
    assert driver.poll() is None

    os.kill(driver.pid, signal.SIGKILL)
    assert driver.wait(timeout=10) == -signal.SIGKILL

    assert wait_until(lambda: group_pids(pgid) == [], timeout=5), (
        f"server processes left after the driver was killed: {group_pids(pgid)}"
    )
