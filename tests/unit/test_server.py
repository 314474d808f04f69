"""The server's `LogWatcher` (node.server): a fatal line written just before a server answers its
health check is classified before the readiness wait returns, whatever the watcher's poll
interval; a line saying one of SGLang's processes failed ends the wait while the main process
still lives (real 0.5.17 then waits 65 s before it exits)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness import wait_until

from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.classify import classify
from spec_sweep.node.command import ServerCommand
from spec_sweep.node.server import LogWatcher, free_port, launch_server

#: A real SGLang 0.5.17 log: EAGLE-3 (5, 2, 4) crashed on its first request (2026-12-02)
_CRASH = Path(__file__).resolve().parents[1] / "fixtures/sglang/0.5.17/eagle3-crash-s5-k2-d4.log"

_FATAL = (
    "[2026-01-01 00:00:00 TP0] Failed to initialize FlashInfer allreduce fusion workspace: "
    "No supported CUDA architectures found for major versions [9, 10]."
)


def test_catch_up_reads_every_line_written_so_far(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading weights\n")
    watcher = LogWatcher(log, poll_s=30.0)  # would not look again for 30 s on its own
    watcher.start()
    try:
        watcher.catch_up()
        assert watcher.lines == 1
        assert watcher.fatal is None
        with log.open("a") as handle:
            handle.write(_FATAL + "\nThe server is fired up and ready to roll!\n")
        t0 = time.monotonic()
        watcher.catch_up()
        waited = time.monotonic() - t0
        assert watcher.fatal is not None
        assert watcher.fatal.line_no == 2
        assert watcher.ready_event.is_set()
        assert waited < 1.0  # woken, not left to its 30 s poll
    finally:
        watcher.stop()
    assert not watcher.is_alive()


def test_catch_up_without_a_log_returns_at_once(tmp_path: Path) -> None:
    watcher = LogWatcher(tmp_path / "missing.log", poll_s=30.0)
    watcher.start()
    try:
        watcher.catch_up()
        assert watcher.lines == 0
    finally:
        watcher.stop()


def test_a_failed_sglang_process_ends_the_wait_before_the_server_exits(tmp_path: Path) -> None:
    # The real log up to SGLang's "Sleeping 5 seconds before crash diagnostics", then a main
    # process that lives on (0.5.17 sleeps 5 s, then waits 60 s for CUDA coredumps)
    text = _CRASH.read_text()
    head = text[: text.index("Sleeping 5 seconds before crash diagnostics")]
    script = tmp_path / "crashed_server.py"
    script.write_text(
        f"import sys, time\nsys.stdout.write({head!r})\nsys.stdout.flush()\ntime.sleep(120)\n"
    )
    server = launch_server(
        ServerCommand((sys.executable, str(script))),
        log_path=tmp_path / "server.log",
        port=free_port(),
    )
    try:
        ready = server.wait_ready(timeout_s=100.0, poll_s=0.05)
        assert not ready.ready
        assert ready.child_failed == "Scheduler hit an exception"
        assert ready.exit_code is None
        assert server.proc.poll() is None  # decided without waiting for the process to exit
    finally:
        server.stop(grace_s=2.0)
    outcome = classify(
        log_text=server.log_text(), exit_code=None, ready=False, child_failed=ready.child_failed
    )
    assert outcome.mode is FailureMode.CRASH
    assert "a server process failed before ready ('Scheduler hit an exception')" in outcome.reason
    assert "The expanded size of the tensor (4) must match the existing size (6)" in outcome.reason


def test_a_server_launched_with_secrets_gets_them_and_its_log_and_record_do_not(
    tmp_path: Path,
) -> None:
    # The server prints its own arguments and environment, as SGLang prints its ServerArgs.
    script = tmp_path / "server.py"
    script.write_text(
        "import os, sys, time\n"
        "token = os.environ['HF_TOKEN']\n"
        "print(f'server_args=ServerArgs(api_key={sys.argv[2]!r}) token={token}')\n"
        "sys.stdout.flush()\ntime.sleep(120)\n"
    )
    shown = ServerCommand(
        (sys.executable, str(script), "--api-key", "<secret: api-key>"),
        {"HF_TOKEN": "<secret: HF_TOKEN>"},
    )
    resolved = ServerCommand(
        (sys.executable, str(script), "--api-key", "sk-launch-value"),
        {"HF_TOKEN": "hf_launch_value"},
    )
    log = tmp_path / "server.log"
    server = launch_server(
        shown,
        log_path=log,
        port=free_port(),
        record_dir=tmp_path,
        resolved=resolved,
        hide=["sk-launch-value", "hf_launch_value"],
    )
    try:
        assert wait_until(lambda: "token=" in log.read_text(), timeout=30)
        assert server.headers == {"Authorization": "Bearer sk-launch-value"}
        record = (tmp_path / "server.json").read_text()
        assert "<secret: api-key>" in record
        assert "sk-launch-value" not in record
    finally:
        server.stop(grace_s=1.0)
    text = log.read_text()
    assert "server_args=ServerArgs(api_key='***') token=***" in text  # it got both values
    assert "launch_value" not in text
