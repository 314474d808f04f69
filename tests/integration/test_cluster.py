"""Sweeps on a multi-node Ray cluster (issue #9): one trial per node, node loss, tracking reach.

The cluster is real and lives on this host: a Ray head started with `ray start --head` (no GPUs,
no `spec_sweep_node`, so no trial can land on it) and worker "nodes", each a `ray start
--address=...` with its own temp dir, 8 logical GPUs and one `spec_sweep_node`. Every node has
its own raylet, so a trial's server runs in the process tree of the raylet of the node that
holds the trial. MLflow is a real `mlflow server` on 127.0.0.1 (SQLite backend, proxied
artifacts under a temp dir), which every node reaches over HTTP. Sweeps run in a subprocess
driver with `--address`, so they never pick up the session's own Ray cluster.

Ray resolves a loopback address to the host's own interface address for multi-node clusters,
so the Ray nodes talk over that address (it never leaves the host). A "node loss" is simulated
as a machine loss would happen: SIGKILL to the node's raylet, its log monitor and every process
below them (Ray workers, agents, the trial's server) at once. The head checks node health every
0.5 s here (Ray's `health_check_*` settings) so the loss is noticed in seconds.

Processes are found and stopped by their temp dir (and the PIDs recorded here), never with
`ray stop`, which would stop every Ray cluster on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from harness import (
    DROP,
    MLFLOW_ADMIN,
    AuthMlflowServer,
    files_holding,
    free_port,
    ray_port_args,
    stop_process_group,
    wait_until,
    write_spec,
)
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
NODE_RESOURCE = "spec_sweep_node"
READY = "The server is fired up and ready to roll"
#: The planted secrets of the secrets test: the tracking password every node starts with, and a
#: spec's env token and SGLang API key.
TRACKING_PASSWORD = f"trk-cluster-{secrets.token_hex(8)}"
HF = f"hf_cluster_{secrets.token_hex(8)}"
API_KEY = f"sk-cluster-{secrets.token_hex(8)}"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


# ---------------------------------------------------------------------------------------------
# A multi-node Ray cluster on one host


@dataclass
class LocalCluster:
    """A Ray head plus worker nodes on this host; each node has its own temp dir and raylet."""

    root: Path
    workers: int
    address: str = ""
    #: Environment every node's Ray starts in (the tracking credentials its trials use).
    env: dict[str, str] = field(default_factory=dict)
    node_dirs: dict[str, Path] = field(default_factory=dict)  # worker node id -> its temp dir

    @property
    def head_dir(self) -> Path:
        return self.root / "h"

    def start(self) -> None:
        port = free_port()
        head = [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--object-store-memory=80000000",
            *ray_port_args(port),
            f"--temp-dir={self.head_dir}",
        ]
        # A lost node is declared dead after ~1.5 s instead of Ray's default ~15 s.
        fast_health = {
            "RAY_health_check_initial_delay_ms": "0",
            "RAY_health_check_period_ms": "500",
            "RAY_health_check_timeout_ms": "500",
            "RAY_health_check_failure_threshold": "3",
        }
        self._run(head, _env(**fast_health, **self.env))
        self.address = f"127.0.0.1:{port}"
        starts = []
        for index in range(1, self.workers + 1):
            lo = 20000 + 1000 * index + (os.getpid() % 10) * 100
            argv = [
                RAY,
                "start",
                f"--address={self.address}",
                "--num-cpus=1",
                "--num-gpus=8",
                f"--resources={json.dumps({NODE_RESOURCE: 1})}",
                "--disable-usage-stats",
                "--object-store-memory=80000000",
                f"--min-worker-port={lo}",
                f"--max-worker-port={lo + 99}",
                *ray_port_args(),
                f"--temp-dir={self.root / f'w{index}'}",
            ]
            starts.append(self._popen(argv, _env(**self.env)))
        for proc in starts:
            out, _ = proc.communicate(timeout=180)
            if proc.returncode != 0:
                raise RuntimeError(f"ray start (worker) failed: {out[-3000:]}")
        assert wait_until(lambda: len(self._raylets()) == self.workers, timeout=30)
        self.node_dirs = self._raylets()

    def _run(self, argv: list[str], env: dict[str, str]) -> None:
        proc = self._popen(argv, env)
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} failed: {out[-3000:]}")

    @staticmethod
    def _popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )

    def _raylets(self) -> dict[str, Path]:
        """Worker node id -> temp dir, from the command lines of this cluster's raylets."""
        found: dict[str, Path] = {}
        for index in range(1, self.workers + 1):
            temp = self.root / f"w{index}"
            for proc in psutil.process_iter(["name", "cmdline"]):
                cmdline = proc.info["cmdline"] or []
                if proc.info["name"] != "raylet" or not any(str(temp) in a for a in cmdline):
                    continue
                node_id = next(
                    (a.split("=", 1)[1] for a in cmdline if a.startswith("--node_id=")), None
                )
                if node_id:
                    found[node_id] = temp
        return found

    def processes(self, temp: Path) -> list[psutil.Process]:
        """Every process of one node: those naming its temp dir, and all their descendants."""
        procs: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str(temp) in " ".join(proc.info["cmdline"] or []):
                    procs[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        procs[child.pid] = child
        return list(procs.values())

    def kill_node(self, node_id: str) -> list[int]:
        """A machine loss: SIGKILL every process of the node at once."""
        procs = self.processes(self.node_dirs[node_id])
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=10)
        return [p.pid for p in procs]

    def stop(self) -> None:
        """SIGTERM every process of the cluster, SIGKILL what is left after 3 s."""
        temps = [self.head_dir, *(self.root / f"w{i}" for i in range(1, self.workers + 1))]
        me = psutil.Process()
        spared = {me.pid, *(p.pid for p in me.parents())}
        procs = {p.pid: p for t in temps for p in self.processes(t) if p.pid not in spared}
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(list(procs.values()), timeout=3)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def local_cluster(workers: int, env: dict[str, str] | None = None) -> Iterator[LocalCluster]:
    # Short root: Ray puts Unix sockets under it (107-byte path limit).
    root = Path(tempfile.mkdtemp(prefix="ssc", dir="/tmp"))
    cluster = LocalCluster(root, workers, env=dict(env or {}))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def raylet_node_of(pid: int) -> str | None:
    """The node id of the raylet above process `pid` (None if it has none)."""
    try:
        for parent in psutil.Process(pid).parents():
            if parent.name() == "raylet":
                for arg in parent.cmdline():
                    if arg.startswith("--node_id="):
                        return arg.split("=", 1)[1]
    except psutil.Error:
        return None
    return None


