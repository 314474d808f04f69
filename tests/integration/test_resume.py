"""Resume (docs/design.md, "Resume"): a killed or interrupted sweep picks up where it stopped.

Sweep drivers run as real subprocesses (`python -m spec_sweep.run SWEEP.yaml --simulate ...`),
joined to the session's Ray cluster with `--address` or starting their own local Ray, with a real
MLflow store under the test's project dir and the simulator as the server. They are killed with
SIGKILL at chosen points (during a server boot, during a benchmark, right after a trial finished,
between trials) or interrupted with SIGINT (once, and twice during a slow teardown), then resumed
with the same command; the last resume runs in-process through
`spec_sweep.orchestrate.driver.sweep` so the test can read the Optuna study it rebuilt.

After a complete resume the checks are: the finished trials are the budget; no finished
configuration ran twice (a configuration is launched again only when its earlier launch's child
run is KILLED; launches are counted from the `command.txt` each one leaves); every finished trial
has exactly one FINISHED child run and appears once in the Optuna history; no RUNNING run is
left; no simulated server and no Ray process of a driver is left.

The simulated boot is slowed down through the spec (`node.env`: `SPEC_SWEEP_SIM_TIME_SCALE`), the
server's own environment, because a driver that joins a running cluster does not pass its
environment to the Ray workers that launch the servers. The same `node.env` carries a tag that
identifies this test's server processes (by their environment) among others on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import psutil
import pytest
from harness import stop_ray_processes, wait_until
from mlflow.tracking import MlflowClient

from spec_sweep.core.config import config_key, normalize_config
from spec_sweep.node.backends import SimBackend
from spec_sweep.node.procs import group_pids
from spec_sweep.node.server import kill_recorded_servers
from spec_sweep.orchestrate.driver import SweepOutcome, sweep
from spec_sweep.search.sampling import history_trials
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

ROOT = Path(__file__).resolve().parents[2]
READY = "The server is fired up and ready to roll!"
BENCH_STARTED = '"GET /health_generate HTTP/1.1" 200'
TAG_ENV = "SPEC_SWEEP_TEST_SWEEP"
RESUME_HINT = "run the same command again to resume"
#: How long a driver may take to reach a point of the sweep (a wait, not a speed check: on an idle
#: machine each point comes within seconds; a driver started beside two busy benchmarks on a
#: two-core host took over 90 s to reach its first benchmark).
REACH_S = 300


# ---------------------------------------------------------------------------------------------
# A sweep on disk and its drivers


@dataclass
class Sweep:
    """One sweep of a test: its spec file, state folder and MLflow store."""

    project: Path
    name: str
    tag: str
    spec_path: Path

    @property
    def state_root(self) -> Path:
        return self.project / ".spec_sweep"

    @property
    def state(self) -> Path:
        return self.state_root / self.name

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.project / 'mlruns' / 'mlflow.db'}"

    def spec(self) -> SweepSpec:
        return load_spec(self.spec_path)

    def argv(self, *, address: str | None, extra: Sequence[str] = ()) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "spec_sweep.run",
            str(self.spec_path),
            "--simulate",
            "--state-dir",
            str(self.state_root),
            "--tracking-uri",
            self.uri,
            *extra,
        ]
        if address is not None:
            argv += ["--address", address]
        return argv

    def state_id(self) -> str:
        return str(json.loads((self.state / "state.json").read_text())["state_id"])

    def ray_temp_dir(self) -> str:
        return f"/tmp/spec_sweep-ray-{self.state_id()[:12]}"


def write_spec(
    project: Path,
    name: str,
    *,
    trials: int,
    output_len: int = 48,
    time_scale: float = 0.003,
    fault: str | None = None,
) -> Sweep:
    """A small sweep on the simulated PCIe node (boots take ~1.2 s at time scale 0.003)."""
    tag = f"{name}-{project.name}"
    env = {"SPEC_SWEEP_SIM_TIME_SCALE": str(time_scale), TAG_ENV: tag}
    if fault:
        env["SPEC_SWEEP_SIM_FAULT"] = fault
    path = harness.write_spec(
        project / "sweeps",
        name=name,
        node={"env": env},
        search_space={"params": {"cuda-graph-max-bs": {"choices": [128, 512], "default": 512}}},
        workload={"output_len": output_len},
        budget={"trials": trials},
    )
    return Sweep(project=project, name=name, tag=tag, spec_path=path)


@dataclass
class Driver:
    """A sweep driver subprocess (its own session, like a command started from a shell)."""

    proc: subprocess.Popen[bytes]
    log: Path
    sweep: Sweep

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        assert self.proc.poll() is None, (
            f"driver exited early ({self.proc.returncode}):\n{self.output()[-4000:]}"
        )
        return True

    def sigkill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def ctrl_c(self) -> None:
        """What a terminal's Ctrl-C does: SIGINT to the driver's process group."""
        os.killpg(self.pid, signal.SIGINT)

    def wait(self, timeout: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"driver still running after {timeout} s:\n{self.output()[-4000:]}")


@dataclass
class Drivers:
    """Starts drivers; `stop` ends them and everything they caused."""

    project: Path
    started: list[Driver] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)

    def start(self, sw: Sweep, *, address: str | None, extra: Sequence[str] = ()) -> Driver:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
        if address is None:
            env.pop("RAY_ADDRESS", None)
        log = self.project / f"driver-{sw.name}-{len(self.started)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                sw.argv(address=address, extra=extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.project,
                start_new_session=True,
            )
        driver = Driver(proc, log, sw)
        self.started.append(driver)
        if sw not in self.sweeps:
            self.sweeps.append(sw)
        return driver

    def pids(self, sw: Sweep) -> set[int]:
        return {d.pid for d in self.started if d.sweep is sw}

    def stop(self) -> None:
        for driver in self.started:
            if driver.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(driver.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                driver.proc.wait(timeout=30)
        for sw in self.sweeps:
            kill_recorded_servers(sw.state_root, grace_s=1.0)
            _kill(tagged_servers(sw.tag))
            for state_json in sw.state_root.glob("*/state.json"):
                state_id = json.loads(state_json.read_text())["state_id"]
                temp = Path(f"/tmp/spec_sweep-ray-{state_id[:12]}")
                stop_ray_processes(temp)
                _kill(ray_processes_of(str(temp)))
                shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def drivers(project_dir: Path) -> Iterator[Drivers]:
    """Sweep drivers of one test; at the end they, their servers and their Ray are stopped."""
    started = Drivers(project_dir)
    try:
        yield started
    finally:
        started.stop()


# ---------------------------------------------------------------------------------------------
# Reading the record


def child_runs(sw: Sweep) -> list[Any]:
    """Every trial child run of the sweep's experiment, oldest first."""
    client = MlflowClient(sw.uri)
    experiment = client.get_experiment_by_name(sw.name)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id], "tags.`spec_sweep.kind` = 'trial'", max_results=1000
    )
    return sorted(runs, key=lambda r: r.info.start_time)


