"""The boot sequence of the simulated node: SGLang's log lines, stage by stage, in scaled time.

This module owns what a booting node prints and when: the resolved ``server_args`` and the
resolution warnings, per-rank distributed init (NCCL version, custom all-reduce / symmetric
memory warnings), weight loading (with ``--load-format dummy`` a short allocation of random
weights instead of a read), draft loading, KV-cache allocation, CUDA-graph capture (in the
layout of the chosen SGLang flavor), 0.5.13's piecewise (torch.compile) CUDA graph, the runtime
states of adaptive speculative decoding, the final capacity line and the startup timings. Stage
durations come from the profile (the simulated node's seconds, which the lines print) and last
that many seconds times the time scale; the phases a line times add up to the scheduler's
start-up time (``scheduler_e2e``), which 0.5.17+ prints in "Engine startup timings" and serves
as ``startup_time`` in ``/server_info`` (:meth:`BootResult.startup_time`). When the plan has a
failure at a stage, the boot stops there and the failing worker prints SGLang's
``Scheduler hit an exception: <traceback>`` and sends ``SIGQUIT`` to the main process; injected
faults (hang, crash, NCCL error) are played here too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.sim import adaptive, texts
from spec_sweep.sim.cli import SimOptions
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import Failure, NodePlan
from spec_sweep.sim.procs import WorkerSet
from spec_sweep.sim.profiles import Profile

__all__ = [
    "DUMMY_LOAD_GIB_PER_S",
    "GRAPH_PHASES",
    "BootResult",
    "boot_node",
    "dummy_load_s",
    "emit_scheduler_failure",
    "has_startup_time",
]

_FOREVER = 365 * 24 * 3600.0
#: Seconds a weight-cache client takes to map the daemon's weights. Measured: 0.04 s for the
#: 135M checkpoint's 184 tensors on the H200 (SGLang 0.5.17, 2026-12-02; 0.23 s from disk); the
#: mapping grows with the number of tensors, not their bytes, so a large MoE's is assumed.
CLIENT_LOAD_S = 5.0

#: GiB per second (per GPU) at which a ``--load-format dummy`` boot allocates and fills its
#: weights instead of reading them. Measured (SGLang 0.5.17, one H100, SmolLM2-135M, 0.27 GB;
#: benchmarks/real/fidelity-0.5.17/*.dummy.json): ``load_weight`` 0.084-0.10 s with dummy weights
#: against 0.125-0.15 s reading them from the page cache, i.e. ~3 GB/s; the same GPU memory is
#: taken ("mem usage=0.27 GB" in both logs). Most of those 0.08 s are building the model, so the
#: rate is a conservative (slow) bound for a large model; a dummy load never takes longer than
#: the profile's real one.
DUMMY_LOAD_GIB_PER_S = 3.0

#: The phases of ``startup_time["cuda_graph"]``, always all present (``GRAPH_MEMORY_USAGE_KEYS``,
#: model_executor/graph_memory_usage.py 0.5.17:5-12, same in 0.5.23).
GRAPH_PHASES = (
    "prefill",
    "decode",
    "target_verify",
    "draft_prefill",
    "draft_decode",
    "draft_extend",
)


def dummy_load_s(weights_gib: float, real_s: float) -> float:
    """Seconds of a ``--load-format dummy`` weight load: random weights allocated on the GPU
    (:data:`DUMMY_LOAD_GIB_PER_S`), never longer than reading them (``real_s``).

    Args:
        weights_gib: Weights per GPU.
        real_s: The profile's seconds to load the real weights.
    """
    return min(real_s, weights_gib / DUMMY_LOAD_GIB_PER_S)


def has_startup_time(version: str) -> bool:
    """Whether an SGLang version reports ``startup_time`` and prints "Engine startup timings".

    Both arrive in 0.5.17 (observability/startup_time.py, entrypoints/engine.py 0.5.17:996-1022;
    absent from 0.5.13, 0.5.14 and 0.5.16).
    """
    return adaptive.version_key(version) >= (0, 5, 17)


@dataclass
class BootResult:
    """What the boot measured, in the simulated node's seconds (what its log lines print).

    Attributes:
        init_distributed_s: Distributed init.
        load_weight_s: Target plus draft weights (``build_scheduler_startup_time`` adds them).
        kv_cache_s: KV-cache allocation.
        cuda_graph_s: Capture seconds per graph phase (:data:`GRAPH_PHASES`).
        graph_memory: Graph memory per phase (GiB).
        piecewise_s: 0.5.13's piecewise CUDA graph (compile and capture).
        scheduler_e2e_s: The scheduler's start-up: the sum of the phases above.
        tokenizer_e2e_s: The engine's start-up as the tokenizer manager measures it
            (``scheduler_e2e`` plus spawning the schedulers).
        started: Wall-clock start of the boot.
    """

    init_distributed_s: float = 0.0
    load_weight_s: float = 0.0
    kv_cache_s: float = 0.0
    cuda_graph_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GRAPH_PHASES, 0.0))
    graph_memory: dict[str, float] = field(default_factory=dict)
    piecewise_s: float = 0.0
    scheduler_e2e_s: float = 0.0
    tokenizer_e2e_s: float = 0.0
    started: float = field(default_factory=time.time)

    def add_graph(self, phase: str, seconds: float) -> None:
        """Add capture seconds to a phase (adaptive states add to the same phases)."""
        self.cuda_graph_s[phase] = self.cuda_graph_s.get(phase, 0.0) + seconds

    def finish(self, *, spawn_s: float) -> None:
        """Sum the phases into ``scheduler_e2e`` and ``tokenizer_e2e``."""
        self.scheduler_e2e_s = (
            self.init_distributed_s
            + self.load_weight_s
            + self.kv_cache_s
            + sum(self.cuda_graph_s.values())
            + self.piecewise_s
        )
        self.tokenizer_e2e_s = self.scheduler_e2e_s + spawn_s

    def startup_time(self) -> dict[str, Any]:
        """``startup_time`` as ``/server_info`` serves it (``build_engine_startup_time``,
        observability/startup_time.py 0.5.17:11-69): critical-path seconds per phase."""
        return {
            "load_weight": self.load_weight_s,
            "kv_cache_allocation": self.kv_cache_s,
            "scheduler_e2e": self.scheduler_e2e_s,
            "cuda_graph": {phase: self.cuda_graph_s.get(phase, 0.0) for phase in GRAPH_PHASES},
            "tokenizer_e2e": self.tokenizer_e2e_s,
        }

    def timings_line(self) -> str:
        """The "Engine startup timings" line (entrypoints/engine.py 0.5.17:1009-1022,
        0.5.23:1118)."""
        st = self.startup_time()
        graphs = ", ".join(f"{k}={v:.2f}" for k, v in st["cuda_graph"].items())
        return (
            f"Engine startup timings (s): load_weight={st['load_weight']:.2f}, "
            f"kv_cache_allocation={st['kv_cache_allocation']:.2f}, "
            f"scheduler_e2e={st['scheduler_e2e']:.2f}, cuda_graph={{{graphs}}}, "
            f"tokenizer_e2e={st['tokenizer_e2e']:.2f}"
        )


async def _pause(options: SimOptions, seconds: float) -> None:
    delay = seconds * options.time_scale
    await asyncio.sleep(delay if delay > 0 else 0)


async def hang_forever() -> None:
    """Block the calling task forever (the event loop keeps running)."""
    await asyncio.sleep(_FOREVER)


def emit_scheduler_failure(
    failure: Failure, *, log: SimLog, workers: WorkerSet, rank: int = 0
) -> None:
    """Have the scheduler worker print SGLang's exception record and SIGQUIT the main process.

    Args:
        failure: The failure (``where == "scheduler"``).
        log: Log writer (for its time stamp format).
        workers: The worker children.
        rank: The failing TP rank.
    """
    text = "".join(texts.fill_pid(line, os.getpid()) + "\n" for line in failure.pre_lines)
    text += f"[{log.stamp()} TP{rank}] {texts.SCHEDULER_EXCEPTION_PREFIX}{failure.text}"
    workers.tell("scheduler", op="print", text=text, stream="stderr")
    workers.tell("scheduler", op="sigquit")


def _server_args_line(options: SimOptions, plan: NodePlan, profile: Profile) -> str:
    resolved: dict[str, Any] = dict(options.server_args)
    resolved.update(resolved_args(options, plan, profile))
    if options.flavor == "new":
        return "server_args=" + json.dumps(resolved, default=str)
    body = ", ".join(f"{k}={v!r}" for k, v in resolved.items())
    return f"server_args=ServerArgs({body})"


def resolved_args(options: SimOptions, plan: NodePlan, profile: Profile) -> dict[str, Any]:
    """The ``server_args`` values SGLang resolves at start-up (shown in logs and /server_info).

    Args:
        options: Simulator options.
        plan: The node plan.
        profile: The profile.

    Returns:
        Field name -> resolved value.
    """
    del profile
    out: dict[str, Any] = {
        "mem_fraction_static": plan.mem_fraction_static,
        "chunked_prefill_size": plan.chunked_prefill_size,
        "max_running_requests": plan.max_running_requests or None,
        "random_seed": options.seed,
        "served_model_name": options.served_model_name or plan.config.model_path,
        "tokenizer_path": options.server_args.get("tokenizer_path") or plan.config.model_path,
        "context_length": plan.context_len,
    }
    key = "cuda_graph_max_bs_decode" if options.flavor == "new" else "cuda_graph_max_bs"
    out[key] = plan.graph_max_bs or None
    if plan.spec is not None:
        out.update(
            speculative_algorithm=plan.spec.algorithm,
            speculative_num_steps=plan.spec.steps,
            speculative_eagle_topk=plan.spec.topk,
            speculative_num_draft_tokens=plan.spec.draft_tokens,
            speculative_draft_model_path=plan.spec.draft_model_path,
        )
    if plan.config.moe_a2a_backend == "flashinfer":
        out["ep_size"] = plan.config.tp_size
    if plan.config.adaptive is not None:  # False when SGLang turned it off
        out["speculative_adaptive"] = plan.adaptive is not None
    return out


async def boot_node(
    *,
    options: SimOptions,
    plan: NodePlan,
    profile: Profile,
    log: SimLog,
    workers: WorkerSet,
) -> BootResult | None:
    """Play the boot up to the point where the HTTP server starts.

    Args:
        options: Simulator options (time scale, faults).
        plan: The node plan (may carry a failure at some stage).
        profile: The hardware profile.
        log: Log writer.
        workers: Worker children (the scheduler prints failures).

    Returns:
        The boot measurements, or None when the boot failed (the failure has been emitted and
        the process is about to be killed) or hangs (never returns in that case).
    """
    result = BootResult()
    faults = options.faults
    cfg = plan.config
    tp = max(1, cfg.tp_size)
    boot = profile.boot
    hw = profile.hardware
    log.line(_server_args_line(options, plan, profile))
    for warning in plan.main_warnings:
        log.line(warning)
    await _pause(options, boot.launch)
    if faults.slow_boot_s > 0:
        await asyncio.sleep(faults.slow_boot_s)

    await _pause(options, boot.spawn)

    # -- distributed init ----------------------------------------------------------------------
    # 0.5.13 model_runner.py:1088/1226 and 0.5.17 distributed/bootstrap.py:62/127 print "Init
    # torch distributed"; 0.5.23 distributed/bootstrap.py:115/190 prints "Init parallel".
    init_parallel = adaptive.version_key(options.sglang_version) >= (0, 5, 23)
    log.ranks("Init parallel begin." if init_parallel else "Init torch distributed begin.", tp)
    await _pause(options, boot.init_distributed)
    if faults.hang_at_boot:
        await hang_forever()
    log.line(f"sglang is using nccl=={hw.nccl_version}", rank=0)
    if faults.crash_at_boot:
        log.ranks(f"Load weight begin. avail mem={plan.pre_load_avail_gib:.2f} GB", tp)
        os.kill(os.getpid(), signal.SIGSEGV)
        await hang_forever()
    if faults.nccl_error:
        host, pid = hw.hostname, os.getpid()
        failing = min(3, tp - 1)
        warn = (
            f"{host}:{pid}:{pid} [{failing}] os/linux.cc:200 NCCL WARN ncclOsSocketPollConnect: "
            "connect to 127.0.0.1<58525> returned Connection refused, exceeded error retry "
            "count after 35 attempts"
        )
        fail = Failure(
            "distributed",
            "scheduler",
            texts.format_traceback(
                texts.SCHEDULER_INIT
                + texts.TP_WORKER_INIT
                + texts.DISTRIBUTED_INIT
                + texts.PYNCCL_INIT,
                f"RuntimeError: NCCL error: {texts.NCCL_ERROR_STRINGS['remote']}",
            ),
            (warn,),
        )
        emit_scheduler_failure(fail, log=log, workers=workers, rank=failing)
        await hang_forever()
    for warning in plan.rank_warnings:
        log.ranks(warning, tp)
    if init_parallel:
        log.ranks(f"Init parallel ends. elapsed={boot.init_distributed:.2f} s", tp)
    else:
        log.ranks(
            f"Init torch distributed ends. elapsed={boot.init_distributed:.2f} s, "
            f"mem usage={hw.startup_overhead_gib:.2f} GB",
            tp,
        )
    result.init_distributed_s = boot.init_distributed
    if await _fail_at(plan, "distributed", log=log, workers=workers):
        return None

    # -- weights -------------------------------------------------------------------------------
    log.ranks(f"Load weight begin. avail mem={plan.pre_load_avail_gib:.2f} GB", tp)
    # A weight-cache client maps the daemon's weights over CUDA IPC instead of reading them
    # (the time is an assumption until measured; the memory is modelled as a disk boot's).
    client = cfg.weight_cache_mode == "client"
    load_s = CLIENT_LOAD_S if client else boot.load_weights
    if cfg.dummy_weights and not client:
        load_s = dummy_load_s(plan.weights_gib, boot.load_weights)
    await _pause(options, load_s)
    if await _fail_at(plan, "load", log=log, workers=workers):
        return None
    if client:  # SGLang's client loader (weight_cache/ipc_loader.py 0.5.17:121, :155)
        tensors = profile.model.num_layers * 9 + 3
        for message in texts.ipc_loader_lines(tensors, load_s):
            log.ranks(message, tp)
    quant = f"{profile.model.quant_log}, " if profile.model.quant_log else ""
    # a client's weights are the daemon's: SGLang counts none against the client (0.5.17 on the
    # H200: "avail mem=138.23 GB, mem usage=0.00 GB", its free memory before loading)
    after, usage = (
        (plan.pre_load_avail_gib, 0.0) if client else (plan.post_load_avail_gib, plan.weights_gib)
    )
    log.ranks(
        f"Load weight end. elapsed={load_s:.2f} s, "
        f"type={profile.model.architecture}, {quant}"
        f"avail mem={after:.2f} GB, mem usage={usage:.2f} GB.",
        tp,
    )
    result.load_weight_s = load_s
    avail = plan.post_load_avail_gib
    if plan.spec is not None and plan.spec.drafts_with_a_model:
        draft_s = boot.load_draft
        if cfg.dummy_draft:
            draft_s = dummy_load_s(plan.draft_weights_gib, boot.load_draft)
        log.ranks(f"Load weight begin. avail mem={avail:.2f} GB", tp)
        await _pause(options, draft_s)
        if await _fail_at(plan, "draft_load", log=log, workers=workers):
            return None
        avail -= plan.draft_weights_gib
        arch = (
            profile.draft.architecture
            if plan.draft_weights_gib < plan.weights_gib
            else profile.model.architecture
        )
        log.ranks(
            f"Load weight end. elapsed={draft_s:.2f} s, type={arch}, "
            f"avail mem={avail:.2f} GB, mem usage={plan.draft_weights_gib:.2f} GB.",
            tp,
        )
        result.load_weight_s += draft_s

    # -- KV cache ------------------------------------------------------------------------------
    await _pause(options, boot.kv_alloc)
    if await _fail_at(plan, "memory_pool", log=log, workers=workers):
        return None
    target_kv = plan.max_total_num_tokens * profile.model.kv_bytes_per_token / (1 << 30)
    log.ranks(
        f"KV Cache is allocated. dtype: {profile.model.dtype}, "
        f"#tokens: {plan.max_total_num_tokens}, KV size: {target_kv:.2f} GB",
        tp,
    )
    avail -= plan.kv_gib
    log.ranks(f"Memory pool end. avail mem={avail:.2f} GB", tp)
    result.kv_cache_s = boot.kv_alloc
    if await _fail_at(plan, "workspace", log=log, workers=workers):
        return None

    # -- CUDA graphs ---------------------------------------------------------------------------
    setup = plan.adaptive
    policy = None
    if setup is not None:
        policy = setup.policy(plan.capture_bs if plan.graph_max_bs > 0 else None)
        if options.flavor == "new":  # the worker's __init__ (0.5.23 eagle_worker_v2.py:1347-1355)
            log.line(policy.initialized_line(), rank=0)
    if plan.graph_max_bs > 0:
        avail = await _capture(options, plan, profile, log, avail, result)
        if await _fail_at(plan, "capture", log=log, workers=workers):
            return None
        if await _fail_at(plan, "draft_capture", log=log, workers=workers):
            return None
    elif plan.piecewise:
        avail = await _piecewise(options, plan, profile, log, avail, result)
    if setup is not None and policy is not None:
        if options.flavor == "old":  # after the draft worker's graphs (0.5.13 :856-897)
            log.line(policy.initialized_line(), rank=0)
        avail = await _adaptive_states(options, plan, profile, log, avail, result)
    log.line(
        f"max_total_num_tokens={plan.max_total_num_tokens}, "
        f"chunked_prefill_size={plan.chunked_prefill_size}, "
        f"max_prefill_tokens=16384, max_running_requests={plan.max_running_requests}, "
        f"context_len={plan.context_len}, available_gpu_mem={plan.available_after_init_gib:.2f} GB",
        rank=0,
    )
    result.finish(spawn_s=boot.spawn)
    if has_startup_time(options.sglang_version):
        log.line(result.timings_line())
    return result


async def _piecewise(
    options: SimOptions,
    plan: NodePlan,
    profile: Profile,
    log: SimLog,
    avail: float,
    result: BootResult,
) -> float:
    """0.5.13's piecewise CUDA graph: torch.compile, then capture per token count.

    ``init_piecewise_cuda_graphs`` (model_runner.py 0.5.13:3034-3051) times it; the token list
    is logged by piecewise_cuda_graph_runner.py:215 and the torch.compile of the dynamic-shape
    graph by compilation/backend.py ("Compiling a graph for dynamic shape takes ... s"), as in
    the real logs under tests/fixtures/sglang/0.5.13/.
    """
    tp = max(1, plan.config.tp_size)
    boot = profile.boot
    log.ranks(f"Capture piecewise CUDA graph begin. avail mem={avail:.2f} GB", tp)
    log.line(f"Capture cuda graph num tokens {plan.piecewise_tokens}", rank=0)
    await _pause(options, boot.piecewise_dynamic_compile)
    log.ranks(
        f"Compiling a graph for dynamic shape takes {boot.piecewise_dynamic_compile:.2f} s", tp
    )
    rest = boot.piecewise_per_size * len(plan.piecewise_tokens)
    await _pause(options, rest)
    seconds = boot.piecewise_dynamic_compile + rest
    used = profile.memory.piecewise_graph_gib
    log.ranks(
        f"Capture piecewise CUDA graph end. Time elapsed: {seconds:.2f} s. "
        f"mem usage={used:.2f} GB. avail mem={avail - used:.2f} GB.",
        tp,
    )
    result.piecewise_s = seconds
    return avail - used


async def _adaptive_states(
    options: SimOptions,
    plan: NodePlan,
    profile: Profile,
    log: SimLog,
    avail: float,
    result: BootResult,
) -> float:
    """Build the runtime state of every other candidate (``AdaptiveController.init_states``).

    Each state captures its draft graphs (0.5.13 eagle_worker_v2.py:336-397, 0.5.23:507-658)
    and a target-verify graph (no line of its own in 0.5.23; 0.5.13's ``CudaGraphRunner`` logs
    its batch sizes, cuda_graph_runner.py:532) over the batch sizes whose slot can pick it, then
    "Built adaptive runtime state" (0.5.13 :1062-1068, 0.5.23 :1852-1858). 0.5.23 adds the time
    to ``startup_time`` (``_additional_graph_time_usage``, :1835-1838).
    """
    assert plan.adaptive is not None
    per_bs = profile.boot.capture_per_bs
    mem = profile.memory
    for steps, pruned, gib in plan.adaptive.extra_states:
        elapsed = 0.0
        drafted = 0.0
        if pruned and steps > 1:
            draft = mem.draft_graph_per_token_gib * max(pruned) * (1 + steps + 1)
            for kind, tokens in (("decode", 1), ("extend", steps + 1)):
                seconds = per_bs * len(pruned)
                begin, end = _draft_capture_lines(
                    options, kind, tokens=tokens, bs=list(pruned), avail=avail, used=draft / 2,
                    seconds=seconds,
                )  # fmt: skip
                log.line(begin, rank=0)
                await _pause(options, seconds)
                log.line(end, rank=0)
                avail -= draft / 2
                drafted += draft / 2
                elapsed += seconds
                result.add_graph(f"draft_{kind}", seconds)
        if pruned:
            if options.flavor == "old":
                log.line(f"Capture cuda graph bs {list(pruned)}", rank=0)
            seconds = per_bs * len(pruned)
            await _pause(options, seconds)
            avail -= gib - drafted
            elapsed += seconds
            result.add_graph("target_verify", seconds)
        log.line(adaptive.BUILT_LINE.format(steps=steps, elapsed=elapsed, mem=gib), rank=0)
    return avail


def _draft_capture_lines(
    options: SimOptions,
    kind: str,
    *,
    tokens: int,
    bs: list[int],
    avail: float,
    used: float,
    seconds: float,
) -> tuple[str, str]:
    """Begin and end lines of a draft graph capture (``kind``: ``"decode"`` or ``"extend"``)."""
    if options.flavor == "new":  # sglang 0.5.23 speculative/eagle_worker_v2.py:513-537, 634-658
        return (
            f"Capture draft {kind} CUDA graph begin. backend=full, "
            f"num_tokens_per_req={tokens}, bs={bs}, avail mem={avail:.2f} GB",
            f"Capture draft {kind} CUDA graph end. elapsed={seconds:.2f} s, "
            f"mem usage={used:.2f} GB, avail mem={avail - used:.2f} GB.",
        )
    name = "draft" if kind == "decode" else "draft extend"  # 0.5.13 eagle_worker_v2.py:342-397
    return (
        f"Capture {name} cuda graph begin. This can take up to several minutes. "
        f"avail mem={avail:.2f} GB",
        f"Capture {name} cuda graph end. Time elapsed: {seconds:.2f} s. "
        f"mem usage={used:.2f} GB. avail mem={avail - used:.2f} GB.",
    )


async def _capture(
    options: SimOptions,
    plan: NodePlan,
    profile: Profile,
    log: SimLog,
    avail: float,
    result: BootResult,
) -> float:
    """Print the capture lines of every graph phase; stop before the phase that fails."""
    tp = max(1, plan.config.tp_size)
    bs = plan.capture_bs
    seconds = profile.boot.capture_per_bs * max(1, len(bs))
    spec = plan.spec
    failing_stage = plan.failure.stage if plan.failure is not None else None
    phase = "target_verify" if spec is not None else "decode"
    name = "target verify" if spec is not None else "target decode"
    per_req = (spec.draft_tokens or 1) if spec is not None else 1
    target_graph = plan.graph_gib
    if plan.adaptive is not None:
        target_graph -= sum(gib for _, _, gib in plan.adaptive.extra_states)
    draft_graph = 0.0
    if spec is not None and spec.drafts_with_a_model:
        draft_graph = (
            profile.memory.draft_graph_per_token_gib
            * plan.graph_max_bs
            * ((spec.topk or 1) + (spec.draft_tokens or 1))
        )
        target_graph -= draft_graph
    if options.flavor == "new":
        log.ranks(
            f"Capture {name} CUDA graph begin. backend=full, num_tokens_per_req={per_req}, "
            f"avail mem={avail:.2f} GB",
            tp,
        )
    else:
        log.ranks(
            f"Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={avail:.2f} GB",
            tp,
        )
        log.line(f"Capture cuda graph bs {bs}", rank=0)
    await _pause(options, seconds)
    if failing_stage == "capture":
        return avail
    after = avail - target_graph
    if options.flavor == "new":
        log.ranks(
            f"Capture {name} CUDA graph end. bs={bs}, elapsed={seconds:.2f} s, "
            f"mem usage={target_graph:.2f} GB, avail mem={after:.2f} GB.",
            tp,
        )
    else:
        log.ranks(
            f"Capture cuda graph end. Time elapsed: {seconds:.2f} s. "
            f"mem usage={target_graph:.2f} GB. avail mem={after:.2f} GB.",
            tp,
        )
    result.add_graph(phase, seconds)
    result.graph_memory[phase] = target_graph
    avail = after
    if plan.piecewise:  # after the decode graphs (model_runner.py 0.5.13, as in the real logs)
        avail = await _piecewise(options, plan, profile, log, avail, result)
    if spec is not None and (spec.steps or 0) > 1 and plan.graph_max_bs > 0:
        half = draft_graph / 2
        for kind, tokens in (("decode", spec.topk or 1), ("extend", per_req)):
            begin, end = _draft_capture_lines(
                options, kind, tokens=tokens, bs=bs, avail=avail, used=half, seconds=seconds
            )
            log.line(begin, rank=0)
            await _pause(options, seconds)
            if failing_stage == "draft_capture" and kind == "decode":
                return avail
            log.line(end, rank=0)
            avail -= half
            result.add_graph(f"draft_{kind}", seconds)
        result.graph_memory["draft_decode"] = half
        result.graph_memory["draft_extend"] = half
    return avail


async def _fail_at(plan: NodePlan, stage: str, *, log: SimLog, workers: WorkerSet) -> bool:
    failure = plan.failure
    if failure is None or failure.stage != stage or failure.where != "scheduler":
        return False
    emit_scheduler_failure(failure, log=log, workers=workers)
    await hang_forever()
    return True
