"""The server's `LogWatcher.catch_up` (node.server): a fatal line written just before a server
answers its health check is classified before the readiness wait returns, whatever the
watcher's poll interval."""

from __future__ import annotations

import time
from pathlib import Path

from spec_sweep.node.server import LogWatcher

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
