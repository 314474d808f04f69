"""A configuration: which values it holds, when two are the same, and the baseline's.

This module owns configuration identity: `Config` (parameter key -> value, active parameters
only, in dependency order), `config_key` / `config_hash` (equal configurations, equal keys),
`same_value` (two values the same to the letter: `True` is not `1`, `1` is not `1.0`), the
dependency order of `when:` conditions (`ordered_keys`, `is_active`), completing a
configuration from given values (`resolve_config`, `baseline_config`), dropping what is
inactive (`normalize_config`), what differs from the baseline (`changed_keys`) and how a value
is written on a command line (`render_value`). Standard library and the spec only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from spec_sweep.core.adaptive_rules import ADAPTIVE, ADAPTIVE_CONFIG
from spec_sweep.spec import ParamSpec, Scalar, SweepSpec, same_scalar

__all__ = [
    "Config",
    "baseline_config",
    "changed_keys",
    "config_hash",
    "config_key",
    "is_active",
    "normalize_config",
    "ordered_keys",
    "render_value",
    "resolve_config",
    "same_value",
]

Config = dict[str, Scalar]


def config_key(config: Mapping[str, Any]) -> str:
    """A canonical string for a configuration (equal configurations give equal keys)."""
    return json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=str)


def config_hash(config: Mapping[str, Any]) -> str:
    """A short stable hash of a configuration (`config_key`'s)."""
    return hashlib.sha1(config_key(config).encode()).hexdigest()[:16]


def same_value(a: Any, b: Any) -> bool:
    """Whether two parameter values are the same to the letter, as `config_key` tells them.

    `True` is not `1` and `1` is not `1.0` (a `when:` condition, which reads values as YAML
    does, uses the spec's `same_scalar` instead).
    """
    return type(a) is type(b) and bool(a == b)


def changed_keys(config: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two configurations (a key one lacks is None there)."""
    keys = sorted(set(config) | set(base))
    return [k for k in keys if not same_value(config.get(k), base.get(k))]


def ordered_keys(params: Mapping[str, ParamSpec]) -> list[str]:
    """Parameter keys with every `when:` dependency before its dependents (else spec order)."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(key: str) -> None:
        if key in seen:
            return
        seen.add(key)
        for dep in params[key].when:
            if dep in params:
                visit(dep)
        order.append(key)

    for key in params:
        visit(key)
    return order


def is_active(param: ParamSpec, config: Mapping[str, Scalar]) -> bool:
    """Whether every `when:` condition of `param` holds in `config` (built in dependency order)."""
    for dep, wanted in param.when.items():
        if dep not in config:
            return False
        options = wanted if isinstance(wanted, tuple) else (wanted,)
        if not any(same_scalar(config[dep], option) for option in options):
            return False
    return True


def baseline_config(spec: SweepSpec) -> Config:
    """The baseline configuration: `baseline:` values, else each parameter's default.

    Raises:
        ValueError: when an active parameter has no baseline value and no default.
    """
    return resolve_config(spec, spec.baseline, what="baseline")


def resolve_config(
    spec: SweepSpec,
    values: Mapping[str, Scalar],
    *,
    what: str,
    fill: Callable[[ParamSpec], Scalar] | None = None,
) -> Config:
    """A complete configuration from some given values, in dependency order.

    Each active parameter takes the given value, else its `default:`, else `null` when its
    choices offer it (flag omitted: SGLang's own default).

    Args:
        spec: The sweep.
        values: Given parameter values.
        what: Where the values come from, for messages ("baseline", "--set").
        fill: Value for an active parameter that has none of the above (the neighbour steps
            of a search); with it, given values of inactive parameters are dropped.

    Raises:
        ValueError: without `fill`: an active parameter has no value, or a value was given
            for a parameter that is inactive in the resulting configuration.
    """
    config: Config = {}
    params = spec.params
    for key in ordered_keys(params):
        param = params[key]
        if not is_active(param, config):
            continue
        if key in values:
            config[key] = values[key]
        elif "default" in param.model_fields_set:
            config[key] = param.default
        elif param.choices is not None and None in param.choices:
            config[key] = None
        elif fill is not None:
            config[key] = fill(param)
        else:
            raise ValueError(
                f"no value for {key!r}, which is active in the {what}: give it a value "
                f"({what} '{key}: <value>') or give the parameter a 'default'"
            )
    unused = [key for key in values if key not in config]
    if unused and fill is None:
        key = unused[0]
        conditions = ", ".join(f"{d}={v!r}" for d, v in params[key].when.items())
        raise ValueError(
            f"{key!r} is inactive in the {what} (it needs {conditions}): drop it or set "
            "what it depends on"
        )
    return config


def normalize_config(spec: SweepSpec, config: Mapping[str, Any]) -> Config:
    """Keep only the parameters that are active in `config`, in dependency order.

    Adaptive speculative decoding's keys are kept even where they are not parameters of the
    space: spec_sweep sets them itself on the configuration it builds after the search
    (`core.adaptive`): `speculative-adaptive` when on, and its config's text with it.
    """
    out: Config = {}
    params = spec.params
    for key in ordered_keys(params):
        if key in config and is_active(params[key], out):
            value = config[key]
            if isinstance(value, float) and params[key].kind == "float":
                value = float(f"{value:.10g}")  # 0.9099999999999999 -> 0.91
            out[key] = value
    if config.get(ADAPTIVE) is True and ADAPTIVE not in params:
        out[ADAPTIVE] = True
    text = config.get(ADAPTIVE_CONFIG)
    if out.get(ADAPTIVE) is True and isinstance(text, str) and text:
        out[ADAPTIVE_CONFIG] = text
    return out


def render_value(value: Any) -> str:
    """How a value is written on a command line or in the environment."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
