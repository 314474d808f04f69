"""The boot sequence of the simulated node: SGLang's log lines, stage by stage, in scaled time.

This module owns what a booting node prints and when: the resolved ``server_args`` and the
resolution warnings, per-rank distributed init (NCCL version, custom all-reduce / symmetric
memory warnings), weight loading, draft loading, KV-cache allocation, CUDA-graph capture (in the
layout of the chosen SGLang flavor), the final capacity line and the startup timings. Stage
durations come from the profile (real seconds) times the time scale. When the plan has a failure
at a stage, the boot stops there and the failing worker prints SGLang's
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

from spec_sweep.sim import texts
from spec_sweep.sim.cli import SimOptions
from spec_sweep.sim.logs import SimLog
from spec_sweep.sim.model import Failure, NodePlan
from spec_sweep.sim.procs import WorkerSet
from spec_sweep.sim.profiles import Profile

__all__ = ["BootResult", "boot_node", "emit_scheduler_failure"]

_FOREVER = 365 * 24 * 3600.0


@dataclass
class BootResult:
    """What the boot measured (for ``/server_info`` and the startup-timings line).

    Attributes:
        load_weight_s: Reported weight-loading seconds.
        kv_cache_s: Reported KV-cache allocation seconds.
        cuda_graph_s: Reported capture seconds per graph phase.
        graph_memory: Graph memory per phase (GiB).
        scheduler_e2e_s: Reported scheduler start-up seconds.
        started: Wall-clock start of the boot.
    """

    load_weight_s: float = 0.0
    kv_cache_s: float = 0.0
    cuda_graph_s: dict[str, float] = field(default_factory=dict)
    graph_memory: dict[str, float] = field(default_factory=dict)
    scheduler_e2e_s: float = 0.0
    started: float = field(default_factory=time.time)


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

    # -- distributed init ----------------------------------------------------------------------
    if options.flavor == "old":
        log.ranks("Init torch distributed begin.", tp)
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
    if options.flavor == "old":
        log.ranks(
            f"Init torch distributed ends. elapsed={boot.init_distributed:.2f} s, "
            f"mem usage={hw.startup_overhead_gib:.2f} GB",
            tp,
        )
    if await _fail_at(plan, "distributed", log=log, workers=workers):
        return None

    # -- weights -------------------------------------------------------------------------------
    log.ranks(f"Load weight begin. avail mem={plan.pre_load_avail_gib:.2f} GB", tp)
    await _pause(options, boot.load_weights)
    if await _fail_at(plan, "load", log=log, workers=workers):
        return None
    quant = f"{profile.model.quant_log}, " if profile.model.quant_log else ""
    log.ranks(
        f"Load weight end. elapsed={boot.load_weights:.2f} s, "
        f"type={profile.model.architecture}, {quant}"
        f"avail mem={plan.post_load_avail_gib:.2f} GB, mem usage={plan.weights_gib:.2f} GB.",
        tp,
    )
    result.load_weight_s = boot.load_weights
    avail = plan.post_load_avail_gib
    if plan.spec is not None:
        log.ranks(f"Load weight begin. avail mem={avail:.2f} GB", tp)
        await _pause(options, boot.load_draft)
        if await _fail_at(plan, "draft_load", log=log, workers=workers):
            return None
        avail -= plan.draft_weights_gib
        arch = (
            profile.draft.architecture
            if plan.draft_weights_gib < plan.weights_gib
            else profile.model.architecture
        )
        log.ranks(
            f"Load weight end. elapsed={boot.load_draft:.2f} s, type={arch}, "
            f"avail mem={avail:.2f} GB, mem usage={plan.draft_weights_gib:.2f} GB.",
            tp,
        )

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
    if plan.graph_max_bs > 0:
        avail = await _capture(options, plan, profile, log, avail, result)
        if await _fail_at(plan, "capture", log=log, workers=workers):
            return None
        if await _fail_at(plan, "draft_capture", log=log, workers=workers):
            return None
    log.line(
        f"max_total_num_tokens={plan.max_total_num_tokens}, "
        f"chunked_prefill_size={plan.chunked_prefill_size}, "
        f"max_prefill_tokens=16384, max_running_requests={plan.max_running_requests}, "
        f"context_len={plan.context_len}, available_gpu_mem={plan.available_after_init_gib:.2f} GB",
        rank=0,
    )
    result.scheduler_e2e_s = time.time() - result.started
    if options.flavor == "new":
        graphs = ", ".join(f"{k}={v:.2f}" for k, v in result.cuda_graph_s.items())
        total = boot.launch + boot.init_distributed + boot.load_weights + boot.kv_alloc
        total += sum(result.cuda_graph_s.values())
        log.line(
            f"Engine startup timings (s): load_weight={result.load_weight_s:.2f}, "
            f"kv_cache_allocation={result.kv_cache_s:.2f}, scheduler_e2e={total:.2f}, "
            f"cuda_graph={{{graphs}}}, tokenizer_e2e={total + 1.0:.2f}"
        )
    return result


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
    draft_graph = 0.0
    if spec is not None:
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
    result.cuda_graph_s[phase] = seconds
    result.graph_memory[phase] = target_graph
    avail = after
    if spec is not None and (spec.steps or 0) > 1 and plan.graph_max_bs > 0:
        half = draft_graph / 2
        for kind, tokens in (("decode", spec.topk or 1), ("extend", per_req)):
            if options.flavor == "new":
                begin = (
                    f"Capture draft {kind} CUDA graph begin. backend=full, "
                    f"num_tokens_per_req={tokens}, bs={bs}, avail mem={avail:.2f} GB"
                )
                end = (
                    f"Capture draft {kind} CUDA graph end. elapsed={seconds:.2f} s, "
                    f"mem usage={half:.2f} GB, avail mem={avail - half:.2f} GB."
                )
            else:  # sglang 0.5.13 speculative/eagle_worker_v2.py
                name_old = "draft" if kind == "decode" else "draft extend"
                begin = (
                    f"Capture {name_old} cuda graph begin. This can take up to several minutes. "
                    f"avail mem={avail:.2f} GB"
                )
                end = (
                    f"Capture {name_old} cuda graph end. Time elapsed: {seconds:.2f} s. "
                    f"mem usage={half:.2f} GB. avail mem={avail - half:.2f} GB."
                )
            log.line(begin, rank=0)
            await _pause(options, seconds)
            if failing_stage == "draft_capture" and kind == "decode":
                return avail
            log.line(end, rank=0)
            avail -= half
        result.cuda_graph_s["draft_decode"] = seconds
        result.cuda_graph_s["draft_extend"] = seconds
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
