"""Tests for spec_sweep.node.classify and its table (node.log_patterns): every log pattern
against the real message texts it was taken from (copied from the source named in the pattern,
inside realistic traceback lines), lines that must not be fatal, and the rules and precedence
of ``classify``."""

from __future__ import annotations

import dataclasses

import pytest

from spec_sweep.core.outcome import FailureMode
from spec_sweep.errors import SpecSweepError, TrialError
from spec_sweep.node.classify import (
    Classification,
    _keywords_of,
    classify,
    find_fatal,
    killed_unexplained,
)
from spec_sweep.node.log_patterns import LOG_PATTERNS, LogPattern


def _pattern(what_prefix: str) -> LogPattern:
    """The table entry whose ``what`` starts with ``what_prefix`` (exactly one)."""
    found = [p for p in LOG_PATTERNS if p.what.startswith(what_prefix)]
    assert len(found) == 1, (what_prefix, found)
    return found[0]


# what-prefix of a pattern -> real lines it must decide (and be the highest-precedence match of).
EXAMPLES: dict[str, tuple[str, ...]] = {
    # argparse (cpython Lib/argparse.py): usage line, then "<prog>: error: <message>", exit 2.
    "argparse rejected": (
        "launch_server.py: error: unrecognized arguments: --cuda-graph-max-bs 128",
        "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'EAGLE4' "
        "(choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')",
        "launch_server.py: error: ambiguous option: --cuda-graph could match "
        "--cuda-graph-max-bs, --cuda-graph-bs",
        "launch_server.py: error: the following arguments are required: --model-path/--model",
        "launch_server.py: error: argument --tp-size/--tensor-parallel-size: invalid int value: "
        "'eight'",
    ),
    # sglang server_args.py _handle_speculative_decoding.
    "ServerArgs rejected a speculative": (
        "ValueError: speculative_eagle_topk > 1 with page_size > 1 is unstable and produces "
        "incorrect results for paged attention backends. This combination is only supported for "
        "the 'flashinfer' backend.",
        "ValueError: speculative_eagle_topk(4) > 1 with page_size(16) > 1 is unstable and "
        "produces incorrect results for paged attention backends. This combination is only "
        "supported for the 'flashinfer' backend.",
        "ValueError: Spec v2 currently only supports topk = 1 for speculative decoding.",
        "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding.",
        "ValueError: Currently standalone speculative decoding does not support dp attention.",
        "ValueError: Ngram speculative decoding only supports CUDA device.",
        "ValueError: Currently ngram speculative decoding does not support dp attention.",
        "AssertionError: Currently speculative MoE runner backend cannot be flashinfer_trtllm for "
        "risk in some draft models.",
        # sglang speculative/spec_info.py SpeculativeAlgorithm.from_string
        "ValueError: Unknown speculative algorithm name: EAGLE4",
    ),
    # sglang server_args.py check_server_args and _handle_* checks.
    "ServerArgs rejected another": (
        "AssertionError: Pipeline parallelism is not compatible with overlap schedule, "
        "speculative decoding",
        "AssertionError: tp_size must be divisible by number of nodes",
        "AssertionError: chunked_prefill_size must be divisible by page_size",
        "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
        "exclusive and cannot be used at the same time. Please use only one of them.",
        "ValueError: Cannot enable both --enable-tokenizer-batch-encode and "
        "--enable-dynamic-batch-tokenizer. Please choose one tokenizer batching approach.",
    ),
    # pytorch c10/cuda/CUDACachingAllocator.cpp; torch >= 2.5 calls it torch.OutOfMemoryError.
    "PyTorch's caching allocator": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 139.81 GiB of which 1.25 GiB is free. Including non-PyTorch memory, "
        "this process has 138.55 GiB memory in use. Of the allocated memory 130.12 GiB is "
        "allocated by PyTorch, and 6.20 GiB is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments"
        ":True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; "
        "79.15 GiB total capacity; 75.20 GiB already allocated; 1.02 GiB free; 76.80 GiB "
        "reserved in total by PyTorch)",
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. "
        "GPU 3 has a total capacity of 139.81 GiB of which 200.00 MiB is free.",
    ),
    "'CUDA out of memory. Tried to allocate": (
        # torch < 1.13 raised a plain RuntimeError with the same text.
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total "
        "capacity; 77.90 GiB already allocated; 10.75 MiB free; 78.20 GiB reserved in total by "
        "PyTorch)",
        "  what():  CUDA out of memory. Tried to allocate 64.00 MiB. GPU 1 has a total capacity "
        "of 139.81 GiB of which 30.00 MiB is free.",
    ),
    "a CUDA runtime/driver call failed": (
        "RuntimeError: CUDA error: out of memory",
        "torch.AcceleratorError: CUDA error: out of memory",
        "RuntimeError: CUDA driver error: out of memory",
        "RuntimeError: Triton Error [CUDA]: out of memory",
    ),
    "cuBLAS could not allocate": (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ),
    "SGLang: no room left for the KV cache": (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.5",
    ),
    "SGLang: the weights (target and draft) leave nothing": (
        # 0.5.17 mem_cache/kv_cache_configurator.py:1646-1655, as it formats the message.
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.001. Raise --mem-fraction-static above 0.012 (minimum viable "
        "= 1 - available/pre = 0.0117). If using speculative decoding, draft weights are now "
        "counted.",
    ),
    "SGLang's CUDA-graph capture failed for lack": (
        "Exception: Capture cuda graph failed: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when "
        "calling `cublasCreate(handle)`",
    ),
    "the 'Last error' detail": (
        "Cuda failure 2 'out of memory'",
        "[rank5]: Last error: Cuda failure 'out of memory'",
    ),
    "SGLang: free memory differs": (
        "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes. min_per_gpu_memory=16.28, local_gpu_memory=46.81, "
        "local_gpu_memory * 0.9=42.13",
        "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes.",
    ),
    # flashinfer compilation_context.py / jit/core.py / utils.py.
    "FlashInfer's JIT has no kernel": (
        "RuntimeError: No supported CUDA architectures found for major versions [12].",
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10, 11, 12].",
    ),
    "FlashInfer's JIT found no usable": (
        "RuntimeError: FlashInfer requires GPUs with sm75 or higher",
    ),
    "a FlashInfer API does not support": (
        "flashinfer.utils.BackendSupportedError: mm_fp4 does not support backend 'cutlass' with "
        "capability 120",
        "flashinfer.utils.BackendSupportedError: trtllm_allreduce_fusion does not support compute "
        "capability 120",
    ),
    "a binary has no kernel": (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
        "device",
    ),
    "a JIT build": ("nvcc fatal   : Unsupported gpu architecture 'compute_120a'",),
    "SGLang's torch symmetric-memory": (
        "RuntimeError: TorchSymmMemCommunicator: Device capability 12 not supported, "
        "communicator is not available.",
        "RuntimeError: TorchSymmMemCommunicator: torch symmetric memory multicast operations are "
        "not supported.",
        # Logged (SGLang falls back) when --enable-torch-symm-mem was asked for: the flag is dead.
        "[2025-09-01 10:00:07 TP0] Failed to initialize TorchSymmMemCommunicator: "
        "TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not "
        "available.",
        "[2026-11-29 13:38:34 TP0] TorchSymmMemCommunicator: Device capability 12 not supported, "
        "communicator is not available.",
    ),
    # sglang layers/flashinfer_comm_fusion.py (0.5.23) on SM120.
    "a feature refuses this GPU generation": (
        "ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.",
        "[2026-01-01 10:00:00 TP0] ValueError: FlashInfer allreduce fusion requires SM90 or SM10X "
        "NVIDIA GPUs.",
    ),
    "a code path is not implemented": (
        "NotImplementedError",
        "NotImplementedError: Unsupported MoE a2a backend for this model",
    ),
    "an exception says a feature": (
        # flashinfer jit/attention/modules.py gen_batch_prefill_module.
        "AssertionError: fp8 tensor core is not supported in fa2 backend",
        "RuntimeError: CUDA error: operation not supported",
        "RuntimeError: CUDA error: peer access is not supported between these two devices",
    ),
    # pytorch NCCLUtils.hpp C10D_NCCL_CHECK, sglang pynccl_wrapper.py NCCL_CHECK.
    "an NCCL call failed": (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details),"
        " NCCL version 2.21.5",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "RuntimeError: NCCL error: remote process exited or there was a network error",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread "
        "terminated with exception: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO "
        "for details)",
    ),
    "torch.distributed's backend failed": (
        "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3.  Original "
        "reason for failure was: [Rank 3] Watchdog caught collective operation timeout",
    ),
    "the detail line torch prints": (
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
        "failed or device error. ",
        "ncclInternalError: Internal check failed.",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
    ),
    "a collective did not finish": (
        "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, "
        "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
    ),
    "torch aborted the NCCL communicator": (
        "[rank2]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID "
        "0(default_pg) Rank 2] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        "[rank3]:[E1218 20:27:22.000000000 NCCLUtils.cpp:40] NCCL communicator was aborted on "
        "rank 3.",
    ),
    "a Python assert failed": (
        "AssertionError",
        "AssertionError: Symmetric buffer not initialized",
    ),
    # DeepEP csrc/kernels/exception.cuh: both EPException formats and the device printf.
    "a DeepEP host or device assertion": (
        "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105 "
        "'x.size(0) == topk_idx.size(0) and x.size(0) <= num_max_dispatch_tokens_per_rank'",
        "RuntimeError: Assertion exception (/sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105): "
        "x.size(0) <= num_max_dispatch_tokens_per_rank",
        "Assertion failed: /sgl-workspace/DeepEP/csrc/kernels/internode_ll.cu:341, condition: "
        "num_recv_tokens <= num_max_dispatch_tokens_per_rank",
    ),
    "a CUDA device-side assertion fired": (
        "RuntimeError: CUDA error: device-side assert triggered",
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
    ),
    "the kernel-side text": (
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], "
        'thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of '
        'bounds"` failed.',
        "python3: /src/csrc/moe_align.cu:120: void align(): Assertion `num_experts > 0' failed.",
    ),
    # sglang managers/scheduler.py / utils/watchdog.py.
    "SGLang's scheduler made no progress": (
        "[2025-09-22 01:05:16 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
        "self.soft=False)",
        "[2025-09-22 01:05:16 TP0] Scheduler watchdog timeout (watchdog_timeout=300)",
    ),
    "SGLang's CUDA-graph capture failed for a reason": (
        "Exception: Capture cuda graph failed: Ninja build failed.",
    ),
    "a kernel accessed invalid memory": (
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    ),
    "the interpreter died": (
        "Fatal Python error: Segmentation fault",
        "Fatal Python error: Aborted",
    ),
    "an uncaught C++ exception": ("terminate called after throwing an instance of 'c10::Error'",),
}

