"""Tests for spec_sweep.node.gpu without GPUs: on a machine with no NVIDIA driver or device every
call reports "no GPUs" and returns at once (tests/gpu/test_gpu_guard.py covers real GPUs), plus the
GpuBusyError message, which needs no GPU."""

from __future__ import annotations

import pickle

import pytest

from spec_sweep.errors import SpecSweepError, TrialError
from spec_sweep.node.gpu import (
    GpuBusyError,
    GpuProcess,
    PeakMemorySampler,
    describe_gpus,
    gpu_processes,
    list_gpus,
    wait_for_free_gpus,
    wait_for_release,
)

no_gpus = pytest.mark.skipif(
    bool(list_gpus()), reason="this machine has GPUs; tests/gpu/test_gpu_guard.py covers them"
)


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"slept {seconds}s although there is nothing to wait for")


@no_gpus
def test_no_gpus_are_listed_or_described() -> None:
    assert list_gpus() == []
    assert describe_gpus() == "no GPUs"
    assert gpu_processes() == []
    assert gpu_processes([0, 1, 7]) == []


@no_gpus
def test_waits_return_at_once_without_gpus() -> None:
    wait_for_free_gpus(timeout_s=0.0, sleep=_no_sleep)
    wait_for_free_gpus([0, 1], timeout_s=3600.0, poll_s=0.01, sleep=_no_sleep)
    assert wait_for_release([1234, 5678], timeout_s=3600.0, sleep=_no_sleep) == []
    assert wait_for_release([], timeout_s=0.0, sleep=_no_sleep) == []


@no_gpus
def test_sampler_has_no_peak_without_gpus() -> None:
    with PeakMemorySampler(interval_s=0.01) as sampler:
        pass
    assert sampler.peak_gib is None
    assert sampler.peak_per_gpu == {}


def test_busy_error_names_gpu_pid_process_and_memory() -> None:
    holders = [
        GpuProcess(gpu_index=0, pid=4242, used_gib=70.25, name="python3"),
        GpuProcess(gpu_index=1, pid=4242, used_gib=70.0, name="python3"),
        GpuProcess(gpu_index=3, pid=99, used_gib=0.0, name=""),
    ]
    error = GpuBusyError(holders, 30.4)
    message = str(error)
    assert isinstance(error, TrialError)  # the machinery failed: retried, never recorded
    assert isinstance(error, SpecSweepError)
    assert "\n" not in message
    assert message.startswith("GPUs still busy after 30s: GPU 0 pid 4242 (python3) 70.2 GiB, ")
    assert "GPU 3 pid 99 0.0 GiB" in message
    assert "kill 4242 99" in message
    assert error.pids == (4242, 99)
    assert error.processes == tuple(holders)


def test_busy_error_survives_pickling() -> None:
    error = GpuBusyError([GpuProcess(0, 7, 1.5, "sglang::scheduler")], 5.0)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, GpuBusyError)
    assert str(copy) == str(error)
    assert copy.pids == (7,)


def test_visible_indices_follow_cuda_visible_devices() -> None:
    from spec_sweep.node.gpu import visible_indices

    assert visible_indices(8, None) == list(range(8))
    assert visible_indices(8, "") == []
    assert visible_indices(8, "3,1") == [3, 1]
    assert visible_indices(2, "1,5,0") == [1]  # CUDA stops at the first invalid entry
    assert visible_indices(4, "0,0,2") == [0, 2]
    assert visible_indices(4, "-1,2") == []