def all_runs(sw: Sweep) -> list[Any]:
    client = MlflowClient(sw.uri)
    experiment = client.get_experiment_by_name(sw.name)
    assert experiment is not None
    return list(client.search_runs([experiment.experiment_id], max_results=1000))


def finished_ids(sw: Sweep) -> list[str]:
    return [
        r.data.tags["spec_sweep.trial_id"] for r in child_runs(sw) if r.info.status == "FINISHED"
    ]


def launch_dirs(sw: Sweep) -> set[Path]:
    """Attempt folders where a server was launched (each leaves a `command.txt`)."""
    return {p.parent for p in (sw.state / "trials").glob("*/attempt*/command.txt")}


def tune_result_written(sw: Sweep, trial_id: str) -> bool:
    """Whether Ray Tune's driver has logged the trial's result (it knows the trial ended)."""
    pattern = f"*/*spec_sweep_trial_id={trial_id},*/result.json"
    return any(p.stat().st_size > 0 for p in (sw.state / "tune").glob(pattern))


# ---------------------------------------------------------------------------------------------
# Processes


def tagged_servers(tag: str) -> list[psutil.Process]:
    """Simulated server processes (main and workers) of one sweep, found by their environment."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "spec_sweep.sim" in cmdline and proc.environ().get(TAG_ENV) == tag:
                found.append(proc)
    return found


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def driver_jobs(pids: set[int]) -> list[dict[str, Any]]:
    """The Ray jobs (on the session cluster) whose driver was one of `pids`."""
    from ray._private import state as ray_state

    jobs: list[dict[str, Any]] = ray_state.jobs()  # type: ignore[no-untyped-call]
    return [job for job in jobs if job.get("DriverPid") in pids]


def job_processes(job_ids: set[str]) -> list[psutil.Process]:
    """Processes that Ray started for these jobs (workers carry `RAY_JOB_ID`) and their children."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("RAY_JOB_ID") in job_ids:
                found.append(proc)
    return found