CASES = [(what, line) for what, lines in EXAMPLES.items() for line in lines]


def test_every_pattern_has_real_examples() -> None:
    covered = {_pattern(what) for what in EXAMPLES}
    missing = [p.what for p in LOG_PATTERNS if p not in covered]
    assert not missing


@pytest.mark.parametrize(("what", "line"), CASES)
def test_pattern_decides_its_real_message(what: str, line: str) -> None:
    pattern = _pattern(what)
    assert find_fatal(line) == pattern
    assert find_fatal(line + "\n") == pattern


@pytest.mark.parametrize(("what", "line"), CASES)
def test_line_carries_a_keyword_of_its_pattern(what: str, line: str) -> None:
    # The keyword prefilter in find_fatal relies on this.
    assert any(keyword in line for keyword in _keywords_of(_pattern(what).regex))


def test_table_is_data_with_sources() -> None:
    for pattern in LOG_PATTERNS:
        assert isinstance(pattern.mode, FailureMode)
        assert pattern.mode not in {FailureMode.NONE, FailureMode.NODE_LOST}
        assert pattern.what
        assert pattern.source
    with pytest.raises(dataclasses.FrozenInstanceError):
        LOG_PATTERNS[0].mode = FailureMode.CRASH  # type: ignore[misc]


def test_table_is_ordered_by_mode_precedence() -> None:
    order = [
        FailureMode.INVALID_ARGS,
        FailureMode.OOM,
        FailureMode.UNSUPPORTED,
        FailureMode.NCCL,
        FailureMode.ASSERTION,
        FailureMode.HANG,
        FailureMode.CRASH,
    ]
    ranks = [order.index(p.mode) for p in LOG_PATTERNS]
    assert ranks == sorted(ranks)


