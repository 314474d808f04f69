"""The fatal log lines of SGLang and what it runs on: the classifier's data, not code.

This module owns the tables `classify` decides from: `LOG_PATTERNS`, fatal log-line patterns
taken from the real message texts of SGLang, PyTorch, NCCL, FlashInfer, DeepEP and argparse, in
precedence order (a root cause beats its echoes), and `ENVIRONMENT_PATTERNS`, the lines that
say the node cannot start any server whatever its flags. Each pattern names where its text
comes from; `tests/unit/test_classify.py` holds each against a real message. Data only.
"""

from __future__ import annotations

from dataclasses import dataclass

from spec_sweep.core.outcome import FailureMode

__all__ = ["ENVIRONMENT_PATTERNS", "LINE_PREFIX", "LOG_PATTERNS", "LogPattern"]


@dataclass(frozen=True, slots=True)
class LogPattern:
    """One fatal log-line pattern.

    Attributes:
        mode: The failure mode a matching line decides.
        regex: A Python regular expression searched (``re.search``) in one log line.
        what: What the line means, for people reading the table.
        source: Where the message text comes from (repository and file).
    """

    mode: FailureMode
    regex: str
    what: str
    source: str


# Optional line prefixes added by torchrun ("[rank0]: "), SGLang's logger ("[2025-01-01 10:00:00
# TP0] ") or Ray ("(pid=123) ") before a line that Python printed at column 0.
LINE_PREFIX = r"^(?:(?:\[[^\]]*\]|\([^)]*\)):?\s*)*"
# An exception line of a traceback: "<qualified.ExceptionType>: <message>".
_EXC = LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): "

_SGLANG_SERVER_ARGS = "sgl-project/sglang python/sglang/srt/server_args.py"

