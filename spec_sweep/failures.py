"""How trials end: this module owns the ``FailureMode`` enum (docs/design.md, "Failure modes"), the
table of fatal log-line patterns taken from the real message texts of SGLang, PyTorch, NCCL,
FlashInfer, DeepEP and argparse (data, not code), the per-line check a log watcher runs on every
line a server prints (``find_fatal``), the one classifier that turns a trial's log, exit status and
readiness/benchmark outcome into exactly one ``Classification`` (``classify``). The exception types
live in ``errors``. It is pure: standard library only, no I/O.
"""

from __future__ import annotations

import enum
import re
import signal
from dataclasses import dataclass

__all__ = [
    "ENVIRONMENT_PATTERNS",
    "LOG_PATTERNS",
    "Classification",
    "FailureMode",
    "LogPattern",
    "classify",
    "find_fatal",
]


class FailureMode(enum.StrEnum):
    """How a trial ended (docs/design.md, "Failure modes"); exactly one per trial."""

    NONE = "none"
    """The trial finished and was measured."""
    OOM = "oom"
    """GPU memory ran out (weights, KV cache, CUDA-graph capture, cuBLAS/NCCL buffers)."""
    ASSERTION = "assertion"
    """An assertion failed (``AssertionError``, DeepEP host/device or CUDA device asserts)."""
    UNSUPPORTED = "unsupported"
    """A feature or the GPU architecture is not supported by a kernel or backend."""
    NCCL = "nccl"
    """A collective failed or timed out (NCCL / torch.distributed)."""
    INVALID_ARGS = "invalid_args"
    """The server rejected its arguments (argparse or ServerArgs validation)."""
    STARTUP_TIMEOUT = "startup_timeout"
    """The server did not become ready before the boot deadline."""
    CRASH = "crash"
    """The server exited (or died) for another reason."""
    HANG = "hang"
    """The server stopped answering during the benchmark."""
    BENCH_ERROR = "bench_error"
    """The server answered, but requests failed."""
    WRONG_OUTPUT = "wrong_output"
    """The server answered, but its greedy outputs disagree with the baseline's (quality gate)."""
    NODE_LOST = "node_lost"
    """The node or its Ray worker went away; the trial is retried elsewhere."""
    ENVIRONMENT = "environment"
    """The node cannot start any server: an import error, no GPU visible, a driver too old for
    the CUDA runtime, a missing model. Not the configuration's fault: the sweep stops."""


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


@dataclass(frozen=True, slots=True)
class Classification:
    """The outcome of one trial.

    Attributes:
        mode: The failure mode (``FailureMode.NONE`` for a measured trial).
        reason: One line saying why, e.g. ``"OOM: torch.OutOfMemoryError: CUDA out of memory..."``.
        excerpt: The deciding log line with a few lines of context, or the log tail when no line
            decided.
    """

    mode: FailureMode
    reason: str
    excerpt: str


