"""Command line of the simulated node: SGLang's ``launch_server`` flags plus the ``--sim-*`` ones.

This module owns parsing: the SGLang flags are parsed by the parser rebuilt from the SGLang flag
manifest of the chosen version (:mod:`spec_sweep.manifest`), so an unknown flag, a bad value or a
value outside a flag's choices fails exactly as SGLang's argparse does (usage, ``error: ...``,
exit status 2); the simulator's own flags are added to that parser. Environment fallbacks
(``SPEC_SWEEP_SIM_*``) and ``NCCL_ALGO`` are read from the mapping the caller passes in. The
result is a :class:`SimOptions` (how to run the simulator) and a
:class:`~spec_sweep.sim.model.NodeConfig` (what the server was asked to be).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.manifest import FlagManifest, ManifestError, load_manifest
from spec_sweep.sim.model import AdaptiveRequest, NodeConfig, SpecSettings
from spec_sweep.sim.texts import Flavor

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_SGLANG_VERSION",
    "DEFAULT_TIME_SCALE",
    "FAULT_KINDS",
    "Faults",
    "SimOptions",
    "adapt_args",
    "flavor_of",
    "parse_command_line",
]

DEFAULT_PROFILE = "rtx-pro-6000-pcie-x8"
DEFAULT_SGLANG_VERSION = "0.5.23"
DEFAULT_TIME_SCALE = 0.004
"""Boot and capture seconds are multiplied by this: a 5-minute real boot takes about 1.2 s."""

FAULT_KINDS = (
    "hang-at-boot",
    "crash-at-boot",
    "worker-dies",
    "nccl-error",
    "hang-after=N",
    "request-error",
    "ignore-sigterm",
    "slow-boot=SECONDS",
    "missing-module=NAME",
)
_PROG = "python -m spec_sweep.sim"


@dataclass(frozen=True, slots=True)
class Faults:
    """Injected faults (``--sim-fault``), for what configurations cannot produce.

    Attributes:
        hang_at_boot: Never become ready; keep running silently.
        crash_at_boot: Print a few lines, then die by SIGSEGV (exit -11 / 139).
        worker_dies: A worker prints a fatal C++ error and aborts; the main process keeps running
            and never becomes ready.
        nccl_error: An NCCL error during distributed init, then SGLang's exit (-9).
        hang_after: Serve this many generate requests, then stop answering (incl. health).
        request_error: ``/generate`` answers with SGLang's error shape and an HTTP error status.
        ignore_sigterm: Ignore SIGTERM (a launcher must SIGKILL).
        slow_boot_s: Extra real seconds of boot.
        missing_module: Die at import time with ``ModuleNotFoundError: No module named 'NAME'``
            (an install that lacks a package SGLang imports: no configuration can run).
    """

    hang_at_boot: bool = False
    crash_at_boot: bool = False
    worker_dies: bool = False
    nccl_error: bool = False
    hang_after: int | None = None
    request_error: bool = False
    ignore_sigterm: bool = False
    slow_boot_s: float = 0.0
    missing_module: str | None = None


@dataclass(frozen=True)
class SimOptions:
    """How to run the simulator.

    Attributes:
        profile: Profile name or YAML path.
        time_scale: Factor on boot and capture seconds (0: as fast as possible).
        speed: Factor on the node's speed: every prefill and decode step takes 1/speed of the
            profile's time, so throughputs read speed times the profile's (1: the profile).
        sglang_version: SGLang version whose flag manifest parses the command line.
        flavor: SGLang flavor of that version.
        seed: Seed of every random choice (``--random-seed`` wins over ``--sim-seed``).
        faults: Injected faults.
        host: HTTP host.
        port: HTTP port.
        served_model_name: ``--served-model-name`` (else the model path).
        skip_server_warmup: ``--skip-server-warmup``.
        incremental_streaming_output: ``--incremental-streaming-output``.
        server_args: Every parsed SGLang flag by dest (for ``/server_info`` and the log).
        corrupt_output: A flag named by ``--sim-corrupt-output`` is set: greedy outputs go
            wrong after two tokens (a kernel bug that changes what the model says).
    """

    profile: str
    time_scale: float
    sglang_version: str
    flavor: Flavor
    seed: int
    faults: Faults
    host: str
    port: int
    served_model_name: str | None = None
    skip_server_warmup: bool = False
    incremental_streaming_output: bool = False
    server_args: dict[str, Any] = field(default_factory=dict)
    corrupt_output: bool = False
    speed: float = 1.0


def flavor_of(manifest: FlagManifest) -> Flavor:
    """``"new"`` when the manifest has ``--cuda-graph-max-bs-decode`` (0.5.14+), else ``"old"``."""
    return "new" if manifest.lookup("cuda-graph-max-bs-decode") is not None else "old"


def adapt_args(args: Sequence[str], manifest: FlagManifest) -> list[str]:
    """Respell the CUDA-graph max-batch flag for a manifest's SGLang version.

    ``--cuda-graph-max-bs`` (0.5.13 and earlier) and ``--cuda-graph-max-bs-decode`` (later)
    mean the same; the reference configurations of the profiles use the write-up's spelling.

    Args:
        args: Command-line arguments.
        manifest: The flag manifest of the target version.

    Returns:
        The arguments with that flag renamed where the version needs it.
    """
    new = manifest.lookup("cuda-graph-max-bs-decode") is not None
    old_name, new_name = "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"
    out = []
    for arg in args:
        name, sep, value = arg.partition("=")
        if new and name == old_name:
            out.append(new_name + sep + value)
        elif not new and name == new_name:
            out.append(old_name + sep + value)
        else:
            out.append(arg)
    return out


def _parse_faults(values: Sequence[str], parser: argparse.ArgumentParser) -> Faults:
    kwargs: dict[str, Any] = {}
    for raw in values:
        for item in (part.strip() for part in raw.split(",")):
            if not item:
                continue
            kind, _, arg = item.partition("=")
            try:
                if kind == "hang-after":
                    kwargs["hang_after"] = max(0, int(arg))
                elif kind == "slow-boot":
                    kwargs["slow_boot_s"] = max(0.0, float(arg))
                elif kind == "missing-module" and arg:
                    kwargs["missing_module"] = arg
                elif (
                    kind
                    in (
                        "hang-at-boot",
                        "crash-at-boot",
                        "worker-dies",
                        "nccl-error",
                        "request-error",
                        "ignore-sigterm",
                    )
                    and not arg
                ):
                    kwargs[kind.replace("-", "_")] = True
                else:
                    raise ValueError(kind)
            except ValueError:
                parser.error(
                    f"argument --sim-fault: invalid choice: {item!r} "
                    f"(choose from {', '.join(FAULT_KINDS)})"
                )
    return Faults(**kwargs)


def _env_int(environ: Mapping[str, str], key: str) -> int | None:
    value = environ.get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _env_float(environ: Mapping[str, str], key: str, default: float) -> float:
    raw = environ.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        print(f"{_PROG}: error: {key}={raw!r} is not a number", file=sys.stderr)
        raise SystemExit(2) from None


def _add_sim_flags(environ: Mapping[str, str]) -> Any:
    def extra(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("simulator (spec_sweep)")
        group.add_argument(
            "--sim-profile",
            default=environ.get("SPEC_SWEEP_SIM_PROFILE") or DEFAULT_PROFILE,
            help="hardware profile: built-in name or YAML path [SPEC_SWEEP_SIM_PROFILE]",
        )
        group.add_argument(
            "--sim-time-scale",
            type=float,
            default=_env_float(environ, "SPEC_SWEEP_SIM_TIME_SCALE", DEFAULT_TIME_SCALE),
            help="factor on boot/capture seconds; 0 = as fast as possible "
            "[SPEC_SWEEP_SIM_TIME_SCALE]",
        )
        group.add_argument(
            "--sim-speed",
            type=float,
            default=_env_float(environ, "SPEC_SWEEP_SIM_SPEED", 1.0),
            help="factor on the node's speed: steps take 1/SPEED of the profile's time and "
            "throughputs read SPEED times its own (tests measure faster) [SPEC_SWEEP_SIM_SPEED]",
        )
        group.add_argument(
            "--sim-sglang-version",
            default=environ.get("SPEC_SWEEP_SIM_SGLANG_VERSION") or DEFAULT_SGLANG_VERSION,
            help="SGLang version whose flags are accepted [SPEC_SWEEP_SIM_SGLANG_VERSION]",
        )
        group.add_argument("--sim-seed", type=int, default=0, help="seed (--random-seed wins)")
        group.add_argument(
            "--sim-boot-id",
            default=environ.get("SPEC_SWEEP_SIM_BOOT_ID", ""),
            help="which boot this is: the run-to-run noise is drawn per boot id "
            "[SPEC_SWEEP_SIM_BOOT_ID]",
        )
        group.add_argument(
            "--sim-fault",
            action="append",
            default=[f for f in [environ.get("SPEC_SWEEP_SIM_FAULT", "")] if f],
            help="inject a fault: " + ", ".join(FAULT_KINDS) + " [SPEC_SWEEP_SIM_FAULT]",
        )
        group.add_argument(
            "--sim-corrupt-output",
            action="append",
            metavar="FLAG[=VALUE]",
            default=[f for f in environ.get("SPEC_SWEEP_SIM_CORRUPT_OUTPUT", "").split(",") if f],
            help="greedy outputs go wrong when this SGLang flag is set (to this value) "
            "[SPEC_SWEEP_SIM_CORRUPT_OUTPUT, comma-separated]",
        )

    return extra


def _pre_parse_version(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--sim-sglang-version", default=None)
    known, _ = pre.parse_known_args(list(argv))
    return str(
        known.sim_sglang_version
        or environ.get("SPEC_SWEEP_SIM_SGLANG_VERSION")
        or DEFAULT_SGLANG_VERSION
    )


class _Flags:
    """Reads parsed values by SGLang flag name (dests differ across versions: ``tp_size`` in
    0.5.23, ``tensor_parallel_size`` in 0.5.13)."""

    def __init__(self, ns: argparse.Namespace, manifest: FlagManifest) -> None:
        self.ns = ns
        self.manifest = manifest

    def get(self, flag: str) -> Any:
        info = self.manifest.lookup(flag)
        if info is None:
            return None
        return getattr(self.ns, info.dest, None)

    def int_(self, flag: str) -> int | None:
        value = self.get(flag)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return int(value)

    def bool_(self, flag: str) -> bool:
        return bool(self.get(flag))


def parse_command_line(
    argv: Sequence[str], environ: Mapping[str, str]
) -> tuple[SimOptions, NodeConfig]:
    """Parse the simulator's command line (exits with status 2 on a bad one, like SGLang).

    Args:
        argv: Arguments without the program name.
        environ: Environment (``SPEC_SWEEP_SIM_*`` fallbacks, ``NCCL_ALGO``).

    Returns:
        Simulator options and the node configuration.
    """
    version = _pre_parse_version(argv, environ)
    try:
        manifest = load_manifest(version)
    except ManifestError as exc:
        print(f"{_PROG}: error: argument --sim-sglang-version: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    parser = manifest.build_parser(extra=_add_sim_flags(environ))
    ns = parser.parse_args(list(argv))
    flavor = flavor_of(manifest)
    faults = _parse_faults(ns.sim_fault, parser)
    if _Flags(ns, manifest).get("model-path") is None:
        parser.error("the following arguments are required: --model-path")
    flags = _Flags(ns, manifest)
    random_seed = flags.int_("random-seed")
    seed = random_seed if random_seed is not None else int(ns.sim_seed)
    if ns.sim_time_scale < 0:
        parser.error(f"argument --sim-time-scale: must be >= 0, got {ns.sim_time_scale}")
    if ns.sim_speed <= 0:
        parser.error(f"argument --sim-speed: must be > 0, got {ns.sim_speed}")

    graph_flag = "cuda-graph-max-bs-decode" if flavor == "new" else "cuda-graph-max-bs"
    graph_disabled = flags.bool_("disable-cuda-graph") or flags.bool_("disable-decode-cuda-graph")
    if str(flags.get("cuda-graph-backend-decode") or "") == "disabled":
        graph_disabled = True
    spec = None
    algo = flags.get("speculative-algorithm")
    if algo:
        spec = SpecSettings(
            algorithm=str(algo),
            steps=flags.int_("speculative-num-steps"),
            topk=flags.int_("speculative-eagle-topk"),
            draft_tokens=flags.int_("speculative-num-draft-tokens"),
            draft_model_path=flags.get("speculative-draft-model-path"),
        )
    fusion_flag = flags.bool_("enable-flashinfer-allreduce-fusion")
    fusion_backend = flags.get("flashinfer-allreduce-fusion-backend")
    if fusion_backend is None and fusion_flag:
        fusion_backend = "auto"
    if flags.bool_("enforce-disable-flashinfer-allreduce-fusion"):
        fusion_backend = None
    mfs = flags.get("mem-fraction-static")
    adaptive = _adaptive_request(flags) if flags.bool_("speculative-adaptive") else None
    config = NodeConfig(
        flavor=flavor,
        model_path=str(flags.get("model-path")),
        tp_size=flags.int_("tp-size") or 1,
        ep_size=flags.int_("ep-size") or 1,
        dp_size=flags.int_("dp-size") or 1,
        attn_dp_size=flags.int_("attn-dp-size") or 1,
        enable_dp_attention=flags.bool_("enable-dp-attention"),
        mem_fraction_static=float(mfs) if mfs is not None else None,
        cuda_graph_max_bs=flags.int_(graph_flag),
        cuda_graph_disabled=graph_disabled,
        max_running_requests=flags.int_("max-running-requests"),
        chunked_prefill_size=flags.int_("chunked-prefill-size"),
        context_length=flags.int_("context-length"),
        spec=spec,
        moe_a2a_backend=str(flags.get("moe-a2a-backend") or "none"),
        moe_runner_backend=str(flags.get("moe-runner-backend") or "auto"),
        fusion_backend=fusion_backend,
        fusion_deprecated_flag=fusion_flag,
        disable_custom_all_reduce=flags.bool_("disable-custom-all-reduce"),
        torch_symm_mem=flags.bool_("enable-torch-symm-mem"),
        nccl_algo=environ.get("NCCL_ALGO"),
        seed=seed,
        boot_id=str(ns.sim_boot_id),
        decode_log_interval=flags.int_("decode-log-interval") or 40,
        port=flags.int_("port") or 30000,
        grpc_port_env=_env_int(environ, "SGLANG_GRPC_PORT"),
        sglang_version=version,
        adaptive=adaptive,
        enable_multi_layer_eagle=flags.bool_("enable-multi-layer-eagle"),
        enable_two_batch_overlap=flags.bool_("enable-two-batch-overlap"),
        enable_pdmux=flags.bool_("enable-pdmux"),
        piecewise_off_flags=tuple(f for f in _PIECEWISE_OFF_FLAGS if flags.bool_(f))
        + (("pp-size",) if (flags.int_("pp-size") or 1) > 1 else ()),
        enforce_piecewise=flags.bool_("enforce-piecewise-cuda-graph"),
        weight_cache_mode=str(flags.get("weight-cache-mode") or "off"),
        load_format=str(flags.get("load-format") or "auto"),
        draft_load_format=_str_or_none(flags.get("speculative-draft-load-format")),
    )
    server_args = {k: v for k, v in vars(ns).items() if not k.startswith("sim_")}
    corrupt = any(_flag_matches(server_args, item) for item in ns.sim_corrupt_output)
    options = SimOptions(
        profile=str(ns.sim_profile),
        time_scale=float(ns.sim_time_scale),
        sglang_version=version,
        flavor=flavor,
        seed=seed,
        faults=faults,
        host=str(flags.get("host") or "127.0.0.1"),
        port=flags.int_("port") or 30000,
        served_model_name=flags.get("served-model-name"),
        skip_server_warmup=flags.bool_("skip-server-warmup"),
        incremental_streaming_output=flags.bool_("incremental-streaming-output"),
        server_args=server_args,
        corrupt_output=corrupt,
        speed=float(ns.sim_speed),
    )
    return options, config


#: Flags that turn 0.5.13's piecewise CUDA graph off (server_args.py 0.5.13:1342-1411,
#: ``_handle_piecewise_cuda_graph``; ``--enforce-piecewise-cuda-graph`` overrides them all).
_PIECEWISE_OFF_FLAGS = (
    "disable-piecewise-cuda-graph",
    "enable-torch-compile",
    "enable-symm-mem",
    "enable-lora",
    "enable-eplb",
    "enable-deterministic-inference",
    "enable-hierarchical-cache",
)


def _adaptive_request(flags: _Flags) -> AdaptiveRequest:
    """``--speculative-adaptive`` with its config file read (SGLang opens it as a path)."""
    path = flags.get("speculative-adaptive-config")
    if path is None:
        return AdaptiveRequest()
    try:
        with open(str(path), encoding="utf-8") as handle:  # noqa: PTH123 (SGLang's own call)
            return AdaptiveRequest(config_path=str(path), text=handle.read())
    except OSError as exc:
        return AdaptiveRequest(config_path=str(path), open_error=f"{type(exc).__name__}: {exc}")


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _flag_matches(server_args: Mapping[str, Any], item: str) -> bool:
    """Whether ``FLAG`` is set (truthy), or ``FLAG=VALUE`` has that value, in the parsed args."""
    name, sep, wanted = item.partition("=")
    value = server_args.get(name.strip().lstrip("-").replace("-", "_"))
    if not sep:
        return bool(value)
    return value is not None and str(value) == wanted.strip()
