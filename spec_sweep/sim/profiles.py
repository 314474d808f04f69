"""Hardware profiles of the simulated node: the YAML data files and their typed, validated form.

This module owns reading ``spec_sweep/sim/profiles/<name>.yaml`` (or any path) into a frozen
:class:`Profile`: hardware, model and draft sizes, boot seconds, memory and performance
parameters, supported features, and the ``reference`` block of figures the simulator must
reproduce. It is the only module of the simulator that imports ``yaml``. Pydantic is deliberately
not used here: the simulator must start in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BootSeconds",
    "DraftSpec",
    "Features",
    "HardwareSpec",
    "MemorySpec",
    "ModelSpec",
    "PerfSpec",
    "Profile",
    "ProfileError",
    "builtin_profiles",
    "load_profile",
]


class ProfileError(Exception):
    """A profile that cannot be found or is not valid (the message names the field)."""


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """The node: GPU generation, count, interconnect and memory."""

    gpu_name: str
    compute_capability: tuple[int, int]
    num_gpus: int
    interconnect: str
    memory_mib: float
    startup_overhead_gib: float
    nccl_version: str
    hostname: str

    @property
    def total_gib(self) -> float:
        """Total memory per GPU in GiB."""
        return self.memory_mib / 1024.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The served model: identity (for logs and ``/model_info``) and memory footprint."""

    name: str
    architecture: str
    model_type: str
    quant_log: str
    dtype: str
    context_len: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    weights_gib_total: float
    ep_weight_overhead_gib: float
    kv_bytes_per_token: int
    builtin_mtp: bool
    multimodal: bool = False
    mla: bool = False


@dataclass(frozen=True, slots=True)
class DraftSpec:
    """The speculative draft model."""

    name: str
    architecture: str
    weights_gib_total: float
    kv_bytes_per_token: int


@dataclass(frozen=True, slots=True)
class BootSeconds:
    """Real boot-stage durations in seconds (scaled by the time scale).

    Attributes:
        launch: Imports, argument resolution, tokenizer, before the engine starts its processes.
        init_distributed: Distributed init per scheduler.
        load_weights: Target weights.
        load_draft: Draft weights.
        kv_alloc: KV-cache allocation.
        capture_per_bs: One graph phase, per captured batch size.
        server_start: HTTP server start.
        warmup: The warm-up request.
        spawn: From the engine's start to the schedulers' start (the difference between
            ``tokenizer_e2e`` and ``scheduler_e2e`` in ``startup_time``).
        piecewise_dynamic_compile: 0.5.13 piecewise CUDA graph: torch.compile of the
            dynamic-shape graph ("Compiling a graph for dynamic shape takes ... s").
        piecewise_per_size: 0.5.13 piecewise CUDA graph: compile and capture per token count.
    """

    launch: float
    init_distributed: float
    load_weights: float
    load_draft: float
    kv_alloc: float
    capture_per_bs: float
    server_start: float
    warmup: float
    spawn: float = 1.0
    piecewise_dynamic_compile: float = 0.0
    piecewise_per_size: float = 0.0


@dataclass(frozen=True, slots=True)
class MemorySpec:
    """Memory consumed by CUDA-graph capture and communication workspaces, GiB per GPU."""

    capture_workspace_gib: float
    graph_base_gib: float
    graph_per_token_gib: float
    draft_graph_per_token_gib: float
    a2a_workspace_gib: float
    piecewise_graph_gib: float = 0.0


@dataclass(frozen=True, slots=True)
class PerfSpec:
    """Parameters of the performance model (see :mod:`spec_sweep.sim.perf`)."""

    decode_compute_ms: float
    decode_compute_per_req_ms: float
    graph_ref_bs: int
    graph_penalty_ms_per_doubling: float
    eager_factor: float
    eager_overhead_ms: float
    prefill_base_ms: float
    prefill_per_token_ms: float
    ar_count: int
    ar_decode_us: float
    ar_verify_us: float
    ar_draft_us: float
    ar_per_token_us: float
    draft_step_ms: float
    draft_per_req_ms: float
    draft_topk_cost: float
    draft_ar_count: int
    verify_compute_ms: float
    verify_per_token_ms: float
    draft_extend_ms: float
    spec_overhead_ms: float
    extra_candidate_gain: float
    acceptance: dict[str, tuple[float, ...]]
    random_token_factor: float
    ep_decode_factor: float
    noise_boot_sigma: float
    noise_step_sigma: float
    noise_drift_sigma: float = 0.0


