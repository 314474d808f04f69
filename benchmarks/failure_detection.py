"""Failure detection: time from the fatal log line to a failing trial's end, ours vs readiness-only.

For configurations that fail while the simulated PCIe node (``rtx-pro-6000-pcie-x8``) boots, this
script measures the time from the fatal log line to the end of the trial, two ways:

* trial path: ``run_trial(..., simulate=True)``, the product's own launcher, which watches the
  log and ends the boot wait at the first fatal line even when the server keeps running;
* readiness-only: the same server command, started the same way (own session, log to a file),
  waited on the way SGLang's ``popen_launch_server`` (``python/sglang/test/test_utils.py``) and
  vLLM's ``RemoteOpenAIServer._wait_for_server`` do: poll ``GET /health_generate`` and
  ``proc.poll()`` until ready, exited, or the boot timeout, sleeping between polls; no log
  watching; then kill the process group. It is measured with a 0.5 s poll (vLLM's tests) and a
  short boot timeout (``--boot-timeout``, default 60 s), and with SGLang's own 10 s poll.

The fatal line (the line that reports the failure, named per case) is timed by a tail of the
server log (5 ms polls) in both runs; the readiness-only loop never looks at it. Cases:

* OOM-and-hang (``worker-dies`` fault): a worker prints the NCCL watchdog's fatal C++ error and
  aborts; the main process keeps running and never becomes ready. A readiness-only wait runs
  until the boot timeout, or until the server's own 600 s warm-up timeout kills it (SGLang's
  warm-up request has ``read timeout=600``); with the spec's ``boot_timeout_s: 1800`` that second
  figure is computed, not measured (it is deterministic: warm-up start + 600 s + one poll).
* OOM during CUDA-graph capture (``mem-fraction-static 0.97``): the scheduler dies, the server
  exits (SIGKILL of its own tree).
* assertion (EP 8 + ``moe-a2a-backend flashinfer``, SGLang 0.5.23): the main process exits 1.
* unsupported, 0.5.13 (``--enable-flashinfer-allreduce-fusion`` on SM120): FlashInfer's workspace
  fails ("No supported CUDA architectures found for major versions [9, 10]"), SGLang disables
  fusion and boots on; readiness-only sees a ready server and misses the failure.
* unsupported, 0.5.23 (``--flashinfer-allreduce-fusion-backend auto`` on SM120): ValueError in the
  scheduler, the server exits.
* crash after ready, 0.5.17 (EAGLE-3 (1, 4, 8) with ``--skip-server-warmup``, as the real table
  runs): the server comes up and the first request (the readiness probe) kills the scheduler
  ("selected index k out of range"); SGLang's running-phase handler then sleeps 5 s and waits
  60 s for CUDA coredumps before it kills its tree (the real table's t0025 on the H200, 2026-12-02,
  and the simulator's handler, which sleeps in real seconds). The trial path ends at "Scheduler
  hit an exception" (the line timed here); readiness-only waits for the exit.

Run: ``.venv/bin/python benchmarks/failure_detection.py`` (about 5 minutes; ``--quick`` skips
the 10 s-poll runs).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from spec_sweep.core.config import resolve_config
from spec_sweep.node.command import build_command
from spec_sweep.node.procs import stop_process_group
from spec_sweep.node.server import ServerProcess, free_port
from spec_sweep.node.trial import run_trial
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

SPEC_BOOT_TIMEOUT_S = 1800.0
"""The sweeps' `node.boot_timeout_s` (sweeps/*.yaml)."""
SGLANG_WARMUP_TIMEOUT_S = 600.0
"""SGLang's warm-up request read timeout, after which the server kills its own tree."""
SGLANG_POLL_S = 10.0
"""`popen_launch_server` sleeps 10 s between polls."""
VLLM_POLL_S = 0.5
"""vLLM's `RemoteOpenAIServer._wait_for_server` sleeps 0.5 s between polls."""
READY = "The server is fired up and ready to roll!"

