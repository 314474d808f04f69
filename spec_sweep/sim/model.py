"""The simulated node's model: what a configuration does to memory, boot and token timing.

This module owns the pure, deterministic part of the simulator. :func:`plan_node` resolves a
:class:`NodeConfig` against a :class:`~spec_sweep.sim.profiles.Profile` the way SGLang would
(default CUDA-graph max batch, ``mem_fraction_static`` heuristic, speculative defaults), walks the
memory budget (weights, draft, KV cache, CUDA-graph buffers, communication workspaces), applies
the profile's feature rules and decides the boot outcome: a :class:`NodePlan` that either boots or
names the stage and the exact failure text. Token timing of a booted plan is
:mod:`spec_sweep.sim.perf`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from spec_sweep.sim import adaptive, texts
from spec_sweep.sim.profiles import Profile
from spec_sweep.sim.texts import Flavor

__all__ = [
    "GIB",
    "AdaptiveRequest",
    "AdaptiveSetup",
    "Failure",
    "NodeConfig",
    "NodePlan",
    "SpecSettings",
    "capture_batch_sizes",
    "piecewise_token_sizes",
    "plan_node",
]

GIB = 1 << 30
_SPEC_ALGOS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
#: NGRAM's draft tokens when ``--speculative-num-draft-tokens`` is not given. Assumed (SGLang's
#: earlier default match window); the real 0.5.17 boots measured give it explicitly.
NGRAM_DEFAULT_DRAFT_TOKENS = 12
#: NGRAM's ``speculative_eagle_topk``: ``--speculative-ngram-max-bfs-breadth``, 10 by default
#: (the real 0.5.17 log's resolved ``server_args``: steps 0, top-k 10).
NGRAM_TOPK = 10


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """Speculative decoding as requested on the command line (before SGLang's adjustments)."""

    algorithm: str
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    draft_model_path: str | None

    @property
    def drafts_with_a_model(self) -> bool:
        """A draft model proposes the tokens (NGRAM matches them in the text: no draft model,
        no draft forward, no draft graphs)."""
        return self.algorithm.upper() != "NGRAM"

    @property
    def depths(self) -> int:
        """Draft tokens a cycle may accept: the steps of a drafting model, NGRAM's draft tokens
        after the first (a matched continuation)."""
        if self.drafts_with_a_model:
            return self.steps or 0
        return max(0, (self.draft_tokens or 1) - 1)


@dataclass(frozen=True, slots=True)
class AdaptiveRequest:
    """``--speculative-adaptive`` as given, with its config file read by the launcher.

    SGLang opens ``--speculative-adaptive-config`` as a path (``open(cfg_path)`` in
    ``_load_adaptive_config``, every version); inline JSON is a file name that does not exist.

    Attributes:
        config_path: ``--speculative-adaptive-config``, or None (the version's default config).
        text: The file's contents (None when there is no path or it could not be read).
        open_error: The exception line when it could not be read
            (``"FileNotFoundError: [Errno 2] No such file or directory: '...'"``).
    """

    config_path: str | None = None
    text: str | None = None
    open_error: str = ""


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """The server configuration, as far as it matters to the node.

    Attributes:
        flavor: SGLang flavor (``"new"``: 0.5.14+, ``"old"``: 0.5.13 and earlier).
        model_path: ``--model-path``.
        tp_size: Tensor-parallel size.
        ep_size: Expert-parallel size.
        dp_size: Data-parallel size.
        attn_dp_size: Attention data-parallel size (0.5.23).
        enable_dp_attention: ``--enable-dp-attention``.
        mem_fraction_static: Explicit value, or None for SGLang's heuristic.
        cuda_graph_max_bs: Explicit decode CUDA-graph max batch, or None for the default.
        cuda_graph_disabled: Decode CUDA graph disabled.
        max_running_requests: Explicit limit, or None.
        chunked_prefill_size: Explicit value, or None.
        context_length: Explicit value, or None (the model's).
        spec: Speculative settings, or None.
        moe_a2a_backend: ``--moe-a2a-backend``.
        moe_runner_backend: ``--moe-runner-backend``.
        fusion_backend: FlashInfer all-reduce fusion backend requested, or None.
        fusion_deprecated_flag: Requested through the deprecated ``--enable-flashinfer-...``.
        disable_custom_all_reduce: ``--disable-custom-all-reduce``.
        torch_symm_mem: ``--enable-torch-symm-mem``.
        nccl_algo: The ``NCCL_ALGO`` environment variable, or None.
        port: ``--port`` (SGLang derives its gRPC port from it).
        grpc_port_env: The ``SGLANG_GRPC_PORT`` environment variable, or None.
        seed: Seed of every random choice of the simulator.
        boot_id: Which boot of this configuration this is (``--sim-boot-id``): the run-to-run
            noise is drawn per boot, so two boots of one configuration measure differently,
            as on a real node; the same boot id reproduces the same draw.
        decode_log_interval: SGLang's ``--decode-log-interval``.
        sglang_version: The SGLang version simulated (rules that differ within a flavor).
        adaptive: ``--speculative-adaptive`` with its config, or None.
        enable_multi_layer_eagle: ``--enable-multi-layer-eagle``.
        enable_two_batch_overlap: ``--enable-two-batch-overlap``.
        enable_pdmux: ``--enable-pdmux``.
        piecewise_off_flags: The set flags that turn 0.5.13's piecewise CUDA graph off
            (``--disable-piecewise-cuda-graph``, ``--enable-torch-compile``, ...).
        enforce_piecewise: ``--enforce-piecewise-cuda-graph`` (skip those conditions).
        weight_cache_mode: ``--weight-cache-mode`` (0.5.17+).
        load_format: ``--load-format`` (``"dummy"``: random weights, nothing read).
        draft_load_format: ``--speculative-draft-load-format`` (None: ``load_format``, as in
            SGLang).

    The fields after ``decode_log_interval`` are left out of ``repr``: the noise of a boot is
    seeded by the ``repr`` of its configuration, and adding them must not move the draws of the
    configurations that existed before them.
    """

    flavor: Flavor
    model_path: str
    tp_size: int = 1
    ep_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    enable_dp_attention: bool = False
    mem_fraction_static: float | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_disabled: bool = False
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    context_length: int | None = None
    spec: SpecSettings | None = None
    moe_a2a_backend: str = "none"
    moe_runner_backend: str = "auto"
    fusion_backend: str | None = None
    fusion_deprecated_flag: bool = False
    disable_custom_all_reduce: bool = False
    torch_symm_mem: bool = False
    nccl_algo: str | None = None
    seed: int = 0
    boot_id: str = ""
    decode_log_interval: int = 40
    port: int = 30000
    grpc_port_env: int | None = None
    sglang_version: str = field(default="", repr=False)
    adaptive: AdaptiveRequest | None = field(default=None, repr=False)
    enable_multi_layer_eagle: bool = field(default=False, repr=False)
    enable_two_batch_overlap: bool = field(default=False, repr=False)
    enable_pdmux: bool = field(default=False, repr=False)
    piecewise_off_flags: tuple[str, ...] = field(default=(), repr=False)
    enforce_piecewise: bool = field(default=False, repr=False)
    weight_cache_mode: str = field(default="off", repr=False)
    load_format: str = field(default="auto", repr=False)
    draft_load_format: str | None = field(default=None, repr=False)

    @property
    def dummy_weights(self) -> bool:
        """The target's weights are random (``--load-format dummy``)."""
        return self.load_format == "dummy"

    @property
    def dummy_draft(self) -> bool:
        """The draft model's weights are random: ``--speculative-draft-load-format dummy``, or
        unset with ``--load-format dummy`` (SGLang's draft load format defaults to the
        target's)."""
        return (self.draft_load_format or self.load_format) == "dummy"


@dataclass(frozen=True, slots=True)
class AdaptiveSetup:
    """Adaptive speculative decoding as the booted node runs it.

    Attributes:
        rules: The version's rules.
        config: The parsed config.
        initial_steps: The worker's initial ``speculative_num_steps``.
        extra_states: ``(steps, captured batch sizes, graph GiB)`` of every runtime state built
            at start-up besides the initial one (``AdaptiveController.init_states``).
    """

    rules: adaptive.AdaptiveRules
    config: adaptive.AdaptiveConfig
    initial_steps: int
    extra_states: tuple[tuple[int, tuple[int, ...], float], ...] = ()

    def policy(self, cuda_graph_bs: list[int] | None) -> adaptive.AdaptivePolicy:
        """A fresh policy (slots) for a node whose decode graphs cover ``cuda_graph_bs``."""
        policy = adaptive.AdaptivePolicy(self.initial_steps, self.config, self.rules)
        policy.set_cuda_graph_bs(cuda_graph_bs)
        return policy


@dataclass(frozen=True, slots=True)
class Failure:
    """A configuration's failure, as the node prints it.

    Attributes:
        stage: Boot stage at which it happens: ``"args"`` (main process, before any worker),
            ``"distributed"``, ``"load"``, ``"draft_load"``, ``"memory_pool"``, ``"workspace"``,
            ``"capture"``, ``"draft_capture"`` or ``"warmup"`` (the first decode step).
        where: ``"main"`` (traceback, exit 1) or ``"scheduler"`` (scheduler traceback, SIGQUIT to
            the main process, which kills the process tree: exit -9).
        text: The traceback text (ending in the exception line).
        pre_lines: Log lines a rank prints just before the traceback (NCCL warnings).
        summary: One line, for people and tests.
    """

    stage: str
    where: str
    text: str
    pre_lines: tuple[str, ...] = ()
    summary: str = ""


@dataclass
class NodePlan:
    """A configuration resolved against a profile: memory figures, warnings, outcome.

    Attributes:
        config: The configuration.
        flavor: SGLang flavor.
        main_warnings: Warnings of the main process while resolving the arguments.
        rank_warnings: Warnings every TP rank prints while initialising communication.
        failure: The failure, or None when the node boots.
        spec: Effective speculative settings (after SGLang's adjustments), or None.
        mem_fraction_static: Resolved ``mem_fraction_static``.
        chunked_prefill_size: Resolved chunked prefill size.
        graph_max_bs: Effective decode CUDA-graph max batch (0 when disabled).
        capture_bs: Captured batch sizes.
        max_running_requests: Resolved limit of running requests.
        context_len: Context length.
        pre_load_avail_gib: Free memory per GPU before loading weights.
        weights_gib: Target weights per GPU.
        post_load_avail_gib: Free memory per GPU after the target weights.
        draft_weights_gib: Draft weights per GPU (0 without speculative decoding).
        kv_gib: KV-cache memory per GPU.
        max_total_num_tokens: KV-cache capacity in tokens.
        graph_gib: CUDA-graph memory per GPU.
        available_after_init_gib: Free memory per GPU after initialisation.
        allreduce_impl: ``"nccl"``, ``"custom"``, ``"torch_symm_mem"`` or
            ``"flashinfer_fusion"``.
        allreduce_factor: Latency factor of that implementation and the NCCL algorithm.
        nccl_algo: NCCL algorithm in use.
        adaptive: Adaptive speculative decoding, or None (not asked for, or turned off).
        piecewise: 0.5.13's piecewise CUDA graph is captured (``init_piecewise_cuda_graphs``).
        piecewise_tokens: Its captured token counts.
    """

    config: NodeConfig
    flavor: Flavor
    main_warnings: list[str] = field(default_factory=list)
    rank_warnings: list[str] = field(default_factory=list)
    failure: Failure | None = None
    spec: SpecSettings | None = None
    mem_fraction_static: float = 0.0
    chunked_prefill_size: int = 8192
    graph_max_bs: int = 0
    capture_bs: list[int] = field(default_factory=list)
    max_running_requests: int = 0
    context_len: int = 0
    pre_load_avail_gib: float = 0.0
    weights_gib: float = 0.0
    post_load_avail_gib: float = 0.0
    draft_weights_gib: float = 0.0
    kv_gib: float = 0.0
    max_total_num_tokens: int = 0
    graph_gib: float = 0.0
    available_after_init_gib: float = 0.0
    allreduce_impl: str = "nccl"
    allreduce_factor: float = 1.0
    nccl_algo: str = "Ring"
    adaptive: AdaptiveSetup | None = None
    piecewise: bool = False
    piecewise_tokens: list[int] = field(default_factory=list)


def capture_batch_sizes(max_bs: int, *, speculative: bool) -> list[int]:
    """SGLang's decode CUDA-graph batch sizes (``generate_decode_cuda_graph_batch_sizes``).

    Args:
        max_bs: The largest captured batch size.
        speculative: Speculative decoding uses denser small sizes.

    Returns:
        Sorted batch sizes, ending at ``max_bs``.
    """
    if max_bs <= 0:
        return []
    if not speculative:
        sizes = [
            1,
            2,
            4,
            8,
            12,
            *range(16, 257, 8),
            *range(272, 512, 16),
            *range(512, max_bs + 1, 32),
        ]
    else:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    sizes = sorted({s for s in sizes if s <= max_bs})
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def _default_chunk_and_bs(mem_mib: float, tp: int) -> tuple[int, int]:
    """SGLang's GPU-memory buckets (arg_groups/memory_hook.py handle_gpu_memory_settings)."""
    gib = 1024.0
    if mem_mib < 20 * gib:
        return 2048, 8
    if mem_mib < 35 * gib:
        return 4096, 48 if tp < 4 else 160
    if mem_mib < 60 * gib:
        return 4096, 32 if tp < 4 else 160
    if mem_mib < 160 * gib:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _default_mem_fraction(mem_mib: float, *, chunk: int, tp: int, graph_bs: int) -> float:
    """SGLang's ``mem_fraction_static`` heuristic (reserved = activations + graphs + slack)."""
    reserved = 512.0 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + graph_bs * 2
    if mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem_mib - reserved) / mem_mib, 3)


