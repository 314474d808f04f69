"""The simulated node's process tree: light worker children, signals, and tearing it all down.

This module owns the processes. Like SGLang, the main process (HTTP server and tokenizer) has
worker children, here a "scheduler" and a "detokenizer", created with ``os.fork`` before any
event loop or thread exists (a millisecond each), left in the main process's process group and
session (not daemonized away), and set to die with their parent (``PR_SET_PDEATHSIG``). A child
does nothing but wait for commands on a pipe: print a text (a traceback, a C++ abort message),
send ``SIGQUIT`` to its parent (what SGLang's scheduler does when it hits an exception), abort
(``SIGABRT``, what ``std::terminate`` does), or exit. :func:`kill_tree_and_self` is SGLang's
``kill_process_tree(os.getpid())``: SIGKILL to every child, then to itself (exit status -9).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import struct
import sys
import time
from dataclasses import dataclass

__all__ = ["Worker", "WorkerSet", "kill_tree_and_self", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


@dataclass(slots=True)
class Worker:
    """One worker child.

    Attributes:
        name: ``"scheduler"`` or ``"detokenizer"``.
        pid: Process id.
        fd: Write end of the command pipe.
    """

    name: str
    pid: int
    fd: int


def _read_exact(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = os.read(fd, size - len(data))
        except InterruptedError:
            continue
        if not chunk:
            return None
        data += chunk
    return data


def _child_main(read_fd: int, parent: int, *, ignore_sigterm: bool) -> None:
    """Body of a worker child: obey commands until told to stop or the parent is gone."""
    set_parent_death_signal(signal.SIGKILL)
    for sig in (signal.SIGQUIT, signal.SIGCHLD, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_sigterm else signal.SIG_DFL)
    if os.getppid() != parent:
        os._exit(0)
    while True:
        header = _read_exact(read_fd, 4)
        if header is None:
            os._exit(0)
        (size,) = struct.unpack("!I", header)
        body = _read_exact(read_fd, size)
        if body is None:
            os._exit(0)
        command = json.loads(body)
        op = command.get("op")
        if op == "print":
            data = str(command.get("text", "")).encode("utf-8", "replace")
            fd = 2 if command.get("stream", "stderr") == "stderr" else 1
            while data:
                data = data[os.write(fd, data) :]
        elif op == "sigquit":
            with contextlib.suppress(ProcessLookupError):
                os.kill(parent, signal.SIGQUIT)
        elif op == "abort":
            signal.signal(signal.SIGABRT, signal.SIG_DFL)
            os.abort()
        elif op == "hang":
            while True:
                time.sleep(3600)
        elif op == "exit":
            os._exit(int(command.get("code", 0)))


class WorkerSet:
    """The worker children of the main process."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    @classmethod
    def spawn(
        cls,
        names: tuple[str, ...] = ("scheduler", "detokenizer"),
        *,
        ignore_sigterm: bool = False,
    ) -> WorkerSet:
        """Fork one child per name. Call before starting any thread or event loop.

        Args:
            names: Worker names.
            ignore_sigterm: Children ignore SIGTERM (the ``ignore-sigterm`` fault).

        Returns:
            The started workers.
        """
        parent = os.getpid()
        workers: list[Worker] = []
        for name in names:
            read_fd, write_fd = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # child
                try:
                    os.close(write_fd)
                    for other in workers:
                        with contextlib.suppress(OSError):
                            os.close(other.fd)
                    _child_main(read_fd, parent, ignore_sigterm=ignore_sigterm)
                finally:
                    os._exit(0)
            os.close(read_fd)
            workers.append(Worker(name, pid, write_fd))
        return cls(workers)

    def get(self, name: str) -> Worker | None:
        """The worker called ``name``, if any."""
        return next((w for w in self.workers if w.name == name), None)

    def tell(self, name: str, **command: object) -> None:
        """Send one command to a worker (ignored when it is gone).

        Args:
            name: Worker name.
            **command: ``op`` plus its arguments (``text``, ``stream``, ``code``).
        """
        worker = self.get(name)
        if worker is None:
            return
        body = json.dumps(command).encode()
        with contextlib.suppress(OSError):
            os.write(worker.fd, struct.pack("!I", len(body)) + body)

    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [w.pid for w in self.workers]

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every worker that is still there."""
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(worker.pid, sig)

    def reap(self, *, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the workers to exit, collecting their status."""
        deadline = time.monotonic() + timeout
        pending = set(self.pids())
        while pending and time.monotonic() < deadline:
            for pid in list(pending):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pending.discard(pid)
                    continue
                if done:
                    pending.discard(pid)
            if pending:
                time.sleep(0.005)

    def close(self) -> None:
        """Close the command pipes (a worker exits when its pipe closes)."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                os.close(worker.fd)


def kill_tree_and_self(workers: WorkerSet | None) -> None:
    """SGLang's ``kill_process_tree(os.getpid())``: SIGKILL the children, then this process.

    Args:
        workers: The children to kill first.
    """
    if workers is not None:
        workers.signal_all(signal.SIGKILL)
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # not reached
