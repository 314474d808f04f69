"""Cheaper boots: SGLang's weight-cache daemon for a sweep, and compile caches pinned per node.

This module owns two things a trial's boot can reuse from the boots before it on its node.

**Compile caches** (`node.compile_cache`, on by default): SGLang JIT-compiles kernels and
captures CUDA graphs with Triton, torch.compile (Inductor), FlashInfer, DeepGEMM and CUDA's PTX
cache, each keeping its own cache under the home folder by default, which a fresh container
loses (the first real 0.5.17 boot on the H200 spent 64.7 s capturing its decode graphs, later
boots 2.25 s). `compile_env` points every one of them at one folder per node and SGLang version
(`~/.cache/spec_sweep/compile/sglang-<version>`, or the folder `node.compile_cache` names, e.g.
a mounted volume): `SGLANG_CACHE_DIR` (0.5.18+ redirects Triton, Inductor, CUDA, TileLang and
FlashInfer under it, `environ.py:2308-2335`, unless FlashInfer was imported first; 0.5.17 reads
it for FA3 and FlashInfer autotuning), and explicitly `TRITON_CACHE_DIR`,
`TORCHINDUCTOR_CACHE_DIR`, `CUDA_CACHE_PATH`, `FLASHINFER_WORKSPACE_BASE`,
`SGLANG_DG_CACHE_DIR` (0.5.13-0.5.17 `environ.py`; DeepGEMM's `DG_JIT_CACHE_DIR` follows it),
`TVM_FFI_CACHE_DIR` (sgl-kernel's JIT, 0.5.17) and `TILELANG_CACHE_DIR`. What `node.env` sets
wins.

**The weight cache** (`node.weight_cache`, off by default; SGLang 0.5.17+): after a disk boot
of the sweep's weights on a node (the baseline, on one node), the first trial that can use it
starts `python -m sglang.srt.weight_cache.daemon` for the baseline's model and parallel layout
(`daemon_command`): one process per rank holds the loaded weights in GPU memory and serves them
over CUDA IPC. Every later non-speculative trial that loads the same weights (`eligible`: SGLang
refuses `--weight-cache-mode` with speculative decoding, and a client whose fingerprint
mismatches falls back to disk) boots with `--weight-cache-mode client`. The daemon's weights are
already resident when a client measures the memory free before loading, so SGLang's static
fraction means something else for a client (KV pool = f x (pre - held) instead of f x pre -
weights): `client_fraction` launches it with the fraction that gives the disk boot's KV pool,
from the disk boot's log (free memory, weights) and the memory the daemon holds (NVML, before
and after it started); without NVML (the simulated node) the fraction is left as it is and the
client's memory is not the disk boot's. The daemon is recorded as `daemon.json` beside the
trials (not `server.json`: a trial's cleanup of leftover servers must not stop it), ignored by
the GPU guard, and stopped with the sweep (`stop_daemons`). A daemon that does not come up is
noted and the trial boots from disk.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec_sweep.core.config import baseline_config
from spec_sweep.core.memory import same_weights
from spec_sweep.core.names import AVAIL_METRIC, RESULT_FILE, WEIGHTS_METRIC
from spec_sweep.core.secrets import secrets_of
from spec_sweep.core.versions import CACHE_DIR_SINCE, at_least
from spec_sweep.node.command import ServerCommand, launch_for
from spec_sweep.node.procs import group_pids, stop_process_group
from spec_sweep.spec import SweepSpec

__all__ = [
    "CLIENT_FLAG",
    "ClientPlan",
    "client_fraction",
    "client_mapped",
    "compile_env",
    "daemon_command",
    "daemon_pids",
    "eligible",
    "plan_client",
    "stop_daemons",
]

CLIENT_FLAG = "weight-cache-mode"
_MEM = "mem-fraction-static"
_ALGO = "speculative-algorithm"
_RECORD = "daemon.json"
_FOLDER = "_weight_cache"
#: Each rank's daemon logs this once its weights are loaded, its ready file written and its
#: socket listening ("[WeightCacheDaemon gpu=N] Listening on /tmp/...sock", weight_cache/
#: daemon.py 0.5.17:424, 0.5.23:512; each rank configures its own logging, :557 / :633). The
#: launcher's own "All N weight cache daemons on node R are ready" (0.5.17:774, 0.5.23:849) is
#: logged without any logging configured in the launcher, so it never reaches the log: the
#: first real daemon (2026-12-02, H200) was ready and waited on until the boot timeout.
LISTENING_TEXT = "] Listening on "
READY_TEXT = "weight cache daemons on node"
#: What a client's server logs when it mapped the daemon's weights, and when it did not find
#: them (no socket, or a config mismatch) and loaded from disk (weight_cache/ipc_loader.py
#: 0.5.17:155 and :114).
MAPPED_TEXT = "[IpcModelLoader] Loaded model via IPC"
FELL_BACK_TEXT = "falling back to disk load"
#: Daemon flags taken from the fixed server arguments (weight_cache/daemon.py 0.5.17:815-903).
_DAEMON_FLAGS = (
    "tp-size",
    "pp-size",
    "dp-size",
    "ep-size",
    "load-format",
    "dtype",
    "quantization",
    "model-loader-extra-config",
    "revision",
)
_DEFAULT_ROOT = "~/.cache/spec_sweep/compile"


# -- compile caches ----------------------------------------------------------------------------
def compile_env(spec: SweepSpec) -> dict[str, str]:
    """The environment that pins the node's compile caches (see the module doc)."""
    setting = spec.node.compile_cache
    if setting is False:
        return {}
    root = Path(setting if isinstance(setting, str) else _DEFAULT_ROOT).expanduser()
    base = root / f"sglang-{spec.node.sglang_version}"
    env = {
        "SGLANG_CACHE_DIR": str(base),
        "TRITON_CACHE_DIR": str(base / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"),
        "CUDA_CACHE_PATH": str(base / "nv"),
        "FLASHINFER_WORKSPACE_BASE": str(base),  # FlashInfer adds .cache/flashinfer itself
        "SGLANG_DG_CACHE_DIR": str(base / "deep_gemm"),
        "TVM_FFI_CACHE_DIR": str(base / "tvm-ffi"),
    }
    if at_least(spec.node.sglang_version, CACHE_DIR_SINCE):
        env["TILELANG_CACHE_DIR"] = str(base / "tilelang")
    return {k: v for k, v in env.items() if k not in spec.node.env}


# -- the weight cache --------------------------------------------------------------------------
def eligible(spec: SweepSpec, config: Mapping[str, Any]) -> bool:
    """Whether a trial can boot as a client: not speculative, the baseline's weights."""
    if not spec.node.weight_cache:
        return False
    algorithm = config.get(_ALGO, spec.node.server_args.get(_ALGO))
    return algorithm is None and same_weights(config, baseline_config(spec))


def daemon_command(spec: SweepSpec, *, simulate: bool = False) -> ServerCommand:
    """The daemon for the sweep's model and the baseline's layout (fixed server arguments)."""
    prefix = launch_for(spec, simulate=simulate).prefix
    if prefix[-1:] == ("spec_sweep.sim",):
        module: tuple[str, ...] = (*prefix[:-1], "spec_sweep.sim.weight_cache")
    else:
        module = (*prefix[:-1], "sglang.srt.weight_cache.daemon")
    argv = [*module, "--model-path", spec.node.model]
    args = spec.node.server_args
    for key in _DAEMON_FLAGS:
        if args.get(key) is not None:
            argv += [f"--{key}", str(args[key])]
    if args.get("trust-remote-code"):
        argv.append("--trust-remote-code")
    if prefix[-1:] == ("spec_sweep.sim",):
        argv += ["--sim-profile", str(spec.node.sim_profile)]
    env = {k: str(v) for k, v in spec.node.env.items() if v is not None}
    return ServerCommand(tuple(argv), env)


def client_fraction(
    fraction: float, *, pre_gib: float, weights_gib: float, held_gib: float
) -> float | None:
    """The static fraction that gives a client the disk boot's KV pool, or None if none can.

    A disk boot's pool is `f x pre - weights`; a client sees `pre - held` free before loading
    and loads nothing, so its pool is `f' x (pre - held)`: equal when
    `f' = (f x pre - weights) / (pre - held)`. What is left outside the pool then differs only
    by what the daemon holds beyond the weights (its own CUDA context).
    """
    free = pre_gib - held_gib
    if free <= 0:
        return None
    out = (fraction * pre_gib - weights_gib) / free
    return round(out, 4) if 0.0 < out < 1.0 else None


@dataclass(frozen=True)
class ClientPlan:
    """How a trial boots as a weight-cache client.

    Attributes:
        overrides: Flags replacing the configuration's for the launch (the client flag, and
            the translated static fraction when the daemon's memory is known).
        ignore_pids: The daemon's processes (the GPU guard lets them hold the GPUs).
        note: One line for the trial's reason.
    """

    overrides: dict[str, Any]
    ignore_pids: tuple[int, ...]
    note: str


def _folder(root: Path, node_id: str | None) -> Path:
    return root / _FOLDER / (node_id or "local")


def _disk_facts(spec: SweepSpec, root: Path) -> tuple[float, float] | None:
    """(free before loading, weights) from this node's disk boots of the baseline's weights."""
    base = baseline_config(spec)
    pre: list[float] = []
    weights: list[float] = []
    for path in root.glob(f"*/attempt*/{RESULT_FILE}"):
        with contextlib.suppress(OSError, ValueError, TypeError):
            data = json.loads(path.read_text())
            metrics = data.get("metrics") or {}
            client = f"--{CLIENT_FLAG}" in (data.get("command") or [])
            if client or not same_weights(data.get("config") or {}, base):
                continue
            if metrics.get(AVAIL_METRIC) and metrics.get(WEIGHTS_METRIC):
                pre.append(float(metrics[AVAIL_METRIC]))
                weights.append(float(metrics[WEIGHTS_METRIC]))
    return (max(pre), min(weights)) if pre else None


def daemon_pids(root: Path, node_id: str | None) -> tuple[int, ...]:
    """The processes of this node's running daemon (empty when none runs)."""
    record = _read(_folder(root, node_id) / _RECORD)
    return tuple(group_pids(int(record["pgid"]))) if record else ()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and group_pids(int(record["pgid"])) else None


def _free_gib() -> list[float] | None:
    from spec_sweep.node import gpu

    gpus = gpu.list_gpus()
    return [g.memory_total_gib - g.memory_used_gib for g in gpus] if gpus else None


def _with_secrets(spec: SweepSpec, env: Mapping[str, str]) -> dict[str, str]:
    """The daemon's environment with the values of the spec's secrets (`core.secrets`)."""
    secrets = secrets_of(spec)
    return secrets.resolve((), env)[1] if secrets is not None else dict(env)


def _start(spec: SweepSpec, folder: Path, *, simulate: bool, timeout_s: float) -> dict[str, Any]:
    """Start the daemon and wait for its ready line; returns its record."""
    folder.mkdir(parents=True, exist_ok=True)
    command = daemon_command(spec, simulate=simulate)
    argv = list(command.argv)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    before = None if simulate else _free_gib()
    log_path = folder / "daemon.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **_with_secrets(spec, command.env), "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    record: dict[str, Any] = {"pid": proc.pid, "pgid": proc.pid, "argv": argv, "held_gib": None}
    (folder / _RECORD).write_text(json.dumps(record))
    deadline = time.monotonic() + timeout_s
    while not _ready(log_path.read_text(errors="replace"), _ranks(spec)):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process_group(proc.pid, grace_s=5.0, leader=proc)
            (folder / _RECORD).unlink(missing_ok=True)
            tail = log_path.read_text(errors="replace")[-300:].strip()
            raise RuntimeError(f"the weight-cache daemon did not come up ({tail or 'no log'})")
        time.sleep(0.2)
    after = None if simulate else _free_gib()
    if before and after:
        record["held_gib"] = max(b - a for b, a in zip(before, after, strict=False))
    (folder / _RECORD).write_text(json.dumps(record))
    return record


def _ranks(spec: SweepSpec) -> int:
    """How many daemons the launcher starts on one node: one per TP x PP rank."""
    args = spec.node.server_args
    sizes = [args.get(key) for key in ("tp-size", "pp-size")]
    return math.prod(int(v) for v in sizes if isinstance(v, int) and v > 0)


def _ready(log: str, ranks: int) -> bool:
    """Whether the daemon's log says every rank is serving (see `LISTENING_TEXT`)."""
    return READY_TEXT in log or log.count(LISTENING_TEXT) >= ranks


def plan_client(
    spec: SweepSpec,
    config: Mapping[str, Any],
    *,
    root: Path,
    node_id: str | None = None,
    simulate: bool = False,
    timeout_s: float = 1800.0,
) -> ClientPlan | None:
    """How `config` boots as a client of this node's daemon (started if need be), or None to
    boot from disk: not eligible, no disk boot of the weights on this node yet, or a daemon
    that does not come up."""
    if not eligible(spec, config):
        return None
    facts = _disk_facts(spec, root)
    if facts is None:
        return None  # the first disk boot (the baseline) gives the memory facts
    folder = _folder(root, node_id)
    record = _read(folder / _RECORD)
    if record is None:
        try:
            record = _start(spec, folder, simulate=simulate, timeout_s=timeout_s)
        except (OSError, RuntimeError):
            return None
    overrides: dict[str, Any] = {CLIENT_FLAG: "client"}
    note = "booted as a weight-cache client"
    held = record.get("held_gib")
    fraction = config.get(_MEM, spec.node.server_args.get(_MEM))
    if held is not None and isinstance(fraction, int | float) and not isinstance(fraction, bool):
        pre, weights = facts
        translated = client_fraction(
            float(fraction), pre_gib=pre, weights_gib=weights, held_gib=float(held)
        )
        if translated is None:
            return None  # cannot be expressed as a client: boot from disk
        overrides[_MEM] = translated
        note += f" (--mem-fraction-static {translated:g} for the disk boot's {fraction:g})"
    return ClientPlan(overrides, tuple(group_pids(int(record["pgid"]))), note)


def client_mapped(log: str) -> bool | None:
    """Whether a client's server mapped the daemon's weights (True), loaded them from disk
    after all (False), or has not logged its load yet (None, e.g. it failed before)."""
    if FELL_BACK_TEXT in log:
        return False
    return True if MAPPED_TEXT in log else None


def stop_daemons(root: Path) -> int:
    """Stop every daemon recorded under `root` (a sweep's trials folder); returns how many."""
    stopped = 0
    for path in root.glob(f"{_FOLDER}/*/{_RECORD}"):
        record = _read(path)
        if record is not None:
            stop_process_group(int(record["pgid"]), grace_s=10.0)
            stopped += 1
        path.unlink(missing_ok=True)
    return stopped