def _nccl_algorithm(value: str | None, supported: dict[str, float]) -> tuple[str, float] | None:
    """Resolve ``NCCL_ALGO`` for all-reduce; None when NCCL cannot run it here."""
    if value is None or not value.strip():
        return "Ring", supported["Ring"]
    raw = value.strip()
    if raw.startswith("^"):
        return "Ring", supported["Ring"]
    chosen = raw
    if ":" in raw:
        chosen = ""
        for part in raw.split(";"):
            op, _, algos = part.partition(":")
            if op.strip().lower() == "allreduce":
                chosen = algos
        if not chosen:
            return "Ring", supported["Ring"]
    names = [n.strip() for n in chosen.split(",") if n.strip()]
    lowered = {k.lower(): k for k in supported}
    usable = [lowered[n.lower()] for n in names if n.lower() in lowered]
    if not usable:
        return None
    best = min(usable, key=lambda n: supported[n])
    return best, supported[best]


def _scheduler_failure(
    stage: str,
    frames: tuple[texts.Frame, ...],
    *,
    exception: str,
    cause: str | None = None,
    pre_lines: tuple[str, ...] = (),
    summary: str = "",
) -> Failure:
    body = texts.format_traceback(frames, exception, cause=cause)
    return Failure(stage, "scheduler", body, pre_lines, summary or exception.splitlines()[0])