# ---------------------------------------------------------------------------------------------
# MLflow server, sweep driver, server watcher


class MlflowServer:
    """`mlflow server` on 127.0.0.1 (SQLite, proxied artifacts under `root`).

    Started at construction; `uri` waits until it answers (it takes a while to boot, which
    overlaps with starting a cluster when the server is started first).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        with (root / "server.log").open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=_env()
            )
        self._uri = f"http://127.0.0.1:{port}"
        self._ready = False

    @property
    def uri(self) -> str:
        if not self._ready:
            assert wait_until(self._healthy, timeout=120, interval=0.25), "mlflow server"
            self._ready = True
        return self._uri

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
        try:
            return httpx.get(f"{self._uri}/health", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        stop_process_group(self.proc)


@contextlib.contextmanager
def mlflow_server_at(root: Path) -> Iterator[str]:
    """An MLflow server for the duration of the block; yields its URI once it answers."""
    server = MlflowServer(root)
    try:
        yield server.uri
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One MLflow server for the module's sweeps (one experiment each)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def _module_cluster() -> Iterator[LocalCluster]:
    # Every node's Ray starts with the tracking credentials, as the cluster recipe's nodes do
    # (an unauthenticated server ignores them).
    creds = {"MLFLOW_TRACKING_USERNAME": MLFLOW_ADMIN}
    creds["MLFLOW_TRACKING_PASSWORD"] = TRACKING_PASSWORD
    with local_cluster(2, env=creds) as cluster:
        yield cluster


@pytest.fixture
def two_nodes(_module_cluster: LocalCluster) -> LocalCluster:
    """A head (no trial resources) and two 8-GPU worker nodes, shared by this module's tests;
    started again, whole, when an earlier test lost one of its nodes (the node-loss test)."""
    if len(_module_cluster._raylets()) != _module_cluster.workers:
        _module_cluster.stop()
        _module_cluster.start()
    return _module_cluster


@dataclass
class Launch:
    """A server seen running during a sweep (its record, read while it ran)."""

    attempt_dir: Path
    pid: int
    create_time: float
    node_id: str | None  # recorded by the trial
    raylet_node_id: str | None  # the raylet above the server process
    first_seen: float
    last_seen: float


class ServerWatcher(threading.Thread):
    """Polls a sweep's trial folders for `server.json` records while the servers run."""

    def __init__(self, trials_dir: Path) -> None:
        super().__init__(name="server-watcher", daemon=True)
        self.trials_dir = trials_dir
        self.launches: dict[Path, Launch] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            now = time.time()
            for record_path in self.trials_dir.glob("*/attempt*/server.json"):
                seen = self.launches.get(record_path.parent)
                if seen is not None:
                    seen.last_seen = now
                    continue
                try:
                    record = json.loads(record_path.read_text())
                except (OSError, ValueError):
                    continue  # being written
                pid = int(record["pid"])
                self.launches[record_path.parent] = Launch(
                    attempt_dir=record_path.parent,
                    pid=pid,
                    create_time=float(record.get("create_time") or 0.0),
                    node_id=record.get("node_id"),
                    raylet_node_id=raylet_node_of(pid),
                    first_seen=now,
                    last_seen=now,
                )
            self._stop_event.wait(0.1)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


