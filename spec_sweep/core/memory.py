"""SGLang's own memory rule before a boot: the low-end OOMs that are certain (pure).

Every SGLang version spec_sweep supports sizes the KV cache the same way (0.5.13
`model_runner_kv_cache_mixin.py:65-78` with `pool_configurator.py:53`, 0.5.17
`mem_cache/kv_cache_configurator.py:1615-1657`, 0.5.23 `:3000-3060`): with `pre` the GPU memory
free before the weights load (least over ranks) and `post` what is free once they (and a
speculative draft) are loaded,

    KV pool = post - (1 - mem_fraction_static) x pre

and a pool of zero or less fails the boot ("Not enough memory. Please try to increase
--mem-fraction-static." in 0.5.13; "Loaded weights leave no GPU memory for the KV cache under
--mem-fraction-static=X" from 0.5.14). Mamba caches and the multimodal reserve only take more.
Since `post <= pre - W`, where W is what the target's weights take on a GPU, the boot fails
for certain when `mem_fraction_static x pre <= W`: the fraction cannot even hold the weights.

Where the two facts come from: a trial's own log ("Load weight begin. avail mem=P GB" and
"Load weight end. ... mem usage=W GB", `node.boot_phases`, recorded as the metrics
`gpu_avail_pre_load_gib` and `weights_gib`), of any earlier trial of the sweep, booted or
failed, that loads the same weights: its configuration may differ only in knobs that cannot
make the target's weights smaller on a GPU or leave more memory free before they load
(`WEIGHT_NEUTRAL`). Every sweep boots its baseline first, so from the second trial on the
facts are known. Margins: `pre` is taken as the most any such trial saw plus `PRE_MARGIN` (the
real H200 logs show the same 139.13 GB on every boot of two versions), W as the least minus the
log's rounding. A checkpoint's size on disk is not used: quantization on load, layers a server
skips (DeepSeek's MTP layer) and tensors replicated across ranks make it no certain bound of W.
The high end (CUDA-graph capture running out of the rest) depends on allocator behaviour SGLang
does not compute ahead, so it is never predicted. Standard library and the spec only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spec_sweep.core.config import same_value
from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC
from spec_sweep.spec import SweepSpec

__all__ = [
    "PRE_MARGIN",
    "WEIGHT_NEUTRAL",
    "MemoryFacts",
    "Observation",
    "facts_for",
    "observations",
    "predict_oom",
    "same_weights",
]

#: Relative margin on the memory free before the weights load (another boot may see more).
PRE_MARGIN = 0.02
#: The logs print GB with two decimals.
_ROUNDING = 0.01
_MEM = "mem-fraction-static"
#: Knobs that cannot shrink the target's weights on a GPU nor free memory before they load:
#: the static fraction itself, CUDA-graph sizes and backends, scheduling and batching limits,
#: the attention, sampling and all-reduce implementations (their buffers only take memory),
#: speculative decoding (the draft's weights are loaded on top: "If using speculative
#: decoding, draft weights are now counted"), NCCL settings. Anything else (tensor, pipeline,
#: data or expert parallel sizes, quantization, dtype, load format, offloading) must match.
WEIGHT_NEUTRAL: frozenset[str] = frozenset(
    {
        _MEM,
        "chunked-prefill-size",
        "max-running-requests",
        "max-prefill-tokens",
        "max-total-tokens",
        "schedule-policy",
        "schedule-conservativeness",
        "page-size",
        "attention-backend",
        "decode-attention-backend",
        "prefill-attention-backend",
        "sampling-backend",
        "kv-cache-dtype",
        "disable-custom-all-reduce",
        "enable-torch-symm-mem",
        "enable-flashinfer-allreduce-fusion",
        "flashinfer-allreduce-fusion-backend",
        "moe-a2a-backend",
        "disable-radix-cache",
        "enable-mixed-chunk",
        "num-continuous-decode-steps",
        "disable-overlap-schedule",
    }
)
_NEUTRAL_PREFIXES = ("cuda-graph-", "disable-cuda-graph", "disable-piecewise-cuda-graph",
                     "speculative-", "env.NCCL_")  # fmt: skip


def _neutral(key: str) -> bool:
    return key in WEIGHT_NEUTRAL or key.startswith(_NEUTRAL_PREFIXES)


@dataclass(frozen=True)
class Observation:
    """What one earlier trial's log said about memory: its configuration and the two facts."""

    trial_id: str
    config: Mapping[str, Any]
    avail_gib: float
    weights_gib: float


@dataclass(frozen=True)
class MemoryFacts:
    """The memory facts a prediction uses, and where they came from.

    Attributes:
        pre_gib: An upper bound of the GPU memory free before the target's weights load.
        weights_gib: A lower bound of what the target's weights take on a GPU.
        source: The trials whose logs said so.
    """

    pre_gib: float
    weights_gib: float
    source: str


def observations(records: Iterable[Any]) -> list[Observation]:
    """The memory facts of finished records that logged them (objects with `trial_id`,
    `config` and `metrics`, such as `TrialRecord`s)."""
    out = []
    for r in records:
        avail, weights = r.metrics.get(AVAIL_METRIC), r.metrics.get(WEIGHTS_METRIC)
        if avail is not None and weights is not None and avail > 0 and weights > 0:
            out.append(Observation(r.trial_id, dict(r.config), float(avail), float(weights)))
    return out


def same_weights(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two configurations load the same target weights on a GPU."""
    keys = (set(a) | set(b)) - {k for k in set(a) | set(b) if _neutral(k)}
    return all(same_value(a.get(k), b.get(k)) for k in keys)


def facts_for(config: Mapping[str, Any], seen: Iterable[Observation]) -> MemoryFacts | None:
    """The facts that hold for `config`: from the trials that load the same weights."""
    same = [o for o in seen if same_weights(o.config, config)]
    if not same:
        return None
    ids = sorted({o.trial_id for o in same})
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return MemoryFacts(
        pre_gib=max(o.avail_gib for o in same) * (1 + PRE_MARGIN),
        weights_gib=min(o.weights_gib for o in same) - _ROUNDING,
        source=f"the weight load logged by {shown}",
    )


def _fraction(spec: SweepSpec, config: Mapping[str, Any]) -> float | None:
    value = config.get(_MEM, spec.node.server_args.get(_MEM))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # SGLang picks its own default from the GPU: nothing to predict
    return float(value)


def predict_oom(
    spec: SweepSpec, config: Mapping[str, Any], seen: Iterable[Observation]
) -> str | None:
    """Why `config` cannot boot by SGLang's memory rule, or None when it may boot.

    Args:
        spec: The sweep (its fixed server arguments may set the fraction).
        config: The configuration about to be launched.
        seen: What earlier trials' logs said about memory (`observations`).

    Returns:
        One line saying why the boot would fail, with the facts and where they came from;
        None unless the failure is certain.
    """
    fraction = _fraction(spec, config)
    if fraction is None:
        return None
    facts = facts_for(config, seen)
    if facts is None or facts.weights_gib <= 0:
        return None
    if fraction * facts.pre_gib > facts.weights_gib:
        return None
    return (
        f"predicted oom without a boot: --mem-fraction-static {fraction:g} x at most "
        f"{facts.pre_gib:.2f} GB free before loading <= the target's weights "
        f"{facts.weights_gib:.2f} GB per GPU ({facts.source}): SGLang's memory rule leaves the "
        "KV cache no memory ('Not enough memory' / 'Loaded weights leave no GPU memory for "
        "the KV cache')"
    )
