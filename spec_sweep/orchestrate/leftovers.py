"""What a killed driver left behind: its servers and the Ray cluster it started.

Before a sweep starts (or resumes), the servers recorded in its trial folders (`server.json`)
and the processes of a local Ray cluster the previous driver started (their PIDs and temp dir,
kept in the state folder) are stopped, so nothing of a crashed run holds the node's GPUs.
"""

from __future__ import annotations

import contextlib

import psutil

from spec_sweep.node.procs import kill_processes, kill_processes_matching
from spec_sweep.node.server import kill_recorded_servers
from spec_sweep.store.state import SweepState

__all__ = ["clean_leftovers"]


def clean_leftovers(state: SweepState) -> list[str]:
    """Kill servers and Ray processes that an earlier, killed run left behind."""
    done: list[str] = []
    state.stop_file.unlink(missing_ok=True)
    for record in kill_recorded_servers(state.trials_dir):
        done.append(f"server group {record['pgid']}")
    recorded: list[psutil.Process] = []
    for entry in state.data.get("ray_pids") or []:
        with contextlib.suppress(psutil.Error, KeyError, TypeError):
            proc = psutil.Process(int(entry["pid"]))
            if proc.create_time() == entry["create_time"]:
                recorded.append(proc)
                done.append(f"Ray process {entry['pid']} ({entry.get('name', '')})")
    kill_processes(lambda: recorded, grace_s=0.0, wait_s=5.0)
    if state.data.get("ray_pids"):
        state.save_ray_pids([])
    temp_dir = state.data.get("ray_temp_dir")
    if temp_dir:
        for pid in kill_processes_matching(temp_dir):
            done.append(f"Ray process {pid}")
    return done