@dataclass
class Sweep:
    """A sweep driven by `python -m spec_sweep.run` in a subprocess."""

    project: Path
    name: str
    proc: subprocess.Popen[bytes]
    watcher: ServerWatcher

    @property
    def state(self) -> Path:
        return self.project / ".spec_sweep" / self.name

    def output(self) -> str:
        return (self.project / "driver.log").read_text(errors="replace")[-4000:]

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.watcher.stop()


def start_sweep(
    project: Path,
    *,
    name: str,
    address: str,
    tracking_uri: str,
    trials: int,
    output_len: int,
) -> Sweep:
    project.mkdir(parents=True, exist_ok=True)
    spec = write_spec(
        project,
        name=name,
        node={"draft_model": DROP, "request_timeout_s": 60},
        search_space={
            "include": DROP,
            "params": {
                "cuda-graph-max-bs": {"choices": [128, 256, 512], "default": 512},
                "mem-fraction-static": {"float": [0.80, 0.90], "default": 0.88},
            },
        },
        baseline={"speculative-algorithm": DROP},
        workload={"output_len": output_len},
        budget={"trials": trials, "trial_timeout_s": 300},
        searcher={"kind": "random"},
    )
    argv = [
        sys.executable,
        "-m",
        "spec_sweep.run",
        str(spec),
        "--simulate",
        "--address",
        address,
        "--tracking-uri",
        tracking_uri,
        "--state-dir",
        str(project / ".spec_sweep"),
    ]
    watcher = ServerWatcher(project / ".spec_sweep" / name / "trials")
    watcher.start()
    with (project / "driver.log").open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=project,
            env=_env(SPEC_SWEEP_PROJECT_DIR=str(project)),
        )
    return Sweep(project=project, name=name, proc=proc, watcher=watcher)


@pytest.fixture
def sweeps() -> Iterator[list[Sweep]]:
    """Collects the sweeps a test starts; kills a driver still running at the end."""
    started: list[Sweep] = []
    yield started
    for sweep in started:
        sweep.watcher.stop()
        if sweep.proc.poll() is None:
            sweep.proc.kill()
            sweep.proc.wait(timeout=10)
        _kill_launches(sweep)


def _kill_launches(sweep: Sweep) -> None:
    for launch in sweep.watcher.launches.values():
        proc = _alive(launch)
        if proc is not None:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def _alive(launch: Launch) -> psutil.Process | None:
    """The launch's server process if it still runs (same pid and start time)."""
    try:
        proc = psutil.Process(launch.pid)
        if abs(proc.create_time() - launch.create_time) > 0.01 or not proc.is_running():
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def trial_runs(uri: str, experiment: str) -> list[Any]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment} in {uri}"
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("spec_sweep.kind") == "trial"]


def leftover_servers(sweep: Sweep) -> list[str]:
    """Servers of the sweep still running, and server records still on disk."""
    launches = sweep.watcher.launches.values()
    alive = [f"pid {run.pid}" for run in launches if _alive(run) is not None]
    return alive + [str(p) for p in sweep.state.glob("trials/**/server.json")]


# ---------------------------------------------------------------------------------------------
# Tests


