"""The real message texts the simulated node prints, taken from the sources that print them.

This module owns every log line, warning, error message and traceback the simulator emits that a
log reader could match on: SGLang's own lines (from the 0.5.23 and 0.5.13 wheels' sources; the
file is named beside each text), PyTorch's allocator and CUDA error texts, NCCL's error strings and
warning lines, FlashInfer's JIT error, and Python's traceback layout. Two SGLang *flavors* are
covered: ``"new"`` (0.5.14 and later: ``--cuda-graph-max-bs-decode``, ``/model_info``) and
``"old"`` (0.5.13 and earlier: ``--cuda-graph-max-bs``). Nothing here decides *when* a text is
printed; :mod:`spec_sweep.sim.boot` does that. Pure functions of their arguments, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Flavor = Literal["new", "old"]

SGLANG_ROOT = "/usr/local/lib/python3.12/dist-packages/sglang"
TORCH_LIB = "/usr/local/lib/python3.12/dist-packages/torch/lib"

PID_PLACEHOLDER = -1
"""Stands for the process id in texts planned before the process runs (see ``fill_pid``)."""

# sglang/srt/entrypoints/http_server.py (_wait_and_warmup)
READY_LINE = "The server is fired up and ready to roll!"

# sglang/launch_server.py (`if __name__ == "__main__":` block, 0.5.13 and 0.5.23)
LAUNCH_WARNING = (
    f"{SGLANG_ROOT}/launch_server.py:72: UserWarning: 'python -m sglang.launch_server' is still "
    "supported, but 'sglang serve' is the recommended entrypoint.\n"
    "  Example: sglang serve --model-path <model> [options]\n"
    "  warnings.warn(\n"
)

# sglang/srt/entrypoints/engine.py (launch_phase_sigquit_handler)
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."

# sglang/srt/managers/tokenizer_manager.py (running_phase_sigquit_handler and
# dump_requests_before_crash; 0.5.17 environ.py for the switches and their defaults): once the
# server runs, a failed child's SIGQUIT gets crash diagnostics before the tree is killed
RUNNING_SIGQUIT_LINE = (
    "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
)
CRASH_DIAGNOSTICS_LINE = "Sleeping 5 seconds before crash diagnostics to let GPU activity settle."
CRASH_DIAGNOSTICS_S = 5.0
COREDUMP_WAIT_LINE = "Waiting {:.1f} seconds for CUDA coredumps before exiting."
PYSPY_ENV = "SGLANG_PYSPY_DUMP_BEFORE_CRASH"  # default on
COREDUMP_ENV = "SGLANG_CUDA_COREDUMP_BEFORE_CRASH"  # default on
COREDUMP_WAIT_ENV = "SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS"  # default 60.0

# sglang/srt/managers/scheduler.py (run_scheduler_process, `except Exception:`)
SCHEDULER_EXCEPTION_PREFIX = "Scheduler hit an exception: "

# sglang/srt/model_executor/pool_configurator.py (MemoryPoolConfig.__post_init__)
NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."

# sglang/srt/model_executor/runner_backend_utils/__init__.py (0.5.23)
_CAPTURE_FAILED_HELP_NEW = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
# sglang/srt/model_executor/cuda_graph_runner.py (0.5.13)
_CAPTURE_FAILED_HELP_OLD = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

# sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py
# (can_use_custom_all_reduce_with_nvlink); 0.5.23 tries CustomAllReduceV2 first, then
# CustomAllreduce (custom_all_reduce.py dispatch_custom_allreduce), so it warns twice.
_CUSTOM_AR_PCIE = (
    "{cls} is disabled because it's not supported on more than two PCIe-only GPUs. "
    "To silence this warning, specify disable_custom_all_reduce=True explicitly."
)

# sglang/srt/distributed/device_communicators/torch_symm_mem.py (0.5.23, TorchSymmMemCommunicator)
_SYMM_MEM_CAPABILITY = (
    "TorchSymmMemCommunicator: Device capability {major} not supported, "
    "communicator is not available."
)

# sglang/srt/layers/flashinfer_comm_fusion.py (0.5.23, _resolve_backend)
FUSION_REQUIRES_SM90 = "FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."
# flashinfer/compilation_context.py (CompilationContext.get_nvcc_flags_list), raised while JIT-
# compiling the TRT-LLM allreduce-fusion module (flashinfer/jit/comm.py, SM90/SM100 only);
# sglang 0.5.13 catches it in FlashInferWorkspaceManager.initialize and warns.
NO_SUPPORTED_ARCH_9_10 = "No supported CUDA architectures found for major versions [9, 10]."

# sglang/srt/arg_groups/serving_hook.py (0.5.23, _handle_deprecated_args)
FUSION_FLAG_DEPRECATED = (
    "--enable-flashinfer-allreduce-fusion is deprecated. "
    "Please use --flashinfer-allreduce-fusion-backend=auto instead."
)

# sglang/srt/arg_groups/moe_hook.py (0.5.23, _handle_a2a_moe) and
# sglang/srt/server_args.py (0.5.13, _handle_a2a_moe)
A2A_TOPOLOGY_NEW = (
    "Flashinfer MoE A2A requires --attn-dp-size equal to --tp-size, except for Muse Spark "
    "TP4/EP4 or TP8/EP8 prefill sequence parallelism."
)
A2A_RUNNER_NEW = (
    "FlashInfer MoE A2A is supported with flashinfer_cutlass, flashinfer_cutedsl, "
    "flashinfer_trtllm, flashinfer_trtllm_routed, or deep_gemm."
)
A2A_TOPOLOGY_OLD = (
    "Flashinfer MoE A2A is only supported with dp_size == tp_size and --enable-dp-attention"
)
A2A_RUNNER_OLD = (
    "Flashinfer MoE A2A is only supported with flashinfer_cutlass or flashinfer_cutedsl moe "
    "runner backend"
)
A2A_RUNNERS_NEW = (
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
    "deep_gemm",
)
A2A_RUNNERS_OLD = ("flashinfer_cutlass", "flashinfer_cutedsl")

# sglang/srt/arg_groups/speculative_hook.py (_handle_eagle_family)
SPEC_MAX_RUNNING_RESET = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by "
    "explicitly setting --max-running-requests."
)
# sglang/srt/server_args.py 0.5.17 (NGRAM), as the real log prints it
NGRAM_MIXED_CHUNK_OFF = (
    "The mixed chunked prefill are disabled because of using ngram speculative decoding."
)
SPEC_DRAFT_TOKENS_ADJUSTED = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)
# torch.topk in sglang/srt/speculative/eagle_utils.py (organize_draft_results) when
# num_draft_tokens - 1 exceeds the draft tree's candidates (topk + (steps - 1) * topk**2)
TOPK_OUT_OF_RANGE = "selected index k out of range"
# torch.cat in organize_draft_results when speculative_num_steps < 1 (no draft step ran)
CAT_EMPTY = "torch.cat(): expected a non-empty list of Tensors"

# NCCL src/init.cc (ncclGetErrorString); sglang pynccl_wrapper.py NCCL_CHECK prefixes "NCCL error: "
NCCL_ERROR_STRINGS = {
    "system": "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "cuda": "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    "invalid_usage": "invalid usage (run with NCCL_DEBUG=WARN for details)",
    "remote": "remote process exited or there was a network error",
}

# c10/cuda/CUDAException.cpp (c10_cuda_check_implementation) hint lines
_CUDA_ERROR_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

Frame = tuple[str, int, str, str]
"""One traceback frame: (path relative to the sglang package or absolute, line, function, code)."""


def fill_pid(text: str, pid: int) -> str:
    """Replace the process-id placeholder of a planned text with the real process id."""
    return text.replace(f":{PID_PLACEHOLDER}:{PID_PLACEHOLDER} ", f":{pid}:{pid} ")


def capture_failed_message(error: str, *, flavor: Flavor) -> str:
    """SGLang's wrapper around an exception raised during decode CUDA-graph capture.

    Source: ``sglang/srt/model_executor/runner/decode_cuda_graph_runner.py`` (0.5.23),
    ``sglang/srt/model_executor/cuda_graph_runner.py`` (0.5.13).

    Args:
        error: ``str()`` of the original exception.
        flavor: SGLang flavor.

    Returns:
        The message of the ``Exception`` SGLang raises.
    """
    helptext = _CAPTURE_FAILED_HELP_NEW if flavor == "new" else _CAPTURE_FAILED_HELP_OLD
    return f"Capture cuda graph failed: {error}\n{helptext}"


def not_enough_memory_message(mem_fraction_static: float) -> str:
    """The ``RuntimeError`` message when no KV cache fits (0.5.13 and 0.5.23 alike).

    Args:
        mem_fraction_static: The resolved ``--mem-fraction-static``.

    Returns:
        The message.
    """
    return f"{NOT_ENOUGH_MEMORY} Current value: mem_fraction_static={mem_fraction_static}"


def weights_leave_no_kv_message(
    mem_fraction_static: float, *, available_gib: float, pre_load_gib: float
) -> str:
    """The ``ValueError`` message of 0.5.14+ when the weights exceed the static budget.

    ``model_runner_kv_cache_mixin.py`` 0.5.14:103-118, ``mem_cache/kv_cache_configurator.py``
    0.5.17:1640-1655 and 0.5.23:3046-3060 (same text), checked against a real 0.5.17 log
    (tests/fixtures/sglang/0.5.17/oom-low.log).

    Args:
        mem_fraction_static: The resolved ``--mem-fraction-static``.
        available_gib: GPU memory free after the weights (target and draft) are loaded.
        pre_load_gib: GPU memory free before loading.

    Returns:
        The message.
    """
    minimum = 1 - available_gib / pre_load_gib
    suggested = math.ceil(minimum * 1000) / 1000
    return (
        "Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={mem_fraction_static}. Raise --mem-fraction-static above "
        f"{suggested:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). If using "
        "speculative decoding, draft weights are now counted."
    )


def format_size(num_bytes: float) -> str:
    """Format a byte count the way PyTorch's caching allocator does (``c10::format_size``).

    Args:
        num_bytes: A size in bytes.

    Returns:
        ``"512.00 KiB"``, ``"1.50 MiB"``, ``"2.00 GiB"`` or ``"12 bytes"``.
    """
    if num_bytes <= 1024:
        return f"{int(num_bytes)} bytes"
    if num_bytes <= 1048576:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes <= 1073741824:
        return f"{num_bytes / 1048576:.2f} MiB"
    return f"{num_bytes / 1073741824:.2f} GiB"


def torch_oom_message(
    *,
    tried_gib: float,
    gpu: int,
    total_gib: float,
    free_gib: float,
    in_use_gib: float,
    allocated_gib: float,
    reserved_unallocated_gib: float,
    private_pool_gib: float = 0.0,
) -> str:
    """The message of ``torch.OutOfMemoryError`` (c10/cuda/CUDACachingAllocator.cpp, torch 2.9;
    checked against a real torch 2.11 OOM during SGLang's CUDA-graph capture, which adds the
    "allocated in private pools (e.g., CUDA Graphs)" clause when graph pools hold memory).

    Args:
        tried_gib: Size of the failed allocation.
        gpu: CUDA device index.
        total_gib: Total capacity of the device.
        free_gib: Free memory on the device.
        in_use_gib: Memory this process holds (including non-PyTorch memory).
        allocated_gib: Memory allocated by PyTorch.
        reserved_unallocated_gib: Memory reserved by PyTorch but unallocated.
        private_pool_gib: Memory held by private pools (CUDA graphs); 0 omits the clause.

    Returns:
        The message, without the exception type.
    """
    g = 1073741824
    pools = (
        f"with {format_size(private_pool_gib * g)} allocated in private pools (e.g., CUDA Graphs), "
        if private_pool_gib > 0
        else ""
    )
    return (
        f"CUDA out of memory. Tried to allocate {format_size(tried_gib * g)}. GPU {gpu} has a "
        f"total capacity of {format_size(total_gib * g)} of which {format_size(free_gib * g)} is "
        f"free. Including non-PyTorch memory, this process has {format_size(in_use_gib * g)} "
        f"memory in use. Of the allocated memory {format_size(allocated_gib * g)} is allocated "
        f"by PyTorch, {pools}and {format_size(reserved_unallocated_gib * g)} is reserved by "
        "PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-"
        "pytorch-cuda-alloc-conf)"
    )


def invalid_device_ordinal_message() -> str:
    """``torch.AcceleratorError`` text for ``cudaErrorInvalidDevice`` (CUDAException.cpp).

    Returns:
        The message, without the exception type.
    """
    return (
        "CUDA error: invalid device ordinal\n"
        "GPU device may be out of range, do you have enough GPUs?\n" + _CUDA_ERROR_TAIL
    )


def custom_allreduce_disabled_lines(*, flavor: Flavor) -> list[str]:
    """Warnings a rank prints when custom all-reduce disables itself on more than 2 PCIe GPUs.

    Args:
        flavor: SGLang flavor (0.5.23 tries ``CustomAllReduceV2`` first, then the legacy class).

    Returns:
        One or two warning lines.
    """
    classes = ["CustomAllReduceV2", "CustomAllreduce"] if flavor == "new" else ["CustomAllreduce"]
    return [_CUSTOM_AR_PCIE.format(cls=cls) for cls in classes]


def symm_mem_unsupported_line(major: int) -> str:
    """The 0.5.23 warning when torch symmetric memory does not support the GPU generation.

    Args:
        major: CUDA compute capability major (12 for SM120).

    Returns:
        The warning line.
    """
    return _SYMM_MEM_CAPABILITY.format(major=major)


def fusion_workspace_failed_line(error: str) -> str:
    """The 0.5.13 warning when the FlashInfer fusion workspace cannot be created.

    Source: ``sglang/srt/layers/flashinfer_comm_fusion.py`` (0.5.13,
    ``FlashInferWorkspaceManager.initialize``).

    Args:
        error: ``str()`` of the exception FlashInfer raised.

    Returns:
        The warning line.
    """
    return (
        f"Failed to initialize FlashInfer workspace: {error}. "
        "Disabling flashinfer allreduce fusion permanently."
    )


def nccl_warn_no_algorithm(*, host: str, pid: int, device: int, algo: str) -> str:
    """The NCCL warning when ``NCCL_ALGO`` names an algorithm the topology cannot run.

    Source: NCCL ``src/enqueue.cc`` (topoGetAlgoInfo): ``WARN("Error : no algorithm/protocol
    available for function %s with datatype %s.%s%s", ...)``, which then returns
    ``ncclInvalidUsage`` because ``NCCL_ALGO`` was set.

    Args:
        host: Host name.
        pid: Process id.
        device: CUDA device index.
        algo: The value of ``NCCL_ALGO``.

    Returns:
        The NCCL log line.
    """
    return (
        f"{host}:{pid}:{pid} [{device}] enqueue.cc:1986 NCCL WARN Error : no algorithm/protocol "
        f"available for function AllReduce with datatype ncclBfloat16. NCCL_ALGO was set to "
        f"{algo}."
    )


def nccl_watchdog_fatal(*, rank: int, stamp: str, host: str) -> str:
    """What PyTorch's NCCL watchdog prints before it takes a rank down (C++, no Python traceback).

    Source: torch ``csrc/distributed/c10d/ProcessGroupNCCL.cpp`` (watchdog) and
    ``c10/cuda/CUDAException.cpp``; ends in ``std::terminate``, so the process aborts (SIGABRT)
    without SGLang's Python exception handler running.

    Args:
        rank: The failing rank.
        stamp: glog-style time stamp (``"1129 12:01:02.123456789"``).
        host: Host name (unused by torch; kept for symmetry with NCCL lines).

    Returns:
        The multi-line text.
    """
    del host
    where = f"[PG ID 2 PG GUID 3 Rank {rank}]"
    msg = f"{where} Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"  # noqa: E501
    frames = "\n".join(
        [
            "Exception raised from c10_cuda_check_implementation at "
            "/pytorch/c10/cuda/CUDAException.cpp:44 (most recent call first):",
            "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
            "std::char_traits<char>, std::allocator<char> >) + 0x80 (0x7f35d56d9eb0 in "
            f"{TORCH_LIB}/libc10.so)",
            "frame #1: <unknown function> + 0x111c7 (0x7f35d576c1c7 in "
            f"{TORCH_LIB}/libc10_cuda.so)",
            "frame #2: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + "
            f"0x50 (0x7f3578cc4640 in {TORCH_LIB}/libtorch_cuda.so)",
            "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::isCompleted() + 0x68 (0x7f3578cd3e28 in "
            f"{TORCH_LIB}/libtorch_cuda.so)",
            "frame #4: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x6b8 (0x7f3578cd9f88 in "
            f"{TORCH_LIB}/libtorch_cuda.so)",
            "frame #5: c10d::ProcessGroupNCCL::Watchdog::run() + 0xc8 (0x7f3578cdb398 in "
            f"{TORCH_LIB}/libtorch_cuda.so)",
            "frame #6: <unknown function> + 0xdc253 (0x7fdd7574b253 in "
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6)",
            "frame #7: <unknown function> + 0x94ac3 (0x7fdd7e5f9ac3 in "
            "/usr/lib/x86_64-linux-gnu/libc.so.6)",
            "frame #8: clone + 0x44 (0x7fdd7e68aa04 in /usr/lib/x86_64-linux-gnu/libc.so.6)",
        ]
    )
    return (
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:2068] {msg}\n"
        + _CUDA_ERROR_TAIL
        + "\n"
        + frames
        + "\n\n"
        + "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        + f"  what():  {msg}\n"
        + _CUDA_ERROR_TAIL
    )


def format_traceback(frames: Sequence[Frame], exception: str, *, cause: str | None = None) -> str:
    """Lay out a Python traceback the way ``traceback.format_exc()`` does.

    Args:
        frames: Frames, outermost first. Relative paths are under the sglang package.
        exception: The last line, ``"ExceptionType: message"`` (may span lines).
        cause: An earlier formatted traceback that was being handled when this one was raised
            (printed first, then "During handling of the above exception, ...").

    Returns:
        The traceback text, ending with a newline.
    """
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        full = path if path.startswith("/") or path.startswith("<") else f"{SGLANG_ROOT}/{path}"
        lines.append(f'  File "{full}", line {lineno}, in {func}')
        if code:
            lines.append(f"    {code}")
    text = "\n".join(lines) + "\n" + exception.rstrip("\n") + "\n"
    if cause is not None:
        text = (
            cause + "\nDuring handling of the above exception, another exception occurred:\n\n"
        ) + text
    return text


# -- traceback frame sets (sglang 0.5.23 layout; close enough for 0.5.13) ----------------------

SCHEDULER_INIT: tuple[Frame, ...] = (
    (
        "srt/managers/scheduler.py",
        6362,
        "run_scheduler_process",
        "scheduler = Scheduler(server_args, port_args)",
    ),
    ("srt/managers/scheduler.py", 568, "__init__", "self.init_model_worker()"),
)
TP_WORKER_INIT: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 1130, "init_model_worker", "self.init_tp_model_worker()"),
    (
        "srt/managers/scheduler.py",
        1033,
        "init_tp_model_worker",
        "self.tp_worker = TpModelWorker(**worker_kwargs)",
    ),
    ("srt/managers/tp_worker.py", 487, "__init__", "self._model_runner = ModelRunner("),
    ("srt/model_executor/model_runner.py", 499, "__init__", "self.initialize()"),
)
DISTRIBUTED_INIT: tuple[Frame, ...] = (
    ("srt/model_executor/model_runner.py", 708, "initialize", "self.init_torch_distributed()"),
    (
        "srt/model_executor/model_runner.py",
        1201,
        "init_torch_distributed",
        "initialize_model_parallel(",
    ),
    (
        "srt/distributed/parallel_state.py",
        1688,
        "initialize_model_parallel",
        "_TP = init_model_parallel_group(",
    ),
    (
        "srt/distributed/parallel_state.py",
        1402,
        "init_model_parallel_group",
        "return GroupCoordinator(",
    ),
)
PYNCCL_INIT: tuple[Frame, ...] = (
    (
        "srt/distributed/parallel_state.py",
        482,
        "__init__",
        "self.pynccl_comm = PyNcclCommunicator(",
    ),
    (
        "srt/distributed/device_communicators/pynccl.py",
        129,
        "__init__",
        "self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
    ),
    (
        "srt/distributed/device_communicators/pynccl_wrapper.py",
        583,
        "ncclCommInitRank",
        "self.NCCL_CHECK(",
    ),
    (
        "srt/distributed/device_communicators/pynccl_wrapper.py",
        474,
        "NCCL_CHECK",
        'raise RuntimeError(f"NCCL error: {error_str}")',
    ),
)
PYNCCL_WARMUP: tuple[Frame, ...] = (
    ("srt/distributed/parallel_state.py", 490, "__init__", "self.pynccl_comm.all_reduce(data)"),
    (
        "srt/distributed/device_communicators/pynccl.py",
        171,
        "all_reduce",
        "self.nccl.ncclAllReduce(",
    ),
    (
        "srt/distributed/device_communicators/pynccl_wrapper.py",
        622,
        "ncclAllReduce",
        "self.NCCL_CHECK(",
    ),
    (
        "srt/distributed/device_communicators/pynccl_wrapper.py",
        474,
        "NCCL_CHECK",
        'raise RuntimeError(f"NCCL error: {error_str}")',
    ),
)
SYMM_MEM_INIT_OLD: tuple[Frame, ...] = (
    (
        "srt/distributed/parallel_state.py",
        371,
        "__init__",
        "self.torch_symm_mem_comm = TorchSymmMemCommunicator(",
    ),
    (
        "srt/distributed/device_communicators/torch_symm_mem.py",
        85,
        "__init__",
        "not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]",
    ),
)
SET_DEVICE: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 6330, "run_scheduler_process", "configure_scheduler_process("),
    (
        "srt/managers/scheduler_components/process_setup.py",
        58,
        "configure_scheduler_process",
        "torch.get_device_module(device).set_device(gpu_id)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py",
        567,
        "set_device",
        "torch._C._cuda_setDevice(device)",
    ),
)
LOAD_MODEL: tuple[Frame, ...] = (
    ("srt/model_executor/model_runner.py", 715, "initialize", "self.load_model()"),
    (
        "srt/model_executor/model_runner.py",
        1330,
        "load_model",
        "self.model = self.loader.load_model(",
    ),
    ("srt/model_loader/loader.py", 694, "load_model", "model = _initialize_model("),
    (
        "srt/model_loader/loader.py",
        281,
        "_initialize_model",
        "return model_class(config=model_config.hf_config, quant_config=quant_config, **kwargs)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/torch/utils/_device.py",
        109,
        "__torch_function__",
        "return func(*args, **kwargs)",
    ),
)
DRAFT_INIT: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 1133, "init_model_worker", "self.maybe_init_draft_worker()"),
    (
        "srt/managers/scheduler.py",
        1068,
        "maybe_init_draft_worker",
        "self.draft_worker = DraftWorkerClass(**draft_worker_kwargs)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        214,
        "__init__",
        "self.draft_worker = EagleDraftWorker(",
    ),
    ("srt/speculative/eagle_worker_v2.py", 318, "__init__", "self.draft_runner = ModelRunner("),
    ("srt/model_executor/model_runner.py", 499, "__init__", "self.initialize()"),
)
MEMORY_POOL: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 1137, "init_model_worker", "self.init_memory_pools()"),
    ("srt/managers/scheduler.py", 1172, "init_memory_pools", "kv_cache_builder.init_memory_pools("),
    (
        "srt/mem_cache/kv_cache_configurator.py",
        436,
        "init_memory_pools",
        "config = self.resolve_memory_pool_config(",
    ),
    (
        "srt/model_executor/pool_configurator.py",
        647,
        "resolve_memory_pool_config",
        "return MemoryPoolConfig(max_total_num_tokens=max_total_num_tokens)",
    ),
    ("<string>", 12, "__init__", ""),
    ("srt/model_executor/pool_configurator.py", 100, "__post_init__", "raise RuntimeError(msg)"),
)
CUDA_GRAPHS: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 1146, "init_model_worker", "self.init_all_cuda_graphs()"),
)
TARGET_GRAPHS: tuple[Frame, ...] = (
    (
        "srt/managers/scheduler.py",
        1124,
        "init_all_cuda_graphs",
        "self.tp_worker.init_cuda_graphs()",
    ),
    ("srt/managers/tp_worker.py", 435, "init_cuda_graphs", "self.model_runner.init_cuda_graphs("),
    (
        "srt/model_executor/model_runner.py",
        1212,
        "init_cuda_graphs",
        "self._pre_initialize_workspaces()",
    ),
)
FUSION_RESOLVE: tuple[Frame, ...] = (
    (
        "srt/model_executor/runner/base_runner.py",
        267,
        "pre_initialize_workspaces",
        "self._pre_initialize_flashinfer_allreduce_workspace()",
    ),
    (
        "srt/model_executor/runner/base_runner.py",
        329,
        "_pre_initialize_flashinfer_allreduce_workspace",
        "pre_initialize_workspaces(",
    ),
    (
        "srt/layers/flashinfer_comm_fusion.py",
        1063,
        "pre_initialize_workspaces",
        "ensure_workspace_initialized(",
    ),
    (
        "srt/layers/flashinfer_comm_fusion.py",
        778,
        "ensure_workspace_initialized",
        "backend = resolve_flashinfer_allreduce_fusion_backend()",
    ),
    (
        "srt/layers/flashinfer_comm_fusion.py",
        99,
        "resolve_flashinfer_allreduce_fusion_backend",
        "return _resolve_backend(backend, get_parallel().nnodes > 1)",
    ),
    ("srt/layers/flashinfer_comm_fusion.py", 49, "_resolve_backend", "raise ValueError("),
)
DECODE_CAPTURE_OUTER: tuple[Frame, ...] = (
    (
        "srt/managers/scheduler.py",
        1124,
        "init_all_cuda_graphs",
        "self.tp_worker.init_cuda_graphs()",
    ),
    ("srt/managers/tp_worker.py", 435, "init_cuda_graphs", "self.model_runner.init_cuda_graphs("),
    (
        "srt/model_executor/model_runner.py",
        1215,
        "init_cuda_graphs",
        "self.init_decode_cuda_graph()",
    ),
    (
        "srt/model_executor/model_runner.py",
        1607,
        "init_decode_cuda_graph",
        "capture = capture_decode_graph(model_runner=self)",
    ),
    (
        "srt/model_executor/model_runner_components/cuda_graph_setup.py",
        780,
        "capture_decode_graph",
        "runner = GraphRunnerCls(model_runner)",
    ),
    ("srt/model_executor/runner/decode_cuda_graph_runner.py", 602, "__init__", "raise Exception("),
)
DECODE_CAPTURE_INNER: tuple[Frame, ...] = (
    ("srt/model_executor/runner/decode_cuda_graph_runner.py", 600, "__init__", "self.capture()"),
    (
        "srt/model_executor/runner/decode_cuda_graph_runner.py",
        1330,
        "capture",
        ") = self.capture_one_batch_size(bs, forward, stream_idx)",
    ),
    (
        "srt/model_executor/runner/decode_cuda_graph_runner.py",
        1425,
        "capture_one_batch_size",
        "run_once()",
    ),
    (
        "srt/model_executor/runner/decode_cuda_graph_runner.py",
        1410,
        "run_once",
        "logits_output_or_pp_proxy_tensors = forward(",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py",
        120,
        "decorate_context",
        "return func(*args, **kwargs)",
    ),
    ("srt/models/deepseek_v2.py", 3418, "forward", "hidden_states = self.model("),
    ("srt/models/deepseek_v2.py", 3204, "forward", "hidden_states, residual = layer("),
    ("srt/models/deepseek_v2.py", 2741, "forward", "hidden_states = self.mlp("),
    (
        "srt/layers/moe/fused_moe_triton/layer.py",
        1012,
        "forward",
        "combine_input = self.run_moe_core(",
    ),
)
DRAFT_CAPTURE_OUTER: tuple[Frame, ...] = (
    (
        "srt/managers/scheduler.py",
        1126,
        "init_all_cuda_graphs",
        "self.draft_worker.init_cuda_graphs()",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        519,
        "init_cuda_graphs",
        "self.cuda_graph_runner = draft_runner_cls(self)",
    ),
    ("srt/speculative/eagle_draft_cuda_graph_runner.py", 296, "__init__", "raise Exception("),
)
DRAFT_CAPTURE_INNER: tuple[Frame, ...] = (
    ("srt/speculative/eagle_draft_cuda_graph_runner.py", 293, "__init__", "self.capture()"),
    (
        "srt/speculative/eagle_draft_cuda_graph_runner.py",
        372,
        "capture",
        "CudaGraphRunner.capture(self)",
    ),
    (
        "srt/model_executor/runner/decode_cuda_graph_runner.py",
        1330,
        "capture",
        ") = self.capture_one_batch_size(bs, forward, stream_idx)",
    ),
    (
        "srt/speculative/eagle_draft_cuda_graph_runner.py",
        519,
        "run_once",
        "ret = self.eagle_worker.draft_forward(forward_batch)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        919,
        "draft_forward",
        "parent_list, top_scores_index, draft_tokens = organize_draft_results(",
    ),
)
EAGLE_TOPK: tuple[Frame, ...] = (
    (
        "srt/speculative/eagle_utils.py",
        109,
        "organize_draft_results",
        "top_scores = torch.topk(score_list, num_draft_token - 1, dim=-1)",
    ),
)
EAGLE_CAT: tuple[Frame, ...] = (
    (
        "srt/speculative/eagle_utils.py",
        107,
        "organize_draft_results",
        "score_list = torch.cat(score_list, dim=1).flatten(1)",
    ),
)
# SGLang 0.5.17's v2 tree verify on the first request when the draft tokens cannot hold the
# steps + 1 accepted nodes (the real table's t0025 on the H200, 2026-12-02)
VERIFY_COMPACT: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 4947, "run_scheduler_process", "scheduler.run_event_loop()"),
    ("srt/managers/scheduler.py", 1662, "run_event_loop", "dispatch_event_loop(self)"),
    ("srt/managers/scheduler.py", 4795, "dispatch_event_loop", "scheduler.event_loop_overlap()"),
    (
        "srt/managers/scheduler.py",
        1763,
        "event_loop_overlap",
        "batch_result = self.run_batch(batch)",
    ),
    (
        "srt/managers/scheduler.py",
        3594,
        "run_batch",
        "batch_result = self.model_worker.forward_batch_generation(",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        1178,
        "forward_batch_generation",
        "batch_output = self.verify(batch, grammar_barrier=grammar_barrier)",
    ),
    ("srt/speculative/eagle_worker_v2.py", 1496, "verify", "return run_eagle_verify("),
    (
        "srt/speculative/eagle_worker_common.py",
        633,
        "run_eagle_verify",
        "predict = _finalize_accept_tree_path(",
    ),
    (
        "srt/speculative/eagle_worker_common.py",
        425,
        "_finalize_accept_tree_path",
        "predict = _compact_accept_to_front(",
    ),
    (
        "srt/speculative/eagle_worker_common.py",
        457,
        "_compact_accept_to_front",
        "out.view(bs, nd, *x.shape[1:])[:, :s1] = gathered.view(bs, s1, *x.shape[1:])",
    ),
)


def compact_size_error(draft_tokens: int, path_nodes: int) -> str:
    """The RuntimeError of `VERIFY_COMPACT` for one request."""
    return (
        f"RuntimeError: The expanded size of the tensor ({draft_tokens}) must match the existing "
        f"size ({path_nodes}) at non-singleton dimension 1.  Target sizes: [1, {draft_tokens}].  "
        f"Tensor sizes: [{path_nodes}]"
    )


DECODE_STEP: tuple[Frame, ...] = (
    ("srt/managers/scheduler.py", 6366, "run_scheduler_process", "scheduler.run_event_loop()"),
    ("srt/managers/scheduler.py", 1514, "run_event_loop", "dispatch_event_loop(self)"),
    (
        "srt/managers/scheduler_components/event_loop.py",
        88,
        "event_loop_normal",
        "result = self.run_batch(batch)",
    ),
    (
        "srt/managers/scheduler.py",
        3011,
        "run_batch",
        "batch_result = self.draft_worker.forward_batch_generation(batch)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        1101,
        "forward_batch_generation",
        "verify_input = self.draft_worker.draft(model_worker_batch)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        702,
        "draft",
        "parent_list, top_scores_index, draft_tokens, draft_probs = self.draft_forward(",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        919,
        "draft_forward",
        "parent_list, top_scores_index, draft_tokens = organize_draft_results(",
    ),
)
MAIN_RESOLVE: tuple[Frame, ...] = (
    ("<frozen runpy>", 198, "_run_module_as_main", ""),
    ("<frozen runpy>", 88, "_run_code", ""),
    ("launch_server.py", 84, "<module>", "run_server(server_args)"),
    ("launch_server.py", 29, "run_server", "server_args.resolve_once()"),
    ("srt/server_args.py", 1702, "resolve_once", "run_resolution_pipeline(self)"),
    ("srt/arg_groups/pipeline.py", 141, "run_resolution_pipeline", "hook(server_args)"),
)
A2A_NEW: tuple[Frame, ...] = (
    (
        "srt/arg_groups/moe_hook.py",
        475,
        "_handle_a2a_moe",
        "assert _flashinfer_a2a_topology_is_supported(",
    ),
)
A2A_RUNNER_NEW_FRAMES: tuple[Frame, ...] = (
    (
        "srt/arg_groups/moe_hook.py",
        523,
        "_handle_a2a_moe",
        "assert resolved_view(server_args).moe_runner_backend in [",
    ),
)
MAIN_POST_INIT_OLD: tuple[Frame, ...] = (
    ("<frozen runpy>", 198, "_run_module_as_main", ""),
    ("<frozen runpy>", 88, "_run_code", ""),
    ("launch_server.py", 60, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    (
        "srt/server_args.py",
        4610,
        "prepare_server_args",
        "return ServerArgs.from_cli_args(raw_args)",
    ),
    (
        "srt/server_args.py",
        4431,
        "from_cli_args",
        "return cls(**{attr: getattr(args, attr) for attr in attrs})",
    ),
    ("<string>", 402, "__init__", ""),
    ("srt/server_args.py", 737, "__post_init__", "self._handle_moe_kernel_config()"),
)
# 0.5.13 server_args.py: __post_init__ line 926 calls _handle_deprecated_args, which raises at 1193.
GRPC_PORT_OLD: tuple[Frame, ...] = (
    ("srt/server_args.py", 926, "__post_init__", "self._handle_deprecated_args()"),
    ("srt/server_args.py", 1193, "_handle_deprecated_args", "raise ValueError("),
)
GRPC_PORT_NEW: tuple[Frame, ...] = (
    ("srt/arg_groups/serving_hook.py", 383, "handle_deprecated_args", "raise ValueError("),
)
A2A_OLD: tuple[Frame, ...] = (("srt/server_args.py", 3568, "_handle_a2a_moe", "assert ("),)
A2A_RUNNER_OLD_FRAMES: tuple[Frame, ...] = (
    ("srt/server_args.py", 3586, "_handle_a2a_moe", "assert self.moe_runner_backend in ["),
)
A2A_WORKSPACE: tuple[Frame, ...] = (
    (
        "srt/model_executor/runner/base_runner.py",
        268,
        "pre_initialize_workspaces",
        "self._pre_initialize_fi_a2a_workspace()",
    ),
    (
        "srt/layers/moe/token_dispatcher/flashinfer.py",
        262,
        "__init__",
        "self.moe_a2a = make_moe_a2a()",
    ),
    ("srt/layers/moe/token_dispatcher/flashinfer.py", 249, "make_moe_a2a", "return MoeAlltoAll("),
    (
        "/usr/local/lib/python3.12/dist-packages/flashinfer/comm/trtllm_moe_alltoall.py",
        611,
        "__init__",
        "self._workspace = torch.empty(",
    ),
)


# Real SGLang 0.5.13 importing a model module whose package is missing from the install
# (tests/fixtures/sglang/0.5.13/import-error-flashinfer.log): the server dies at import time.
IMPORT_FRAMES: tuple[Frame, ...] = (
    ("<frozen runpy>", 198, "_run_module_as_main", ""),
    ("<frozen runpy>", 88, "_run_code", ""),
    ("launch_server.py", 7, "<module>", "from sglang.srt.server_args import prepare_server_args"),
    ("srt/models/qwen3_asr.py", 24, "<module>",
     "from sglang.srt.models.qwen3_omni_moe import Qwen3OmniMoeAudioEncoder"),
    ("srt/models/qwen3_omni_moe.py", 37, "<module>",
     "from sglang.srt.layers.attention.vision import VisionAttention"),
    ("srt/layers/attention/vision.py", 47, "<module>",
     "from flashinfer.prefill import cudnn_batch_prefill_with_kv_cache"),
)  # fmt: skip


# -- adaptive speculative decoding: where SGLang raises while reading its config ---------------
# Exact frames of the wheels (sglang/...), outermost first. 0.5.13 checks the config in
# ServerArgs.__post_init__ -> handle_speculative_decoding -> validate_adaptive_initial_steps;
# 0.5.23 in resolve_once -> run_resolution_pipeline -> _init_adaptive_speculative_params.
ADAPTIVE_MAIN_OLD: tuple[Frame, ...] = (
    ("<frozen runpy>", 198, "_run_module_as_main", ""),
    ("<frozen runpy>", 88, "_run_code", ""),
    ("launch_server.py", 66, "<module>", "server_args = prepare_server_args(sys.argv[1:])"),
    ("srt/server_args.py", 8009, "prepare_server_args",
     "return ServerArgs.from_cli_args(raw_args)"),
    ("srt/server_args.py", 7284, "from_cli_args",
     "return cls(**{attr: getattr(args, attr) for attr in attrs})"),
    ("<string>", 399, "__init__", ""),
    ("srt/server_args.py", 1019, "__post_init__", "handle_speculative_decoding(self)"),
    ("srt/arg_groups/speculative_hook.py", 127, "handle_speculative_decoding",
     "validate_adaptive_initial_steps("),
)  # fmt: skip
ADAPTIVE_LOAD_OLD: tuple[Frame, ...] = (
    ("srt/speculative/adaptive_spec_params.py", 134, "validate_adaptive_initial_steps",
     "candidate_steps = resolve_candidate_steps_from_config(cfg_path)"),
    ("srt/speculative/adaptive_spec_params.py", 122, "resolve_candidate_steps_from_config",
     "_, bs_entries = _load_adaptive_config(cfg_path)"),
)  # fmt: skip
ADAPTIVE_NOT_CANDIDATE_OLD: tuple[Frame, ...] = (
    ("srt/speculative/adaptive_spec_params.py", 136, "validate_adaptive_initial_steps",
     "raise ValueError("),
)  # fmt: skip
ADAPTIVE_MAIN_NEW: tuple[Frame, ...] = (
    ("<frozen runpy>", 198, "_run_module_as_main", ""),
    ("<frozen runpy>", 88, "_run_code", ""),
    ("launch_server.py", 84, "<module>", "run_server(server_args)"),
    ("launch_server.py", 29, "run_server", "server_args.resolve_once()"),
    ("srt/server_args.py", 277, "resolve_once", "run_resolution_pipeline(self)"),
    ("srt/arg_groups/pipeline.py", 306, "run_resolution_pipeline",
     "run_hook(handle_speculative_decoding, server_args)"),
    ("srt/arg_groups/resolution_hooks.py", 139, "run_hook", "step(server_args)"),
    ("srt/arg_groups/speculative_hook.py", 264, "handle_speculative_decoding",
     "_init_adaptive_speculative_params(server_args)"),
)  # fmt: skip
ADAPTIVE_LOAD_NEW: tuple[Frame, ...] = (
    ("srt/arg_groups/speculative_hook.py", 1398, "_init_adaptive_speculative_params",
     "candidate_steps = resolve_candidate_steps_from_config("),
    ("srt/speculative/adaptive_spec_params.py", 146, "resolve_candidate_steps_from_config",
     "_, bs_entries = _load_adaptive_config(cfg_path)"),
)  # fmt: skip
ADAPTIVE_NOT_CANDIDATE_NEW: tuple[Frame, ...] = (
    ("srt/arg_groups/speculative_hook.py", 1417, "_init_adaptive_speculative_params",
     "raise ValueError("),
)  # fmt: skip
#: The raising line of ``_load_adaptive_config`` by what went wrong: (0.5.13 line, 0.5.23 line,
#: code). adaptive_spec_params.py 0.5.13:88-110, 0.5.23:111-134.
ADAPTIVE_LOAD_LINES: dict[str, tuple[int, int, str]] = {
    "open": (88, 111, "with open(cfg_path) as f:"),
    "json": (89, 112, "cfg = json.load(f)"),
    "items": (94, 117, "for key, entry in cfg.items():"),
    "entry": (98, 121, 'steps = entry.get("candidate_steps")'),
    "candidates": (104, 127, "raise ValueError("),
    "no_keys": (110, 134, "raise ValueError("),
}
# CPython 3.12 json (the image's /usr/lib/python3.12): json.load -> loads -> decode -> raw_decode;
# "Expecting value" is raised by raw_decode itself, other messages by the C scanner it calls.
_JSON = "/usr/lib/python3.12/json"
JSON_LOAD: tuple[Frame, ...] = (
    (f"{_JSON}/__init__.py", 293, "load", "return loads(fp.read(),"),
    (f"{_JSON}/__init__.py", 346, "loads", "return _default_decoder.decode(s)"),
    (f"{_JSON}/decoder.py", 337, "decode", "obj, end = self.raw_decode(s, idx=_w(s, 0).end())"),
)
JSON_SCAN: Frame = (f"{_JSON}/decoder.py", 353, "raw_decode", "obj, end = self.scan_once(s, idx)")
JSON_NO_VALUE: Frame = (
    f"{_JSON}/decoder.py",
    355,
    "raw_decode",
    'raise JSONDecodeError("Expecting value", s, err.value) from None',
)


def adaptive_config_frames(where: str, *, flavor: Flavor, json_error: str = "") -> list[Frame]:
    """Traceback frames of an exception raised while SGLang reads the adaptive config.

    Args:
        where: What failed (``AdaptiveConfigError.where``).
        flavor: ``"old"`` (0.5.13 frames) or ``"new"`` (0.5.23 frames).
        json_error: The JSON decoder's message, for ``where == "json"``.

    Returns:
        Frames, outermost first.
    """
    old = flavor == "old"
    frames = list(
        ADAPTIVE_MAIN_OLD + ADAPTIVE_LOAD_OLD if old else ADAPTIVE_MAIN_NEW + ADAPTIVE_LOAD_NEW
    )
    line_old, line_new, code = ADAPTIVE_LOAD_LINES[where]
    frames.append(
        (
            "srt/speculative/adaptive_spec_params.py",
            line_old if old else line_new,
            "_load_adaptive_config",
            code,
        )
    )
    if where == "json":
        frames.extend(JSON_LOAD)
        frames.append(JSON_NO_VALUE if json_error == "Expecting value" else JSON_SCAN)
    return frames


def adaptive_not_candidate_frames(*, flavor: Flavor) -> list[Frame]:
    """Traceback frames of the "is not in the adaptive config candidate_steps" ValueError."""
    if flavor == "old":
        return [*ADAPTIVE_MAIN_OLD, *ADAPTIVE_NOT_CANDIDATE_OLD]
    return [*ADAPTIVE_MAIN_NEW, *ADAPTIVE_NOT_CANDIDATE_NEW]


# sglang/srt/arg_groups/model_path_hook.py (0.5.23, handle_load_format:281-287), after the
# speculative hook in the resolution pipeline (pipeline.py:306, 326).
WEIGHT_CACHE_SPEC = (
    "--weight-cache-mode is not supported together with speculative decoding "
    "(--speculative-algorithm): the weight cache daemon does not export the draft model's "
    "weights. Disable one of them (--weight-cache-mode off) for this configuration."
)
WEIGHT_CACHE_SPEC_FRAMES: tuple[Frame, ...] = (
    *ADAPTIVE_MAIN_NEW[:5],
    ("srt/arg_groups/pipeline.py", 326, "run_resolution_pipeline",
     "run_hook(handle_load_format, server_args)"),
    ("srt/arg_groups/resolution_hooks.py", 139, "run_hook", "step(server_args)"),
    ("srt/arg_groups/model_path_hook.py", 282, "handle_load_format", "raise ValueError("),
)  # fmt: skip


# sglang/srt/weight_cache/daemon.py (0.5.17: _load_model :287-314, serve :424), each rank in its
# own logging format ("%(asctime)s [Daemon gpu=N tp_rank=N] %(levelname)s %(message)s", :557);
# as logged by the real daemon on the H200 (tests/fixtures/sglang/0.5.17/weight-cache-daemon.log).
def weight_cache_daemon_lines(rank: int, model_path: str, load_s: float) -> tuple[str, ...]:
    """What one daemon rank logs from loading to listening (messages, no record prefix)."""
    return (
        f"[WeightCacheDaemon gpu={rank} tp_rank={rank}] Loading model from disk: {model_path}",
        f"[WeightCacheDaemon gpu={rank} tp_rank={rank}] Model loaded from disk in {load_s:.2f}s",
        f"[WeightCacheDaemon gpu={rank}] Listening on /tmp/sglang_weight_cache_rank{rank}.sock",
    )


# sglang/srt/weight_cache/ipc_loader.py (0.5.17: :121 fetched, :155 loaded), a client server's
# scheduler; as logged on the H200 (tests/fixtures/sglang/0.5.17/weight-cache-client.log).
def ipc_loader_lines(tensors: int, load_s: float) -> tuple[str, ...]:
    """What a weight-cache client logs when it mapped the daemon's weights."""
    return (
        f"[IpcModelLoader] Fetched {tensors} IPC handles from daemon in 0.00s",
        f"[IpcModelLoader] Loaded model via IPC (mode=client), total={load_s:.2f}s",
    )
