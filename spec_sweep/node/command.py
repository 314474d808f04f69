"""A trial's server command: which program, which flags, which environment.

This module owns turning one configuration into the exact server command line and environment
of docs/design.md, "Server launch" (`build_command`: `true` is a bare `--flag`, `false`/`null`
omit it, `env.NAME` keys go to the environment), and the one decision of what a trial launches
(`Launch`, from `--simulate` and the spec's `node.backend`): the node's own server, or the
simulated node, which takes the hardware profile and SGLang version it imitates and touches no
GPU. It also owns `node_fingerprint`, what makes two measurements of one configuration
comparable (reuse across sweeps).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.core.adaptive import adaptive_text
from spec_sweep.core.adaptive_rules import ADAPTIVE_CONFIG, CONFIG_FILE
from spec_sweep.core.config import render_value
from spec_sweep.spec import DRAFT_PATH, NO_DRAFT_MODEL, Backend, SweepSpec

__all__ = [
    "Launch",
    "ServerCommand",
    "build_command",
    "draft_model",
    "launch_for",
    "node_fingerprint",
]


@dataclass(frozen=True, slots=True)
class Launch:
    """What a trial launches, decided once (`launch_for`).

    Attributes:
        prefix: The command prefix (`python -m sglang.launch_server`, `node.launch`, or the
            simulated node's `python -m spec_sweep.sim`).
        simulator: The server is the simulated node: it is told the hardware profile and the
            SGLang version it imitates, and no GPU is waited for or watched.
    """

    prefix: tuple[str, ...]
    simulator: bool

    def uses_gpus(self, spec: SweepSpec) -> bool:
        """Whether a trial waits for the node's GPUs and samples their memory."""
        return spec.node.gpus > 0 and not self.simulator


def launch_for(spec: SweepSpec, *, simulate: bool) -> Launch:
    """What a trial of `spec` launches: the simulated node with `--simulate` (or when the
    spec's node is the simulator, `node.backend: sim`), else the node's own server."""
    return Launch(
        prefix=spec.node.launch_prefix(simulate=simulate),
        simulator=simulate or spec.node.backend is Backend.SIM,
    )


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


def _flag_tokens(key: str, value: Any) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{key}"]
    if isinstance(value, list):
        return [f"--{key}", *(render_value(v) for v in value)]
    return [f"--{key}", render_value(value)]


def draft_model(spec: SweepSpec, config: Mapping[str, Any]) -> str | None:
    """The draft model a trial of `config` loads, or None when it runs none.

    A draft model runs when the spec names one (`node.draft_model`) and the configuration's
    speculative algorithm (or the fixed one of `node.server_args`) takes one (not NGRAM or
    LOOKAHEAD): the searched `speculative-draft-model-path` when node.draft_model lists
    several, else the first.
    """
    node = spec.node
    algorithm = config.get("speculative-algorithm", node.server_args.get("speculative-algorithm"))
    if not (node.draft_models and algorithm and str(algorithm).upper() not in NO_DRAFT_MODEL):
        return None
    searched = config.get(DRAFT_PATH)
    return searched if isinstance(searched, str) else node.draft_models[0]


def build_command(
    spec: SweepSpec,
    config: Mapping[str, Any],
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    simulate: bool = False,
    adaptive_path: str | None = None,
) -> ServerCommand:
    """The server command of one trial (docs/design.md, "Server launch").

    Args:
        spec: The sweep.
        config: The trial's configuration (parameter key -> value).
        port: Port to serve on; `None` leaves `--host/--port` out (a pasteable command that
            uses SGLang's defaults).
        host: Address to bind.
        simulate: Launch the simulated node instead of the spec's backend (`launch_for`).
        adaptive_path: Where the trial's adaptive config file is written (SGLang takes a path,
            never the JSON itself); default `adaptive-config.json`, for a pasteable command.

    Returns:
        argv (launch prefix first) and the environment the trial adds.
    """
    node = spec.node
    launch = launch_for(spec, simulate=simulate)
    argv: list[str] = [*launch.prefix, "--model-path", node.model]
    if port is not None:
        argv += ["--host", host, "--port", str(port)]
    if launch.simulator:
        if node.sim_profile:
            argv += ["--sim-profile", node.sim_profile]
        argv += ["--sim-sglang-version", node.sglang_version]
    for key, value in node.server_args.items():
        argv += _flag_tokens(key, value)
    env = {k: render_value(v) for k, v in node.env.items() if v is not None}
    flags = {k: v for k, v in config.items() if not k.startswith("env.")}
    flags.pop(DRAFT_PATH, None)
    draft = draft_model(spec, config)
    if draft is not None:
        argv += [f"--{DRAFT_PATH}", draft]
    for key, value in flags.items():
        if key != ADAPTIVE_CONFIG:
            argv += _flag_tokens(key, value)
    if adaptive_text(spec, config) is not None:
        argv += [f"--{ADAPTIVE_CONFIG}", adaptive_path or CONFIG_FILE]
    for key, value in config.items():
        if key.startswith("env.") and value is not None and value is not False:
            env[key[4:]] = render_value(value)
    return ServerCommand(argv=tuple(argv), env=env)


def node_fingerprint(spec: SweepSpec, *, hardware: str, simulate: bool) -> str:
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
        "launch": list(launch_for(spec, simulate=simulate).prefix),
        "server_args": node.server_args,
        "env": {k: render_value(v) for k, v in node.env.items()},
        # The mix weighs levels in the judgement; it changes no measurement.
        "workload": spec.workload.model_dump(mode="json", exclude={"mix"}),
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]
