"""Resume after a SIGKILLed driver: finished trials re-run and time to the next trial, vs Tune.

A simulated sweep (PCIe profile, a small speculative search space, tiny workload, boots slowed to
~0.8 s with `SPEC_SWEEP_SIM_TIME_SCALE` in the spec's `node.env`) runs as a subprocess driver,
`python -m spec_sweep.run SWEEP.yaml --simulate --address ADDR`, joined to a Ray head this script
starts (8 logical GPUs and one `spec_sweep_node`, like one GPU node). For each of N seeded random
kill times (seconds after the sweep's first trial started, within `trials x --trial-s`) a fresh
sweep's driver is killed with SIGKILL at that time, and the same command is run again to resume
it to the end. Measured per kill:

* finished trials re-run: launches during the resume (`command.txt` in a new attempt folder) of a
  configuration whose child run was already FINISHED when the resume started (goal 0); trials
  that were running at the kill are re-run by design and are counted apart ("interrupted");
* restart -> next trial: from launching the resume command to the first new `command.txt`.

Beside it, the same situation with plain Ray Tune: a function trainable that sleeps as long as
one of our trials took (the median over our runs) and appends a line to a file when it starts and
when it finishes, one trial per node (the same resources as ours), a `Tuner` with
`RunConfig(storage_path=...)`. Its driver is SIGKILLed at the same times after its first trial
started and restarted with `Tuner.restore(path, trainable, resume_unfinished=True)`. Finished
trials re-run = trials with two "finish" lines; restart -> next trial = from launching the restore
driver to the first "start" line after it. Had the killed Tune driver saved no experiment state
yet, `Tuner.restore` could not run and the experiment starts over (marked "new").

Run: `.venv/bin/python benchmarks/resume.py [--kills 10] [--seed 0] [--trials 3]` (about 8
minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NODE_RESOURCES: dict[str, float] = {"cpu": 1, "gpu": 8, "spec_sweep_node": 1}

SPEC = """\
name: {name}
node:
  backend: sglang
  model: moonshotai/Kimi-K2.5
  draft_model: lightseekorg/kimi-k2.5-eagle3
  gpus: 8
  sglang_version: "0.5.13"
  server_args: {{tp-size: 8}}
  env: {{SPEC_SWEEP_SIM_TIME_SCALE: "0.002"}}
  boot_timeout_s: 60
  request_timeout_s: 30
  sim_profile: rtx-pro-6000-pcie-x8
search_space:
  include: [speculative.yaml]
  params:
    cuda-graph-max-bs: {{choices: [128, 512], default: 512}}
