"""A sweep's state folder: identity, spec fingerprint, lock, and cleanup of what a crash left.

This module owns `.spec_sweep/<sweep name>/`: `state.json` (a stable id that ties the folder to
its MLflow parent run, the spec as it was when the sweep started, whether it runs simulated),
an exclusive lock so two drivers never run one sweep, the PIDs of a Ray cluster the sweep
started, and the per-trial folders (`trials/<id>/attempt<N>/`) whose `server.json` records let a
later run stop servers a killed driver left behind (`orchestrate.leftovers` does). `--fresh`
moves the folder aside (never deletes it); a changed spec is refused with the difference
shown.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from spec_sweep.core.secrets import is_secret_name, placeholder
from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.spec import SweepSpec
from spec_sweep.store.paths import sweep_state_dir, sweep_trials_dir

__all__ = ["SweepState", "fingerprint", "open_state", "spec_diff"]

# Keys that may change between runs of one sweep (resuming with a larger budget, say).
_MUTABLE = (
    "budget.trials",
    "budget.max_concurrent",
    "budget.max_hours",
    "tracking",
    "source",
    "description",
    # Where node.sglang_version came from (written, found on the node): the version itself stays.
    "node.sglang_version_source",
)


def fingerprint(spec: SweepSpec, *, simulate: bool) -> dict[str, Any]:
    """The parts of a spec that define a sweep's results, flattened to dotted keys."""
    dump = spec.model_dump(mode="json", by_alias=True)
    flat = _flatten(dump)
    flat = {
        k: v for k, v in flat.items() if not any(k == m or k.startswith(m + ".") for m in _MUTABLE)
    }
    flat = {k: v for k, v in flat.items() if not k.endswith(".description")}
    flat = _hide_secrets(flat, spec.node.secrets)  # a spec `seal` never saw
    flat["simulate"] = simulate
    if not simulate:
        flat = {k: v for k, v in flat.items() if k != "node.sim_profile"}
    return flat


def _hide_secrets(flat: dict[str, Any], marked: tuple[str, ...]) -> dict[str, Any]:
    """A fingerprint with each secret (`core.secrets`) of the node as its placeholder."""
    out = dict(flat)
    for key in [k for k in out if k.startswith(("node.env.", "node.server_args."))]:
        name = key.split(".", 2)[2]
        if is_secret_name(name) or name in marked:
            out[key] = placeholder(name)
    return out


def spec_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if old.get(key, "<absent>") != new.get(key, "<absent>"):
            lines.append(f"{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}")
    return lines


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


@dataclass
class SweepState:
    """An open (locked) sweep state folder."""

    path: Path
    state_id: str
    data: dict[str, Any]
    _lock: IO[str] | None = field(default=None, repr=False)
    #: This driver created the folder (no earlier run of the sweep left state).
    created: bool = False

    @property
    def stop_file(self) -> Path:
        """Present while a driver is stopping: trials ending then were interrupted."""
        return self.path / "stopping"

    @property
    def trials_dir(self) -> Path:
        """`trials/`: one folder per trial and attempt."""
        return sweep_trials_dir(self.path)

    @property
    def complete(self) -> bool:
        """Whether the sweep ran to its budget."""
        return bool(self.data.get("complete"))

    def _write(self) -> None:
        tmp = self.path / "state.json.tmp"
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True))
        tmp.replace(self.path / "state.json")

    def save_run(self, parent_run_id: str, tracking_uri: str) -> None:
        """Remember the MLflow parent run."""
        self.data.update(parent_run_id=parent_run_id, tracking_uri=tracking_uri)
        self._write()

    def save_ray_pids(self, pids: list[dict[str, Any]]) -> None:
        """Remember the processes of a Ray cluster this sweep started."""
        self.data["ray_pids"] = pids
        self._write()

    def mark_complete(self) -> None:
        """The sweep reached its budget."""
        self.data["complete"] = True
        self._write()

    @property
    def ray_temp_dir(self) -> str:
        """Temp dir of a local Ray cluster this sweep starts (short: it holds Unix sockets)."""
        return f"/tmp/spec_sweep-ray-{self.state_id[:12]}"

    def discard_if_unused(self) -> bool:
        """Remove a folder this driver created if no sweep run started in it (a refused start).

        Returns whether it was removed.
        """
        if not self.created or "parent_run_id" in self.data:
            return False
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
        return True

    def close(self) -> None:
        """Release the lock."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def open_state(
    spec: SweepSpec, *, state_dir: str | Path | None, fresh: bool, simulate: bool
) -> SweepState:
    """Open (or create) a sweep's state folder, locked for this process.

    Raises:
        SpecError: the spec changed since the sweep started (and not `fresh`), or the folder
            cannot be created.
        SpecSweepError: another driver holds the sweep.
    """
    path = sweep_state_dir(spec, state_dir)
    if fresh and path.exists():
        _lock_or_fail(path).close()  # never move a folder another driver is using
        aside = path.with_name(f"{path.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        path.rename(aside)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        given = "--state-dir" if state_dir else "the sweep's state folder"
        raise SpecError(
            f"{given}: cannot create {path} ({exc.strerror or exc}): use a folder you can write "
            "(--state-dir DIR)"
        ) from exc
    lock = _lock_or_fail(path)
    state_file = path / "state.json"
    print_ = fingerprint(spec, simulate=simulate)
    created = not state_file.exists()
    if not created:
        data = json.loads(state_file.read_text())
        old = {
            k: v for k, v in data.get("fingerprint", {}).items() if not k.endswith(".description")
        }
        # A state.json written before secrets were sealed holds their values: compare (and
        # rewrite) it without them.
        old = _hide_secrets(old, spec.node.secrets)
        diff = spec_diff(old, print_)
        if diff:
            lock.close()
            shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
            raise SpecError(
                f"{spec.source}: the spec of sweep {spec.name!r} changed since it started "
                f"({shown}): run with --fresh to start over (the old state is kept aside), "
                "or rename the sweep"
            )
        data["fingerprint"] = print_
    else:
        data = {
            "state_id": uuid.uuid4().hex,
            "name": spec.name,
            "created": time.time(),
            "fingerprint": print_,
        }
    state = SweepState(
        path=path,
        state_id=data["state_id"],
        data=data,
        _lock=lock,
        created=created,
    )
    state._write()
    return state


def _lock_or_fail(path: Path) -> IO[str]:
    handle = (path / "lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise SpecSweepError(
            f"sweep state {path} is in use by another spec-sweep run (pid {holder}): wait for "
            "it to end or stop it"
        ) from exc
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