# Precedence. The table order is the precedence order: when several lines (or several patterns on
# one line) match, the pattern that comes first in ``LOG_PATTERNS`` decides, and among lines matched
# by that pattern the earliest line wins. The modes are ordered so that a root cause beats its
# consequences: ``invalid_args`` (nothing else ran) > ``oom`` > ``unsupported`` > ``nccl`` (an NCCL
# error on the other ranks is usually the echo of one rank dying) > ``assertion`` > ``hang`` >
# ``crash``. So an OOM printed inside an assertion's traceback is ``oom``; an ``AssertionError``
# whose message says "not supported" is ``unsupported``. Wrapper lines such as SGLang's
# "Scheduler hit an exception", "Received sigquit from a child process" or "Rank 0 scheduler died
# during initialization" are never causes and are not in the table; warnings (custom all-reduce or
# torch symmetric memory being disabled, ``NCCL WARN``/``NCCL INFO`` output, a soft scheduler
# watchdog) are not fatal either. Traceback source lines (``raise X(...)``, string literals) are
# ignored so that the code that *raises* a message is not mistaken for the message.
LOG_PATTERNS: tuple[LogPattern, ...] = (
    # ---------------------------------------------------------------- invalid_args
    LogPattern(
        FailureMode.INVALID_ARGS,
        r": error: (?:unrecognized arguments: |argument [^:]+: |ambiguous option: "
        r"|the following arguments are required: )",
        "argparse rejected the command line (unknown flag, bad value or choice, ambiguous "
        "abbreviation, missing argument); the server exits with code 2",
        "python/cpython Lib/argparse.py (ArgumentParser.error, parse_args, _get_values)",
    ),
    LogPattern(
        FailureMode.INVALID_ARGS,
        _EXC + r"(?:Currently standalone speculative decoding does not support dp attention"
        r"|Spec v2 currently only supports topk = 1 for speculative decoding"
        r"|trtllm_mha backend only supports topk = 1 for speculative decoding"
        r"|speculative_eagle_topk(?:\(\d+\))? > 1 with page_size(?:\(\d+\))? > 1 is unstable"
        r"|Ngram speculative decoding only supports CUDA device"
        r"|Currently ngram speculative decoding does not support dp attention"
        r"|Currently speculative MoE runner backend cannot be flashinfer_trtllm"
        r"|Unknown speculative algorithm name: )",
        "ServerArgs rejected a speculative-decoding combination (topk with page size or "
        "backend, spec v2, dp attention, draft MoE backend)",
        _SGLANG_SERVER_ARGS + " (ServerArgs._handle_speculative_decoding); "
        "python/sglang/srt/speculative/spec_info.py (SpeculativeAlgorithm.from_string)",
    ),
    LogPattern(
        FailureMode.INVALID_ARGS,
        _EXC + r"(?:Pipeline parallelism is not compatible with overlap schedule"
        r"|tp_size must be divisible by number of nodes"
        r"|chunked_prefill_size must be divisible by page_size"
        r"|The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive"
        r"|Cannot enable both --enable-tokenizer-batch-encode and "
        r"--enable-dynamic-batch-tokenizer)",
        "ServerArgs rejected another flag combination (parallelism, page size, cache, "
        "tokenizer batching)",
        _SGLANG_SERVER_ARGS + " (ServerArgs.check_server_args and _handle_* checks)",
    ),
    # ------------------------------------------------------------------------- oom
    LogPattern(
        FailureMode.OOM,
        LINE_PREFIX + r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError: \S",
        "PyTorch's caching allocator ran out of GPU memory (torch.OutOfMemoryError, before "
        "torch 2.5 torch.cuda.OutOfMemoryError)",
        "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (TORCH_CHECK_WITH(OutOfMemoryError"
        ", ...)), torch/cuda/memory.py",
    ),
    LogPattern(
        FailureMode.OOM,
        r"CUDA out of memory(?:(?<=: CUDA out of memory)|(?<=:  CUDA out of memory))",
        "'CUDA out of memory. Tried to allocate ...' in an exception (also inside SGLang's "
        "'Capture cuda graph failed: ...')",
        "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp",
    ),
    LogPattern(
        FailureMode.OOM,
        r"out of memory(?:(?<=CUDA error: out of memory)|(?<=CUDA driver error: out of memory)"
        r"|(?<=Triton Error \[CUDA\]: out of memory))",
        "a CUDA runtime/driver call failed with cudaErrorMemoryAllocation "
        "('RuntimeError: CUDA error: out of memory', torch.AcceleratorError in torch >= 2.8)",
        "pytorch/pytorch c10/cuda/CUDAException.cpp (c10_cuda_check_implementation) with "
        "cudaGetErrorString; triton-lang/triton third_party/nvidia/backend/driver.c",
    ),
    LogPattern(
        FailureMode.OOM,
        r"CUBLAS_STATUS_ALLOC_FAILED",
        "cuBLAS could not allocate its workspace/handle",
        "pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp (TORCH_CUDABLAS_CHECK)",
    ),
    LogPattern(
        FailureMode.OOM,
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        "SGLang: no room left for the KV cache after weights (and CUDA graphs)",
        "sgl-project/sglang python/sglang/srt/model_executor/model_runner.py (init_memory_pool);"
        " newer: model_executor/pool_configurator.py (MemoryPoolConfig.__post_init__)",
    ),
    LogPattern(
        FailureMode.OOM,
        r"Loaded weights leave no GPU memory for the KV cache",
        "SGLang: the weights (target and draft) leave nothing of the static budget for the KV "
        "cache",
        "sgl-project/sglang 0.5.17 python/sglang/srt/mem_cache/kv_cache_configurator.py:1646-1655",
    ),
    LogPattern(
        FailureMode.OOM,
        r"Capture cuda graph failed: .*(?i:out of memory|cublas_status_alloc_failed"
        r"|cublas_status_not_initialized)",
        "SGLang's CUDA-graph capture failed for lack of memory (SGLang's own OOM markers; its "
        "advice: lower --mem-fraction-static or --cuda-graph-max-bs)",
        "sgl-project/sglang python/sglang/srt/model_executor/cuda_graph_runner.py "
        "(CUDA_GRAPH_CAPTURE_FAILED_MSG) and cuda_graph_backend_utils (_OOM_MARKERS)",
    ),
    LogPattern(
        FailureMode.OOM,
        LINE_PREFIX + r"(?:Last error:\s*)?Cuda failure (?:\d+ )?'out of memory'",
        "the 'Last error' detail of an NCCL failure says a CUDA allocation ran out of memory",
        "NVIDIA/nccl src/include/checks.h (CUCHECK: WARN(\"Cuda failure %d '%s'\")) via "
        "pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr 'Last error:')",
    ),
    LogPattern(
        FailureMode.OOM,
        _EXC + r"The memory capacity is unbalanced",
        "SGLang: free memory differs between the TP ranks (other processes hold GPU memory); "
        "the GPU guard should have prevented this",
        "sgl-project/sglang python/sglang/srt/model_executor/model_runner.py "
        "(init_torch_distributed)",
    ),
    # ----------------------------------------------------------------- unsupported
    LogPattern(
        FailureMode.UNSUPPORTED,
        r"No supported CUDA architectures found for major versions",
        "FlashInfer's JIT has no kernel for this GPU generation (e.g. SM120 with a CUDA toolkit "
        "older than 12.9)",
        "flashinfer-ai/flashinfer flashinfer/compilation_context.py (get_nvcc_flags_list)",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        _EXC + r".*FlashInfer requires GPUs with sm75 or higher",
        "FlashInfer's JIT found no usable target architecture",
        "flashinfer-ai/flashinfer flashinfer/jit/core.py (check_cuda_arch)",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*(?:BackendSupportedError|GPUArchitectureError): ",
        "a FlashInfer API does not support this backend or compute capability",
        "flashinfer-ai/flashinfer flashinfer/utils.py (backend_requirement, BackendSupportedError)",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        r"no kernel image is available for execution on the device",
        "a binary has no kernel for this GPU architecture (cudaErrorNoKernelImageForDevice)",
        "CUDA runtime cudaGetErrorString, reported by pytorch c10/cuda/CUDAException.cpp, "
        "sgl-kernel and Triton",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        r"nvcc fatal\s*: Unsupported gpu architecture",
        "a JIT build (FlashInfer, sgl-kernel, DeepGEMM) targets an architecture nvcc does not know",
        "NVIDIA nvcc driver message, seen through flashinfer-ai/flashinfer "
        "flashinfer/jit/cpp_ext.py",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        LINE_PREFIX + r"(?:[A-Za-z_]\w*Error: |Failed to initialize TorchSymmMemCommunicator: )?"
        r"(?:TorchSymmMemCommunicator: .*not supported"
        r"|torch symmetric memory multicast operations are not supported)",
        "SGLang's torch symmetric-memory all-reduce refused this GPU or world size (raised, or "
        "logged when SGLang falls back: only printed when the trial asked for the feature, so "
        "the asked-for flag does nothing on this node, like FlashInfer's fusion fallback)",
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/torch_symm_mem.py",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        _EXC + r".*\brequires SM\d+\w*(?: or SM\w+)* (?:NVIDIA )?GPUs",
        "a feature refuses this GPU generation, e.g. 'FlashInfer allreduce fusion requires SM90 "
        "or SM10X NVIDIA GPUs.' on SM120",
        "sgl-project/sglang python/sglang/srt/layers/flashinfer_comm_fusion.py",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*NotImplementedError(?::|\s*$)",
        "a code path is not implemented for this model, backend or feature combination",
        "python builtin; raised across sgl-project/sglang python/sglang/srt/layers/",
    ),
    LogPattern(
        FailureMode.UNSUPPORTED,
        _EXC + r".*(?:\bnot (?:yet |currently )?supported\b|(?<!\w)[Uu]nsupported\b(?! operand))",
        "an exception says a feature, dtype, backend or architecture is not supported (e.g. "
        "'CUDA error: operation not supported', 'peer access is not supported')",
        "generic: exception lines from sgl-project/sglang, flashinfer-ai/flashinfer, sgl-kernel,"
        " CUDA runtime",
    ),
    # ------------------------------------------------------------------------ nccl
    LogPattern(
        FailureMode.NCCL,
        LINE_PREFIX + r"(?:\s*what\(\):\s+|(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): )"
        r".*\bNCCL error\b",
        "an NCCL call failed ('NCCL error in: <file>:<line>, unhandled cuda error ...' from "
        "torch, 'NCCL error: ...' from SGLang's pynccl)",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK); "
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py"
        " (NCCL_CHECK)",
    ),
    LogPattern(
        FailureMode.NCCL,
        LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*DistBackendError: ",
        "torch.distributed's backend failed (communicator aborted, NCCL timeout)",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp, ProcessGroupNCCL.cpp",
    ),
    LogPattern(
        FailureMode.NCCL,
        LINE_PREFIX
        + r"(?:ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidArgument"
        r"|ncclInvalidUsage|ncclRemoteError): ",
        "the detail line torch prints under an NCCL error",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr)",
    ),
    LogPattern(
        FailureMode.NCCL,
        r"Watchdog caught collective operation timeout",
        "a collective did not finish within the process group timeout",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (watchdog)",
    ),
    LogPattern(
        FailureMode.NCCL,
        r"NCCL (?:communicator was aborted on rank \d+|operations have failed or timed out)",
        "torch aborted the NCCL communicator after a failure or timeout",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (NCCLComm::getNcclComm), "
        "ProcessGroupNCCL.cpp",
    ),
    # ------------------------------------------------------------------- assertion
    LogPattern(
        FailureMode.ASSERTION,
        LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*AssertionError(?::|\s*$)",
        "a Python assert failed",
        "python builtin; asserts across sgl-project/sglang python/sglang/srt/",
    ),
    LogPattern(
        FailureMode.ASSERTION,
        r"Assertion (?:error \S+:\d+ '|exception \(\S+:\d+\): |failed: \S+:\d+, condition: )",
        "a DeepEP host or device assertion (EP_HOST_ASSERT / EP_DEVICE_ASSERT)",
        "deepseek-ai/DeepEP csrc/kernels/exception.cuh (EPException, EP_HOST_ASSERT, "
        "EP_DEVICE_ASSERT)",
    ),
    LogPattern(
        FailureMode.ASSERTION,
        r"device-side assert triggered",
        "a CUDA device-side assertion fired (cudaErrorAssert, e.g. an index out of bounds)",
        "CUDA runtime cudaGetErrorString via pytorch c10/cuda/CUDAException.cpp",
    ),
    LogPattern(
        FailureMode.ASSERTION,
        r"Assertion `.*[`'] failed",
        "the kernel-side text of a failed CUDA_KERNEL_ASSERT or a C assert()",
        "pytorch/pytorch c10/macros/Macros.h (CUDA_KERNEL_ASSERT -> __assert_fail), glibc assert",
    ),
    # ------------------------------------------------------------------------ hang
    LogPattern(
        FailureMode.HANG,
        r"Scheduler watchdog timeout \((?![^)]*soft=True)[^)]*\)",
        "SGLang's scheduler made no progress for --watchdog-timeout seconds and killed the "
        "server (the soft watchdog only warns and is ignored)",
        "sgl-project/sglang python/sglang/srt/managers/scheduler.py, srt/utils/watchdog.py",
    ),
    # ----------------------------------------------------------------------- crash
    LogPattern(
        FailureMode.CRASH,
        r"Capture cuda graph failed",
        "SGLang's CUDA-graph capture failed for a reason other than memory (its 0.5.x advice "
        "to lower --mem-fraction-static is printed for every cause, so it is not trusted)",
        "sgl-project/sglang python/sglang/srt/model_executor/cuda_graph_runner.py",
    ),
    LogPattern(
        FailureMode.CRASH,
        r"an illegal memory access was encountered",
        "a kernel accessed invalid memory (cudaErrorIllegalAddress)",
        "CUDA runtime cudaGetErrorString via pytorch c10/cuda/CUDAException.cpp",
    ),
    LogPattern(
        FailureMode.CRASH,
        r"Fatal Python error: ",
        "the interpreter died (segfault, abort) and faulthandler printed the Python stack",
        "python/cpython Python/pylifecycle.c (fatal_error), Modules/faulthandler.c",
    ),
    LogPattern(
        FailureMode.CRASH,
        r"terminate called after throwing an instance of",
        "an uncaught C++ exception aborted the process",
        "gcc libstdc++ libsupc++/vterminate.cc (__verbose_terminate_handler)",
    ),
)