def _main_failure(frames: tuple[texts.Frame, ...], exception: str) -> Failure:
    return Failure(
        "args", "main", texts.format_traceback(frames, exception), (), exception.splitlines()[0]
    )


def _oom(
    profile: Profile,
    *,
    tried_gib: float,
    free_gib: float,
    private_pool_gib: float = 0.0,
) -> str:
    total = profile.hardware.total_gib
    in_use = max(0.0, total - free_gib - 0.45)
    allocated = max(0.0, in_use - 1.37)
    return texts.torch_oom_message(
        tried_gib=tried_gib,
        gpu=0,
        total_gib=total,
        free_gib=free_gib,
        in_use_gib=in_use,
        allocated_gib=allocated,
        reserved_unallocated_gib=min(1.37, in_use),
        private_pool_gib=private_pool_gib,
    )


def _check_ports(plan: NodePlan) -> Failure | None:
    """SGLang's gRPC port rule, checked while it builds its arguments.

    0.5.13 (`ServerArgs._handle_deprecated_args`) sets the gRPC port to `SGLANG_GRPC_PORT` or
    `--port + 10000` on every launch and refuses one past 65535, so a port above 55535 kills the
    boot. 0.5.23 (`arg_groups/serving_hook.py`) derives it only in gRPC mode, but still refuses
    an out-of-range `SGLANG_GRPC_PORT`.
    """
    cfg = plan.config
    if plan.flavor == "old":
        grpc = cfg.grpc_port_env if cfg.grpc_port_env is not None else cfg.port + 10000
        if not 1 <= grpc <= 65535:
            return _main_failure(
                (*texts.MAIN_POST_INIT_OLD[:-1], *texts.GRPC_PORT_OLD),
                f"ValueError: SGLANG_GRPC_PORT ({grpc}) must be between 1 and 65535",
            )
    elif cfg.grpc_port_env is not None and not 1 <= cfg.grpc_port_env <= 65535:
        return _main_failure(
            (*texts.MAIN_RESOLVE, *texts.GRPC_PORT_NEW),
            f"ValueError: --grpc-port / SGLANG_GRPC_PORT ({cfg.grpc_port_env}) must be between 1 "
            "and 65535",
        )
    return None


