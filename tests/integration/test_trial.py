"""Integration tests of one trial through the real launcher against the simulated node.

Every test runs `run_trial` (or `spec-sweep trial` as a subprocess) with `simulate=True`: the real
launcher starts `python -m spec_sweep.sim` in its own process group on a free loopback port, at time
scale 0 (tests/conftest.py). There is one test per failure mode of docs/design.md, "Failure modes"
except `node_lost`. A real configuration produces the failure where the simulated PCIe node
(`rtx-pro-6000-pcie-x8`) does so: `mem-fraction-static` too high (OOM while capturing CUDA graphs),
EP 8 with the FlashInfer A2A backend (assertion), FlashInfer all-reduce fusion on SM120
(unsupported), `NCCL_ALGO=NVLS` without NVLink (NCCL), and so on. Faults that no configuration can
produce go through the simulator's own `SPEC_SWEEP_SIM_FAULT`, passed as `run_trial`'s `extra_env`,
which is the real launcher path.

Each test checks the classification, that the trial ended promptly (within 2 s of the fatal log
line, or of the configured timeout) and that no process of the server's group is left. The time
of a log line is taken by `_LineClock`, a tail of the server log that this file starts from
`run_trial`'s `on_launch` hook and that polls every 5 ms, independently of the product's
`LogWatcher`.

Three real configurations whose failure is decided by less common evidence (unknown speculative
algorithm on SGLang 0.5.23, FlashInfer fusion backend and torch symmetric memory on SM120) also
must end at once and leave nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from spec_sweep.core.config import resolve_config
from spec_sweep.core.names import AVAIL_METRIC, BOOT_PHASES, WEIGHTS_METRIC, boot_metric
from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.node.classify import find_fatal
from spec_sweep.node.procs import group_pids, stop_process_group
from spec_sweep.node.server import ServerProcess
from spec_sweep.node.trial import run_trial
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

ROOT = Path(__file__).resolve().parents[2]
PCIE = "rtx-pro-6000-pcie-x8"
PROMPT_DEADLINE_S = 2.0
"""A trial must end within this many seconds of the line (or timeout) that decided it."""

# Search spaces in the shape of the repo's sweeps (sweeps/allreduce.yaml: SGLang 0.5.13,
# sweeps/eagle3_h200.yaml: 0.5.23), with the values the failing configurations need.
_COMMON_PARAMS: dict[str, Any] = {
    "speculative-algorithm": {"choices": [None, "EAGLE3", "EAGLE4"]},
    "speculative-num-steps": {
        "int": [1, 7],
        "default": 3,
        "when": {"speculative-algorithm": "EAGLE3"},
    },
    "speculative-eagle-topk": {
        "choices": [1, 2, 4, 8],
        "default": 1,
        "when": {"speculative-algorithm": "EAGLE3"},
    },
    "speculative-num-draft-tokens": {
        "choices": [2, 4, 8, 16],
        "default": 4,
        "when": {"speculative-algorithm": "EAGLE3"},
    },
    "mem-fraction-static": {"float": [0.70, 0.99], "step": 0.01, "default": 0.88},
    "ep-size": {"choices": [1, 8], "default": 1},
    "moe-a2a-backend": {
        "choices": ["none", "flashinfer"],
        "default": "none",
        "when": {"ep-size": 8},
    },
    "env.NCCL_ALGO": {"choices": [None, "Ring", "Tree", "NVLS"]},
}
_PARAMS: dict[str, dict[str, Any]] = {
    "0.5.13": {
        **_COMMON_PARAMS,
        "cuda-graph-max-bs": {"choices": [32, 64, 128, 256, 512], "default": 128},
        "enable-flashinfer-allreduce-fusion": {"choices": [False, True], "default": False},
        "enable-torch-symm-mem": {"choices": [False, True], "default": False},
    },
    "0.5.23": {
        **_COMMON_PARAMS,
        "cuda-graph-max-bs-decode": {"choices": [32, 64, 128, 256, 512], "default": 128},
        "flashinfer-allreduce-fusion-backend": {"choices": [None, "auto"]},
        "enable-torch-symm-mem": {"choices": [False, True], "default": False},
    },
}


def _write_spec(
    tmp_path: Path,
    *,
    version: str = "0.5.23",
    profile: str = PCIE,
    boot_timeout_s: float = 60.0,
    request_timeout_s: float = 10.0,
    cost_per_hour: float | None = None,
    server_args: Mapping[str, Any] | None = None,
) -> SweepSpec:
    """A small sweep spec on the simulated 8-GPU PCIe node (2 prompts of 8 tokens, no warm-up)."""
    raw = {
        "name": "trial-test",
        "node": {
            "backend": "sglang",
            "model": "moonshotai/Kimi-K2.5",
            "draft_model": "lightseekorg/kimi-k2.5-eagle3",
            "gpus": 8,
            "sglang_version": version,
            "server_args": {"tp-size": 8, "trust-remote-code": True, **(server_args or {})},
            "env": {"NCCL_DEBUG": "WARN"},
            "boot_timeout_s": boot_timeout_s,
            "request_timeout_s": request_timeout_s,
            "sim_profile": profile,
            **({"cost_per_hour": cost_per_hour} if cost_per_hour is not None else {}),
        },
        "search_space": {"params": _PARAMS[version]},
        "baseline": {"speculative-algorithm": None},
        "workload": {
            "dataset": "builtin",
            "output_len": 8,
            "num_prompts": 2,
            "concurrency": 1,
            "warmup_prompts": 0,
            "seed": 0,
        },
        "objective": {"metric": "output_throughput", "mode": "max"},
        "budget": {"trials": 1, "max_concurrent": 1, "trial_timeout_s": 120},
    }
    path = tmp_path / f"sweep-{version}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_spec(path)


class _LineClock:
    """`on_launch` hook: keeps the launched server and times every line of its log.

    A thread tails the log file every 5 ms and records `(time.monotonic(), line)` for each
    complete line, counting lines the way `LogWatcher` does (split on newlines).
    """

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, server: ServerProcess) -> None:
        self.server = server
        self._thread = threading.Thread(
            target=self._tail, args=(server.log_path,), name="test-line-clock", daemon=True
        )
        self._thread.start()

    def _tail(self, path: Path) -> None:
        pending = b""
        with path.open("rb") as handle:
            while True:
                stopping = self._stop.is_set()
                chunk = handle.read()
                if chunk:
                    now = time.monotonic()
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    with self._lock:
                        self.lines += [(now, raw.decode("utf-8", "replace")) for raw in complete]
                if stopping:
                    return
                self._stop.wait(0.005)

    def stop(self) -> None:
        """Read what is left of the log, then stop the tail."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def first(self, predicate: Callable[[str], bool]) -> float:
        """When the first line matching `predicate` appeared."""
        with self._lock:
            for seen, line in self.lines:
                if predicate(line):
                    return seen
        raise AssertionError(f"no matching line in the log:\n{self.tail()}")

    def last(self, predicate: Callable[[str], bool] = lambda line: bool(line)) -> float:
        """When the last line matching `predicate` appeared."""
        with self._lock:
            for seen, line in reversed(self.lines):
                if predicate(line):
                    return seen
        raise AssertionError(f"no matching line in the log:\n{self.tail()}")

    def fatal_at(self) -> float:
        """When the first fatal line (`failures.find_fatal`) appeared."""
        return self.first(lambda line: find_fatal(line) is not None)

    def tail(self, count: int = 30) -> str:
        with self._lock:
            return "\n".join(line for _, line in self.lines[-count:])