# Optional line prefixes added by torchrun ("[rank0]: "), SGLang's logger ("[2025-01-01 10:00:00
# TP0] ") or Ray ("(pid=123) ") before a line that Python printed at column 0.
_PFX = r"^(?:(?:\[[^\]]*\]|\([^)]*\)):?\s*)*"
# An exception line of a traceback: "<qualified.ExceptionType>: <message>".
_EXC = _PFX + r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): "

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
        _PFX + r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError: \S",
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
        _PFX + r"(?:Last error:\s*)?Cuda failure (?:\d+ )?'out of memory'",
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
        _PFX + r"(?:[A-Za-z_]\w*\.)*(?:BackendSupportedError|GPUArchitectureError): ",
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
        _PFX + r"(?:[A-Za-z_]\w*Error: |Failed to initialize TorchSymmMemCommunicator: )?"
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
        _PFX + r"(?:[A-Za-z_]\w*\.)*NotImplementedError(?::|\s*$)",
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
        _PFX + r"(?:\s*what\(\):\s+|(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): )"
        r".*\bNCCL error\b",
        "an NCCL call failed ('NCCL error in: <file>:<line>, unhandled cuda error ...' from "
        "torch, 'NCCL error: ...' from SGLang's pynccl)",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK); "
        "sgl-project/sglang python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py"
        " (NCCL_CHECK)",
    ),
    LogPattern(
        FailureMode.NCCL,
        _PFX + r"(?:[A-Za-z_]\w*\.)*DistBackendError: ",
        "torch.distributed's backend failed (communicator aborted, NCCL timeout)",
        "pytorch/pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp, ProcessGroupNCCL.cpp",
    ),
    LogPattern(
        FailureMode.NCCL,
        _PFX + r"(?:ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclInvalidArgument"
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
        _PFX + r"(?:[A-Za-z_]\w*\.)*AssertionError(?::|\s*$)",
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

# Every pattern's regex contains one of these substrings literally (backslashes aside), and every
# line it matches contains it too, so a line without any of them is not fatal: that substring test
# (in C) is all an ordinary line costs, and a line with a keyword is searched only by the patterns
# that carry it. tests/unit/test_failures.py checks the invariant on every pattern's real message.
_KEYWORDS = (
    "rror",
    "xception",
    "out of memory",
    "Not enough memory",
    "no GPU memory for the KV cache",
    "memory capacity",
    "illegal memory",
    "ssert",
    "upport",
    "atchdog",
    "communicator was aborted",
    "operations have failed",
    "terminate called",
    "Capture cuda graph failed",
    "kernel image",
    "ALLOC_FAILED",
)
_NCCL_DEBUG = ("NCCL INFO", "NCCL WARN", "NCCL TRACE")


def _keywords_of(regex: str) -> tuple[str, ...]:
    literal = regex.replace("\\", "")
    return tuple(keyword for keyword in _KEYWORDS if keyword in literal)


_COMPILED: tuple[re.Pattern[str], ...] = tuple(re.compile(p.regex) for p in LOG_PATTERNS)
# keyword -> (table index, compiled regex) of the patterns that carry it, in precedence order.
_BY_KEYWORD: tuple[tuple[str, tuple[tuple[int, re.Pattern[str]], ...]], ...] = tuple(
    (
        keyword,
        tuple(
            (index, _COMPILED[index])
            for index, pattern in enumerate(LOG_PATTERNS)
            if keyword in _keywords_of(pattern.regex)
        ),
    )
    for keyword in _KEYWORDS
)
_UNKEYED = [p.regex for p in LOG_PATTERNS if not _keywords_of(p.regex)]
if _UNKEYED:  # pragma: no cover - a table edit without a keyword must fail loudly at import
    raise AssertionError(f"log patterns without a _KEYWORDS substring: {_UNKEYED}")

# Lines that may contain a pattern's text but never report a failure: NCCL's own debug output
# (also skipped early through _NCCL_DEBUG), traceback source lines (the statement that raises, a
# string literal, an assignment).
_NOT_FATAL = re.compile(
    r"\bNCCL (?:INFO|WARN|TRACE)\b"
    r"|\braise\s+[A-Za-z_][\w.]*\("
    r"|^\s*(?:[fFrRbBuU]{0,2}[\"']|(?:raise|assert|except|if|elif|return)\b)"
    r"|^\s+[A-Za-z_][\w.]*\s*\+?=\s"
)
_FRAME = re.compile(_PFX + r"\s*File \"([^\"]+)\", line \d+")
_EXCEPTION_LINE = re.compile(_PFX + r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::|\s*$)")
_USAGE = re.compile(r"^usage: ")

_LABELS: dict[FailureMode, str] = {
    FailureMode.NONE: "ok",
    FailureMode.OOM: "OOM",
    FailureMode.ASSERTION: "assertion",
    FailureMode.UNSUPPORTED: "unsupported",
    FailureMode.NCCL: "NCCL",
    FailureMode.INVALID_ARGS: "invalid args",
    FailureMode.STARTUP_TIMEOUT: "startup timeout",
    FailureMode.CRASH: "crash",
    FailureMode.HANG: "hang",
    FailureMode.BENCH_ERROR: "bench error",
    FailureMode.NODE_LOST: "node lost",
    FailureMode.ENVIRONMENT: "environment",
}
_CONTEXT_BEFORE = 8
_CONTEXT_AFTER = 3
_TAIL_LINES = 20
_MAX_LINE = 400
_MAX_EXCERPT_LINE = 1000
_SERVER_ARGS_FILE = "server_args.py"
# An exception that matches no pattern is still decided by the file that raised it: SGLang's
# argument checks reject the arguments; the all-reduce feature communicators failing to set up
# mean the feature does not work on this node (e.g. torch symmetric memory's `KeyError: 12` on
# SM120 in SGLang 0.5.13, a lookup in its per-architecture table).
_RAISING_FILES: tuple[tuple[str, FailureMode], ...] = (
    (_SERVER_ARGS_FILE, FailureMode.INVALID_ARGS),
    ("torch_symm_mem.py", FailureMode.UNSUPPORTED),
    ("flashinfer_comm_fusion.py", FailureMode.UNSUPPORTED),
    ("custom_all_reduce.py", FailureMode.UNSUPPORTED),
)


def _match(line: str) -> int | None:
    """Return the table index of the highest-precedence pattern matching ``line``, if any."""
    best: int | None = None
    for keyword, candidates in _BY_KEYWORD:
        if keyword not in line:
            continue
        for debug in _NCCL_DEBUG:
            if debug in line:
                return None
        for index, compiled in candidates:
            if best is not None and index >= best:
                break
            if compiled.search(line) is not None:
                best = index
                break
    if best is None or _NOT_FATAL.search(line) is not None:
        return None
    return best


def find_fatal(line: str) -> LogPattern | None:
    """Check one log line for a fatal message.

    Meant for a log watcher that sees every line a server prints: a line without any of the
    patterns' keywords costs one short substring scan. A fatal line means the trial has failed,
    but the watcher should let the server finish printing its traceback (a second or two, or until
    it exits) before stopping it, so that ``classify`` sees the whole story.

    Args:
        line: One line of server output, with or without its trailing newline.

    Returns:
        The highest-precedence matching pattern, or None when the line is not fatal.
    """
    index = _match(line)
    return None if index is None else LOG_PATTERNS[index]


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def _excerpt(lines: list[str], index: int) -> str:
    start = max(0, index - _CONTEXT_BEFORE)
    chunk = lines[start : index + _CONTEXT_AFTER + 1]
    return "\n".join(line[:_MAX_EXCERPT_LINE] for line in chunk)


def _tail(lines: list[str]) -> str:
    return "\n".join(line[:_MAX_EXCERPT_LINE] for line in lines[-_TAIL_LINES:])


def _innermost_frame(lines: list[str], index: int) -> str | None:
    """File of the traceback frame printed just above the exception line at ``index``."""
    for back in range(index - 1, max(-1, index - 6), -1):
        frame = _FRAME.match(lines[back])
        if frame is not None:
            return frame.group(1)
    return None


def _last_exception(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]) and not _NOT_FATAL.search(lines[index]):
            return index
    return None


