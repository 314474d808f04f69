"""Measure what the log classifier costs per line: ``find_fatal`` on a realistic 10,000-line
SGLang boot-and-serve log (server_args dump, NCCL INFO chatter, weight loading, CUDA-graph capture
progress, warnings, request logs), on the subset of lines that pass its keyword prefilter, and on a
fatal traceback, plus one ``classify`` over the whole log. Prints a table; run it with
``python benchmarks/classifier_speed.py``.
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spec_sweep.node.classify import _KEYWORDS, classify, find_fatal

_SERVER_ARGS = (
    "[2025-09-01 10:00:00] server_args=ServerArgs(model_path='/models/Llama-3.1-70B-Instruct', "
    "tokenizer_path='/models/Llama-3.1-70B-Instruct', tokenizer_mode='auto', "
    "skip_tokenizer_init=False, load_format='auto', trust_remote_code=True, dtype='auto', "
    "kv_cache_dtype='auto', quantization=None, context_length=None, device='cuda', "
    "served_model_name='/models/Llama-3.1-70B-Instruct', chat_template=None, is_embedding=False,"
    " revision=None, host='127.0.0.1', port=30000, mem_fraction_static=0.85, "
    "max_running_requests=48, max_total_tokens=None, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, schedule_policy='fcfs', schedule_conservativeness=1.0, "
    "cpu_offload_gb=0, page_size=1, tp_size=8, stream_interval=1, stream_output=False, "
    "random_seed=0, watchdog_timeout=300, log_level='info', log_requests=False, "
    "speculative_algorithm='EAGLE3', speculative_draft_model_path='/models/EAGLE3-Llama-3.1-70B',"
    " speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, "
    "attention_backend='fa3', sampling_backend='flashinfer', grammar_backend='xgrammar', "
    "disable_radix_cache=False, disable_cuda_graph=False, cuda_graph_max_bs=128, "
    "disable_custom_all_reduce=False, enable_torch_compile=False, enable_nccl_nvls=False, "
    "enable_symm_mem=False, enable_flashinfer_allreduce_fusion=False, moe_a2a_backend='none', "
    "enable_memory_saver=False, allow_auto_truncate=False, enable_custom_logit_processor=False)"
)

_TEMPLATES = (
    "[2025-09-01 10:00:{s:02d} TP{r}] Init torch distributed begin.",
    "[2025-09-01 10:00:{s:02d} TP{r}] sglang is using nccl==2.27.3",
    "node-{r}:{p}:{p} [{r}] NCCL INFO Bootstrap : Using eth0:10.0.0.{r}<0>",
    "node-{r}:{p}:{p} [{r}] NCCL INFO cudaDriverVersion 12080",
    "node-{r}:{p}:{p} [{r}] NCCL INFO Channel {c:02d}/24 :    0   1   2   3   4   5   6   7",
    "node-{r}:{p}:{q} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> 1[1] via P2P/CUMEM/read",
    "node-{r}:{p}:{p} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "node-{r}:{p}:{q} [{r}] NCCL INFO NVLS multicast support is not available on dev {r}",
    "[2025-09-01 10:00:{s:02d} TP{r}] Load weight begin. avail mem=137.85 GB",
    "Loading safetensors checkpoint shards:  {c:d}% Completed | {c}/30 [00:05<00:34,  1.31s/it]",
    "[2025-09-01 10:01:{s:02d} TP{r}] Load weight end. type=LlamaForCausalLM, "
    "dtype=torch.bfloat16, avail mem=120.02 GB, mem usage=17.83 GB.",
    "[2025-09-01 10:01:{s:02d} TP{r}] KV Cache is allocated. #tokens: 1234567, "
    "K size: 40.00 GB, V size: 40.00 GB",
    "[2025-09-01 10:01:{s:02d} TP{r}] Memory pool end. avail mem=35.00 GB",
    "[2025-09-01 10:01:{s:02d} TP{r}] Capture cuda graph begin. This can take up to several "
    "minutes. avail mem=34.50 GB",
    "Capturing batches (bs={c} avail_mem=34.40 GB):  {c}%|▏         | {c}/52 [00:01<01:02,  "
    "1.22s/it]",
    "[2025-09-01 10:01:{s:02d} TP{r}] Capture cuda graph end. Time elapsed: 38.12 s. "
    "mem usage=2.10 GB. avail mem=32.40 GB.",
    "[2025-09-01 10:01:{s:02d} TP{r}] Custom allreduce is disabled because it's not supported on "
    "more than two PCIe-only GPUs. To silence this warning, specify "
    "disable_custom_all_reduce=True explicitly.",
    "[2025-09-01 10:01:{s:02d} TP{r}] Disable piecewise CUDA graph for speculative decoding to "
    "avoid error.",
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:63: FutureWarning: The "
    "pynvml package is deprecated. Please install nvidia-ml-py instead.",
    '[2025-09-01 10:01:{s:02d}] INFO:     127.0.0.1:{p} - "GET /health HTTP/1.1" 200 OK',
    "[2025-09-01 10:02:{s:02d} TP0] Prefill batch. #new-seq: 1, #new-token: {p}, "
    "#cached-token: 0, token usage: 0.01, #running-req: {c}, #queue-req: 0,",
    "[2025-09-01 10:02:{s:02d} TP0] Decode batch. #running-req: {c}, #token: {p}, token usage: "
    "0.02, accept len: 3.12, cuda graph: True, gen throughput (token/s): 812.34, #queue-req: 0,",
    '[2025-09-01 10:02:{s:02d}] INFO:     127.0.0.1:{p} - "POST /generate HTTP/1.1" 200 OK',
)

_TRACEBACK = """\
[2025-09-01 10:01:20 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__
    self.capture()
  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py", line 186, in __exit__
    self.cuda_graph.capture_end()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 139.81 GiB of which 1.25 GiB is free.

During handling of the above exception, another exception occurred:

Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
[2025-09-01 10:01:21] Received sigquit from a child process. It usually means the child failed.
"""  # noqa: E501


def boot_log(n_lines: int = 10_000, *, seed: int = 0) -> list[str]:
    """A realistic healthy SGLang boot-and-serve log of ``n_lines`` lines."""
    rng = random.Random(seed)
    lines = [_SERVER_ARGS]
    while len(lines) < n_lines:
        template = rng.choice(_TEMPLATES)
        lines.append(
            template.format(
                s=rng.randrange(60),
                r=rng.randrange(8),
                p=rng.randrange(1000, 99999),
                q=rng.randrange(1000, 99999),
                c=rng.randrange(1, 99),
            )
        )
    return lines


def _time_per_call(fn: Callable[[], object], *, repeat: int = 5) -> float:
    """Best-of-``repeat`` wall time of one call of ``fn``, in seconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def _scan(lines: list[str]) -> Callable[[], object]:
    def run() -> object:
        return [find_fatal(line) for line in lines]

    return run


def _rows() -> Iterator[tuple[str, int, float]]:
    log = boot_log()
    prefiltered = [line for line in log if any(k in line for k in _KEYWORDS)]
    fatal = _TRACEBACK.splitlines()
    # Repeat the small sets so their timings are not dominated by timer resolution.
    prefiltered_rep = list(itertools.islice(itertools.cycle(prefiltered), 10_000))
    fatal_rep = list(itertools.islice(itertools.cycle(fatal), 10_000))
    yield "find_fatal, whole boot log", len(log), _time_per_call(_scan(log))
    yield (
        "find_fatal, lines past prefilter",
        len(prefiltered_rep),
        _time_per_call(_scan(prefiltered_rep)),
    )
    yield "find_fatal, fatal traceback lines", len(fatal_rep), _time_per_call(_scan(fatal_rep))
    text = "\n".join([*log, *fatal])
    yield (
        "classify, whole log + traceback",
        len(log) + len(fatal),
        _time_per_call(lambda: classify(log_text=text, exit_code=1, ready=False)),
    )


def main() -> None:
    """Print the table."""
    log = boot_log()
    share = statistics.mean(any(k in line for k in _KEYWORDS) for line in log)
    print(f"boot log: {len(log)} lines, {share:.1%} pass the keyword prefilter")
    print(f"{'case':<36} {'lines':>7} {'total ms':>9} {'us/line':>8} {'lines/s':>12}")
    for name, n, seconds in _rows():
        print(
            f"{name:<36} {n:>7} {seconds * 1e3:>9.2f} {seconds / n * 1e6:>8.2f} "
            f"{n / seconds:>12,.0f}"
        )


if __name__ == "__main__":
    main()