def ray_processes_of(temp_dir: str) -> list[psutil.Process]:
    """Processes of the local Ray cluster that uses `temp_dir` (in their command line, or
    holding files there: agents rewrite their command line to `ray::...`)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if temp_dir in " ".join(proc.info["cmdline"] or []) or any(
                f.path.startswith(temp_dir) for f in proc.open_files()
            ):
                found.append(proc)
    return found


def _alive(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    return False


def describe(procs: list[psutil.Process]) -> str:
    out = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            out.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
    return "; ".join(out)


def assert_nothing_left(sw: Sweep, driver_pids: set[int]) -> None:
    """No server of the sweep and no Ray job process of its (joined) drivers is left running."""
    assert wait_until(lambda: not tagged_servers(sw.tag), timeout=15), (
        f"simulated servers left: {describe(tagged_servers(sw.tag))}"
    )
    records = list((sw.state / "trials").glob("*/attempt*/server.json"))
    for record in records:
        pgid = int(json.loads(record.read_text())["pgid"])
        assert group_pids(pgid) == [], f"{record}: server group {pgid} still alive"
    if not driver_pids:
        return

    def jobs_gone() -> bool:
        jobs = driver_jobs(driver_pids)
        ids = {str(j["JobID"]) for j in jobs}
        return all(j["IsDead"] for j in jobs) and not job_processes(ids)

    if not wait_until(jobs_gone, timeout=30, interval=0.5):
        jobs = driver_jobs(driver_pids)
        left = job_processes({str(j["JobID"]) for j in jobs})
        pytest.fail(f"Ray jobs of the drivers: {jobs}; their processes: {describe(left)}")


def assert_resumed_cleanly(
    sw: Sweep, outcome: SweepOutcome | None = None, *, driver_pids: Collection[int] = ()
) -> None:
    """The acceptance checks of a sweep that was interrupted and resumed to its end."""
    spec = sw.spec()
    budget = spec.budget.trials
    children = child_runs(sw)
    runs = all_runs(sw)
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"], "RUNNING runs left"

    # Exactly one FINISHED child run per trial id, and the budget of them.
    finished: dict[str, Any] = {}
    for run in children:
        if run.info.status == "FINISHED":
            trial_id = run.data.tags["spec_sweep.trial_id"]
            assert trial_id not in finished, f"{trial_id} has two FINISHED child runs"
            finished[trial_id] = run
    assert len(finished) == budget, sorted(finished)
    assert {r.info.status for r in children} <= {"FINISHED", "KILLED"}
    configs = {tid: json.loads(r.data.tags["spec_sweep.config"]) for tid, r in finished.items()}
    finished_keys = [config_key(c) for c in configs.values()]
    assert len(set(finished_keys)) == budget, "a configuration finished twice"

    # Launches per configuration: every launch but the last one of a configuration was KILLED.
    by_run = {r.info.run_id: r for r in children}
    per_config: dict[str, list[Any]] = defaultdict(list)
    for attempt in launch_dirs(sw):
        run = by_run[(attempt / "mlflow_run_id").read_text().strip()]
        per_config[config_key(json.loads(run.data.tags["spec_sweep.config"]))].append(run)
    for key, launched in per_config.items():
        launched.sort(key=lambda r: r.info.start_time)
        earlier = [r.info.status for r in launched[:-1]]
        assert all(s == "KILLED" for s in earlier), f"{key} launched again after {earlier}"
        if key in finished_keys:
            assert launched[-1].info.status == "FINISHED", key
    assert set(finished_keys) <= set(per_config), "a finished trial without a launch"

    # A re-run keeps its trial id and counts its attempts.
    by_id: dict[str, list[Any]] = defaultdict(list)
    for run in children:
        by_id[run.data.tags["spec_sweep.trial_id"]].append(run)
    for trial_id, attempts in by_id.items():
        numbers = sorted(int(r.data.tags.get("spec_sweep.attempt", "1")) for r in attempts)
        assert numbers == list(range(1, len(attempts) + 1)), (trial_id, numbers)
        configs_of = {config_key(json.loads(r.data.tags["spec_sweep.config"])) for r in attempts}
        assert len(configs_of) == 1, trial_id

    # The Optuna study holds every finished trial once.
    if outcome is not None:
        assert outcome.study is not None
        history = history_trials(outcome.study)
        keys = [config_key(normalize_config(spec, t.params)) for t in history]
        assert sorted(keys) == sorted(finished_keys)

    assert_nothing_left(sw, set(driver_pids))


def resume_in_process(sw: Sweep, **kwargs: Any) -> SweepOutcome:
    spec = sw.spec()
    return sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=sw.state_root,
        tracking_uri=sw.uri,
        report=False,
        **kwargs,
    )


def resumed_count(driver: Driver) -> int:
    """k of the driver's "resuming NAME: k/N trials done" line."""
    match = re.search(rf"resuming {driver.sweep.name}: (\d+)/\d+ trials done", driver.output())
    assert match, f"no resume line in:\n{driver.output()[-3000:]}"
    return int(match.group(1))


