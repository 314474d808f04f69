"""The one process-tree killer: SIGTERM, a grace period, SIGKILL, and wait until nothing is left.

Everything spec_sweep stops goes through `kill_processes`: a server's process group at the end
of a trial (`stop_process_group`), servers a killed driver left behind, and the processes of a
local Ray cluster whose driver was killed (`kill_processes_matching`). The processes to stop are
chosen by a function that is asked again at every poll, so a process that appears while the
group is being stopped (a worker forked during teardown) is stopped too. Signals go through
`psutil.Process`, which checks the process's start time first, so a reused pid is never hit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

import psutil

__all__ = [
    "group_pids",
    "group_processes",
    "kill_processes",
    "kill_processes_matching",
    "stop_process_group",
]

_POLL_S = 0.05


def _live(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    out: list[psutil.Process] = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


def kill_processes(
    select: Callable[[], Sequence[psutil.Process]],
    *,
    grace_s: float = 10.0,
    wait_s: float = 10.0,
    on_poll: Callable[[], object] | None = None,
) -> list[int]:
    """Stop the processes `select` returns: SIGTERM, SIGKILL after `grace_s`, wait `wait_s`.

    Args:
        select: The live processes to stop; called again at every poll.
        grace_s: Seconds between SIGTERM and SIGKILL (0: SIGKILL at once after SIGTERM).
        wait_s: Seconds to wait after SIGKILL for the processes to be gone.
        on_poll: Called at every poll (e.g. `Popen.poll` to reap a child of ours).

    Returns:
        PIDs still alive at the end (empty when everything is gone).
    """
    signalled: dict[int, float] = {}

    def poll() -> list[psutil.Process]:
        if on_poll is not None:
            on_poll()
        return _live(select())

    def send(procs: list[psutil.Process], sig: signal.Signals) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    procs = poll()
    if not procs:
        return []
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        send([p for p in procs if p.pid not in signalled], signal.SIGTERM)
        signalled.update({p.pid: time.monotonic() for p in procs})
        time.sleep(_POLL_S)
        procs = poll()
    if not procs:
        return []
    deadline = time.monotonic() + wait_s
    while True:
        send(procs, signal.SIGKILL)
        procs = poll()
        if not procs or time.monotonic() >= deadline:
            return sorted(p.pid for p in procs)
        time.sleep(_POLL_S)


def group_processes(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    out: list[psutil.Process] = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.info["pid"]) == pgid:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def group_pids(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes whose process group is `pgid`."""
    return [proc.pid for proc in group_processes(pgid)]


def stop_process_group(
    pgid: int,
    *,
    grace_s: float = 10.0,
    leader: subprocess.Popen[bytes] | None = None,
    wait_s: float = 10.0,
) -> list[int]:
    """Stop every process of a group (SIGTERM, SIGKILL after `grace_s`) and wait until gone.

    Args:
        pgid: The process group.
        grace_s: Seconds between SIGTERM and SIGKILL.
        leader: The group leader's `subprocess.Popen`, if it is our child (reaped while waiting).
        wait_s: Seconds to wait after SIGKILL.

    Returns:
        PIDs still alive at the end (empty when the group is gone).
    """
    return kill_processes(
        lambda: group_processes(pgid),
        grace_s=grace_s,
        wait_s=wait_s,
        on_poll=leader.poll if leader is not None else None,
    )


def kill_processes_matching(text: str, *, grace_s: float = 5.0) -> list[int]:
    """Stop every process whose command line contains `text`, and their children.

    Used to stop what is left of a local Ray cluster whose driver was killed: its processes all
    name the cluster's temp dir. This process and its parents are spared.

    Returns:
        The PIDs that were found (and stopped).
    """
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid not in spared and text in " ".join(proc.info["cmdline"] or []):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    if child.pid not in spared:
                        found[child.pid] = child
    targets = list(found.values())
    kill_processes(lambda: targets, grace_s=grace_s, wait_s=grace_s)
    return sorted(found)