@dataclass(frozen=True, slots=True)
class Features:
    """Which communication features work on this node, and how fast."""

    custom_all_reduce: bool
    torch_symm_mem: bool
    flashinfer_allreduce_fusion: bool
    flashinfer_a2a: bool
    nccl_algorithms: dict[str, float]
    allreduce_factors: dict[str, float]


@dataclass(frozen=True)
class Profile:
    """A complete hardware profile.

    Attributes:
        name: Profile name (``rtx-pro-6000-pcie-x8``).
        description: One paragraph.
        hardware: The node.
        model: The served model.
        draft: The speculative draft model.
        boot: Boot-stage durations.
        memory: Capture and workspace memory.
        perf: Performance-model parameters.
        features: Supported communication features.
        reference: The ``reference`` block as plain data (figures and failures the simulator must
            reproduce; read by ``benchmarks/sim_fidelity.py``).
        path: The file it was read from.
    """

    name: str
    description: str
    hardware: HardwareSpec
    model: ModelSpec
    draft: DraftSpec
    boot: BootSeconds
    memory: MemorySpec
    perf: PerfSpec
    features: Features
    reference: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped in the package, sorted.

    Returns:
        Names such as ``["h200-nvlink-x8", "rtx-pro-6000-pcie-x8"]``.
    """
    folder = resources.files("spec_sweep.sim").joinpath("profiles")
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    )


def load_profile(name_or_path: str) -> Profile:
    """Load a profile by built-in name or from a YAML file.

    Args:
        name_or_path: A built-in name (``"rtx-pro-6000-pcie-x8"``) or a path to a YAML file.

    Returns:
        The validated profile.

    Raises:
        ProfileError: Unknown name, unreadable file, or an invalid field (the message names it).
    """
    candidate = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or candidate.is_file():
        try:
            text = candidate.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read simulator profile {name_or_path}: {exc}") from exc
        origin = str(candidate)
    else:
        resource = resources.files("spec_sweep.sim").joinpath("profiles", f"{name_or_path}.yaml")
        if not resource.is_file():
            known = ", ".join(builtin_profiles())
            raise ProfileError(
                f"unknown simulator profile {name_or_path!r}; built-in profiles: {known} "
                "(or give a path to a YAML file)"
            )
        text = resource.read_text(encoding="utf-8")
        origin = f"spec_sweep/sim/profiles/{name_or_path}.yaml"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProfileError(f"{origin}: a profile is a mapping, got {type(raw).__name__}")
    return _build(raw, origin)


class _Reader:
    """Typed access to one mapping of the YAML document, with field paths in errors."""

    def __init__(self, data: object, path: str, origin: str) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"{origin}: {path}: expected a mapping, got {data!r}")
        self.data: dict[str, Any] = data
        self.path = path
        self.origin = origin

    def _where(self, key: str) -> str:
        return f"{self.origin}: {self.path}.{key}" if self.path else f"{self.origin}: {key}"

    def _get(self, key: str) -> Any:
        if key not in self.data:
            raise ProfileError(f"{self._where(key)}: missing")
        return self.data[key]

    def num(self, key: str, *, minimum: float = 0.0) -> float:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{self._where(key)}: expected a number, got {value!r}")
        if value < minimum:
            raise ProfileError(f"{self._where(key)}: must be >= {minimum}, got {value}")
        return float(value)

    def int_(self, key: str, *, minimum: int = 0) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{self._where(key)}: expected an integer, got {value!r}")
        if value < minimum:
            raise ProfileError(f"{self._where(key)}: must be >= {minimum}, got {value}")
        return value

    def str_(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ProfileError(f"{self._where(key)}: expected a string, got {value!r}")
        return str(value)

    def opt_num(self, key: str, default: float) -> float:
        return self.num(key) if key in self.data else default

    def opt_bool(self, key: str, default: bool) -> bool:
        return self.bool_(key) if key in self.data else default

    def bool_(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise ProfileError(f"{self._where(key)}: expected true or false, got {value!r}")
        return value

    def sub(self, key: str) -> _Reader:
        return _Reader(self._get(key), f"{self.path}.{key}" if self.path else key, self.origin)

    def num_map(self, key: str) -> dict[str, float]:
        value = self._get(key)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in value.items()
        ):
            raise ProfileError(f"{self._where(key)}: expected a mapping of names to numbers")
        return {k: float(v) for k, v in value.items()}


def _rates(reader: _Reader, key: str) -> dict[str, tuple[float, ...]]:
    value = reader.data.get(key)
    where = f"{reader.origin}: {reader.path}.{key}"
    if not isinstance(value, dict) or not value:
        raise ProfileError(f"{where}: expected a mapping of algorithm -> list of rates")
    out: dict[str, tuple[float, ...]] = {}
    for algo, rates in value.items():
        if (
            not isinstance(rates, list)
            or not rates
            or not all(isinstance(r, (int, float)) and 0.0 <= r <= 1.0 for r in rates)
        ):
            raise ProfileError(f"{where}.{algo}: expected a list of rates in [0, 1]")
        out[str(algo).upper()] = tuple(float(r) for r in rates)
    return out


def _build(raw: dict[str, Any], origin: str) -> Profile:
    top = _Reader(raw, "", origin)
    hw = top.sub("hardware")
    cc = hw.data.get("compute_capability")
    if not (isinstance(cc, list) and len(cc) == 2 and all(isinstance(x, int) for x in cc)):
        raise ProfileError(f"{origin}: hardware.compute_capability: expected [major, minor]")
    interconnect = hw.str_("interconnect")
    if interconnect not in ("pcie", "nvlink"):
        raise ProfileError(
            f"{origin}: hardware.interconnect: expected pcie or nvlink, got {interconnect!r}"
        )
    hardware = HardwareSpec(
        gpu_name=hw.str_("gpu_name"),
        compute_capability=(int(cc[0]), int(cc[1])),
        num_gpus=hw.int_("num_gpus", minimum=1),
        interconnect=interconnect,
        memory_mib=hw.num("memory_mib", minimum=1.0),
        startup_overhead_gib=hw.num("startup_overhead_gib"),
        nccl_version=hw.str_("nccl_version"),
        hostname=hw.str_("hostname"),
    )
    m = top.sub("model")
    model = ModelSpec(
        name=m.str_("name"),
        architecture=m.str_("architecture"),
        model_type=m.str_("model_type"),
        quant_log=m.str_("quant_log"),
        dtype=m.str_("dtype"),
        context_len=m.int_("context_len", minimum=1),
        num_layers=m.int_("num_layers", minimum=1),
        hidden_size=m.int_("hidden_size", minimum=1),
        vocab_size=m.int_("vocab_size", minimum=2),
        weights_gib_total=m.num("weights_gib_total"),
        ep_weight_overhead_gib=m.num("ep_weight_overhead_gib"),
        kv_bytes_per_token=m.int_("kv_bytes_per_token", minimum=1),
        builtin_mtp=m.bool_("builtin_mtp"),
        multimodal=m.opt_bool("multimodal", False),
        mla=m.opt_bool("mla", False),
    )
    d = top.sub("draft")
    draft = DraftSpec(
        name=d.str_("name"),
        architecture=d.str_("architecture"),
        weights_gib_total=d.num("weights_gib_total"),
        kv_bytes_per_token=d.int_("kv_bytes_per_token", minimum=1),
    )
    b = top.sub("boot_seconds")
    boot = BootSeconds(
        launch=b.num("launch"),
        init_distributed=b.num("init_distributed"),
        load_weights=b.num("load_weights"),
        load_draft=b.num("load_draft"),
        kv_alloc=b.num("kv_alloc"),
        capture_per_bs=b.num("capture_per_bs"),
        server_start=b.num("server_start"),
        warmup=b.num("warmup"),
        spawn=b.opt_num("spawn", 1.0),
        piecewise_dynamic_compile=b.opt_num("piecewise_dynamic_compile", 0.0),
        piecewise_per_size=b.opt_num("piecewise_per_size", 0.0),
    )
    mem = top.sub("memory")
    memory = MemorySpec(
        capture_workspace_gib=mem.num("capture_workspace_gib"),
        graph_base_gib=mem.num("graph_base_gib"),
        graph_per_token_gib=mem.num("graph_per_token_gib"),
        draft_graph_per_token_gib=mem.num("draft_graph_per_token_gib"),
        a2a_workspace_gib=mem.num("a2a_workspace_gib"),
        piecewise_graph_gib=mem.opt_num("piecewise_graph_gib", 0.0),
    )
    p = top.sub("perf")
    dec, pre, ar, spec = p.sub("decode"), p.sub("prefill"), p.sub("allreduce"), p.sub("speculative")
    ep, noise = p.sub("ep"), p.sub("noise")
    perf = PerfSpec(
        decode_compute_ms=dec.num("compute_ms"),
        decode_compute_per_req_ms=dec.num("compute_per_req_ms"),
        graph_ref_bs=dec.int_("graph_ref_bs", minimum=1),
        graph_penalty_ms_per_doubling=dec.num("graph_penalty_ms_per_doubling"),
        eager_factor=dec.num("eager_factor", minimum=1.0),
        eager_overhead_ms=dec.num("eager_overhead_ms"),
        prefill_base_ms=pre.num("base_ms"),
        prefill_per_token_ms=pre.num("per_token_ms"),
        ar_count=ar.int_("count_per_forward"),
        ar_decode_us=ar.num("decode_us"),
        ar_verify_us=ar.num("verify_us"),
        ar_draft_us=ar.num("draft_us"),
        ar_per_token_us=ar.num("per_token_us"),
        draft_step_ms=spec.num("draft_step_ms"),
        draft_per_req_ms=spec.num("draft_per_req_ms"),
        draft_topk_cost=spec.num("draft_topk_cost"),
        draft_ar_count=spec.int_("draft_allreduce_count"),
        verify_compute_ms=spec.num("verify_compute_ms"),
        verify_per_token_ms=spec.num("verify_per_token_ms"),
        draft_extend_ms=spec.num("draft_extend_ms"),
        spec_overhead_ms=spec.num("overhead_ms"),
        extra_candidate_gain=spec.num("extra_candidate_gain"),
        acceptance=_rates(spec, "acceptance"),
        random_token_factor=spec.num("random_token_factor"),
        ep_decode_factor=ep.num("decode_factor"),
        noise_boot_sigma=noise.num("boot_sigma"),
        noise_step_sigma=noise.num("step_sigma"),
        noise_drift_sigma=noise.num("drift_sigma") if "drift_sigma" in noise.data else 0.0,
    )
    f = top.sub("features")
    features = Features(
        custom_all_reduce=f.bool_("custom_all_reduce"),
        torch_symm_mem=f.bool_("torch_symm_mem"),
        flashinfer_allreduce_fusion=f.bool_("flashinfer_allreduce_fusion"),
        flashinfer_a2a=f.bool_("flashinfer_a2a"),
        nccl_algorithms=f.num_map("nccl_algorithms"),
        allreduce_factors=f.num_map("allreduce_factors"),
    )
    if "Ring" not in features.nccl_algorithms:
        raise ProfileError(f"{origin}: features.nccl_algorithms: must include Ring")
    reference = raw.get("reference", {})
    if not isinstance(reference, dict):
        raise ProfileError(f"{origin}: reference: expected a mapping")
    return Profile(
        name=top.str_("name"),
        description=str(raw.get("description", "")).strip(),
        hardware=hardware,
        model=model,
        draft=draft,
        boot=boot,
        memory=memory,
        perf=perf,
        features=features,
        reference=reference,
        path=origin,
    )