# Lines that say the node cannot run a server at all, whatever its flags: decided only for a
# server that never became ready (a caught, logged import error in a healthy boot is not one).
# Texts: CPython's import system and `runpy` ("Error while finding module specification for
# 'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang')"); PyTorch
# (torch/cuda/__init__.py `_lazy_init`: "No CUDA GPUs are available", "Found no NVIDIA driver on
# your system", "The NVIDIA driver on your system is too old"); the CUDA runtime
# (cudaErrorInsufficientDriver, cudaErrorNoDevice); the dynamic loader; huggingface_hub /
# transformers for a model path that does not exist.
ENVIRONMENT_PATTERNS: tuple[str, ...] = (
    LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*(?:ModuleNotFoundError|ImportError): ",
    r"Error while finding module specification for '[^']+' \((?:ModuleNotFoundError|ImportError)",
    r": No module named [\w.]+\s*$",
    r"No CUDA GPUs are available",
    r"Found no NVIDIA driver on your system",
    r"The NVIDIA driver on your system is too old",
    r"CUDA driver version is insufficient for CUDA runtime version",
    r"no CUDA-capable device is detected",
    r"cannot open shared object file: No such file or directory",
    r"\bundefined symbol: ",
    r"is not a local folder and is not a valid model identifier",
    r"does not appear to have a file named config\.json",
    r"Repo id must use alphanumeric chars",
    LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*OSError: ",
)