BENIGN = (
    "",
    "[2025-09-01 10:00:00] server_args=ServerArgs(model_path='/models/Llama-3.1-70B-Instruct', "
    "mem_fraction_static=0.85, disable_custom_all_reduce=False, enable_nccl_nvls=False, "
    "enable_symm_mem=False, speculative_algorithm='EAGLE3', watchdog_timeout=300)",
    "node-0:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "node-0:1234:1234 [0] NCCL INFO NVLS multicast support is not available on dev 0",
    "node-0:1234:5678 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    # NCCL's own warnings are never decisive (the failure that follows is).
    "node-0:1234:5678 [0] include/alloc.h:124 NCCL WARN Cuda failure 2 'out of memory'",
    "node-0:1234:5678 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'out of memory'",
    "node-0:1234:5678 [0] misc/socket.cc:50 NCCL WARN Call to bind failed: Address already in use",
    # SGLang warnings: features that fall back, not failures.
    "[2025-09-01 10:00:07 TP0] Custom allreduce is disabled because it's not supported on more "
    "than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
    "explicitly.",
    "[2025-09-01 10:00:07 TP0] Custom allreduce is disabled because your platform lacks GPU P2P "
    "capability or P2P test failed. To silence this warning, specify "
    "disable_custom_all_reduce=True explicitly.",
    "[2025-09-01 10:00:07 TP0] TorchSymmMemCommunicator is disabled, skipping initialization",
    "[2025-09-01 10:00:07 TP0] flashinfer.comm allreduce_fusion API is not available (No module "
    "named 'flashinfer.comm'), falling back to standard implementation",
    "[2025-09-01 10:00:08 TP0] Disable piecewise CUDA graph for speculative decoding to avoid "
    "error.",
    "[2025-09-01 10:00:08 TP0] Ignore import error when loading sglang.srt.models.mllama4: "
    "No module named 'transformers.models.llama4'",
    # memory in benign lines.
    "[2025-09-01 10:01:01 TP0] Memory pool end. avail mem=35.00 GB",
    "[2025-09-01 10:01:01 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
    "avail mem=120.02 GB, mem usage=17.83 GB.",
    "[2025-09-01 10:01:02 TP0] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=34.50 GB",
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/memory.py:365: UserWarning: "
    "expandable_segments not supported on this platform (Triggered internally at "
    "/pytorch/c10/cuda/CUDAAllocatorConfig.h:28.)",
    "  warnings.warn(",
    # deprecation warnings.
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:63: FutureWarning: The "
    "pynvml package is deprecated. Please install nvidia-ml-py instead. If you did not install "
    "pynvml directly, please report this to the maintainers of the package that installed "
    "pynvml for you.",
    "/usr/local/lib/python3.12/dist-packages/torch/_utils.py:831: UserWarning: TypedStorage is "
    "deprecated. It will be removed in the future and UntypedStorage will be the only storage "
    "class.",
    "DeprecationWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use "
    "`torch.amp.autocast('cuda', args...)` instead.",
    # SGLang's capture advice alone, and the newer not-an-OOM hint.
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
    "This is not an out-of-memory error, so lowering --mem-fraction-static or "
    "--cuda-graph-max-bs-decode will not help.",
    # wrapper lines: never the cause.
    "[2025-09-01 10:01:20 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    "[2025-09-01 10:01:21] Received sigquit from a child process. It usually means the child "
    "failed.",
    "RuntimeError: Rank 0 scheduler died during initialization (exit code: -3). If exit code is "
    "-9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T` to check for OOM killer "
    "invocations.",
    "Traceback (most recent call last):",
    "During handling of the above exception, another exception occurred:",
    # traceback source lines that contain a message's text.
    '    raise RuntimeError(f"NCCL error: {error_str}")',
    '    raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")',
    '                "Not enough memory. Please try to increase --mem-fraction-static."',
    '            msg = "Not enough memory. Please try to increase --mem-fraction-static."',
    '    assert not fp8_enabled, "fp8 tensor core is not supported in fa2 backend"',
    "    except torch.OutOfMemoryError:",
    # soft watchdog: warns and dumps stacks, nothing is killed.
    "[2025-09-01 10:01:20 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
    "self.soft=True)",
    "[2025-09-01 10:01:20 TP0] Scheduler watchdog timeout (soft=True)",
    # serving logs.
    '[2025-09-01 10:02:00] INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK',
    "[2025-09-01 10:02:00 TP0] Decode batch. #running-req: 8, #token: 9000, token usage: 0.01, "
    "accept len: 3.12, cuda graph: True, gen throughput (token/s): 812.34, #queue-req: 0,",
    "[2025-09-01 10:01:45] The server is fired up and ready to roll!",
)