def test_two_trials_at_once_one_per_node(
    mlflow_server: MlflowServer, two_nodes: LocalCluster, tmp_path: Path, sweeps: list[Sweep]
) -> None:
    uri = mlflow_server.uri
    sweep = start_sweep(
        tmp_path / "proj",
        name="cluster2",
        address=two_nodes.address,
        tracking_uri=uri,
        trials=4,
        output_len=48,  # ~1.6 s of benchmark: trials on the two nodes overlap by seconds
    )
    sweeps.append(sweep)
    code = sweep.wait(timeout=240)
    assert code == 0, sweep.output()

    # MLflow holds every trial exactly once, each closed FINISHED with an outcome.
    runs = trial_runs(uri, "cluster2")
    ids = sorted(r.data.tags["spec_sweep.trial_id"] for r in runs)
    assert ids == ["t0000", "t0001", "t0002", "t0003"], ids
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(r.data.tags.get("failure_mode") == "none" for r in runs)

    # Each server ran on a worker node, in the process tree of that node's raylet.
    launches = sweep.watcher.launches
    assert len(launches) == 4, sorted(str(p) for p in launches)
    workers = set(two_nodes.node_dirs)
    for launch in launches.values():
        assert launch.node_id in workers, launch
        assert launch.raylet_node_id == launch.node_id, launch
    assert {launch.node_id for launch in launches.values()} == workers

    # Two trials ran at once, and trials that overlapped ran on different nodes.
    by_attempt = {
        sweep.state / "trials" / r.data.tags["spec_sweep.trial_id"] / "attempt1": r for r in runs
    }
    spans = []
    for attempt_dir, run in by_attempt.items():
        launch = launches[attempt_dir]
        spans.append((run.info.start_time / 1000, run.info.end_time / 1000, launch.node_id))
    overlaps = [
        (a, b)
        for i, a in enumerate(spans)
        for b in spans[i + 1 :]
        if min(a[1], b[1]) - max(a[0], b[0]) > 0.5
    ]
    assert overlaps, f"no two trials overlapped: {spans}"
    assert all(a[2] != b[2] for a, b in overlaps), overlaps

    # Nothing is left running.
    assert wait_until(lambda: not leftover_servers(sweep), timeout=10), leftover_servers(sweep)


def test_local_tracking_store_is_refused_on_several_nodes(
    two_nodes: LocalCluster, tmp_path: Path, sweeps: list[Sweep]
) -> None:
    db = tmp_path / "proj" / "mlruns" / "mlflow.db"
    sweep = start_sweep(
        tmp_path / "proj",
        name="localuri",
        address=two_nodes.address,
        tracking_uri=f"sqlite:///{db}",
        trials=2,
        output_len=8,
    )
    sweeps.append(sweep)
    code = sweep.wait(timeout=120)
    lines = [line for line in sweep.output().splitlines() if line.strip()]
    assert code == 2, sweep.output()
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1, lines
    assert "mlflow server" in errors[0]
    assert "--tracking-uri http://" in errors[0]
    assert not sweep.state.exists()  # a refused start leaves no state behind
    assert not db.exists()
    assert not sweep.watcher.launches


