"""Launch one server, watch it boot, and tear it down with everything it started.

This module owns a server's process life (STYLE "Processes"). `launch_server` starts the
command in its own session (so its process group holds SGLang's worker grandchildren too),
with `PR_SET_PDEATHSIG` so it dies with the thread that launched it, output to a per-trial log
file, and writes the group id to a small JSON record so a later run can kill what is left of it
whatever happened to its parent. `ServerProcess.wait_ready` polls `/health_generate` and the
process in one loop against a monotonic deadline while a `LogWatcher` thread follows the log:
a fatal line (`classify.find_fatal`), or a line that says one of SGLang's processes failed
(`classify.find_child_failed`), ends the wait at once even if the main process keeps running.
Stopping goes through `procs.stop_process_group` (SIGTERM to the group, SIGKILL after a grace
period, wait until no process of the group is left).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import psutil

from spec_sweep.core.secrets import TRACKING_SECRET_VARS, redact
from spec_sweep.node.classify import find_child_failed, find_fatal
from spec_sweep.node.command import ServerCommand
from spec_sweep.node.log_patterns import LogPattern
from spec_sweep.node.procs import group_pids, stop_process_group

__all__ = [
    "FatalLine",
    "LogWatcher",
    "ReadyResult",
    "ServerProcess",
    "api_key_headers",
    "free_port",
    "kill_recorded_servers",
    "launch_server",
]

_PR_SET_PDEATHSIG = 1
_RECORD_NAME = "server.json"


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (from binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """preexec_fn: SIGKILL this process when the launching thread exits (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True, slots=True)
class FatalLine:
    """A log line that decided a server's fate."""

    line_no: int
    text: str
    pattern: LogPattern


class LogWatcher(threading.Thread):
    """Follows a growing log file line by line and flags the first fatal line."""

    def __init__(self, path: Path, *, poll_s: float = 0.05) -> None:
        """Watch `path` (which may not exist yet)."""
        super().__init__(name=f"logwatch-{path.name}", daemon=True)
        self._path = path
        self._poll_s = poll_s
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._consumed = 0  # bytes of the file read and classified (complete lines)
        self.fatal_event = threading.Event()
        self.ready_event = threading.Event()
        self.fatal: FatalLine | None = None
        #: What the first line saying one of the server's processes failed said (None: none yet)
        self.child_failed: str | None = None
        self.lines = 0

    def stop(self) -> None:
        """Read what is left, then stop."""
        self._stop_event.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout=2.0)

    def catch_up(self, *, timeout_s: float = 1.0) -> None:
        """Return once every line written to the log so far has been read and classified.

        The watcher polls; a server that prints a fatal line and then answers its health check
        at once (SGLang 0.5.13 prints FlashInfer fusion's failure as a warning and boots) would
        otherwise be found ready before the line is read.
        """
        try:
            target = self._path.stat().st_size
        except FileNotFoundError:
            return
        deadline = time.monotonic() + timeout_s
        while self._consumed < target and self.is_alive() and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.005)

    def run(self) -> None:
        """Thread body: tail the file until stopped."""
        pending = b""
        handle = None
        try:
            while True:
                stopping = self._stop_event.is_set()
                if handle is None:
                    with contextlib.suppress(FileNotFoundError):
                        handle = self._path.open("rb")
                if handle is not None:
                    chunk = handle.read()
                    if chunk:
                        pending += chunk
                        *complete, pending = pending.split(b"\n")
                        for raw in complete:
                            self._line(raw.decode("utf-8", "replace"))
                            self._consumed += len(raw) + 1
                if stopping:
                    if pending:
                        self._line(pending.decode("utf-8", "replace"))
                    return
                self._wake.wait(self._poll_s)
                self._wake.clear()
        finally:
            if handle is not None:
                handle.close()

    def _line(self, text: str) -> None:
        self.lines += 1
        if "The server is fired up and ready to roll" in text:
            self.ready_event.set()
        if self.fatal is None:
            pattern = find_fatal(text)
            if pattern is not None:
                self.fatal = FatalLine(self.lines, text.rstrip(), pattern)
                self.fatal_event.set()
        if self.child_failed is None:
            self.child_failed = find_child_failed(text)
            if self.child_failed is not None:
                self.fatal_event.set()

    @property
    def failed(self) -> bool:
        """Whether a fatal line or a failed process has been seen."""
        return self.fatal is not None or self.child_failed is not None