# ---------------------------------------------------------------------------------------------
# SIGKILL


def test_sigkill_at_each_point_then_resume(
    project_dir: Path, drivers: Drivers, ray_cluster: str
) -> None:
    """Kill during a boot, during a benchmark, right after a trial, between trials; resume."""
    budget = 4
    sw = write_spec(project_dir, "killed", trials=budget)
    seen: set[Path] = set()

    def new_launch(pred: Callable[[Path], bool]) -> Callable[[], Path | None]:
        def find() -> Path | None:
            for attempt in sorted(launch_dirs(sw) - seen):
                if pred(attempt):
                    return attempt
            return None

        return find

    def log_of(attempt: Path) -> str:
        with contextlib.suppress(FileNotFoundError):
            return (attempt / "server.log").read_text(errors="replace")
        return ""

    def booting(attempt: Path) -> bool:
        return (attempt / "server.json").exists() and READY not in log_of(attempt)

    def benchmarking(attempt: Path) -> bool:
        return BENCH_STARTED in log_of(attempt) and not (attempt / "bench.json").exists()

    # 1. During a server boot (the baseline's first launch).
    first = drivers.start(sw, address=ray_cluster)
    find = new_launch(booting)
    assert wait_until(lambda: first.alive() and find() is not None, timeout=REACH_S)
    attempt = find()
    assert attempt is not None
    first.sigkill()
    assert READY not in log_of(attempt)
    seen |= launch_dirs(sw)

    # 2. During a benchmark.
    second = drivers.start(sw, address=ray_cluster)
    find = new_launch(benchmarking)
    assert wait_until(lambda: second.alive() and find() is not None, timeout=REACH_S)
    second.sigkill()
    assert resumed_count(second) == 0
    seen |= launch_dirs(sw)

    # 3. Right after a trial finished (its child run is FINISHED; Tune may not know yet).
    third = drivers.start(sw, address=ray_cluster)
    before = len(finished_ids(sw))
    assert wait_until(lambda: third.alive() and len(finished_ids(sw)) > before, timeout=REACH_S)
    third.sigkill()
    assert resumed_count(third) == before
    seen |= launch_dirs(sw)

    # 4. Between trials: the driver has printed a new trial's result line (Ray Tune has the
    # result and moves on to the next trial).
    fourth = drivers.start(sw, address=ray_cluster)
    before_ids = set(finished_ids(sw))

    def next_result_printed() -> bool:
        printed = re.findall(r"^(t\d{4}) ", fourth.output(), re.MULTILINE)
        return any(t not in before_ids for t in printed)

    assert wait_until(
        lambda: fourth.alive() and next_result_printed(), timeout=REACH_S, interval=0.005
    )
    fourth.sigkill()
    assert resumed_count(fourth) == len(before_ids)
    done = len(set(finished_ids(sw)))
    assert done < budget, "the kills came too late: nothing left to resume"

    # Resume to the end, in-process, and check the whole record.
    outcome = resume_in_process(sw)
    assert outcome.new_trials == budget - done
    assert_resumed_cleanly(sw, outcome, driver_pids=drivers.pids(sw))
    assert len(launch_dirs(sw)) >= budget + 2  # at least the two launches killed mid-trial
    # The kills are ours: no trial is charged one. (Once in clean-clone CI the killed driver's
    # worker saw the baseline's server die with it, saved "crash: exited with code -9 (SIGKILL)
    # before ready", and the resume recorded that as the baseline's outcome.)
    for record in outcome.records:
        assert "(SIGKILL)" not in record.reason, record
        assert "(SIGTERM)" not in record.reason, record