def _check_arguments(plan: NodePlan, profile: Profile) -> Failure | None:
    """Main-process checks of ServerArgs resolution (assertions, ValueErrors)."""
    cfg = plan.config
    if cfg.moe_a2a_backend == "flashinfer":
        tp = cfg.tp_size
        if plan.flavor == "new":
            topology_ok = cfg.attn_dp_size == tp or (cfg.enable_dp_attention and cfg.dp_size == tp)
            if not topology_ok:
                return _main_failure(
                    texts.MAIN_RESOLVE + texts.A2A_NEW, f"AssertionError: {texts.A2A_TOPOLOGY_NEW}"
                )
            if cfg.moe_runner_backend not in texts.A2A_RUNNERS_NEW:
                return _main_failure(
                    texts.MAIN_RESOLVE + texts.A2A_RUNNER_NEW_FRAMES,
                    f"AssertionError: {texts.A2A_RUNNER_NEW}",
                )
        else:
            if not (cfg.enable_dp_attention and cfg.dp_size == tp):
                return _main_failure(
                    texts.MAIN_POST_INIT_OLD + texts.A2A_OLD,
                    f"AssertionError: {texts.A2A_TOPOLOGY_OLD}",
                )
            if cfg.moe_runner_backend not in texts.A2A_RUNNERS_OLD:
                return _main_failure(
                    texts.MAIN_POST_INIT_OLD + texts.A2A_RUNNER_OLD_FRAMES,
                    f"AssertionError: {texts.A2A_RUNNER_OLD}",
                )
        plan.main_warnings.append(
            "Flashinfer MoE A2A is enabled. The expert parallel size is adjusted to be the same "
            f"as the tensor parallel size[{tp}]."
        )
        plan.main_warnings.append(
            "Flashinfer MoE A2A is enabled. --disable-shared-experts-fusion is automatically set."
        )
    del profile
    return None


def _attention_dp(cfg: NodeConfig) -> bool:
    """Attention data parallelism as SGLang sees it when it checks the adaptive mode.

    0.5.13 reads ``enable_dp_attention``; 0.5.23 turns the deprecated ``--dp-size N
    --enable-dp-attention`` into ``attn_dp_size = N`` (arg_groups/parallel_hook.py:39-61) and asks
    ``attn_dp_size > 1`` (runtime_context.py:191-199).
    """
    if cfg.flavor == "old":
        return cfg.enable_dp_attention
    return cfg.attn_dp_size > 1 or (cfg.enable_dp_attention and cfg.dp_size > 1)


def _adaptive_kept(
    plan: NodePlan, rules: adaptive.AdaptiveRules, *, algorithm: str | None, topk: int | None
) -> bool:
    """``_maybe_disable_adaptive``: warn and turn the mode off when SGLang would."""
    cfg = plan.config
    reason = adaptive.unsupported_reason(
        rules,
        algorithm=algorithm,
        topk=topk,
        attention_dp=_attention_dp(cfg),
        multi_layer_eagle=cfg.enable_multi_layer_eagle,
        two_batch_overlap=cfg.enable_two_batch_overlap,
        pdmux=cfg.enable_pdmux,
    )
    if reason is None:
        return True
    plan.main_warnings.append(adaptive.DISABLED_WARNING.format(reason=reason))
    return False


def _load_adaptive(
    plan: NodePlan, rules: adaptive.AdaptiveRules, request: AdaptiveRequest
) -> adaptive.AdaptiveConfig | Failure:
    """Read the config as ``resolve_candidate_steps_from_config`` does in the main process."""
    try:
        return adaptive.parse_config(request.text, rules, open_error=request.open_error)
    except adaptive.AdaptiveConfigError as exc:
        frames = texts.adaptive_config_frames(
            exc.where, flavor=plan.flavor, json_error=exc.json_error
        )
        return _main_failure(tuple(frames), exc.exception)