@pytest.mark.parametrize("line", BENIGN)
def test_harmless_line_is_not_fatal(line: str) -> None:
    assert find_fatal(line) is None


# ------------------------------------------------------------------------------- classify

OOM_IN_CAPTURE = """\
[2025-09-01 10:01:02 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.50 GB
[2025-09-01 10:01:20 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__
    self.capture()
  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py", line 186, in __exit__
    self.cuda_graph.capture_end()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.25 GiB is free.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.25 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose

[2025-09-01 10:01:21] Received sigquit from a child process. It usually means the child failed.
"""  # noqa: E501


def test_oom_during_capture_is_oom_and_names_the_allocator_line() -> None:
    result = classify(log_text=OOM_IN_CAPTURE, exit_code=-9, ready=False)
    assert result.mode is FailureMode.OOM
    assert result.reason.startswith("OOM: torch.OutOfMemoryError: CUDA out of memory.")
    assert "\n" not in result.reason
    assert "torch.OutOfMemoryError" in result.excerpt
    assert "self.capture()" in result.excerpt


def test_fatal_line_decides_even_while_the_process_runs() -> None:
    result = classify(log_text=OOM_IN_CAPTURE, exit_code=None, ready=False)
    assert result.mode is FailureMode.OOM


def test_node_lost_wins_over_everything() -> None:
    result = classify(log_text=OOM_IN_CAPTURE, exit_code=-9, ready=False, node_lost=True)
    assert result.mode is FailureMode.NODE_LOST


