"""The test harness: the one spec template and the helpers every test uses.

- `make_spec` / `write_spec`: the one spec template (the write-up's PCIe node, SGLang 0.5.13,
  a small builtin workload) with keyword overrides merged into it (`DROP` removes a key).
- `free_port`, `ray_port_args`: ports for the processes tests start, none of Ray's fixed
  defaults, so the suite can run beside a user's own Ray cluster or MLflow UI.
- `wait_until`: the only way tests wait for something (no bare sleeps).
- `record`: a finished trial record as the store returns it, for the pure tests of the core.
- `stop_ray_processes`: stop one Ray cluster by its temp dir (never every Ray on the host).
- `SimProcess`: one simulated SGLang node (`python -m spec_sweep.sim`) as a real process.

Imported as `harness` (tests/ is on the import path); fixtures live in `conftest.py`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

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
    "budget": {
        "trials": 4,
        "trial_timeout_s": 120,
        "confirm": 0,
        "remeasure_baseline": False,
    },
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


def record(
    trial_id: str,
    config: Mapping[str, Any],
    value: float | None,
    *,
    start: int | None = None,
    mode: Any = None,
    metric: str = "output_throughput",
    status: str = "FINISHED",
    **metrics: float,
) -> Any:
    """A trial record: measured with `value` of `metric` (plus `metrics`), or failed (`oom`,
    or `mode`) when `value` is None; started at `start` (default: the id's number)."""
    from spec_sweep.core.outcome import FailureMode
    from spec_sweep.core.record import TrialRecord

    if mode is None:
        mode = FailureMode.NONE if value is not None else FailureMode.OOM
    return TrialRecord(
        run_id=f"r-{trial_id}",
        trial_id=trial_id,
        status=status,
        config=dict(config),
        failure_mode=mode,
        metrics={metric: value, **metrics} if value is not None else dict(metrics),
        start_time=start if start is not None else int(trial_id[1:5]),
    )


#: The configurations of `confirm_spec`'s sweep: the baseline, two others, and one that fails.
CONFIRM_BASE = {"cuda-graph-max-bs": 512, "disable-custom-all-reduce": False}
CONFIRM_A = {"cuda-graph-max-bs": 128, "disable-custom-all-reduce": False}
CONFIRM_B = {"cuda-graph-max-bs": 64, "disable-custom-all-reduce": True}
CONFIRM_BAD = {"cuda-graph-max-bs": 64, "disable-custom-all-reduce": False}


def graph_spec(tmp_path: Path, **sections: Any) -> Any:
    """A one-parameter sweep (the CUDA-graph batch, 512 by default) with `sections` merged in."""
    return make_spec(
        tmp_path,
        search_space={
            "include": [],
            "params": {"cuda-graph-max-bs": {"choices": [64, 128, 256, 512], "default": 512}},
        },
        baseline=DROP,
        **sections,
    )


def confirm_spec(tmp_path: Path, **budget: object) -> Any:
    """A two-parameter sweep (CUDA-graph batch, custom all-reduce) that confirms its top two."""
    spec = make_spec(
        tmp_path,
        search_space={
            "include": [],
            "params": {
                "cuda-graph-max-bs": {"choices": [64, 128, 256, 512], "default": 512},
                "disable-custom-all-reduce": {"choices": [False, True], "default": False},
            },
        },
        baseline=DROP,
        budget={
            "trials": 6,
            "confirm": 2,
            "confirm_repeats": 2,
            "remeasure_baseline": True,
            **budget,
        },
    )
    return spec


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


def free_ports(count: int, *, taken: Collection[int] = ()) -> list[int]:
    """`count` distinct ports that were free a moment ago, none of `taken`: the sockets are held
    open together while they are chosen, so the kernel cannot hand out one port twice."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                ports.append(port)
    finally:
        for sock in socks:
            sock.close()
    return ports


def ray_port_args(*taken: int) -> list[str]:
    """The port options of `ray start`, each a free port, distinct from each other and from
    `taken` (e.g. the head's `--port`), none of Ray's fixed defaults.

    (No Ray Client server runs: it needs `ray[client]`, which is not installed.)
    """
    names = (
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "metrics-export-port",
        "runtime-env-agent-port",
    )
    ports = free_ports(len(names), taken=taken)
    return [f"--{name}={port}" for name, port in zip(names, ports, strict=True)]


def stop_ray_processes(temp_dir: Path) -> None:
    """Stop the Ray processes of one cluster (found by its temp dir), not every Ray on the host.

    `ray stop` would also stop clusters that other test sessions (or the user) are using.
    Ray's GCS server and its autoscaler monitor do not exit on SIGTERM (they were still running
    12 s after it), so a long grace only delays the SIGKILL: 3 s, as `test_cluster` gives its
    nodes.
    """
    from spec_sweep.node.procs import kill_processes_matching

    kill_processes_matching(str(temp_dir), grace_s=3.0)


#: The admin user of `AuthMlflowServer`.
MLFLOW_ADMIN = "admin"


class AuthMlflowServer:
    """`mlflow server --app-name basic-auth` on a free loopback port (SQLite stores and proxied
    artifacts under `root`), its admin's password from `MLFLOW_AUTH_ADMIN_PASSWORD`, as the
    cluster recipe runs it. Started at construction; `uri` waits until it answers."""

    def __init__(self, root: Path, password: str) -> None:
        import os
        import subprocess
        import sys

        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        config = root / "basic_auth.ini"
        config.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{root / 'basic_auth.db'}\n"
            f"admin_username = {MLFLOW_ADMIN}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        env.update(MLFLOW_AUTH_CONFIG_PATH=str(config), MLFLOW_AUTH_ADMIN_PASSWORD=password)
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = secrets.token_hex(16)  # CSRF, required
        argv = [
            *(sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth"),
            *("--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"),
            *("--artifacts-destination", str(root / "artifacts")),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ]
        with (root / "server.log").open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        self._uri = f"http://127.0.0.1:{port}"
        self._ready = False

    @property
    def uri(self) -> str:
        """The server's URI, once it answers."""
        import httpx

        def healthy() -> bool:
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            try:
                return httpx.get(f"{self._uri}/health", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        if not self._ready:
            assert wait_until(healthy, timeout=120, interval=0.25), "mlflow server"
            self._ready = True
        return self._uri

    def stop(self) -> None:
        """Stop its process group (`stop_process_group`)."""
        stop_process_group(self.proc)


#: The line a node (real or simulated) prints once it serves.
SIM_READY = "The server is fired up and ready to roll!"


class SimProcess:
    """One `python -m spec_sweep.sim` process (its own session) at time scale 0 on a free
    loopback port, its stderr (the log) and stdout captured under `tmp`."""

    def __init__(self, args: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        # The trial launcher's own port choice: SGLang 0.5.13 (and the simulator emulating it)
        # rejects a --port whose derived gRPC port (+10000) is above 65535, which a kernel
        # ephemeral port (32768-60999) can be.
        from spec_sweep.node.ports import choose_server_port

        self.port = choose_server_port()
        self.log_path = tmp / f"sim-{self.port}.log"
        self.out_path = tmp / f"sim-{self.port}.out"
        environ = dict(os.environ)
        environ.pop("SPEC_SWEEP_SIM_FAULT", None)
        environ["SPEC_SWEEP_SIM_TIME_SCALE"] = "0"
        environ["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(ROOT), environ.get("PYTHONPATH", "")] if p
        )
        environ.update(env or {})
        cmd = [sys.executable, "-m", "spec_sweep.sim", *args, "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port)]
        self._err = self.log_path.open("wb")
        self._out = self.out_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, stdout=self._out, stderr=self._err, env=environ, start_new_session=True
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if SIM_READY in self.log():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.02)
        raise AssertionError(f"not ready after {timeout}s:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"still running:\n{self.log()[-3000:]}") from exc

    def wait_for_text(self, text: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not in log:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process_group(self.proc, grace_s=5.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._err.close()
        self._out.close()


def stop_process_group(proc: Any, *, grace_s: float = 1.0) -> None:
    """SIGTERM a process group, SIGKILL it after `grace_s`, and reap the leader.

    `mlflow server` and its uvicorn worker take more than 5 s to exit on SIGTERM (the SIGKILL
    always ended it); 1 s is enough for a server that does exit on it.
    """
    import contextlib
    import os
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def load_script(path: Path, name: str) -> Any:
    """Import a script or benchmark file (not a package module) as module `name`."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def files_holding(roots: Collection[Path], needles: Collection[str]) -> list[str]:
    """Every file under `roots` whose bytes hold one of `needles` (`path: needle`)."""
    found: list[str] = []
    for root in roots:
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in paths:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            found += [f"{path}: {n}" for n in needles if n.encode() in data]
    return found