def test_sigkill_of_a_driver_with_its_own_ray(project_dir: Path, drivers: Drivers) -> None:
    """Without --address: the resume stops what is left of the killed driver's local Ray.

    Ray's head processes die with a SIGKILLed driver, but some of its agents (their command
    line rewritten to `ray::DashboardAgent`, `ray::RuntimeEnvAgent`) outlive it.
    """
    # A trial long enough that the kill lands in it even on a loaded machine: a ~1.2 s boot,
    # then 3 requests (1 warm-up, 2 measured) of 128 tokens at ~89 tok/s, ~4.3 s.
    sw = write_spec(project_dir, "local", trials=1, output_len=128)
    first = drivers.start(sw, address=None)
    assert wait_until(lambda: first.alive() and launch_dirs(sw), timeout=120)
    temp_dir = sw.ray_temp_dir()
    assert ray_processes_of(temp_dir), "the driver's local Ray is not running"
    descendants = psutil.Process(first.pid).children(recursive=True)
    first.sigkill()
    done_at_kill = len(set(finished_ids(sw)))

    second = drivers.start(sw, address=None)
    assert second.wait() == 0, second.output()[-4000:]
    # The killed driver's Ray worker can outlive it by a moment and still record a trial that
    # ended just before the kill (seen in CI on a loaded machine): the resume then counts it as
    # done. Either way it never runs a finished trial again (assert_resumed_cleanly below).
    assert done_at_kill <= resumed_count(second) <= len(launch_dirs(sw))
    left = ray_processes_of(temp_dir) + [p for p in descendants if _alive(p)]
    assert not left, f"processes of the killed driver left: {describe(left)}"
    assert_resumed_cleanly(sw)


# ---------------------------------------------------------------------------------------------
# SIGINT


def test_ctrl_c_stops_cleanly_and_the_trial_reruns(
    project_dir: Path, drivers: Drivers, ray_cluster: str
) -> None:
    sw = write_spec(project_dir, "ctrlc", trials=2)
    driver = drivers.start(sw, address=ray_cluster)

    def second_trial_benchmarking() -> bool:
        attempt = sw.state / "trials" / "t0001" / "attempt1"
        with contextlib.suppress(FileNotFoundError):
            return BENCH_STARTED in (attempt / "server.log").read_text(errors="replace")
        return False

    assert wait_until(lambda: driver.alive() and second_trial_benchmarking(), timeout=REACH_S)
    driver.ctrl_c()
    assert driver.wait(timeout=60) == 130, driver.output()[-4000:]
    assert RESUME_HINT in driver.output()
    assert_nothing_left(sw, drivers.pids(sw))
    runs = {r.data.tags["spec_sweep.trial_id"]: r for r in child_runs(sw)}
    assert runs["t0000"].info.status == "FINISHED"
    assert runs["t0001"].info.status == "KILLED"
    assert not [r for r in all_runs(sw) if r.info.status == "RUNNING"]

    outcome = resume_in_process(sw)
    assert outcome.new_trials == 1
    rerun = [r for r in child_runs(sw) if r.data.tags["spec_sweep.trial_id"] == "t0001"]
    assert [(r.info.status, r.data.tags["spec_sweep.attempt"]) for r in rerun] == [
        ("KILLED", "1"),
        ("FINISHED", "2"),
    ]
    assert (sw.state / "trials" / "t0001" / "attempt2" / "command.txt").exists()
    assert_resumed_cleanly(sw, outcome, driver_pids=drivers.pids(sw))