# Lines that say the node cannot run a server at all, whatever its flags: decided only for a
# server that never became ready (a caught, logged import error in a healthy boot is not one).
# Texts: CPython's import system and `runpy` ("Error while finding module specification for
# 'sglang.launch_server' (ModuleNotFoundError: No module named 'sglang')"); PyTorch
# (torch/cuda/__init__.py `_lazy_init`: "No CUDA GPUs are available", "Found no NVIDIA driver on
# your system", "The NVIDIA driver on your system is too old"); the CUDA runtime
# (cudaErrorInsufficientDriver, cudaErrorNoDevice); the dynamic loader; huggingface_hub /
# transformers for a model path that does not exist.
ENVIRONMENT_PATTERNS: tuple[str, ...] = (
    _PFX + r"(?:[A-Za-z_]\w*\.)*(?:ModuleNotFoundError|ImportError): ",
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
    _PFX + r"(?:[A-Za-z_]\w*\.)*OSError: ",
)
_ENVIRONMENT = tuple(re.compile(p) for p in ENVIRONMENT_PATTERNS)
_TRACEBACK_START = re.compile(_PFX + r"Traceback \(most recent call last\):")
# Where SGLang builds and checks its arguments: `ServerArgs.__post_init__` in server_args.py,
# and from 0.5.13 the hooks it calls in `sglang/srt/arg_groups/` (e.g. speculative_hook.py).
_ARGUMENT_FRAMES = ("server_args.py", "/arg_groups/")


