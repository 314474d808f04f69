"""The search space as Optuna sees it, and one configuration as the server sees it.

This module owns two translations. `SearchSpace` turns the spec's parameters into an Optuna
define-by-run function (categorical, int/float ranges with step and log, `when:` conditions
evaluated in dependency order); it only calls the trial's `suggest_*` methods, so it needs no Optuna
import and pickles with the searcher. `build_command` turns one configuration into the exact server
command line and environment of docs/design.md, "Spec format" and "Server launch": `true` is a bare
`--flag`, `false`/`null` omit it, `env.NAME` keys go to the environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from spec_sweep.spec import ParamSpec, Scalar, SweepSpec

# Speculative algorithms that draft without a model (NGRAM looks tokens up in the context).
_NO_DRAFT_MODEL = frozenset({"NGRAM", "LOOKAHEAD"})

__all__ = [
    "Config",
    "SearchSpace",
    "ServerCommand",
    "baseline_config",
    "build_command",
    "config_key",
    "is_active",
    "node_fingerprint",
    "normalize_config",
    "ordered_keys",
    "redact",
    "render_value",
    "resolve_config",
    "secret_values",
]

Config = dict[str, Scalar]

_SECRET_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
_REDACTED = "***"


class _Trial(Protocol):
    def suggest_categorical(self, name: str, choices: list[Any]) -> Any: ...
    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int: ...
    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...


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
        if not any(_equal(config[dep], option) for option in options):
            return False
    return True


class SearchSpace:
    """An Optuna define-by-run function over a spec's parameters (picklable)."""

    def __init__(self, params: Mapping[str, ParamSpec]) -> None:
        """Keep the parameters in dependency order."""
        self._params = dict(params)
        self._order = ordered_keys(self._params)

    @property
    def keys(self) -> list[str]:
        """Parameter keys in the order they are suggested."""
        return list(self._order)

    def __call__(self, trial: _Trial) -> None:
        """Suggest every active parameter on `trial` (Ray Tune's define-by-run contract)."""
        self.sample(trial)

    def sample(self, trial: _Trial) -> Config:
        """Suggest every active parameter on `trial` and return the configuration."""
        config: Config = {}
        for key in self._order:
            param = self._params[key]
            if is_active(param, config):
                value = _suggest(trial, key, param)
                if isinstance(value, float):
                    value = float(f"{value:.10g}")  # 0.9099999999999999 -> 0.91
                config[key] = value
        return config


def _suggest(trial: _Trial, key: str, param: ParamSpec) -> Scalar:
    if param.choices is not None:
        return trial.suggest_categorical(key, list(param.choices))  # type: ignore[no-any-return]
    if param.int_range is not None:
        lo, hi = param.int_range
        return trial.suggest_int(key, lo, hi, step=int(param.step or 1), log=param.log)
    assert param.float_range is not None
    lo_f, hi_f = param.float_range
    return trial.suggest_float(key, lo_f, hi_f, step=param.step, log=param.log)


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
    """Keep only the parameters that are active in `config`, in dependency order."""
    out: Config = {}
    params = spec.params
    for key in ordered_keys(params):
        if key in config and is_active(params[key], out):
            value = config[key]
            if isinstance(value, float) and params[key].kind == "float":
                value = float(f"{value:.10g}")  # 0.9099999999999999 -> 0.91
            out[key] = value
    return out


def config_key(config: Mapping[str, Any]) -> str:
    """A canonical string for a configuration (equal configurations give equal keys)."""
    return json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=str)


def render_value(value: Any) -> str:
    """How a value is written on a command line or in the environment."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.10g}"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _flag_tokens(key: str, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{key}"]
    if isinstance(value, list):
        return [f"--{key}", *(render_value(v) for v in value)]
    return [f"--{key}", render_value(value)]


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """A server command line plus the environment variables it adds."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """The command as one pasteable shell line, environment first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        line = shlex.join(self.argv)
        return f"{env} {line}" if env else line


def build_command(
    spec: SweepSpec,
    config: Mapping[str, Any],
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    simulate: bool = False,
) -> ServerCommand:
    """The server command of one trial (docs/design.md, "Server launch").

    Args:
        spec: The sweep.
        config: The trial's configuration (parameter key -> value).
        port: Port to serve on; `None` leaves `--host/--port` out (a pasteable command that
            uses SGLang's defaults).
        host: Address to bind.
        simulate: Launch the simulated node instead of the spec's backend.

    Returns:
        argv (launch prefix first) and the environment the trial adds.
    """
    node = spec.node
    argv: list[str] = [*node.launch_prefix(simulate=simulate), "--model-path", node.model]
    if port is not None:
        argv += ["--host", host, "--port", str(port)]
    sim = simulate or node.backend.value == "sim"
    if sim:
        if node.sim_profile:
            argv += ["--sim-profile", node.sim_profile]
        argv += ["--sim-sglang-version", node.sglang_version]
    for key, value in node.server_args.items():
        argv += _flag_tokens(key, value)
    env = {k: render_value(v) for k, v in node.env.items() if v is not None}
    flags = {k: v for k, v in config.items() if not k.startswith("env.")}
    algorithm = flags.get("speculative-algorithm", node.server_args.get("speculative-algorithm"))
    if node.draft_model and algorithm and str(algorithm).upper() not in _NO_DRAFT_MODEL:
        argv += ["--speculative-draft-model-path", node.draft_model]
    for key, value in flags.items():
        argv += _flag_tokens(key, value)
    for key, value in config.items():
        if key.startswith("env.") and value is not None and value is not False:
            env[key[4:]] = render_value(value)
    return ServerCommand(argv=tuple(argv), env=env)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def secret_values(spec: SweepSpec) -> list[str]:
    """Values of env vars and server args whose names look secret."""
    values = [str(v) for k, v in spec.node.env.items() if _SECRET_RE.search(k) and v]
    values += [
        str(v)
        for k, v in spec.node.server_args.items()
        if _SECRET_RE.search(k) and isinstance(v, str | int | float) and str(v)
    ]
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value in `text` with `***`."""
    for secret in secrets:
        text = text.replace(secret, _REDACTED)
    return text


def node_fingerprint(spec: SweepSpec, *, hardware: str) -> str:
    """What makes two measurements of one configuration comparable, as a short hash.

    Model, draft model, hardware (GPU model and count, or the simulated profile), SGLang
    version, launch command, fixed server arguments and environment, and the workload.
    """
    node = spec.node
    identity = {
        "model": node.model,
        "draft_model": node.draft_model,
        "hardware": hardware,
        "sglang_version": node.sglang_version,
        "launch": list(node.launch_prefix(simulate=hardware.startswith("sim:"))),
        "server_args": node.server_args,
        "env": {k: render_value(v) for k, v in node.env.items()},
        "workload": spec.workload.model_dump(mode="json"),
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]