@dataclass(frozen=True, slots=True)
class ReadyResult:
    """How a readiness wait ended."""

    ready: bool
    boot_s: float
    exit_code: int | None = None
    fatal: FatalLine | None = None
    timed_out: bool = False
    child_failed: str | None = None


class ServerProcess:
    """A launched server: its process, group, port, log and watcher."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        command: ServerCommand,
        host: str,
        port: int,
        log_path: Path,
        record_path: Path | None,
    ) -> None:
        """Wrap a started process (use `launch_server`)."""
        self.proc = proc
        self.pgid = proc.pid  # session leader: its pid is the group id
        self.command = command
        self.host = host
        self.port = port
        self.log_path = log_path
        self.record_path = record_path
        self.started = time.monotonic()
        self.stopped = False
        #: Writes the output of a server launched with secrets to its log (`launch_server`).
        self.pump: _RedactingPump | None = None
        #: What every request to it sends: its API key, when it was launched with one.
        self.headers: dict[str, str] = {}
        self.watcher = LogWatcher(log_path)
        self.watcher.start()

    @property
    def base_url(self) -> str:
        """The server's HTTP root."""
        return f"http://{self.host}:{self.port}"

    def wait_ready(self, *, timeout_s: float, poll_s: float = 0.1) -> ReadyResult:
        """Wait until `/health_generate` answers 200, the process exits, or a fatal line (or a
        line saying one of its processes failed) shows.

        Args:
            timeout_s: The boot deadline (`node.boot_timeout_s`), from launch.
            poll_s: Health poll interval.
        """
        deadline = self.started + timeout_s
        with httpx.Client(timeout=httpx.Timeout(max(poll_s * 20, 2.0))) as client:
            while True:
                now = time.monotonic()
                if self.watcher.failed:
                    code = self.settle()
                    self.watcher.catch_up()
                    return ReadyResult(
                        False,
                        now - self.started,
                        code,
                        self.watcher.fatal,
                        child_failed=self.watcher.child_failed,
                    )
                code = self.proc.poll()
                if code is not None:
                    self.drain()
                    self.watcher.stop()  # read the last lines before deciding
                    return ReadyResult(False, now - self.started, code, self.watcher.fatal)
                if now >= deadline:
                    return ReadyResult(False, now - self.started, None, None, timed_out=True)
                if self._healthy(client, timeout=min(2.0, max(0.05, deadline - now))):
                    self.watcher.catch_up()  # a fatal line printed just before readiness
                    if self.watcher.failed:
                        continue
                    return ReadyResult(True, time.monotonic() - self.started)
                self.watcher.fatal_event.wait(min(poll_s, max(0.0, deadline - time.monotonic())))

    def drain(self, timeout_s: float = 2.0) -> None:
        """Wait until the output of an exited server is in its log (with a redacting pump)."""
        if self.pump is not None:
            self.pump.drain(timeout_s)

    def settle(self, *, seconds: float = 1.0) -> int | None:
        """After a fatal line: let the server finish printing its traceback (up to `seconds`).

        Returns:
            The exit code if the process exited meanwhile.
        """
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def _healthy(self, client: httpx.Client, *, timeout: float) -> bool:
        try:
            response = client.get(f"{self.base_url}/health_generate", timeout=timeout)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def stop(self, *, grace_s: float = 10.0) -> int | None:
        """Stop the whole process group (SIGTERM, then SIGKILL); returns the exit code."""
        self.stopped = True
        stop_process_group(self.pgid, grace_s=grace_s, leader=self.proc)
        code = self.proc.poll()
        self.drain()
        self.watcher.stop()
        if self.record_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.record_path.unlink()
        return code

    def log_text(self) -> str:
        """The whole log so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


def launch_server(
    command: ServerCommand,
    *,
    log_path: Path,
    host: str = "127.0.0.1",
    port: int,
    extra_env: Mapping[str, str] | None = None,
    record_dir: Path | None = None,
    node_id: str | None = None,
    resolved: ServerCommand | None = None,
    hide: Sequence[str] = (),
) -> ServerProcess:
    """Start a server in its own process group, output to `log_path`.

    A leading `python` in the command runs this interpreter (`sys.executable`), so a Ray worker
    or a virtual environment launches the server it has. The server does not inherit the
    tracking server's credentials (`core.secrets.TRACKING_SECRET_VARS`). With secrets
    (`resolved` and `hide`), the process runs `resolved` (the command with their values) while
    the record and `ServerProcess.command` keep `command` (placeholders), and its output reaches
    `log_path` through a thread that writes each line with the `hide` values and secret-named
    values redacted (`core.secrets.redact`): SGLang prints its own arguments.

    Args:
        command: argv (including `--host/--port`) and the environment it adds.
        log_path: stdout and stderr go here.
        host: Where the server listens.
        port: Its port.
        extra_env: Environment added on top of the command's (e.g. simulator settings).
        record_dir: Where to write `server.json` (pid, group, start time) for later cleanup.
        node_id: The Ray node the server runs on (recorded, so cleanup stays on its node).
        resolved: The command with its secrets' values, run instead of `command`.
        hide: Secret values to keep out of the log.
    """
    shown = list(command.argv)
    if shown and shown[0] in ("python", "python3"):
        shown[0] = sys.executable
    run = resolved or command
    argv = [shown[0], *run.argv[1:]] if shown else list(run.argv)
    env = {k: v for k, v in os.environ.items() if k not in TRACKING_SECRET_VARS}
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(run.env)
    if extra_env:
        env.update(extra_env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pump = None
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if resolved is not None else log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    if resolved is not None:
        assert proc.stdout is not None
        pump = _RedactingPump(proc.stdout, log_path, hide)
        pump.start()
    argv = shown
    record_path = None
    if record_dir is not None:
        record_path = record_dir / _RECORD_NAME
        record = {
            "pid": proc.pid,
            "pgid": proc.pid,
            "create_time": _create_time(proc.pid),
            "port": port,
            "argv": argv,
            "log": str(log_path),
            "node_id": node_id,
        }
        record_path.write_text(json.dumps(record))
    server = ServerProcess(
        proc, command=command, host=host, port=port, log_path=log_path, record_path=record_path
    )
    server.pump = pump
    server.headers = api_key_headers(run.argv)
    return server


def api_key_headers(argv: Sequence[str]) -> dict[str, str]:
    """`Authorization: Bearer KEY` for a server launched with `--api-key KEY` (SGLang then
    refuses every request without it but its health checks), else nothing."""
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name == "--api-key":
            key = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            return {"Authorization": f"Bearer {key}"} if key else {}
    return {}


class _RedactingPump(threading.Thread):
    """Copies a server's output to its log file line by line, secrets redacted."""

    def __init__(self, stream: IO[bytes], log_path: Path, hide: Sequence[str]) -> None:
        super().__init__(name=f"logpump-{log_path.parent.name}", daemon=True)
        self._stream = stream
        self._log_path = log_path
        self._hide = tuple(hide)

    def run(self) -> None:
        with self._log_path.open("ab") as log, contextlib.suppress(OSError, ValueError):
            for raw in iter(self._stream.readline, b""):
                text = raw.decode("utf-8", "replace")
                log.write(redact(text, self._hide).encode("utf-8"))
                log.flush()
        with contextlib.suppress(OSError):
            self._stream.close()

    def drain(self, timeout_s: float) -> None:
        """Wait (up to `timeout_s`) until what the server printed is in the log."""
        if self.is_alive():
            self.join(timeout=timeout_s)


def _create_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def kill_recorded_servers(
    root: Path, *, grace_s: float = 5.0, node_id: str | None = None
) -> list[dict[str, Any]]:
    """Kill every server recorded under `root` (`**/server.json`) that is still alive.

    A record whose pid was reused by another process (different start time) is not touched;
    with `node_id`, only servers recorded by that Ray node are (several nodes of one host share
    the folder).

    Returns:
        The records of the groups that were found alive and stopped.
    """
    stopped: list[dict[str, Any]] = []
    for record_path in sorted(root.glob(f"**/{_RECORD_NAME}")):
        try:
            record = json.loads(record_path.read_text())
            pgid = int(record["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if node_id is not None and record.get("node_id") not in (None, node_id):
            continue
        alive = group_pids(pgid)
        leader_time = _create_time(int(record.get("pid", pgid)))
        same_leader = leader_time is not None and leader_time == record.get("create_time")
        if alive and (same_leader or leader_time is None):
            stop_process_group(pgid, grace_s=grace_s)
            stopped.append(record)
        with contextlib.suppress(FileNotFoundError):
            record_path.unlink()
    return stopped