def test_second_ctrl_c_during_a_slow_teardown(
    project_dir: Path, drivers: Drivers, ray_cluster: str
) -> None:
    """The servers ignore SIGTERM, so teardown waits for the SIGKILL grace; Ctrl-C again."""
    sw = write_spec(project_dir, "ctrlc2", trials=1, fault="ignore-sigterm")
    driver = drivers.start(sw, address=ray_cluster)
    attempt = sw.state / "trials" / "t0000" / "attempt1"

    def benchmarking() -> bool:
        with contextlib.suppress(FileNotFoundError):
            return BENCH_STARTED in (attempt / "server.log").read_text(errors="replace")
        return False

    assert wait_until(lambda: driver.alive() and benchmarking(), timeout=REACH_S)
    driver.ctrl_c()
    assert wait_until(lambda: "stopping:" in driver.output(), timeout=10)
    assert tagged_servers(sw.tag), "the server should still be tearing down (ignores SIGTERM)"
    t0 = time.monotonic()
    driver.ctrl_c()
    assert driver.wait(timeout=60) == 130, driver.output()[-4000:]
    assert time.monotonic() - t0 < 30
    assert_nothing_left(sw, drivers.pids(sw))
    running = [
        (r.data.tags.get("spec_sweep.kind"), r.data.tags.get("spec_sweep.trial_id"))
        for r in all_runs(sw)
        if r.info.status == "RUNNING"
    ]
    assert not running, f"runs left RUNNING: {running}\n{driver.output()[-3000:]}"
    runs = child_runs(sw)
    assert [r.info.status for r in runs] == ["KILLED"]


# ---------------------------------------------------------------------------------------------
# Changed spec, --fresh


def test_changed_spec_is_refused_and_fresh_starts_over(
    project_dir: Path, drivers: Drivers, ray_cluster: str
) -> None:
    sw = write_spec(project_dir, "changed", trials=1, output_len=16, time_scale=0)
    outcome = resume_in_process(sw)
    old_parent = outcome.parent_run_id
    old_state_id = sw.state_id()

    text = sw.spec_path.read_text().replace("output_len: 16", "output_len: 24")
    sw.spec_path.write_text(text)
    refused = subprocess.run(
        sw.argv(address=ray_cluster),
        capture_output=True,
        text=True,
        cwd=project_dir,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert "workload.output_len: 16 -> 24" in lines[0]
    assert "--fresh" in lines[0]
    assert sw.state_id() == old_state_id

    fresh = drivers.start(sw, address=ray_cluster, extra=["--fresh"])
    assert fresh.wait() == 0, fresh.output()[-4000:]
    aside = list(sw.state_root.glob(f"{sw.name}.old-*"))
    assert len(aside) == 1
    assert json.loads((aside[0] / "state.json").read_text())["state_id"] == old_state_id
    assert sw.state_id() != old_state_id
    parents = [r for r in all_runs(sw) if r.data.tags.get("spec_sweep.kind") == "sweep"]
    assert len(parents) == 2
    new_parent = next(r for r in parents if r.info.run_id != old_parent)
    assert new_parent.data.tags["spec_sweep.state_id"] == sw.state_id()
    assert new_parent.info.status == "FINISHED"
    children = child_runs(sw)
    new_children = [r for r in children if r.data.tags["mlflow.parentRunId"] != old_parent]
    assert [r.info.status for r in new_children] == ["FINISHED"]
    assert "resuming" not in fresh.output()