def test_oom_inside_an_assertion_traceback_is_oom() -> None:
    log = """\
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/token_dispatcher/deepep.py", line 412, in dispatch
    assert hidden_states.shape[0] <= self.num_max_dispatch_tokens_per_rank
AssertionError

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/token_dispatcher/deepep.py", line 420, in dispatch
    buffer = torch.empty(size, device="cuda")
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 2 has a total capacity of 139.81 GiB of which 3.00 GiB is free.
"""  # noqa: E501
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.OOM


def test_oom_on_one_rank_beats_nccl_errors_on_the_others() -> None:
    log = "\n".join(
        [
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
            "distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with "
            "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.",
            "[rank1]: Last error:",
            "[rank1]: Cuda failure 2 'out of memory'",
            "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
        ]
    )
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.OOM
    assert "Cuda failure 2 'out of memory'" in result.reason


def test_nccl_error_alone_is_nccl() -> None:
    log = "\n".join(
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/'
            'pynccl_wrapper.py", line 374, in NCCL_CHECK',
            '    raise RuntimeError(f"NCCL error: {error_str}")',
            "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        ]
    )
    result = classify(log_text=log, exit_code=-9, ready=False)
    assert result.mode is FailureMode.NCCL
    assert result.reason == (
        "NCCL: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for "
        "details)"
    )