@pytest.fixture
def clock() -> Iterator[_LineClock]:
    """A line clock for one trial; stops its tail and anything left of the server's group."""
    line_clock = _LineClock()
    yield line_clock
    line_clock.stop()
    if line_clock.server is not None and group_pids(line_clock.server.pgid):
        stop_process_group(line_clock.server.pgid, grace_s=0.5, leader=line_clock.server.proc)


def _run(
    spec: SweepSpec,
    overrides: Mapping[str, Any],
    *,
    trial_dir: Path,
    clock: _LineClock,
    fault: str = "",
    grace_s: float = 10.0,
) -> tuple[TrialResult, float]:
    """Run one trial of `baseline + overrides`; returns the result and when `run_trial` returned.

    The log is read to its end before returning, so `clock` has every line.
    """
    config = resolve_config(spec, {**spec.baseline, **overrides}, what="test configuration")
    result = run_trial(
        spec,
        config,
        trial_dir=trial_dir,
        trial_id=trial_dir.name,
        simulate=True,
        extra_env={"SPEC_SWEEP_SIM_FAULT": fault},
        grace_s=grace_s,
        on_launch=clock,
    )
    ended = time.monotonic()
    clock.stop()
    return result, ended


def _assert_group_gone(clock: _LineClock) -> None:
    assert clock.server is not None, "run_trial did not call on_launch"
    left = group_pids(clock.server.pgid)
    assert left == [], f"processes of the server's group left after the trial: {left}"


def _explain(result: TrialResult, clock: _LineClock) -> str:
    return f"{result.failure_mode}: {result.reason}\n--- log tail ---\n{clock.tail()}"