def _resolve_spec(plan: NodePlan, profile: Profile) -> Failure | None:
    """Speculative settings as SGLang resolves them (``handle_speculative_decoding``).

    With ``--speculative-adaptive``, 0.5.14+ first decides whether the mode stays on and, if so,
    forces top-k 1, the middle candidate as the initial steps (when not given) and draft tokens
    = steps + 1, before the EAGLE defaults (arg_groups/speculative_hook.py 0.5.23:261-264,
    1374-1428); 0.5.13 applies the EAGLE defaults first, then decides and only checks that the
    initial steps are a candidate (0.5.13:116-130).
    """
    cfg = plan.config
    spec = cfg.spec
    request = cfg.adaptive
    rules = adaptive.adaptive_rules(cfg.sglang_version) if request is not None else None
    if spec is None:
        if request is not None and rules is not None:
            _adaptive_kept(plan, rules, algorithm=None, topk=None)
        return None
    algo = spec.algorithm.upper()
    if algo not in _SPEC_ALGOS:
        return _main_failure(
            texts.MAIN_RESOLVE,
            f"ValueError: Unknown speculative algorithm name: {spec.algorithm}",
        )
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo == "NGRAM":
        return _resolve_ngram(plan, spec, rules)
    steps, topk, draft_tokens = spec.steps, spec.topk, spec.draft_tokens
    config: adaptive.AdaptiveConfig | None = None
    if (
        request is not None
        and rules is not None
        and rules.resolve_first
        and _adaptive_kept(plan, rules, algorithm=algo, topk=topk)
    ):
        loaded = _load_adaptive(plan, rules, request)
        if isinstance(loaded, Failure):
            return loaded
        config = loaded
        candidates = config.candidate_steps
        topk = 1 if topk is None else topk
        steps = candidates[len(candidates) // 2] if steps is None else steps
        if steps not in candidates:
            return _main_failure(
                tuple(texts.adaptive_not_candidate_frames(flavor=plan.flavor)),
                adaptive.steps_not_a_candidate(steps, candidates),
            )
        draft_tokens = steps + 1
    # -- _handle_eagle_family --------------------------------------------------------------------
    if cfg.max_running_requests is None:
        plan.main_warnings.append(texts.SPEC_MAX_RUNNING_RESET)
    if steps is None:
        if topk is not None or draft_tokens is not None:
            return _main_failure(
                (
                    *texts.MAIN_RESOLVE,
                    (
                        "srt/arg_groups/speculative_hook.py",
                        1160,
                        "_handle_eagle_family",
                        "assert (",
                    ),
                ),
                "AssertionError",
            )
        # _auto_choose_speculative_params: the common default for unknown architectures
        steps, topk, draft_tokens = 3, 1, 4
    if topk is None:
        topk = 1
    if draft_tokens is None:
        draft_tokens = steps + 1
    if topk == 1 and draft_tokens != steps + 1:
        plan.main_warnings.append(texts.SPEC_DRAFT_TOKENS_ADJUSTED)
        draft_tokens = steps + 1
    if (
        request is not None
        and rules is not None
        and not rules.resolve_first
        and _adaptive_kept(plan, rules, algorithm=algo, topk=topk)
    ):
        loaded = _load_adaptive(plan, rules, request)
        if isinstance(loaded, Failure):
            return loaded
        config = loaded
        if steps not in config.candidate_steps:
            return _main_failure(
                tuple(texts.adaptive_not_candidate_frames(flavor=plan.flavor)),
                adaptive.steps_not_a_candidate(steps, config.candidate_steps),
            )
    draft_path = spec.draft_model_path
    if draft_path is None and profile.model.builtin_mtp:
        draft_path = cfg.model_path
    plan.spec = SpecSettings(algo, steps, topk, draft_tokens, draft_path)
    if config is not None and rules is not None:
        plan.adaptive = AdaptiveSetup(rules=rules, config=config, initial_steps=steps)
    return None


def _resolve_ngram(
    plan: NodePlan, spec: SpecSettings, rules: adaptive.AdaptiveRules | None
) -> Failure | None:
    """NGRAM as SGLang 0.5.17 resolved it (the real log, benchmarks/real/fidelity-0.5.17/):
    no draft model, 0 steps, top-k the BFS breadth (10), the draft tokens as given; running
    requests reset to 48 and mixed chunked prefill off, with their warnings."""
    cfg = plan.config
    if rules is not None:
        _adaptive_kept(plan, rules, algorithm="NGRAM", topk=NGRAM_TOPK)
    if cfg.max_running_requests is None:
        plan.main_warnings.append(texts.SPEC_MAX_RUNNING_RESET)
    plan.main_warnings.append(texts.NGRAM_MIXED_CHUNK_OFF)
    draft_tokens = spec.draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS
    plan.spec = SpecSettings("NGRAM", 0, NGRAM_TOPK, draft_tokens, None)
    return None


def _check_weight_cache(plan: NodePlan) -> Failure | None:
    """The weight-cache daemon does not export a draft model: SGLang refuses the pair.

    0.5.17 server_args.py:7326-7332 (``_handle_load_format``); 0.5.23
    arg_groups/model_path_hook.py:281-287 (``handle_load_format``, after the speculative hook).
    """
    if plan.config.weight_cache_mode == "off" or plan.config.spec is None:
        return None
    return _main_failure(texts.WEIGHT_CACHE_SPEC_FRAMES, f"ValueError: {texts.WEIGHT_CACHE_SPEC}")


def plan_node(profile: Profile, config: NodeConfig) -> NodePlan:
    """Resolve a configuration against a profile and decide its boot outcome.

    Args:
        profile: The hardware profile.
        config: The server configuration.

    Returns:
        The plan: resolved settings, memory figures, warnings and the failure (if any).
    """
    hw, model, mem = profile.hardware, profile.model, profile.memory
    plan = NodePlan(config=config, flavor=config.flavor)
    failure = (
        _check_ports(plan)
        or _check_arguments(plan, profile)
        or _resolve_spec(plan, profile)
        or _check_weight_cache(plan)
    )
    if failure is not None:
        plan.failure = failure
        return plan
    spec = plan.spec
    if config.fusion_deprecated_flag and config.flavor == "new":
        plan.main_warnings.append(texts.FUSION_FLAG_DEPRECATED)

    chunk_default, bs_default = _default_chunk_and_bs(hw.memory_mib, config.tp_size)
    plan.chunked_prefill_size = config.chunked_prefill_size or chunk_default
    max_bs = config.cuda_graph_max_bs if config.cuda_graph_max_bs is not None else bs_default
    if (
        config.cuda_graph_max_bs is None
        and config.max_running_requests is not None
        and max_bs > config.max_running_requests
    ):
        max_bs = config.max_running_requests
    graph_reserved_bs = 0 if config.cuda_graph_disabled else max_bs
    plan.mem_fraction_static = (
        config.mem_fraction_static
        if config.mem_fraction_static is not None
        else _default_mem_fraction(
            hw.memory_mib,
            chunk=plan.chunked_prefill_size,
            tp=config.tp_size,
            graph_bs=graph_reserved_bs,
        )
    )
    if config.max_running_requests is not None:
        plan.max_running_requests = config.max_running_requests
    elif spec is not None:
        plan.max_running_requests = 48
    else:
        plan.max_running_requests = 0  # decided from the KV capacity below
    plan.context_len = config.context_length or model.context_len

    # -- distributed init: device ordinals, NCCL algorithm, communicators ----------------------
    tp = config.tp_size
    if tp * max(1, config.dp_size if not config.enable_dp_attention else 1) > hw.num_gpus:
        plan.failure = _scheduler_failure(
            "distributed",
            texts.SET_DEVICE,
            exception=f"torch.AcceleratorError: {texts.invalid_device_ordinal_message()}",
            summary="torch.AcceleratorError: CUDA error: invalid device ordinal",
        )
        return plan
    algo = _nccl_algorithm(config.nccl_algo, profile.features.nccl_algorithms)
    if algo is None and tp > 1:
        warn = texts.nccl_warn_no_algorithm(
            host=hw.hostname, pid=texts.PID_PLACEHOLDER, device=0, algo=str(config.nccl_algo)
        )
        plan.failure = _scheduler_failure(
            "distributed",
            texts.SCHEDULER_INIT
            + texts.TP_WORKER_INIT
            + texts.DISTRIBUTED_INIT
            + texts.PYNCCL_WARMUP,
            exception=f"RuntimeError: NCCL error: {texts.NCCL_ERROR_STRINGS['invalid_usage']}",
            pre_lines=(warn,),
        )
        return plan
    plan.nccl_algo, algo_factor = algo if algo is not None else ("Ring", 1.0)
    impl, impl_factor = "nccl", 1.0
    if tp > 1:
        if not config.disable_custom_all_reduce:
            if profile.features.custom_all_reduce:
                impl, impl_factor = "custom", profile.features.allreduce_factors.get("custom", 1.0)
            elif hw.interconnect == "pcie" and tp > 2:
                plan.rank_warnings.extend(texts.custom_allreduce_disabled_lines(flavor=plan.flavor))
        if config.torch_symm_mem:
            major = hw.compute_capability[0]
            if profile.features.torch_symm_mem and tp in (4, 6, 8):
                impl = "torch_symm_mem"
                impl_factor = profile.features.allreduce_factors.get("torch_symm_mem", impl_factor)
            elif config.flavor == "new" or major < 9:
                plan.rank_warnings.append(texts.symm_mem_unsupported_line(major))
            else:
                plan.failure = _scheduler_failure(
                    "distributed",
                    texts.SCHEDULER_INIT
                    + texts.TP_WORKER_INIT
                    + texts.DISTRIBUTED_INIT
                    + texts.SYMM_MEM_INIT_OLD,
                    exception=f"KeyError: {major}",
                )
                return plan
    plan.allreduce_impl, plan.allreduce_factor = impl, impl_factor * algo_factor

    # -- weights -------------------------------------------------------------------------------
    plan.pre_load_avail_gib = hw.total_gib - hw.startup_overhead_gib
    ep_extra = model.ep_weight_overhead_gib if config.ep_size > 1 else 0.0
    plan.weights_gib = model.weights_gib_total / tp + ep_extra
    if plan.weights_gib > plan.pre_load_avail_gib:
        plan.failure = _scheduler_failure(
            "load",
            texts.SCHEDULER_INIT + texts.TP_WORKER_INIT + texts.LOAD_MODEL,
            exception="torch.OutOfMemoryError: " + _oom(profile, tried_gib=1.75, free_gib=0.41),
        )
        return plan
    plan.post_load_avail_gib = plan.pre_load_avail_gib - plan.weights_gib
    avail = plan.post_load_avail_gib
    if spec is not None and spec.drafts_with_a_model:
        if spec.draft_model_path is None or (
            spec.draft_model_path == config.model_path and not model.builtin_mtp
        ):
            plan.draft_weights_gib = plan.weights_gib  # the whole target again
        else:
            plan.draft_weights_gib = profile.draft.weights_gib_total / tp
        if plan.draft_weights_gib > avail:
            plan.failure = _scheduler_failure(
                "draft_load",
                texts.SCHEDULER_INIT + texts.DRAFT_INIT + texts.LOAD_MODEL[1:],
                exception="torch.OutOfMemoryError: " + _oom(profile, tried_gib=1.75, free_gib=0.38),
            )
            return plan
        avail -= plan.draft_weights_gib

    # -- KV cache ------------------------------------------------------------------------------
    rest = avail - plan.pre_load_avail_gib * (1.0 - plan.mem_fraction_static)
    drafting = spec is not None and spec.drafts_with_a_model
    cell = model.kv_bytes_per_token + (profile.draft.kv_bytes_per_token if drafting else 0)
    tokens = int(rest * GIB // cell) if rest > 0 else 0
    if rest <= 0 and config.flavor == "new":  # 0.5.14+: the weights exceed the static budget
        message = texts.weights_leave_no_kv_message(
            plan.mem_fraction_static, available_gib=avail, pre_load_gib=plan.pre_load_avail_gib
        )
        plan.failure = _scheduler_failure(
            "memory_pool",
            texts.SCHEDULER_INIT + texts.MEMORY_POOL,
            exception="ValueError: " + message,
        )
        return plan
    if tokens <= 0:
        plan.failure = _scheduler_failure(
            "memory_pool",
            texts.SCHEDULER_INIT + texts.MEMORY_POOL,
            exception="RuntimeError: " + texts.not_enough_memory_message(plan.mem_fraction_static),
        )
        return plan
    plan.max_total_num_tokens = tokens
    plan.kv_gib = tokens * cell / GIB
    avail -= plan.kv_gib
    if plan.max_running_requests == 0:
        plan.max_running_requests = min(max(int(tokens / plan.context_len * 512), 2048), 4096)

    # -- communication workspaces (before capture) ---------------------------------------------
    if plan.failure is None and config.fusion_backend is not None and tp > 1:
        if not profile.features.flashinfer_allreduce_fusion:
            if config.flavor == "new":
                plan.failure = _scheduler_failure(
                    "workspace",
                    texts.SCHEDULER_INIT
                    + texts.CUDA_GRAPHS
                    + texts.TARGET_GRAPHS
                    + texts.FUSION_RESOLVE,
                    exception=f"ValueError: {texts.FUSION_REQUIRES_SM90}",
                )
                return plan
            plan.rank_warnings.append(
                texts.fusion_workspace_failed_line(texts.NO_SUPPORTED_ARCH_9_10)
            )
        else:
            plan.allreduce_impl = "flashinfer_fusion"
            plan.allreduce_factor = (
                profile.features.allreduce_factors.get("flashinfer_fusion", impl_factor)
                * algo_factor
            )
    if config.moe_a2a_backend == "flashinfer":
        if not profile.features.flashinfer_a2a or mem.a2a_workspace_gib > avail - 0.5:
            plan.failure = _scheduler_failure(
                "workspace",
                texts.SCHEDULER_INIT
                + texts.CUDA_GRAPHS
                + texts.TARGET_GRAPHS
                + texts.A2A_WORKSPACE,
                exception="torch.OutOfMemoryError: "
                + _oom(profile, tried_gib=mem.a2a_workspace_gib, free_gib=max(0.2, avail - 3.1)),
            )
            return plan
        avail -= mem.a2a_workspace_gib

    # -- CUDA graphs ---------------------------------------------------------------------------
    plan.graph_max_bs = 0 if config.cuda_graph_disabled else min(max_bs, plan.max_running_requests)
    plan.capture_bs = capture_batch_sizes(plan.graph_max_bs, speculative=spec is not None)
    adaptive_gib = 0.0
    if plan.adaptive is not None:
        plan.adaptive = _with_extra_states(plan.adaptive, plan, profile)
        adaptive_gib = sum(gib for _, _, gib in plan.adaptive.extra_states)
    if plan.graph_max_bs > 0:
        per_req = (spec.draft_tokens or 1) if spec is not None else 1
        graph = mem.graph_base_gib + mem.graph_per_token_gib * plan.graph_max_bs * per_req
        # An adaptive node also captures a runtime state per other candidate (init_states);
        # when those do not fit, the simulator fails it like the decode capture.
        if graph + adaptive_gib + mem.capture_workspace_gib > avail:
            free = max(0.05, avail - graph * 0.7)
            tried = min(mem.capture_workspace_gib, max(0.25, graph * 0.3 + 0.5))
            err = _oom(
                profile,
                tried_gib=tried,
                free_gib=min(free, tried * 0.6),
                private_pool_gib=graph * 0.7,  # graphs captured before the failing one
            )
            cause = texts.format_traceback(
                texts.DECODE_CAPTURE_INNER, f"torch.OutOfMemoryError: {err}"
            )
            plan.failure = _scheduler_failure(
                "capture",
                texts.SCHEDULER_INIT + texts.CUDA_GRAPHS + texts.DECODE_CAPTURE_OUTER,
                exception="Exception: " + texts.capture_failed_message(err, flavor=config.flavor),
                cause=cause,
            )
            return plan
        avail -= graph
        plan.graph_gib = graph
    if spec is not None and spec.drafts_with_a_model:
        # (an adaptive node may start at 0 steps, 0.5.14+: it verifies a trivial input)
        zero_start = plan.adaptive is not None and spec.steps == 0
        failure = None if zero_start else _draft_tree_failure(plan, spec, profile)
        if failure is not None:
            plan.failure = failure
            return plan
        if plan.graph_max_bs > 0:
            draft = (
                mem.draft_graph_per_token_gib
                * plan.graph_max_bs
                * ((spec.topk or 1) + (spec.draft_tokens or 1))
            )
            avail -= draft
            plan.graph_gib += draft
    avail -= adaptive_gib
    plan.graph_gib += adaptive_gib
    if _piecewise_on(config, profile):
        max_tokens = 2048 if model.mla else plan.chunked_prefill_size
        if config.context_length is not None:
            max_tokens = min(max_tokens, config.context_length)
        plan.piecewise = True
        plan.piecewise_tokens = piecewise_token_sizes(max_tokens)
        avail -= mem.piecewise_graph_gib
    plan.available_after_init_gib = avail
    return plan


def _piecewise_on(config: NodeConfig, profile: Profile) -> bool:
    """Whether SGLang 0.5.13 captures its piecewise (torch.compile) CUDA graph.

    ``_handle_piecewise_cuda_graph`` (server_args.py 0.5.13:1342-1411) turns it off for
    multimodal models, DP attention, an MoE A2A backend and the flags in
    ``NodeConfig.piecewise_off_flags``, unless ``--enforce-piecewise-cuda-graph``; later versions
    replaced it (0.5.23 has a "prefill CUDA graph" with its own rules, not simulated).
    """
    if config.flavor != "old":
        return False
    if config.enforce_piecewise:
        return True
    return not (
        profile.model.multimodal
        or config.enable_dp_attention
        or config.moe_a2a_backend != "none"
        or config.piecewise_off_flags
    )


def piecewise_token_sizes(max_tokens: int) -> list[int]:
    """0.5.13's piecewise capture sizes (``_generate_piecewise_cuda_graph_tokens``,
    server_args.py 0.5.13:1708-1726); the maximum is 2048 for MLA models, else the chunked
    prefill size (:1557-1564).

    Args:
        max_tokens: ``piecewise_cuda_graph_max_tokens``.

    Returns:
        Token counts, ascending.
    """
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1024 + 1, 64),
        *range(1280, 4096 + 1, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


def _with_extra_states(setup: AdaptiveSetup, plan: NodePlan, profile: Profile) -> AdaptiveSetup:
    """The runtime states ``AdaptiveController.init_states`` builds besides the initial one.

    Each other candidate gets a target-verify graph and draft graphs (a draft-decode graph only
    above one step, eagle_worker_v2.py 0.5.23:507) over the captured batch sizes whose slot can
    pick it (``cuda_graph_bs_for_step``); none when no slot can (0.5.23:1944-1950 then turns
    capture off for that state). Memory per state follows the profile's per-token graph costs.
    """
    mem = profile.memory
    graphs = plan.capture_bs if plan.graph_max_bs > 0 else None
    policy = setup.policy(graphs)
    states = []
    for steps in policy.candidate_steps:
        if steps == setup.initial_steps:
            continue
        pruned = policy.cuda_graph_bs_for_step(steps) or []
        gib = 0.0
        if pruned:
            top = max(pruned)
            gib = mem.graph_per_token_gib * top * (steps + 1)
            gib += mem.draft_graph_per_token_gib * top * (1 + steps + 1)
        states.append((steps, tuple(pruned), gib))
    return dataclasses.replace(setup, extra_states=tuple(states))


def _draft_tree_failure(plan: NodePlan, spec: SpecSettings, profile: Profile) -> Failure | None:
    """SGLang's failures for an impossible draft tree (topk/cat in organize_draft_results)."""
    del profile
    steps, topk, draft_tokens = spec.steps or 0, spec.topk or 1, spec.draft_tokens or 1
    if steps < 1:
        error, inner = f"RuntimeError: {texts.CAT_EMPTY}", texts.EAGLE_CAT
    elif draft_tokens - 1 > topk + (steps - 1) * topk * topk:
        error, inner = f"RuntimeError: {texts.TOPK_OUT_OF_RANGE}", texts.EAGLE_TOPK
    elif plan.config.sglang_version == "0.5.17" and topk > 1 and draft_tokens < steps + 1:
        # the first verify copies the steps + 1 accepted nodes into the draft tokens' slots
        # (0.5.17 only: other versions were not read for it)
        error = texts.compact_size_error(draft_tokens, steps + 1)
        return _scheduler_failure("warmup", texts.VERIFY_COMPACT, exception=error)
    else:
        return None
    if steps > 1 and plan.graph_max_bs > 0:
        cause = texts.format_traceback(texts.DRAFT_CAPTURE_INNER + inner, error)
        message = error.split(": ", 1)[1]
        return _scheduler_failure(
            "draft_capture",
            texts.SCHEDULER_INIT + texts.CUDA_GRAPHS + texts.DRAFT_CAPTURE_OUTER,
            exception="Exception: " + texts.capture_failed_message(message, flavor=plan.flavor),
            cause=cause,
        )
    return _scheduler_failure("warmup", texts.DECODE_STEP + inner, exception=error)