def _environment_line(lines: list[str]) -> int | None:
    """The line saying the node cannot run any server, if that is what ended it, else None.

    Only the exception that ended the server counts (the last exception line, or Python's own
    "Error while finding module specification" when there is none after it): a boot logs and
    survives optional imports that fail, and a server that died of OOM after such a line died
    of OOM.
    """
    last = _last_exception(lines)
    candidates = [last] if last is not None else []
    candidates += [
        i for i in range(len(lines) - 1, (last or -1), -1) if "finding module spec" in lines[i]
    ]
    for index in candidates:
        if any(pattern.search(lines[index]) for pattern in _ENVIRONMENT):
            return index
    return None


def _traceback_frames(lines: list[str], index: int) -> list[str]:
    """The files of the traceback that ends at line `index` (its last block only)."""
    frames: list[str] = []
    for back in range(index - 1, max(-1, index - 400), -1):
        if _TRACEBACK_START.match(lines[back]):
            break
        frame = _FRAME.match(lines[back])
        if frame is not None:
            frames.append(frame.group(1))
    return frames


def _while_building_arguments(lines: list[str], index: int) -> bool:
    """Whether the exception at `index` was raised while SGLang built its arguments."""
    return any(
        marker in frame for frame in _traceback_frames(lines, index) for marker in _ARGUMENT_FRAMES
    )


def _raised_from_known_file(lines: list[str]) -> tuple[int, FailureMode] | None:
    """The last exception raised from a file of `_RAISING_FILES`, with that file's mode."""
    for index in range(len(lines) - 1, -1, -1):
        if not _EXCEPTION_LINE.match(lines[index]):
            continue
        if _while_building_arguments(lines, index):
            return index, FailureMode.INVALID_ARGS
        frame = _innermost_frame(lines, index)
        if frame is None:
            continue
        for suffix, mode in _RAISING_FILES:
            if frame.endswith(suffix):
                return index, mode
    return None


def _describe_exit(exit_code: int) -> str:
    """Say how a process ended: ``-11`` -> ``"code -11 (SIGSEGV)"``."""
    number = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    try:
        name = signal.Signals(number).name if number > 0 else ""
    except ValueError:
        name = ""
    if not name:
        return f"code {exit_code}"
    return f"code {exit_code} ({name})" if exit_code < 0 else f"code {exit_code} (128+{name})"


def _decided(mode: FailureMode, lines: list[str], index: int) -> Classification:
    return Classification(
        mode=mode,
        reason=f"{_LABELS[mode]}: {_one_line(lines[index])}",
        excerpt=_excerpt(lines, index),
    )


def _undecided(mode: FailureMode, detail: str, lines: list[str]) -> Classification:
    return Classification(mode=mode, reason=f"{_LABELS[mode]}: {detail}", excerpt=_tail(lines))