# ---------------------------------------------------------------------------------------------
# A configuration that works


def test_baseline_configuration_is_measured_and_leaves_no_process(
    tmp_path: Path, clock: _LineClock
) -> None:
    spec = _write_spec(tmp_path)
    started = time.monotonic()
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock)

    assert result.failure_mode is FailureMode.NONE, _explain(result, clock)
    assert result.metrics["output_throughput"] > 0
    assert result.metrics["boot_s"] > 0
    assert result.exit_code is None  # still running when the trial stopped it
    assert ended - started < 10.0
    assert not (tmp_path / "trial" / "server.json").exists()  # record removed after the stop
    _assert_group_gone(clock)


# ---------------------------------------------------------------------------------------------
# Configurations that fail on the simulated node: classified, stopped within 2 s of the fatal line


@pytest.mark.parametrize(
    ("version", "overrides", "expected", "evidence"),
    [
        pytest.param(
            "0.5.23",
            {"mem-fraction-static": 0.97},
            FailureMode.OOM,
            "Capture cuda graph failed: CUDA out of memory",
            id="oom-mem-fraction-0.97-during-cuda-graph-capture",
        ),
        pytest.param(
            "0.5.23",
            {"ep-size": 8, "moe-a2a-backend": "flashinfer"},
            # An assertion in SGLang's argument hooks (arg_groups/moe_hook.py): a rejection of
            # the arguments, deterministic, so invalid_args rather than assertion.
            FailureMode.INVALID_ARGS,
            "AssertionError: Flashinfer MoE A2A requires --attn-dp-size",
            id="invalid-args-ep8-flashinfer-a2a-assert-in-argument-hooks",
        ),
        pytest.param(
            "0.5.13",
            {"enable-flashinfer-allreduce-fusion": True},
            FailureMode.UNSUPPORTED,
            "No supported CUDA architectures found for major versions [9, 10]",
            id="unsupported-flashinfer-allreduce-fusion-on-sm120",
        ),
        pytest.param(
            "0.5.23",
            {"env.NCCL_ALGO": "NVLS"},
            FailureMode.NCCL,
            "NCCL error: invalid usage",
            id="nccl-nccl-algo-nvls-on-pcie",
        ),
        pytest.param(
            "0.5.13",
            {"ep-size": 8, "moe-a2a-backend": "flashinfer"},
            FailureMode.INVALID_ARGS,
            'srt/server_args.py", line 3568, in _handle_a2a_moe',
            id="invalid-args-server-args-rejects-ep8-flashinfer-a2a-on-0.5.13",
        ),
    ],
)
def test_failing_configuration_is_classified_and_stopped_within_2s_of_fatal_line(
    tmp_path: Path,
    clock: _LineClock,
    version: str,
    overrides: dict[str, Any],
    expected: FailureMode,
    evidence: str,
) -> None:
    spec = _write_spec(tmp_path, version=version)
    result, ended = _run(spec, overrides, trial_dir=tmp_path / "trial", clock=clock)

    assert result.failure_mode is expected, _explain(result, clock)
    assert clock.server is not None
    assert clock.server.watcher.fatal is not None  # the launcher's log watcher saw it too
    assert evidence in clock.server.log_text()
    assert result.log_excerpt
    # Nothing was measured; only where the boot went (the phases it reached) and the memory
    # facts of its weight load are kept (docs/concepts/node-hours.md).
    boot_facts = {AVAIL_METRIC, WEIGHTS_METRIC} | {boot_metric(p) for p in BOOT_PHASES}
    assert set(result.metrics) <= boot_facts
    assert ended - clock.fatal_at() < PROMPT_DEADLINE_S, _explain(result, clock)
    _assert_group_gone(clock)