def test_not_supported_assertion_is_unsupported() -> None:
    log = """\
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/jit/attention/modules.py", line 978, in gen_batch_prefill_module
    assert not fp8_enabled, "fp8 tensor core is not supported in fa2 backend"
AssertionError: fp8 tensor core is not supported in fa2 backend
"""  # noqa: E501
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.UNSUPPORTED


def test_deepep_assertion_during_capture_is_assertion() -> None:
    log = """\
RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105 'x.size(0) == topk_idx.size(0) and x.size(0) <= num_max_dispatch_tokens_per_rank'

During handling of the above exception, another exception occurred:

Exception: Capture cuda graph failed: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1105 'x.size(0) == topk_idx.size(0) and x.size(0) <= num_max_dispatch_tokens_per_rank'
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
"""  # noqa: E501
    assert classify(log_text=log, exit_code=-9, ready=False).mode is FailureMode.ASSERTION


def test_capture_failure_without_memory_cause_is_crash() -> None:
    log = """\
Exception: Capture cuda graph failed: Ninja build failed.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
"""
    result = classify(log_text=log, exit_code=-9, ready=False)
    assert result.mode is FailureMode.CRASH
    assert "Ninja build failed" in result.reason


def test_flashinfer_arch_error_is_unsupported() -> None:
    log = """\
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/compilation_context.py", line 62, in get_nvcc_flags_list
    raise RuntimeError(
RuntimeError: No supported CUDA architectures found for major versions [12].
"""  # noqa: E501
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.UNSUPPORTED
    assert result.reason.startswith("unsupported: RuntimeError: No supported CUDA architectures")


def test_argparse_error_is_invalid_args() -> None:
    log = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]
                        [--host HOST] [--port PORT]