def test_node_loss_retries_the_trial_on_the_other_node(
    mlflow_server: MlflowServer, two_nodes: LocalCluster, tmp_path: Path, sweeps: list[Sweep]
) -> None:
    uri = mlflow_server.uri
    cluster = two_nodes  # one of its nodes is lost here: the next user gets it started again
    sweep = start_sweep(
        tmp_path / "proj",
        name="nodeloss",
        address=cluster.address,
        tracking_uri=uri,
        trials=3,
        output_len=96,  # 3 requests at ~89 tok/s: ~3.2 s of benchmark after the ready line
    )
    sweeps.append(sweep)

    def ready_server() -> Launch | None:
        assert sweep.proc.poll() is None, sweep.output()
        for launch in list(sweep.watcher.launches.values()):
            log = launch.attempt_dir / "server.log"
            if log.exists() and READY in log.read_text(errors="replace"):
                return launch
        return None

    assert wait_until(lambda: ready_server() is not None, timeout=120), sweep.output()
    victim = ready_server()
    assert victim is not None
    assert victim.node_id in cluster.node_dirs
    lost_id = victim.attempt_dir.parent.name
    survivor = next(n for n in cluster.node_dirs if n != victim.node_id)
    time.sleep(0.5)  # mid-trial: the server is up and being benchmarked
    assert _alive(victim) is not None
    killed_at = time.time()
    killed = cluster.kill_node(victim.node_id)
    assert victim.pid in killed

    code = sweep.wait(timeout=240)
    assert code == 0, sweep.output()

    runs = trial_runs(uri, "nodeloss")
    attempts = sorted(
        (r for r in runs if r.data.tags["spec_sweep.trial_id"] == lost_id),
        key=lambda r: r.info.start_time,
    )
    assert [r.info.status for r in attempts] == ["KILLED", "FINISHED"], [
        (r.info.status, r.data.tags) for r in attempts
    ]
    assert attempts[0].data.tags["failure_mode"] == "node_lost"
    assert attempts[1].data.tags["failure_mode"] == "none"
    assert attempts[1].data.tags["spec_sweep.attempt"] == "2"

    # The retry ran on the surviving node, in attempt2, as did everything after the loss.
    retry = sweep.watcher.launches[sweep.state / "trials" / lost_id / "attempt2"]
    assert retry.node_id == survivor
    assert retry.raylet_node_id == survivor
    assert (sweep.state / "trials" / lost_id / "attempt1" / "command.txt").exists()
    later = [run for run in sweep.watcher.launches.values() if run.first_seen > killed_at]
    assert retry in later
    assert all(run.node_id == survivor for run in later), later

    # The sweep reached its budget: every trial finished once.
    finished = sorted(
        r.data.tags["spec_sweep.trial_id"] for r in runs if r.info.status == "FINISHED"
    )
    assert finished == ["t0000", "t0001", "t0002"], finished

    # No simulator process is left, on either node.
    assert wait_until(lambda: not leftover_servers(sweep), timeout=10), leftover_servers(sweep)
    assert not [
        p.pid
        for p in cluster.processes(cluster.node_dirs[survivor])
        if "spec_sweep.sim" in " ".join(_cmdline(p))
    ]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthMlflowServer]:
    """A basic-auth MLflow server whose admin password the nodes start with."""
    server = AuthMlflowServer(tmp_path_factory.mktemp("mlflow-auth"), TRACKING_PASSWORD)
    try:
        yield server
    finally:
        server.stop()


def test_secrets_reach_the_trials_on_the_nodes_and_nothing_else(
    auth_server: AuthMlflowServer, two_nodes: LocalCluster, tmp_path: Path
) -> None:
    """Credentials from the nodes' environment, the spec's secrets from the spec file: the
    trials record to an authenticated server, and no planted secret is in the state folder,
    the MLflow stores, the driver's output or any file of the Ray cluster (its logs, spills)."""
    project = tmp_path / "proj"
    project.mkdir()
    spec = write_spec(
        project,
        name="clustersecrets",
        node={
            "draft_model": DROP,
            "sglang_version": "0.5.17",
            "env": {"HF_TOKEN": HF},
            "server_args": {"tp-size": 8, "api-key": API_KEY},
        },
        search_space={
            "include": DROP,
            "params": {"mem-fraction-static": {"float": [0.80, 0.90], "default": 0.88}},
        },
        baseline={"speculative-algorithm": DROP},
        budget={"trials": 2, "trial_timeout_s": 300},
        searcher={"kind": "random"},
    )
    uri = auth_server.uri
    env = _env(
        SPEC_SWEEP_PROJECT_DIR=str(project),
        MLFLOW_TRACKING_USERNAME=MLFLOW_ADMIN,
        MLFLOW_TRACKING_PASSWORD=TRACKING_PASSWORD,
    )
    argv = [sys.executable, "-m", "spec_sweep.run", str(spec), "--simulate"]
    argv += ["--address", two_nodes.address, "--tracking-uri", uri]
    done = subprocess.run(
        argv, cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    os.environ["MLFLOW_TRACKING_USERNAME"] = MLFLOW_ADMIN
    os.environ["MLFLOW_TRACKING_PASSWORD"] = TRACKING_PASSWORD
    try:
        runs = trial_runs(uri, "clustersecrets")
    finally:
        del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
    assert sorted(r.data.tags["spec_sweep.trial_id"] for r in runs) == ["t0000", "t0001"]
    assert all(r.data.tags.get("failure_mode") == "none" for r in runs)
    state = project / ".spec_sweep" / "clustersecrets"
    log = (state / "trials" / "t0000" / "attempt1" / "server.log").read_text()
    assert '"api_key": "***"' in log  # the server on the node got the key; our copy hides it

    planted = (TRACKING_PASSWORD, HF, API_KEY)
    roots = [p for p in project.iterdir() if p.resolve() != spec.resolve()]
    leaks = files_holding([*roots, auth_server.root, two_nodes.root], planted)
    leaks += [f"output: {s}" for s in planted if s in done.stdout + done.stderr]
    assert not leaks, leaks