@pytest.mark.parametrize(
    ("version", "overrides", "expected"),
    [
        pytest.param(
            "0.5.23",
            {"speculative-algorithm": "EAGLE4"},
            FailureMode.INVALID_ARGS,
            id="invalid-args-unknown-speculative-algorithm",
        ),
        pytest.param(
            "0.5.23",
            {"flashinfer-allreduce-fusion-backend": "auto"},
            FailureMode.UNSUPPORTED,
            id="unsupported-flashinfer-allreduce-fusion-backend-on-sm120",
        ),
        pytest.param(
            "0.5.13",
            {"enable-torch-symm-mem": True},
            FailureMode.UNSUPPORTED,
            id="unsupported-torch-symm-mem-on-sm120",
        ),
        pytest.param(
            "0.5.23",
            {"enable-torch-symm-mem": True},
            FailureMode.UNSUPPORTED,
            id="unsupported-torch-symm-mem-fallback-warning-on-sm120",
        ),
    ],
)
def test_less_common_failure_evidence_ends_within_2s_and_gets_its_mode(
    tmp_path: Path,
    clock: _LineClock,
    version: str,
    overrides: dict[str, Any],
    expected: FailureMode,
) -> None:
    spec = _write_spec(tmp_path, version=version)
    result, ended = _run(spec, overrides, trial_dir=tmp_path / "trial", clock=clock)

    # Whatever the classification, the trial ends at once and leaves nothing behind.
    if ended - clock.last() >= PROMPT_DEADLINE_S:
        pytest.fail(f"ended {ended - clock.last():.2f} s after the last log line")
    assert clock.server is not None
    if group_pids(clock.server.pgid):
        pytest.fail(f"processes of the server's group left: {group_pids(clock.server.pgid)}")
    assert result.failure_mode is expected, _explain(result, clock)


# ---------------------------------------------------------------------------------------------
# Faults no configuration produces (SPEC_SWEEP_SIM_FAULT through run_trial's extra_env)


def test_server_that_never_becomes_ready_is_startup_timeout_at_the_boot_deadline(
    tmp_path: Path, clock: _LineClock
) -> None:
    boot_timeout_s = 1.5
    spec = _write_spec(tmp_path, boot_timeout_s=boot_timeout_s)
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock, fault="hang-at-boot")

    assert result.failure_mode is FailureMode.STARTUP_TIMEOUT, _explain(result, clock)
    assert clock.server is not None
    waited = ended - clock.server.started
    assert boot_timeout_s <= waited < boot_timeout_s + PROMPT_DEADLINE_S
    _assert_group_gone(clock)


def test_server_killed_by_a_signal_at_boot_is_crash_naming_the_signal(
    tmp_path: Path, clock: _LineClock
) -> None:
    spec = _write_spec(tmp_path)
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock, fault="crash-at-boot")

    assert result.failure_mode is FailureMode.CRASH, _explain(result, clock)
    assert result.exit_code == -signal.SIGSEGV
    assert "SIGSEGV" in result.reason
    # No fatal line: the process just dies; the trial ends within 2 s of its last line.
    assert ended - clock.last() < PROMPT_DEADLINE_S, _explain(result, clock)
    _assert_group_gone(clock)


def test_worker_dying_while_main_process_keeps_running_is_crash_within_2s_of_fatal_line(
    tmp_path: Path, clock: _LineClock
) -> None:
    # The NCCL watchdog of a worker aborts; the main process would wait 600 s for its warm-up.
    spec = _write_spec(tmp_path)
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock, fault="worker-dies")

    assert result.failure_mode is FailureMode.CRASH, _explain(result, clock)
    assert "illegal memory access" in result.reason
    assert result.exit_code is None  # the main process was still running: the trial stopped it
    assert clock.server is not None
    assert clock.server.watcher.fatal is not None
    assert ended - clock.fatal_at() < PROMPT_DEADLINE_S, _explain(result, clock)
    _assert_group_gone(clock)


def test_a_failed_scheduler_ends_the_trial_before_sglang_exits(
    tmp_path: Path, clock: _LineClock
) -> None:
    # With the warm-up skipped, the tree (1, 4, 8) boots and its first request (the readiness
    # probe) kills the scheduler; SGLang's running-phase handler then sleeps 5 s and (0.5.17+)
    # waits 60 s for CUDA coredumps before it exits (the real table's t0025 waited 65 s).
    spec = _write_spec(tmp_path, server_args={"skip-server-warmup": True})
    tree = {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 1,
        "speculative-eagle-topk": 4,
        "speculative-num-draft-tokens": 8,
    }
    config = resolve_config(spec, {**spec.baseline, **tree}, what="test configuration")
    result = run_trial(
        spec,
        config,
        trial_dir=tmp_path / "trial",
        trial_id="trial",
        simulate=True,
        on_launch=clock,
    )
    ended = time.monotonic()
    clock.stop()

    assert result.failure_mode is FailureMode.CRASH, _explain(result, clock)
    assert "a server process failed before ready ('Scheduler hit an exception')" in result.reason
    assert "selected index k out of range" in result.reason
    assert result.exit_code is None  # SGLang was still waiting: the trial stopped it
    failed = clock.first(lambda line: "Scheduler hit an exception" in line)
    # the health probe that hit the crash (up to 2 s), the traceback's settle (1 s), the stop
    assert ended - failed < 5.0, _explain(result, clock)
    _assert_group_gone(clock)