baseline: {{speculative-algorithm: null}}
workload: {{dataset: builtin, output_len: 16, num_prompts: 1, concurrency: 1, warmup_prompts: 0}}
objective: {{metric: output_throughput, mode: max}}
budget: {{trials: {trials}, trial_timeout_s: 120}}
searcher: {{kind: tpe, seed: 0}}
"""


# ---------------------------------------------------------------------------------------------
# Plain Ray Tune baseline (this file is also its driver: `--plain-driver DIR`)


def _plain_trial(config: dict[str, Any]) -> dict[str, float]:
    """A stand-in trial: log the start, sleep like a trial, log the finish."""
    log = Path(config["log"])
    with log.open("a") as out:
        out.write(f"start {config['i']} {time.time():.3f}\n")
    time.sleep(float(config["seconds"]))
    with log.open("a") as out:
        out.write(f"finish {config['i']} {time.time():.3f}\n")
    return {"score": float(config["i"])}


def plain_driver(args: argparse.Namespace) -> None:
    """Run (or, with --restore, restore) the plain Tune experiment in DIR."""
    import ray
    from ray import tune

    work = Path(args.plain_driver)
    log = work / "trials.log"
    storage = work / "tune"
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.ERROR)
    trainable = tune.with_resources(_plain_trial, NODE_RESOURCES)
    experiment = storage / "plain"
    if args.restore and tune.Tuner.can_restore(str(experiment)):
        tuner = tune.Tuner.restore(str(experiment), trainable=trainable, resume_unfinished=True)
    else:
        if args.restore:
            with log.open("a") as out:
                out.write("new\n")  # nothing to restore: start over
        tuner = tune.Tuner(
            trainable,
            param_space={
                "i": tune.grid_search(list(range(args.trials))),
                "log": str(log),
                "seconds": args.trial_s,
            },
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
            run_config=tune.RunConfig(name="plain", storage_path=str(storage), verbose=0),
        )
    tuner.fit()


def plain_log(path: Path) -> list[tuple[str, str, float]]:
    out = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], parts[1], float(parts[2])))
    return out


# ---------------------------------------------------------------------------------------------
# Processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_head(temp: Path) -> str:
    """A local Ray head like one GPU node (8 logical GPUs, one spec_sweep_node)."""
    port = _free_port()
    ray_bin = str(Path(sys.executable).parent / "ray")
    subprocess.run(
        [
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
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return f"127.0.0.1:{port}"


def stop_head(temp: Path) -> None:
    from spec_sweep.node.procs import kill_processes_matching

    kill_processes_matching(str(temp))
    shutil.rmtree(temp, ignore_errors=True)


def _env(project: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env["SPEC_SWEEP_PROJECT_DIR"] = str(project)
    return env


_STARTED: list[subprocess.Popen[bytes]] = []


def _popen(
    argv: list[str], *, log: Path, cwd: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    _STARTED.append(proc)
    return proc


def _stop_all() -> None:
    """Kill every driver this script started that is still running (and its process group)."""
    for proc in _STARTED:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def _kill_at(proc: subprocess.Popen[bytes], first_trial: Callable[[], bool], at: float) -> bool:
    """SIGKILL `proc` `at` seconds after `first_trial()` became true; False if it exited first."""
    while not first_trial():
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    deadline = time.monotonic() + at
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return True


def _wait(proc: subprocess.Popen[bytes], what: str, timeout: float = 300) -> None:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise SystemExit(f"{what}: still running after {timeout} s") from None
    if code != 0:
        raise SystemExit(f"{what}: exit code {code}")


# ---------------------------------------------------------------------------------------------
# Ours


@dataclass
class Result:
    kill_at: float
    done_at_kill: int = 0
    rerun_finished: int = 0
    rerun_interrupted: int = 0
    next_trial_s: float | None = None
    resume_line_s: float | None = None
    note: str = ""


class Ours:
    """Sweeps of one project dir, one sweep name per kill."""

    def __init__(self, work: Path, address: str, trials: int) -> None:
        self.project = work / "ours"
        self.project.mkdir()
        shutil.copytree(ROOT / "search_spaces", self.project / "search_spaces")
        (self.project / "sweeps").mkdir()
        self.address = address
        self.trials = trials
        self.uri = f"sqlite:///{self.project / 'mlflow.db'}"
        self.state_root = self.project / "state"
        self.env = _env(self.project)
        from spec_sweep.store.tracker import Tracker

        _ = Tracker(self.uri, "warmup").experiment_id  # the store's schema is created once

    def argv(self, name: str) -> list[str]:
        spec = self.project / "sweeps" / f"{name}.yaml"
        if not spec.exists():
            spec.write_text(SPEC.format(name=name, trials=self.trials))
        return [
            sys.executable,
            "-m",
            "spec_sweep.run",
            str(spec),
            "--simulate",
            "--address",
            self.address,
            "--state-dir",
            str(self.state_root),
            "--tracking-uri",
            self.uri,
        ]

    def launches(self, name: str) -> set[Path]:
        return {
            p.parent for p in (self.state_root / name / "trials").glob("*/attempt*/command.txt")
        }

    def records(self, name: str) -> list[Any]:
        from spec_sweep.store.tracker import Tracker

        state = json.loads((self.state_root / name / "state.json").read_text())
        return Tracker(self.uri, name).trials(state["parent_run_id"])

    def trial_seconds(self, name: str) -> list[float]:
        """Wall time of each finished trial (child run start to end)."""
        return [
            (r.end_time - r.start_time) / 1000
            for r in self.records(name)
            if r.finished and r.end_time is not None
        ]

    def kill_and_resume(self, name: str, kill_at: float) -> Result:
        from spec_sweep.core.config import config_key
        from spec_sweep.node.server import kill_recorded_servers

        result = Result(kill_at)
        log = self.project / f"{name}.log"
        first = _popen(self.argv(name), log=log, cwd=self.project, env=self.env)
        if not _kill_at(first, lambda: bool(self.launches(name)), kill_at):
            result.note = "finished before the kill"
            return result
        if not (self.state_root / name / "state.json").exists():
            result.note = "killed before the sweep started"
        before_launches = self.launches(name)
        finished: set[str] = set()
        with contextlib.suppress(FileNotFoundError, KeyError, json.JSONDecodeError):
            records = self.records(name)
            finished = {config_key(r.config) for r in records if r.finished}
            result.done_at_kill = len(finished)

        t1 = time.monotonic()
        resume_log = self.project / f"{name}-resume.log"
        second = _popen(self.argv(name), log=resume_log, cwd=self.project, env=self.env)
        while second.poll() is None and result.next_trial_s is None:
            if result.resume_line_s is None and "resuming" in resume_log.read_text():
                result.resume_line_s = time.monotonic() - t1
            if self.launches(name) - before_launches:
                result.next_trial_s = time.monotonic() - t1
                break
            time.sleep(0.01)
        _wait(second, f"resume of {name}")
        kill_recorded_servers(self.state_root / name / "trials", grace_s=1.0)

        by_run = {r.run_id: r for r in self.records(name)}
        for attempt in sorted(self.launches(name) - before_launches):
            run = by_run.get((attempt / "mlflow_run_id").read_text().strip())
            if run is None:
                continue
            if config_key(run.config) in finished:
                result.rerun_finished += 1
            elif attempt.name != "attempt1":
                result.rerun_interrupted += 1
        twice = Counter(config_key(r.config) for r in by_run.values() if r.finished)
        result.rerun_finished = max(result.rerun_finished, sum(n - 1 for n in twice.values()))
        return result


# ---------------------------------------------------------------------------------------------
# Plain Tune


class Plain:
    def __init__(self, work: Path, address: str, trials: int, trial_s: float) -> None:
        self.work = work / "tune"
        self.work.mkdir()
        self.address = address
        self.trials = trials
        self.trial_s = trial_s
        self.env = _env(self.work)

    def argv(self, run_dir: Path, *, restore: bool) -> list[str]:
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--plain-driver",
            str(run_dir),
            "--address",
            self.address,
            "--trials",
            str(self.trials),
            "--trial-s",
            f"{self.trial_s:.3f}",
        ]
        return [*argv, "--restore"] if restore else argv

    def kill_and_restore(self, index: int, kill_at: float) -> Result:
        result = Result(kill_at)
        run_dir = self.work / f"k{index}"
        run_dir.mkdir()
        log = run_dir / "driver.log"
        first = _popen(self.argv(run_dir, restore=False), log=log, cwd=run_dir, env=self.env)
        if not _kill_at(first, lambda: bool(plain_log(run_dir / "trials.log")), kill_at):
            result.note = "finished before the kill"
            return result
        lines = plain_log(run_dir / "trials.log")
        result.done_at_kill = len({i for kind, i, _ in lines if kind == "finish"})
        started_before = {i for kind, i, _ in lines if kind == "start"}
        finished_before = {i for kind, i, _ in lines if kind == "finish"}

        t1_wall, t1 = time.time(), time.monotonic()
        second = _popen(self.argv(run_dir, restore=True), log=log, cwd=run_dir, env=self.env)
        while second.poll() is None:
            if any(
                kind == "start" and t >= t1_wall for kind, _, t in plain_log(run_dir / "trials.log")
            ):
                result.next_trial_s = time.monotonic() - t1
                break
            time.sleep(0.01)
        _wait(second, f"Tune restore {index}")
        with contextlib.suppress(FileNotFoundError):
            if "new" in (run_dir / "trials.log").read_text().split("\n"):
                result.note = "new"
        finishes = Counter(
            i for kind, i, _ in plain_log(run_dir / "trials.log") if kind == "finish"
        )
        result.rerun_finished = sum(n - 1 for n in finishes.values())
        restarted = Counter(
            i
            for kind, i, t in plain_log(run_dir / "trials.log")
            if kind == "start" and t >= t1_wall
        )
        result.rerun_interrupted = len((set(restarted) & started_before) - finished_before)
        return result


# ---------------------------------------------------------------------------------------------
# Table


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_table(ours: list[Result], plain: list[Result], *, trials: int, trial_s: float) -> None:
    print(
        f"\nbudget {trials} trials; our median trial {trial_s:.2f} s (plain Tune trials sleep "
        "as long); kill at = seconds after the first trial started; restart -> next trial = "
        "seconds from launching the resume to the next trial starting (ours: in brackets, to "
        "the driver's 'resuming' line)\n"
    )
    print(
        "| kill at (s) | ours: done at kill | ours: finished re-run | ours: interrupted re-run "
        "| ours: restart -> next trial (s) | Tune: done at kill | Tune: finished re-run "
        "| Tune: interrupted re-run | Tune: restart -> next trial (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for mine, theirs in zip(ours, plain, strict=True):
        note_ours = f" ({mine.note})" if mine.note else ""
        note_tune = f" ({theirs.note})" if theirs.note else ""
        print(
            f"| {mine.kill_at:.1f} | {mine.done_at_kill}{note_ours} | {mine.rerun_finished} "
            f"| {mine.rerun_interrupted} | {_s(mine.next_trial_s)} ({_s(mine.resume_line_s)}) "
            f"| {theirs.done_at_kill}{note_tune} | {theirs.rerun_finished} "
            f"| {theirs.rerun_interrupted} | {_s(theirs.next_trial_s)} |"
        )

    def median(values: list[float | None]) -> str:
        got = [v for v in values if v is not None]
        return f"{statistics.median(got):.2f}" if got else "-"

    print(
        f"| **all {len(ours)}** | {sum(r.done_at_kill for r in ours)} "
        f"| **{sum(r.rerun_finished for r in ours)}** "
        f"| {sum(r.rerun_interrupted for r in ours)} "
        f"| median {median([r.next_trial_s for r in ours])} "
        f"({median([r.resume_line_s for r in ours])}) "
        f"| {sum(r.done_at_kill for r in plain)} "
        f"| **{sum(r.rerun_finished for r in plain)}** "
        f"| {sum(r.rerun_interrupted for r in plain)} "
        f"| median {median([r.next_trial_s for r in plain])} |"
    )


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kill times")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=3, help="budget of each sweep")
    parser.add_argument("--plain-driver", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--restore", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--trial-s",
        type=float,
        default=1.7,
        help="expected seconds per trial: kill times fall within trials x this after the first "
        "trial started (plain Tune trials sleep as long as our measured median)",
    )
    args = parser.parse_args()
    if args.plain_driver:
        plain_driver(args)
        return

    temp = Path(f"/tmp/spec_sweep-bench-ray-{os.getpid()}")
    work = Path(tempfile.mkdtemp(prefix="spec-sweep-resume-"))
    try:
        t_start = time.monotonic()
        address = start_head(temp)
        ours = Ours(work, address, args.trials)
        rng = random.Random(args.seed)
        window = args.trials * args.trial_s
        kill_times = sorted(round(rng.uniform(0.0, window), 1) for _ in range(args.kills))
        print(f"kill times (s after the first trial started): {kill_times}", flush=True)

        ours_results = []
        for i, at in enumerate(kill_times):
            ours_results.append(ours.kill_and_resume(f"k{i}", at))
            print(f"ours  kill {i} at {at:.1f} s: {ours_results[-1]}", flush=True)
        trial_s = statistics.median(
            s for i in range(len(kill_times)) for s in ours.trial_seconds(f"k{i}")
        )
        plain = Plain(work, address, args.trials, trial_s)
        plain_results = []
        for i, at in enumerate(kill_times):
            plain_results.append(plain.kill_and_restore(i, at))
            print(f"Tune  kill {i} at {at:.1f} s: {plain_results[-1]}", flush=True)
        print_table(ours_results, plain_results, trials=args.trials, trial_s=trial_s)
        print(f"\n(benchmark wall time {time.monotonic() - t_start:.0f} s)")
    finally:
        from spec_sweep.node.server import kill_recorded_servers

        _stop_all()
        kill_recorded_servers(work, grace_s=1.0)
        stop_head(temp)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