# Lines that say one of SGLang's processes has failed: the wrappers above (never a cause) and the
# main process's SIGQUIT handlers. A trial ends at one instead of waiting for the server to exit:
# after the running phase's SIGQUIT, 0.5.13 sleeps 5 s "before crash diagnostics" and 0.5.17 then
# waits another 60 s "for CUDA coredumps before exiting" (`SGLANG_CUDA_COREDUMP_BEFORE_CRASH`,
# on by default), so a crash on the first request cost a real trial 65 s (2026-12-02). They only
# count while the trial has not stopped the server itself: stopping it prints the SIGQUIT line too.
# Texts (0.5.13-0.5.17): managers/scheduler.py ("Scheduler hit an exception"), the detokenizer,
# tokenizer, data-parallel controller and multi-tokenizer routers ("... hit an exception"),
# entrypoints/engine.py (launch_phase_sigquit_handler; "Rank N scheduler died during
# initialization"), managers/tokenizer_manager.py (running_phase_sigquit_handler).
CHILD_FAILED_PATTERN = (
    r"\b(?:Scheduler|DetokenizerManager|TokenizerManager|DataParallelController"
    r"|MultiDetokenizerRouter|MultiTokenizerRouter) hit an exception"
    r"|Received sigquit from a child process\. It usually means the child failed"
    r"|SIGQUIT received\. .*It usually means one child failed"
    r"|\bscheduler died during initialization"
)