def classify(
    *,
    log_text: str,
    exit_code: int | None,
    ready: bool,
    boot_timed_out: bool = False,
    bench_hung: bool = False,
    bench_error: str | None = None,
    node_lost: bool = False,
) -> Classification:
    """Classify how a trial ended: exactly one failure mode, a one-line reason and an excerpt.

    Rules, first match wins:

    1. ``node_lost`` -> ``node_lost``.
    2. Not ready, and a line says the node cannot run any server (``ENVIRONMENT_PATTERNS``: an
       import error, no GPU, a driver too old, a missing model) -> ``environment``.
    3. A fatal log line (``LOG_PATTERNS``, precedence = table order, then earliest line) decides
       its mode, even if the process still runs; if that line ends a traceback that passes
       through SGLang's argument construction (``server_args.py`` or ``arg_groups/``, at any
       depth: checks moved into hooks that ``ServerArgs.__post_init__`` calls), the mode is
       ``invalid_args``: the server rejected its arguments, deterministically.
    4. Any other exception raised while building the arguments -> ``invalid_args``; from an
       all-reduce feature communicator (torch symmetric memory, FlashInfer fusion, custom
       all-reduce) -> ``unsupported`` (``_RAISING_FILES``).
    5. Exit code 2 with argparse's ``usage:`` text -> ``invalid_args``.
    6. Not ready and the boot deadline passed -> ``startup_timeout``.
    7. Not ready otherwise (exited before ready) -> ``crash``, naming the exit code or signal
       (``-11`` -> SIGSEGV) and the last exception line if there is one.
    8. Ready, and the process exited on its own during the benchmark -> ``crash``.
    9. Ready and the benchmark hung -> ``hang``.
    10. Ready and requests failed -> ``bench_error``.
    11. Otherwise -> ``none``.

    Args:
        log_text: The server's whole log (stdout and stderr).
        exit_code: The server's exit status if it exited on its own (negative: killed by that
            signal); None if it was still running when the trial stopped it (the trial's own
            SIGTERM is not a crash).
        ready: Whether the server became ready (health check passed).
        boot_timed_out: Whether the boot deadline passed before it was ready.
        bench_hung: Whether the benchmark stopped getting answers.
        bench_error: The benchmark's error summary when requests failed, else None.
        node_lost: Whether the node or its Ray worker went away.

    Returns:
        The classification.
    """
    lines = log_text.splitlines()
    if node_lost:
        return _undecided(
            FailureMode.NODE_LOST, "the node or its Ray worker went away; retry elsewhere", lines
        )

    if not ready:
        environment = _environment_line(lines)
        if environment is not None:
            return _decided(FailureMode.ENVIRONMENT, lines, environment)

    best: tuple[int, int] | None = None  # (pattern index, line index)
    for line_index, line in enumerate(lines):
        pattern_index = _match(line)
        if pattern_index is not None and (best is None or pattern_index < best[0]):
            best = (pattern_index, line_index)
            if pattern_index == 0:
                break
    if best is not None:
        pattern_index, line_index = best
        mode = LOG_PATTERNS[pattern_index].mode
        if mode is not FailureMode.INVALID_ARGS and _while_building_arguments(lines, line_index):
            mode = FailureMode.INVALID_ARGS
        return _decided(mode, lines, line_index)

    raised = _raised_from_known_file(lines)
    if raised is not None:
        return _decided(raised[1], lines, raised[0])

    if exit_code == 2 and any(_USAGE.match(line) for line in lines):
        return _undecided(
            FailureMode.INVALID_ARGS, "exited with code 2 after printing argparse usage", lines
        )

    if not ready:
        if boot_timed_out:
            return _undecided(
                FailureMode.STARTUP_TIMEOUT,
                "the server was not ready before the boot deadline",
                lines,
            )
        if exit_code is None:
            detail = "the server never became ready (still running, no fatal line)"
        else:
            detail = f"exited with {_describe_exit(exit_code)} before ready"
        last = _last_exception(lines)
        if last is not None:
            detail += f"; last exception: {_one_line(lines[last])}"
        return _undecided(FailureMode.CRASH, detail, lines)

    if exit_code is not None:
        return _undecided(
            FailureMode.CRASH,
            f"exited with {_describe_exit(exit_code)} during the benchmark",
            lines,
        )
    if bench_hung:
        return _undecided(
            FailureMode.HANG, "the server stopped answering during the benchmark", lines
        )
    if bench_error is not None:
        return _undecided(FailureMode.BENCH_ERROR, _one_line(bench_error), lines)
    return Classification(mode=FailureMode.NONE, reason=_LABELS[FailureMode.NONE], excerpt="")
