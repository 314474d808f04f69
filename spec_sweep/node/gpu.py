"""The node's GPUs as NVML sees them: this module is the only one that imports ``pynvml`` (from the
nvidia-ml-py package). It lists the GPUs, finds the processes holding their memory, waits until
they are free before a trial (``wait_for_free_gpus``) and until a stopped server's processes have
let go after it (``wait_for_release``), and samples peak memory while a trial runs
(``PeakMemorySampler``). On a machine without NVIDIA GPUs or driver (NVML library not found,
driver not loaded, no device) every function reports "no GPUs" and does nothing else; any other
NVML failure is a ``TrialError``. NVML is initialised once per process and never shut down.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from spec_sweep.errors import TrialError

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency; degrade all the same
    pynvml = None

__all__ = [
    "GpuBusyError",
    "GpuInfo",
    "GpuProcess",
    "PeakMemorySampler",
    "describe_gpus",
    "gpu_processes",
    "list_gpus",
    "wait_for_free_gpus",
    "wait_for_release",
]

_GIB = float(1 << 30)
_lock = threading.Lock()
_state: list[bool] = []  # [] not tried yet, [True] NVML initialised, [False] no GPUs here


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU.

    Attributes:
        index: NVML device index.
        name: Product name, e.g. ``"NVIDIA H200"``.
        uuid: Device UUID (``"GPU-..."``).
        memory_total_gib: Total memory in GiB.
        memory_used_gib: Memory in use now, in GiB (all processes and the driver).
    """

    index: int
    name: str
    uuid: str
    memory_total_gib: float
    memory_used_gib: float


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU.

    Attributes:
        gpu_index: NVML index of the GPU.
        pid: Process id as NVML reports it (the host's PID namespace).
        used_gib: Memory it holds on that GPU in GiB (0.0 when NVML cannot tell).
        name: Process name from ``/proc/<pid>/comm``, or ``""`` when not visible from here.
    """

    gpu_index: int
    pid: int
    used_gib: float
    name: str


class GpuBusyError(TrialError):
    """Other processes kept holding memory on the GPUs a trial needs.

    Attributes:
        processes: What held the GPUs when the wait gave up.
        waited_s: How long the wait lasted.
    """

    def __init__(self, processes: Sequence[GpuProcess], waited_s: float) -> None:
        self.processes = tuple(processes)
        self.waited_s = waited_s
        holders = ", ".join(
            f"GPU {p.gpu_index} pid {p.pid}"
            + (f" ({p.name})" if p.name else "")
            + f" {p.used_gib:.1f} GiB"
            for p in self.processes
        )
        pids = " ".join(str(pid) for pid in self.pids)
        super().__init__(
            f"GPUs still busy after {waited_s:.0f}s: {holders}; stop those processes "
            f"(e.g. kill {pids}) or wait until they finish, then run again"
        )

    def __reduce__(self) -> tuple[type[GpuBusyError], tuple[tuple[GpuProcess, ...], float]]:
        # Rebuild from the fields (not from the message) so that Ray can pickle it.
        return (type(self), (self.processes, self.waited_s))

    @property
    def pids(self) -> tuple[int, ...]:
        """The distinct PIDs that held the GPUs, in order of appearance."""
        return tuple(dict.fromkeys(p.pid for p in self.processes))


def _nvml_available() -> bool:
    """Initialise NVML once; False when this machine has no NVIDIA driver or library."""
    with _lock:
        if not _state:
            if pynvml is None:  # pragma: no cover - see the import
                _state.append(False)
            else:
                try:
                    pynvml.nvmlInit()
                except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded):
                    _state.append(False)
                except pynvml.NVMLError as exc:
                    raise TrialError(
                        f"NVML could not start: {exc}; check the driver with nvidia-smi"
                    ) from exc
                else:
                    _state.append(True)
        return _state[0]


def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML function, turning its errors into TrialError."""
    assert pynvml is not None
    try:
        return function(*args)
    except pynvml.NVMLError as exc:
        raise TrialError(
            f"NVML {function.__name__} failed: {exc}; check the GPUs with nvidia-smi"
        ) from exc


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _device_count() -> int:
    if not _nvml_available():
        return 0
    return int(_call(pynvml.nvmlDeviceGetCount))


def visible_indices(count: int, cuda_visible: str | None) -> list[int]:
    """NVML indices of the GPUs a process may use, from `CUDA_VISIBLE_DEVICES`.

    The node's GPUs are the ones its servers can see: unset means all of them; otherwise the
    variable lists indices or `GPU-...` UUIDs (CUDA stops at the first entry it cannot parse, and
    so does this). Index order is NVML's (PCI bus order), which is CUDA's on a node of one GPU
    model; UUIDs are exact.

    Args:
        count: NVML's device count.
        cuda_visible: The variable's value, or None when unset.
    """
    if cuda_visible is None:
        return list(range(count))
    uuids: dict[str, int] = {}
    chosen: list[int] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if entry.isdigit():
            index = int(entry)
            if index >= count:
                break
        elif entry.startswith(("GPU-", "MIG-")):
            if not uuids:
                uuids = {
                    _text(
                        _call(pynvml.nvmlDeviceGetUUID, _call(pynvml.nvmlDeviceGetHandleByIndex, i))
                    ): i
                    for i in range(count)
                }
            match = [i for uuid, i in uuids.items() if uuid.startswith(entry)]
            if len(match) != 1:
                break
            index = match[0]
        else:
            break
        if index not in chosen:
            chosen.append(index)
    return chosen


def _handles(indices: Sequence[int] | None) -> list[tuple[int, Any]]:
    count = _device_count()
    if indices is None:
        wanted: Sequence[int] = visible_indices(count, os.environ.get("CUDA_VISIBLE_DEVICES"))
    else:
        wanted = [i for i in indices if 0 <= i < count]
    return [(i, _call(pynvml.nvmlDeviceGetHandleByIndex, i)) for i in wanted]


def _used_gib(handle: Any) -> float:
    return float(_call(pynvml.nvmlDeviceGetMemoryInfo, handle).used) / _GIB


def list_gpus() -> list[GpuInfo]:
    """The GPUs of this machine, in NVML order; empty when there are none."""
    gpus = []
    for index, handle in _handles(None):
        memory = _call(pynvml.nvmlDeviceGetMemoryInfo, handle)
        gpus.append(
            GpuInfo(
                index=index,
                name=_text(_call(pynvml.nvmlDeviceGetName, handle)),
                uuid=_text(_call(pynvml.nvmlDeviceGetUUID, handle)),
                memory_total_gib=float(memory.total) / _GIB,
                memory_used_gib=float(memory.used) / _GIB,
            )
        )
    return gpus


def describe_gpus() -> str:
    """One line for people: ``"8 x NVIDIA H200 (139.8 GiB)"`` or ``"no GPUs"``."""
    groups: dict[tuple[str, float], int] = {}
    for info in list_gpus():
        key = (info.name, round(info.memory_total_gib, 1))
        groups[key] = groups.get(key, 0) + 1
    if not groups:
        return "no GPUs"
    return ", ".join(f"{n} x {name} ({gib:.1f} GiB)" for (name, gib), n in groups.items())


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def gpu_processes(indices: Sequence[int] | None = None) -> list[GpuProcess]:
    """The processes holding memory on the given GPUs (compute and graphics contexts).

    Args:
        indices: NVML indices to look at; None for all GPUs. Indices that do not exist are
            ignored.

    Returns:
        One entry per (GPU, process); empty without GPUs.
    """
    found: dict[tuple[int, int], GpuProcess] = {}
    for index, handle in _handles(indices):
        running = [
            *_call(pynvml.nvmlDeviceGetComputeRunningProcesses, handle),
            *_call(pynvml.nvmlDeviceGetGraphicsRunningProcesses, handle),
        ]
        for process in running:
            pid = int(process.pid)
            used = process.usedGpuMemory
            used_gib = float(used) / _GIB if used is not None else 0.0
            known = found.get((index, pid))
            if known is None or used_gib > known.used_gib:
                found[(index, pid)] = GpuProcess(index, pid, used_gib, _process_name(pid))
    return list(found.values())


def _holders(indices: Sequence[int] | None, ignore_pids: Collection[int]) -> list[GpuProcess]:
    return [p for p in gpu_processes(indices) if p.pid not in ignore_pids]


def wait_for_free_gpus(
    indices: Sequence[int] | None = None,
    *,
    timeout_s: float,
    poll_s: float = 1.0,
    ignore_pids: Collection[int] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Wait until no other process holds memory on the GPUs.

    Returns at once without GPUs.

    Args:
        indices: NVML indices of the GPUs the trial will use; None for all.
        timeout_s: How long to wait before giving up.
        poll_s: Seconds between looks.
        ignore_pids: Processes that may hold the GPUs (e.g. the caller itself).
        clock: Monotonic clock (tests may pass a fake one).
        sleep: Sleep function matching ``clock``.

    Raises:
        GpuBusyError: Processes still held the GPUs when ``timeout_s`` had passed; the message
            names GPU, PID, process name and GiB of each.
    """
    start = clock()
    deadline = start + timeout_s
    while True:
        holders = _holders(indices, ignore_pids)
        if not holders:
            return
        now = clock()
        if now >= deadline:
            raise GpuBusyError(holders, now - start)
        sleep(min(poll_s, deadline - now))


def wait_for_release(
    pids: Collection[int],
    *,
    timeout_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[GpuProcess]:
    """After a teardown, wait until none of ``pids`` holds GPU memory.

    Args:
        pids: The stopped server's processes.
        timeout_s: How long to wait.
        poll_s: Seconds between looks.
        clock: Monotonic clock (tests may pass a fake one).
        sleep: Sleep function matching ``clock``.

    Returns:
        What those processes still hold when the wait ends: empty means released (and always
        empty without GPUs).
    """
    wanted = frozenset(pids)
    deadline = clock() + timeout_s
    while True:
        holding = [p for p in gpu_processes() if p.pid in wanted] if wanted else []
        if not holding:
            return []
        now = clock()
        if now >= deadline:
            return holding
        sleep(min(poll_s, deadline - now))


class PeakMemorySampler:
    """Sample used memory per GPU in a background thread while a block runs.

    Use as a context manager; without GPUs it samples nothing and ``peak_gib`` stays None::

        with PeakMemorySampler(interval_s=0.5) as sampler:
            run_trial()
        sampler.peak_gib  # max over GPUs of each GPU's peak used memory, in GiB

    A sample is also taken on entry and on exit. If NVML fails while sampling (a GPU lost), the
    thread stops and the peaks seen so far remain.

    NVML's "used" is never 0 on an idle GPU: the driver reserves some memory (about 0.6 GiB on an
    H200) that no process holds. The entry sample is kept as each GPU's idle level, and
    ``peak_gib`` is the peak *above* it, so a server that never touched the GPU reads 0.
    """

    def __init__(self, indices: Sequence[int] | None = None, *, interval_s: float = 0.5) -> None:
        """Prepare a sampler.

        Args:
            indices: NVML indices to sample; None for all GPUs.
            interval_s: Seconds between samples.
        """
        self._indices = indices
        self._interval_s = interval_s
        self._peaks: dict[int, float] = {}
        self._idle: dict[int, float] = {}
        self._peaks_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[tuple[int, Any]] = []

    @property
    def peak_per_gpu(self) -> dict[int, float]:
        """Peak used memory in GiB per GPU index (empty without GPUs)."""
        with self._peaks_lock:
            return dict(self._peaks)

    @property
    def idle_per_gpu(self) -> dict[int, float]:
        """Used memory in GiB per GPU index at entry, before the block ran."""
        with self._peaks_lock:
            return dict(self._idle)

    @property
    def peak_gib(self) -> float | None:
        """The largest per-GPU peak above that GPU's idle level at entry, in GiB (None: no GPUs)."""
        peaks = self.peak_per_gpu
        idle = self.idle_per_gpu
        if not peaks:
            return None
        return max(max(0.0, peak - idle.get(index, 0.0)) for index, peak in peaks.items())

    def _sample(self) -> None:
        for index, handle in self._handles:
            used = _used_gib(handle)
            with self._peaks_lock:
                if used > self._peaks.get(index, -1.0):
                    self._peaks[index] = used

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._sample()
            except TrialError:
                return

    def __enter__(self) -> PeakMemorySampler:
        self._handles = _handles(self._indices)
        if self._handles:
            self._sample()
            with self._peaks_lock:
                self._idle = dict(self._peaks)
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="spec_sweep-gpu-sampler", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            with contextlib.suppress(TrialError):
                self._sample()