def test_server_that_stops_answering_mid_benchmark_is_hang_at_the_request_timeout(
    tmp_path: Path, clock: _LineClock
) -> None:
    request_timeout_s = 1.0
    spec = _write_spec(tmp_path, request_timeout_s=request_timeout_s)
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock, fault="hang-after=1")

    assert result.failure_mode is FailureMode.HANG, _explain(result, clock)
    # The first request was answered, the second never was: its timeout starts at that answer.
    answered = clock.last(lambda line: '"POST /generate HTTP/1.1" 200' in line)
    assert ended - answered < request_timeout_s + PROMPT_DEADLINE_S, _explain(result, clock)
    _assert_group_gone(clock)


def test_server_that_fails_requests_is_bench_error_with_the_servers_message(
    tmp_path: Path, clock: _LineClock
) -> None:
    spec = _write_spec(tmp_path)
    result, ended = _run(spec, {}, trial_dir=tmp_path / "trial", clock=clock, fault="request-error")

    assert result.failure_mode is FailureMode.BENCH_ERROR, _explain(result, clock)
    assert "2/2 requests failed" in result.reason
    assert "Out of memory even after retracting" in result.reason
    aborted = clock.last(lambda line: "aborted request" in line)
    assert ended - aborted < PROMPT_DEADLINE_S, _explain(result, clock)
    _assert_group_gone(clock)


def test_server_ignoring_sigterm_is_killed_with_sigkill_after_the_grace_period(
    tmp_path: Path, clock: _LineClock
) -> None:
    grace_s = 1.0
    spec = _write_spec(tmp_path)
    result, ended = _run(
        spec,
        {},
        trial_dir=tmp_path / "trial",
        clock=clock,
        fault="ignore-sigterm",
        grace_s=grace_s,
    )

    assert result.failure_mode is FailureMode.NONE, _explain(result, clock)
    assert clock.server is not None
    assert clock.server.proc.returncode == -signal.SIGKILL
    assert "SIGTERM received" not in clock.server.log_text()
    # Teardown starts after the benchmark's last request (its last log line) and waits the
    # grace period before SIGKILL.
    teardown = ended - clock.last()
    assert grace_s - 0.1 <= teardown < grace_s + PROMPT_DEADLINE_S
    _assert_group_gone(clock)


# ---------------------------------------------------------------------------------------------
# `spec-sweep trial --simulate --json`


def _sim_processes_on_port(port: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info["cmdline"] or []
            if "spec_sweep.sim" in cmdline and port in cmdline:
                found.append(proc.info["pid"])
    return found


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param("mem-fraction-static=0.97", "oom", id="failed-trial"),
        pytest.param("mem-fraction-static=0.88", "none", id="measured-trial"),
    ],
)
def test_trial_command_prints_one_json_object_and_exits_0(
    tmp_path: Path, setting: str, expected: str
) -> None:
    spec = _write_spec(tmp_path, cost_per_hour=40.0)
    script = Path(sys.executable).parent / "spec-sweep"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spec_sweep"]
    env = dict(os.environ, SPEC_SWEEP_PROJECT_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("SPEC_SWEEP_SIM_FAULT", None)
    done = subprocess.run(
        [*command, "trial", spec.source, "--set", setting, "--simulate", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(done.stdout)  # exactly one JSON document on stdout
    assert isinstance(payload, dict)
    assert set(payload) == {
        "failure_mode",
        "reason",
        "metrics",
        "command",
        "log_excerpt",
        "elapsed_s",
        "trial_dir",
        "quality",
        "fidelity",
    }
    assert payload["quality"] is None  # the spec has no quality gate
    assert payload["fidelity"] == "real"  # the model's weights (no --dummy-weights)
    assert payload["failure_mode"] == expected
    assert payload["elapsed_s"] > 0
    assert payload["command"][:3] == ["python", "-m", "spec_sweep.sim"]
    if expected == "none":
        tput = payload["metrics"]["output_throughput"]
        assert tput > 0
        # Priced as a sweep trial is (node.cost_per_hour over tokens per hour).
        assert payload["metrics"]["usd_per_million_tokens"] == pytest.approx(
            40.0 / (tput * 3600) * 1e6, rel=1e-4
        )
    else:
        boot_facts = {AVAIL_METRIC, WEIGHTS_METRIC} | {boot_metric(p) for p in BOOT_PHASES}
        assert set(payload["metrics"]) <= boot_facts  # where the failed boot went, only
        assert "OutOfMemoryError" in payload["log_excerpt"]
    port = payload["command"][payload["command"].index("--port") + 1]
    assert _sim_processes_on_port(port) == []
