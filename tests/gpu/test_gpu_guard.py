"""Tests for spec_sweep.node.gpu on a real NVIDIA GPU: a child process that takes GPU memory through
the CUDA driver API (ctypes against libcuda, so no Python package is needed) is found with its PID
by ``gpu_processes``, makes ``wait_for_free_gpus`` give up with a message naming it, shows up in
``PeakMemorySampler`` with the allocation's size, and once it is killed ``wait_for_release``
confirms its memory is gone. Skipped where NVML finds no GPU."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from spec_sweep.node.gpu import (
    GpuBusyError,
    PeakMemorySampler,
    describe_gpus,
    gpu_processes,
    list_gpus,
    wait_for_free_gpus,
    wait_for_release,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not list_gpus(), reason="no NVIDIA GPU visible to NVML"),
]

_GPU = 0
_ALLOC_GIB = 4
# Plain device allocation (cuMemAlloc) through the driver API, touched with a memset so that it
# is backed, then held until the test kills the process.
_CHILD = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
def check(result, what):
    if result != 0:
        sys.exit(f"{what} failed with CUresult {result}")
check(cuda.cuInit(0), "cuInit")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), int(sys.argv[1])), "cuDeviceGet")
context = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
size = int(sys.argv[2])
pointer = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc")
check(cuda.cuMemsetD8_v2(pointer, ctypes.c_ubyte(0), ctypes.c_size_t(size)), "cuMemsetD8")
check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
print("allocated", flush=True)
time.sleep(600)
"""


@pytest.fixture
def memory_hog() -> Iterator[subprocess.Popen[str]]:
    """A child process holding ``_ALLOC_GIB`` GiB on GPU ``_GPU``; always killed afterwards."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(_GPU), str(_ALLOC_GIB << 30)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "allocated":
            child.kill()
            _, err = child.communicate(timeout=30)
            pytest.fail(f"the allocating child failed: {line!r} {err!r}")
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def _used_gib(index: int) -> float:
    return next(g.memory_used_gib for g in list_gpus() if g.index == index)


def test_describe_gpus_counts_and_sizes() -> None:
    description = describe_gpus()
    print(f"\ndescribe_gpus(): {description}")
    assert re.fullmatch(r"\d+ x .+ \(\d+\.\d GiB\)(, \d+ x .+ \(\d+\.\d GiB\))*", description)
    gpus = list_gpus()
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert all(g.uuid.startswith("GPU-") for g in gpus)


def test_guard_sees_holds_and_releases_a_child(memory_hog: subprocess.Popen[str]) -> None:
    child = memory_hog
    before = [p for p in gpu_processes([_GPU]) if p.pid != child.pid]
    seen = [p for p in gpu_processes([_GPU]) if p.pid == child.pid]
    print(f"\ngpu_processes([{_GPU}]) for the child: {seen}")
    assert len(seen) == 1
    assert seen[0].gpu_index == _GPU
    assert seen[0].name.startswith("python")
    if seen[0].used_gib:  # NVML may not report per-process memory inside some VMs
        assert seen[0].used_gib >= _ALLOC_GIB

    start = time.monotonic()
    with pytest.raises(GpuBusyError) as caught:
        wait_for_free_gpus([_GPU], timeout_s=1.0, poll_s=0.2)
    waited = time.monotonic() - start
    print(f"GpuBusyError after {waited:.2f}s: {caught.value}")
    assert 1.0 <= waited < 10.0
    assert child.pid in caught.value.pids
    assert f"GPU {_GPU} pid {child.pid} ({seen[0].name})" in str(caught.value)

    # The deadline logic with a fake clock: no real waiting.
    fake_now = [1000.0]

    def fake_sleep(seconds: float) -> None:
        fake_now[0] += seconds

    with pytest.raises(GpuBusyError) as faked:
        wait_for_free_gpus(
            [_GPU], timeout_s=60.0, poll_s=7.0, clock=lambda: fake_now[0], sleep=fake_sleep
        )
    assert faked.value.waited_s == pytest.approx(60.0)

    ignored = {child.pid, *(p.pid for p in before)}
    wait_for_free_gpus([_GPU], timeout_s=5.0, ignore_pids=ignored)
    # Another GPU is not held by the child.
    others = [g.index for g in list_gpus() if g.index != _GPU]
    if others:
        assert child.pid not in {p.pid for p in gpu_processes(others)}


def test_sampler_sees_the_allocation_and_release_is_confirmed() -> None:
    baseline = _used_gib(_GPU)
    with PeakMemorySampler([_GPU], interval_s=0.05) as sampler:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(_GPU), str(_ALLOC_GIB << 30)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "allocated"
            time.sleep(0.5)
        finally:
            child.kill()
            child.wait(timeout=30)
    peak = sampler.peak_per_gpu[_GPU]
    print(f"\nbaseline {baseline:.2f} GiB, sampled peak {peak:.2f} GiB ({sampler.peak_gib=})")
    assert peak - baseline >= _ALLOC_GIB * 0.95
    assert sampler.peak_gib is not None
    assert sampler.peak_gib >= peak - baseline - 0.05
    assert sampler.idle_per_gpu[_GPU] < peak

    start = time.monotonic()
    still = wait_for_release([child.pid], timeout_s=30.0, poll_s=0.1)
    print(f"wait_for_release -> {still} after {time.monotonic() - start:.2f}s")
    assert still == []
    assert child.pid not in {p.pid for p in gpu_processes()}
    assert _used_gib(_GPU) - baseline < 1.0


def test_sampler_reads_zero_when_nothing_touches_the_gpu() -> None:
    # NVML's "used" on an idle H200 is about 0.6 GiB of driver reservation; a trial whose
    # server died before touching the GPU must not report it as its peak.
    with PeakMemorySampler([_GPU], interval_s=0.05):
        time.sleep(0.3)
    with PeakMemorySampler([_GPU], interval_s=0.05) as sampler:
        time.sleep(0.3)
    assert sampler.idle_per_gpu[_GPU] >= 0.0
    assert sampler.peak_gib is not None
    assert sampler.peak_gib < 0.05