_PARAMS: dict[str, dict[str, Any]] = {
    "0.5.13": {
        "mem-fraction-static": {"float": [0.70, 0.99], "default": 0.88},
        "ep-size": {"choices": [1, 8], "default": 1},
        "moe-a2a-backend": {"choices": ["none", "flashinfer"], "default": "none"},
        "enable-flashinfer-allreduce-fusion": {"choices": [False, True], "default": False},
    },
    "0.5.23": {
        "mem-fraction-static": {"float": [0.70, 0.99], "default": 0.88},
        "ep-size": {"choices": [1, 8], "default": 1},
        "moe-a2a-backend": {"choices": ["none", "flashinfer"], "default": "none"},
        "flashinfer-allreduce-fusion-backend": {"choices": [None, "auto"]},
    },
    "0.5.17": {
        "speculative-algorithm": {"choices": [None, "EAGLE3"]},
        "speculative-num-steps": {"choices": [1, 3], "default": 3},
        "speculative-eagle-topk": {"choices": [1, 4], "default": 1},
        "speculative-num-draft-tokens": {"choices": [4, 8], "default": 4},
    },
}
#: the 0.5.17 node as the real table runs it: no warm-up, so the first request is the first decode
_SERVER_ARGS: dict[str, dict[str, Any]] = {"0.5.17": {"skip-server-warmup": True}}


@dataclass(frozen=True)
class Case:
    """One failing configuration."""

    name: str
    version: str
    overrides: dict[str, Any]
    fatal: str
    """Text of the log line that reports the failure (timed in both runs)."""
    fault: str = ""
    exits_after_s: float = SGLANG_WARMUP_TIMEOUT_S
    """Seconds from the fatal line until a server that keeps running exits on its own."""

    @property
    def label(self) -> str:
        if self.fault:
            return f"fault {self.fault}"
        return " ".join(f"{k}={v}" for k, v in self.overrides.items()) + f" ({self.version})"


CASES = (
    Case("OOM-and-hang", "0.5.23", {}, "an illegal memory access", fault="worker-dies"),
    Case("OOM at capture", "0.5.23", {"mem-fraction-static": 0.97}, "OutOfMemoryError: CUDA"),
    Case(
        "assertion",
        "0.5.23",
        {"ep-size": 8, "moe-a2a-backend": "flashinfer"},
        "AssertionError: Flashinfer MoE A2A",
    ),
    Case(
        "unsupported",
        "0.5.13",
        {"enable-flashinfer-allreduce-fusion": True},
        "No supported CUDA architectures found",
    ),
    Case(
        "unsupported",
        "0.5.23",
        {"flashinfer-allreduce-fusion-backend": "auto"},
        "ValueError: FlashInfer allreduce fusion requires SM90",
    ),
    Case(
        "crash after ready",
        "0.5.17",
        {
            "speculative-algorithm": "EAGLE3",
            "speculative-num-steps": 1,
            "speculative-eagle-topk": 4,
            "speculative-num-draft-tokens": 8,
        },
        "Scheduler hit an exception",
        exits_after_s=65.0,  # 5 s before crash diagnostics + 60 s for CUDA coredumps
    ),
)


@dataclass
class Run:
    """One measured run: what it concluded and when, relative to the fatal line."""

    outcome: str
    fatal_to_end_s: float
    launch_to_end_s: float
    fatal_after_launch_s: float
    ready_line_after_launch_s: float | None = None


class _LineClock:
    """Tails a log file (5 ms polls) and records when each line appeared (measurement only)."""

    def __init__(self, path: Path) -> None:
        self.lines: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tail, args=(path,), daemon=True)
        self._thread.start()

    def _tail(self, path: Path) -> None:
        pending = b""
        while not path.exists() and not self._stop.is_set():
            time.sleep(0.005)
        with path.open("rb") as handle:
            while True:
                stopping = self._stop.is_set()
                chunk = handle.read()
                if chunk:
                    now = time.monotonic()
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    self.lines += [(now, raw.decode("utf-8", "replace")) for raw in complete]
                if stopping:
                    return
                self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def first(self, needle: str) -> float | None:
        """When the first line containing `needle` appeared."""
        for seen, line in self.lines:
            if needle in line:
                return seen
        return None


