"""How a trial and a configuration are named wherever a person reads them.

This module owns the short texts: `config_summary` (the flags and environment a configuration
sets, for the terminal tables and the report), `run_name` (a trial's MLflow run name: its id
and what differs from the baseline, abbreviated: `t0010 cgbs=64 mem=0.88`) and `shown_value`
(a metric with the half width of its 95% within-boot interval: `1234 ±0.8%`). Standard library
and the core only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spec_sweep.core.adaptive_rules import ADAPTIVE_CONFIG, describe_slots
from spec_sweep.core.config import same_value
from spec_sweep.core.names import CI_HIGH, CI_LOW

__all__ = ["config_summary", "run_name", "shown_value"]


def config_summary(config: Mapping[str, Any], *, width: int = 60) -> str:
    """A short one-line description of a configuration (flags set, env vars)."""
    parts = []
    for key, value in config.items():
        if value is None or value is False:
            continue
        if key == ADAPTIVE_CONFIG:  # the config file's contents, read as its slots
            parts.append(describe_slots(str(value)).replace(" ", "/"))
            continue
        name = key.removeprefix("speculative-").removeprefix("env.")
        parts.append(name if value is True else f"{name}={value}")
    text = " ".join(parts) or "(defaults)"
    return text if len(text) <= width else text[: width - 1] + "…"


def shown_value(metrics: Mapping[str, Any], metric: str) -> str:
    """`1234 ±0.8%`: a metric with the half width of its 95% within-boot interval, if known."""
    value = metrics.get(metric)
    if not isinstance(value, int | float):
        return ""
    lo, hi = metrics.get(metric + CI_LOW), metrics.get(metric + CI_HIGH)
    if isinstance(lo, int | float) and isinstance(hi, int | float) and value > 0:
        return f"{value:.4g} ±{(hi - lo) / 2 / value:.1%}"
    return f"{value:.4g}"


# Short names of the parameters the shipped search spaces use: "" puts the value alone
# (`EAGLE3`), a name ending in a letter glues the value to it (`s3`), one ending in "=" reads
# `cgbs=64`. A boolean flag reads as its name when on and `no-<name>` when off.
_SHORT = {
    "speculative-algorithm": "",
    "speculative-draft-model-path": "draft=",
    "speculative-num-steps": "s",
    "speculative-eagle-topk": "k",
    "speculative-num-draft-tokens": "d",
    "speculative-adaptive": "adaptive",
    "cuda-graph-max-bs": "cgbs=",
    "cuda-graph-max-bs-decode": "cgbs=",
    "cuda-graph-max-bs-prefill": "cgbs-prefill=",
    "mem-fraction-static": "mem=",
    "ep-size": "ep=",
    "tp-size": "tp=",
    "dp-size": "dp=",
    "moe-a2a-backend": "a2a=",
    "env.NCCL_ALGO": "nccl=",
    "env.NCCL_PROTO": "nccl-proto=",
    "disable-custom-all-reduce": "custom-ar",
    "enable-flashinfer-allreduce-fusion": "fi-ar-fusion",
    "enable-torch-symm-mem": "symm-mem",
}
_NULL_SHORT = {"speculative-algorithm": "no-spec"}


def _short_key(key: str) -> str:
    if key in _SHORT:
        return _SHORT[key]
    name = key.removeprefix("env.").lower().replace("_", "-")
    for prefix in ("enable-", "disable-"):
        name = name.removeprefix(prefix)
    name = name.replace("speculative-", "spec-")
    if len(name) > 14 and name.count("-") >= 2:
        name = "".join(part[0] for part in name.split("-") if part)
    return name if isinstance(_default_bool(key), bool) else f"{name}="


def _default_bool(key: str) -> bool | None:
    """For `enable-x`/`disable-x` flags: the value that turns the feature on."""
    if key.startswith("enable-"):
        return True
    if key.startswith("disable-"):
        return False
    return None


def _short_item(key: str, value: Any) -> str:
    if key == ADAPTIVE_CONFIG:
        return describe_slots(str(value)).replace(" ", "/")
    short = _short_key(key)
    if value is None:
        return _NULL_SHORT.get(key, f"{short.rstrip('=')}=default")
    if isinstance(value, bool):
        on_value = _default_bool(key)
        on = value if on_value is None else value is on_value
        name = short.rstrip("=")
        return name if on else f"no-{name}"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if key == "speculative-draft-model-path":
        text = text.rstrip("/").rsplit("/", 1)[-1]  # a draft model by its last path part
    return f"{short}{text}"


def run_name(
    trial_id: str,
    config: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    *,
    attempt: int = 1,
) -> str:
    """A trial's run name: its id and what differs from the baseline, in short.

    `t0010 cgbs=64 mem=0.88`, `t0008 EAGLE3 s3 k1 d4`, `t0000 baseline`. A parameter the baseline
    does not set (the speculative knobs of a non-speculative baseline) counts as different. The
    name depends only on the trial id, its configuration and the baseline, so a resumed sweep
    names a trial as before; a second attempt of a trial adds `#2`.
    """
    if baseline is None:
        parts = [_short_item(k, v) for k, v in config.items()]
    else:
        parts = [
            _short_item(k, v)
            for k, v in config.items()
            if k not in baseline or not same_value(baseline[k], v)
        ]
    body = " ".join(parts) if parts else "baseline"
    suffix = f" #{attempt}" if attempt > 1 else ""
    return f"{trial_id} {body}"[: 250 - len(suffix)] + suffix