launch_server.py: error: unrecognized arguments: --cuda-graph-max-bs 128
"""
    result = classify(log_text=log, exit_code=2, ready=False)
    assert result.mode is FailureMode.INVALID_ARGS
    assert "unrecognized arguments: --cuda-graph-max-bs 128" in result.reason


def test_exit_code_2_with_usage_only_is_invalid_args() -> None:
    log = "usage: launch_server.py [-h] --model-path MODEL_PATH\n"
    assert classify(log_text=log, exit_code=2, ready=False).mode is FailureMode.INVALID_ARGS
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.CRASH


def test_server_args_validation_error_is_invalid_args() -> None:
    log = """\
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 11, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 3803, in _handle_cache_compatibility
    raise ValueError(
ValueError: --enable-prefix-mm-cache requires --encoder-only to be enabled
"""  # noqa: E501
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.INVALID_ARGS
    assert result.reason == (
        "invalid args: ValueError: --enable-prefix-mm-cache requires --encoder-only to be enabled"
    )


def test_assertion_raised_by_server_args_is_invalid_args() -> None:
    log = """\
  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 2210, in _handle_speculative_decoding
    assert (
AssertionError
"""  # noqa: E501
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.INVALID_ARGS


def test_unknown_exit_before_ready_is_crash_with_signal_and_last_exception() -> None:
    log = """\
[2025-09-01 10:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 124, in init_ipc_channels
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:29236')
[2025-09-01 10:00:20] Received sigquit from a child process. It usually means the child failed.
"""  # noqa: E501
    result = classify(log_text=log, exit_code=-9, ready=False)
    assert result.mode is FailureMode.CRASH
    assert "code -9 (SIGKILL)" in result.reason
    assert "zmq.error.ZMQError: Address already in use" in result.reason
    assert result.excerpt.endswith("It usually means the child failed.")


def test_a_kill_nothing_in_the_log_explains_is_told_apart() -> None:
    """SIGKILL or SIGTERM with no fatal line and no exception came from outside the server (what
    a retry does not charge to the configuration); SGLang's own kill_process_tree after an
    exception, a segfault, or our own hang verdict did not."""
    for code in (-9, -15):
        for ready in (False, True):
            result = classify(log_text="Load weight begin.\n", exit_code=code, ready=ready)
            assert killed_unexplained(result.mode, result.reason, code), result.reason
    explained = """\
[2025-09-01 10:00:20 TP0] Scheduler hit an exception: Traceback (most recent call last):
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:29236')
[2025-09-01 10:00:20] Received sigquit from a child process. It usually means the child failed.
"""
    result = classify(log_text=explained, exit_code=-9, ready=False)
    assert not killed_unexplained(result.mode, result.reason, -9)
    result = classify(log_text="", exit_code=-11, ready=False)
    assert not killed_unexplained(result.mode, result.reason, -11)
    assert not killed_unexplained(FailureMode.HANG, "hang: the server stopped answering", -9)


def test_segfault_before_ready_names_the_signal() -> None:
    result = classify(log_text="Loading weights\n", exit_code=-11, ready=False)
    assert result.mode is FailureMode.CRASH
    assert result.reason == "crash: exited with code -11 (SIGSEGV) before ready"


def test_shell_style_exit_code_names_the_signal() -> None:
    result = classify(log_text="", exit_code=137, ready=False)
    assert result.reason == "crash: exited with code 137 (128+SIGKILL) before ready"


def test_boot_deadline_is_startup_timeout() -> None:
    log = "\n".join(f"[2025-09-01 10:00:{i:02d} TP0] Load weight begin." for i in range(40))
    result = classify(log_text=log, exit_code=None, ready=False, boot_timed_out=True)
    assert result.mode is FailureMode.STARTUP_TIMEOUT
    assert result.excerpt.count("\n") == 19  # the log tail


def test_death_during_benchmark_is_crash_even_if_requests_failed() -> None:
    result = classify(
        log_text="ready\n", exit_code=-6, ready=True, bench_hung=True, bench_error="503 x 64"
    )
    assert result.mode is FailureMode.CRASH
    assert "SIGABRT" in result.reason
    assert "during the benchmark" in result.reason


def test_hang_and_bench_error_and_none() -> None:
    assert classify(log_text="", exit_code=None, ready=True, bench_hung=True).mode is (
        FailureMode.HANG
    )
    result = classify(
        log_text="", exit_code=None, ready=True, bench_error="12/64 requests failed: HTTP 500"
    )
    assert result.mode is FailureMode.BENCH_ERROR
    assert result.reason == "bench error: 12/64 requests failed: HTTP 500"
    ok = classify(
        log_text="The server is fired up and ready to roll!\n", exit_code=None, ready=True
    )
    assert ok == Classification(mode=FailureMode.NONE, reason="ok", excerpt="")


def test_hard_scheduler_watchdog_is_hang_soft_is_not() -> None:
    hard = "[2025-09-22 01:05:16 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"  # noqa: E501
    soft = hard.replace("soft=False", "soft=True")
    assert classify(log_text=hard, exit_code=None, ready=True).mode is FailureMode.HANG
    assert classify(log_text=soft, exit_code=None, ready=True).mode is FailureMode.NONE


def test_reason_is_one_bounded_line() -> None:
    line = "RuntimeError: CUDA error: out of memory" + " x" * 1000
    result = classify(log_text=line, exit_code=1, ready=False)
    assert result.mode is FailureMode.OOM
    assert "\n" not in result.reason
    assert len(result.reason) <= 420


def test_failure_mode_values() -> None:
    assert [m.value for m in FailureMode] == [
        "none",
        "oom",
        "assertion",
        "unsupported",
        "nccl",
        "invalid_args",
        "startup_timeout",
        "crash",
        "hang",
        "bench_error",
        "wrong_output",
        "node_lost",
        "environment",
    ]
    assert FailureMode("oom") is FailureMode.OOM
    assert f"{FailureMode.INVALID_ARGS}" == "invalid_args"


def test_error_hierarchy() -> None:
    assert issubclass(TrialError, SpecSweepError)
    assert issubclass(SpecSweepError, Exception)
    assert not hasattr(Classification(FailureMode.NONE, "ok", ""), "__dict__")


def test_exception_raised_by_an_all_reduce_feature_module_is_unsupported() -> None:
    # SGLang 0.5.13 on SM120: torch symmetric memory looks up the GPU's capability in a table.
    srt = "/sgl-workspace/sglang/python/sglang/srt"
    log = "\n".join(
        [
            "[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            f'  File "{srt}/managers/scheduler.py", line 2901, in run_scheduler_process',
            "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank)",
            f'  File "{srt}/distributed/device_communicators/torch_symm_mem.py", line 61, '
            "in __init__",
            "    max_size = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability][ws]",
            "KeyError: 12",
        ]
    )
    outcome = classify(log_text=log, exit_code=-9, ready=False)
    assert outcome.mode is FailureMode.UNSUPPORTED
    assert "KeyError: 12" in outcome.reason


# ------------------------------------------------------------ environment and stack context
_HOOK_TRACEBACK = """\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/site/sglang/launch_server.py", line 60, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/site/sglang/srt/server_args.py", line 7811, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "<string>", line 402, in __init__
  File "/site/sglang/srt/server_args.py", line 1017, in __post_init__
    handle_speculative_decoding(self)
  File "/site/sglang/srt/arg_groups/speculative_hook.py", line 341, in _handle_eagle_family
    assert (
{exception}
"""


@pytest.mark.parametrize(
    "exception",
    [
        "AssertionError",
        "ValueError: speculative_eagle_topk(10) > 1 with page_size(16) > 1 is unstable and "
        "produces incorrect results for paged attention backends.",
        "RuntimeError: some check nobody wrote a pattern for",
    ],
)
def test_rejection_raised_while_building_arguments_is_invalid_args(exception: str) -> None:
    log = _HOOK_TRACEBACK.format(exception=exception)
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.INVALID_ARGS, result
    assert exception.split(":")[0] in result.reason


def test_assertion_outside_argument_construction_stays_assertion() -> None:
    log = """\
Traceback (most recent call last):
  File "/site/sglang/srt/managers/scheduler.py", line 2710, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/site/sglang/srt/layers/moe/ep_moe/layer.py", line 88, in __init__
    assert self.num_experts % self.ep_size == 0
AssertionError
"""
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.ASSERTION


@pytest.mark.parametrize(
    "line",
    [
        "ModuleNotFoundError: No module named 'jsonschema'",
        "/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
        "(ModuleNotFoundError: No module named 'sglang')",
        "RuntimeError: No CUDA GPUs are available",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
        "NVIDIA GPU and installed a driver",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
        "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
        "OSError: /no/such/model is not a local folder and is not a valid model identifier listed "
        "on 'https://huggingface.co/models'",
    ],
)
def test_node_that_cannot_run_any_server_is_environment(line: str) -> None:
    log = f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{line}\n'
    result = classify(log_text=log, exit_code=1, ready=False)
    assert result.mode is FailureMode.ENVIRONMENT, result
    assert line[:30] in result.excerpt


def test_import_error_in_a_server_that_got_ready_is_not_environment() -> None:
    # A caught, logged import error of an optional backend in a healthy boot.
    log = "ImportError: cannot import name 'x' from 'optional_backend'\nThe server is fired up"
    assert classify(log_text=log, exit_code=None, ready=True).mode is FailureMode.NONE


def test_environment_is_what_ended_the_server_not_an_earlier_logged_import() -> None:
    log = (
        "[2026-11-30 21:54:45] Ignore import error when loading sglang.srt.models.deepseek_v4: "
        "No module named 'tilelang'\n"
        "ModuleNotFoundError: No module named 'optional_thing'\n"
        "Traceback (most recent call last):\n"
        '  File "/site/sglang/srt/model_executor/model_runner.py", line 1, in init_memory_pool\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.OOM


def test_a_model_path_the_server_cannot_find_is_environment_not_invalid_args() -> None:
    # SGLang loads the model's config while building ServerArgs, so the traceback passes through
    # server_args.py; a missing model is still the node's problem, not the configuration's.
    log = """\
Traceback (most recent call last):
  File "/site/sglang/srt/server_args.py", line 7811, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "/site/transformers/utils/hub.py", line 473, in cached_files
    raise OSError(f"{e}") from e
OSError: Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot start or end with \
'-' or '.' and the maximum length is 96: '.models/llama-1b'.
"""
    assert classify(log_text=log, exit_code=1, ready=False).mode is FailureMode.ENVIRONMENT