def _write_spec(folder: Path, version: str) -> SweepSpec:
    raw = {
        "name": "failure-detection",
        "node": {
            "backend": "sglang",
            "model": "moonshotai/Kimi-K2.5",
            "draft_model": "lightseekorg/kimi-k2.5-eagle3",
            "gpus": 8,
            "sglang_version": version,
            "server_args": {
                "tp-size": 8,
                "trust-remote-code": True,
                **_SERVER_ARGS.get(version, {}),
            },
            "boot_timeout_s": SPEC_BOOT_TIMEOUT_S,
            "request_timeout_s": 60,
            "sim_profile": "rtx-pro-6000-pcie-x8",
        },
        "search_space": {"params": _PARAMS[version]},
        "workload": {
            "dataset": "builtin",
            "output_len": 16,
            "num_prompts": 2,
            "concurrency": 1,
            "warmup_prompts": 0,
        },
        "budget": {"trials": 1, "trial_timeout_s": 3600},
    }
    path = folder / f"sweep-{version}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_spec(path)


def _config(spec: SweepSpec, case: Case) -> dict[str, Any]:
    return resolve_config(spec, {**spec.baseline, **case.overrides}, what=case.name)


def run_ours(spec: SweepSpec, case: Case, folder: Path) -> tuple[Run, str]:
    """The product's trial path; returns the run and the failure mode it classified."""
    clocks: list[_LineClock] = []
    servers: list[ServerProcess] = []

    def on_launch(server: ServerProcess) -> None:
        servers.append(server)
        clocks.append(_LineClock(server.log_path))

    result = run_trial(
        spec,
        _config(spec, case),
        trial_dir=folder,
        simulate=True,
        extra_env={"SPEC_SWEEP_SIM_FAULT": case.fault},
        on_launch=on_launch,
    )
    ended = time.monotonic()
    clock, server = clocks[0], servers[0]
    clock.stop()
    fatal = clock.first(case.fatal)
    if fatal is None:
        raise RuntimeError(f"{case.name}: no line with {case.fatal!r} in {server.log_path}")
    run = Run(
        outcome=result.failure_mode.value,
        fatal_to_end_s=ended - fatal,
        launch_to_end_s=ended - server.started,
        fatal_after_launch_s=fatal - server.started,
    )
    return run, result.failure_mode.value


def run_readiness_only(
    spec: SweepSpec, case: Case, folder: Path, *, timeout_s: float, poll_s: float
) -> Run:
    """Launch the same command and wait like `popen_launch_server`: health + exit, no log."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = build_command(spec, _config(spec, case), port=port, simulate=True)
    argv = [sys.executable if a == "python" else a for a in command.argv]
    env = dict(os.environ, **command.env, SPEC_SWEEP_SIM_FAULT=case.fault, PYTHONUNBUFFERED="1")
    log_path = folder / "server.log"
    url = f"http://127.0.0.1:{port}/health_generate"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    started = time.monotonic()
    clock = _LineClock(log_path)
    outcome = f"timeout ({timeout_s:g} s)"
    try:
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() - started < timeout_s:
                code = proc.poll()
                if code is not None:
                    outcome = f"exited ({code})"
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        outcome = "ready: failure missed"
                        break
                code = proc.poll()
                if code is not None:
                    outcome = f"exited ({code})"
                    break
                time.sleep(min(poll_s, max(0.0, timeout_s - (time.monotonic() - started))))
    finally:
        stop_process_group(proc.pid, grace_s=0.0, leader=proc)  # kill_process_tree: SIGKILL
    ended = time.monotonic()
    clock.stop()
    fatal = clock.first(case.fatal)
    if fatal is None:
        raise RuntimeError(f"{case.name}: no line with {case.fatal!r} in {log_path}")
    ready_line = clock.first(READY)
    return Run(
        outcome=outcome,
        fatal_to_end_s=ended - fatal,
        launch_to_end_s=ended - started,
        fatal_after_launch_s=fatal - started,
        ready_line_after_launch_s=None if ready_line is None else ready_line - started,
    )


def sglang_long_timeout(measured: Run, case: Case, *, poll_s: float) -> tuple[str, float]:
    """Readiness-only at `boot_timeout_s: 1800` for a server that never answers (computed).

    The main process keeps running until it kills itself, `case.exits_after_s` after the fatal
    line (the OOM-and-hang: its warm-up request times out 600 s after the warm-up started, which
    is when the worker died; the crash after ready: SGLang's crash diagnostics, 65 s); the wait
    notices at its next poll. Polls happen every `poll_s` (plus the poll's own few milliseconds)
    from launch.
    """
    exit_at = measured.fatal_after_launch_s + case.exits_after_s
    if exit_at >= SPEC_BOOT_TIMEOUT_S:
        return f"timeout ({SPEC_BOOT_TIMEOUT_S:g} s)", SPEC_BOOT_TIMEOUT_S - (
            measured.fatal_after_launch_s
        )
    noticed = math.ceil(exit_at / poll_s) * poll_s
    return "exited (-9), computed", noticed - measured.fatal_after_launch_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="trial-path runs per case")
    parser.add_argument(
        "--boot-timeout", type=float, default=60.0, help="boot timeout of the measured wait"
    )
    parser.add_argument("--quick", action="store_true", help="skip the 10 s-poll runs")
    parser.add_argument("--time-scale", default="0", help="SPEC_SWEEP_SIM_TIME_SCALE")
    args = parser.parse_args()
    os.environ["SPEC_SWEEP_SIM_TIME_SCALE"] = args.time_scale
    os.environ.pop("SPEC_SWEEP_SIM_FAULT", None)

    rows = []
    with tempfile.TemporaryDirectory(prefix="failure-detection-") as tmp:
        root = Path(tmp)
        specs = {v: _write_spec(root, v) for v in _PARAMS}
        for index, case in enumerate(CASES):
            spec = specs[case.version]
            ours = [run_ours(spec, case, root / f"ours-{index}-{i}") for i in range(args.repeat)]
            mode = ours[0][1]
            ours_s = statistics.median(run.fatal_to_end_s for run, _ in ours)
            quick = run_readiness_only(
                spec,
                case,
                root / f"ready-{index}-quick",
                timeout_s=args.boot_timeout,
                poll_s=VLLM_POLL_S,
            )
            if quick.outcome.startswith("timeout"):
                slow_outcome, slow_s = sglang_long_timeout(quick, case, poll_s=SGLANG_POLL_S)
            elif args.quick:
                slow_outcome, slow_s = "(skipped)", math.nan
            else:
                slow = run_readiness_only(
                    spec,
                    case,
                    root / f"ready-{index}-slow",
                    timeout_s=SPEC_BOOT_TIMEOUT_S,
                    poll_s=SGLANG_POLL_S,
                )
                slow_outcome, slow_s = slow.outcome, slow.fatal_to_end_s
            rows.append((case, mode, ours_s, quick, slow_outcome, slow_s))
            print(f"done: {case.name} [{case.label}]", file=sys.stderr, flush=True)

    print()
    print(
        f"Seconds from the fatal log line to the end of the trial (simulated "
        f"rtx-pro-6000-pcie-x8, time scale {args.time_scale}; trial path: median of "
        f"{args.repeat}, spec boot_timeout_s {SPEC_BOOT_TIMEOUT_S:g})."
    )
    print(
        f"readiness-only A: health + exit polls every {VLLM_POLL_S:g} s, boot timeout "
        f"{args.boot_timeout:g} s (measured). readiness-only B: as SGLang's popen_launch_server, "
        f"polls every {SGLANG_POLL_S:g} s, boot timeout {SPEC_BOOT_TIMEOUT_S:g} s (measured, or "
        "computed where marked)."
    )
    table = [
        (
            "case",
            "configuration",
            "trial path: mode",
            "s",
            "readiness-only A",
            "s",
            "A/ours",
            "readiness-only B",
            "s",
            "B/ours",
        )
    ]
    for case, mode, ours_s, quick, slow_outcome, slow_s in rows:
        table.append(
            (
                case.name,
                case.label,
                mode,
                f"{ours_s:.2f}",
                quick.outcome,
                f"{quick.fatal_to_end_s:.2f}",
                _ratio(quick.outcome, quick.fatal_to_end_s, ours_s),
                slow_outcome,
                "-" if math.isnan(slow_s) else f"{slow_s:.2f}",
                _ratio(slow_outcome, slow_s, ours_s),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for number, row in enumerate(table):
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
        if number == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def _ratio(outcome: str, seconds: float, ours_s: float) -> str:
    if outcome.startswith("ready"):
        return "missed"
    if math.isnan(seconds):
        return "-"
    return f"{seconds / ours_s:.1f}x"


if __name__ == "__main__":
    main()
