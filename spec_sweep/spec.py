"""The sweep spec's models: the frozen pydantic `SweepSpec` and its parts.

This module owns the shape of a sweep spec (docs/design.md, "Spec format"): pydantic models with
`extra="forbid"` and field descriptions, the field-level checks that need nothing but the value,
the metric names a spec's trials report (`spec_metric_names`, from `spec_metrics`) and
`parse_value` (how a YAML scalar on the command line or in a replay table is read). Reading a
YAML file, resolving its fragments and checking every flag against SGLang's flag manifest is
`spec_load`.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any, Literal, Self, TypeAlias

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spec_sweep.manifest import newest_version
from spec_sweep.spec_metrics import LEVEL_METRICS, metric_names

__all__ = [
    "AUTO_VERSION",
    "DRAFT_PATH",
    "NO_DRAFT_MODEL",
    "AdaptiveSpec",
    "BudgetSpec",
    "FidelitySpec",
    "GoodputSpec",
    "NodeSpec",
    "ObjectiveSpec",
    "ParamSpec",
    "QualitySpec",
    "Scalar",
    "SearchSpaceSpec",
    "SearcherSpec",
    "SweepSpec",
    "TrackingSpec",
    "WorkloadSpec",
    "drafting_algorithms",
    "parse_value",
    "same_scalar",
    "spec_metric_names",
]

Scalar: TypeAlias = StrictBool | StrictInt | StrictFloat | StrictStr | None
ArgValue: TypeAlias = Scalar | list[Scalar] | dict[str, Any]

#: The draft model's flag: set from `node.draft_model`; a searched parameter (one value per
#: listed draft model) when `node.draft_model` lists several (`SweepSpec.params`).
DRAFT_PATH = "speculative-draft-model-path"
#: Flags every trial sets itself; a spec may not set them.
RESERVED_FLAGS: frozenset[str] = frozenset({"model-path", "host", "port", DRAFT_PATH})
#: Speculative algorithms that draft without a model (NGRAM looks tokens up in the context).
NO_DRAFT_MODEL: frozenset[str] = frozenset({"NGRAM", "LOOKAHEAD"})
_ALGORITHM = "speculative-algorithm"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.\-+]?[A-Za-z0-9]+)*$")
#: `node.sglang_version: auto`: the SGLang the node runs decides.
AUTO_VERSION = "auto"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Backend(StrEnum):
    """Which server a trial launches."""

    SGLANG = "sglang"
    SIM = "sim"


class ParamSpec(_Model):
    """One searched parameter: a categorical, an integer range or a float range."""

    choices: tuple[Scalar, ...] | None = Field(
        None, description="Categorical values; null means 'flag omitted'."
    )
    int_range: tuple[StrictInt, StrictInt] | None = Field(
        None, alias="int", description="Integer range [lo, hi], both ends included."
    )
    float_range: tuple[float, float] | None = Field(
        None, alias="float", description="Float range [lo, hi]."
    )
    step: float | None = Field(None, gt=0, description="Grid step of a range.")
    log: bool = Field(False, description="Sample a range on a log scale.")
    when: dict[str, Scalar | tuple[Scalar, ...]] = Field(
        default_factory=dict,
        description="Active only when each named parameter has (one of) the given value(s).",
    )
    default: Scalar = Field(
        None, description="Value used by the baseline when the baseline does not name it."
    )
    description: str = Field("", description="What the parameter does, for people.")

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [k for k in ("choices", "int_range", "float_range") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "give exactly one of 'choices: [...]', 'int: [lo, hi]' or 'float: [lo, hi]'"
            )
        if self.choices is not None:
            if not self.choices:
                raise ValueError("'choices' is empty: list at least one value")
            seen: list[Scalar] = []
            for value in self.choices:
                if any(same_scalar(value, other) for other in seen):
                    raise ValueError(f"'choices' lists {value!r} twice: remove the duplicate")
                seen.append(value)
            if self.step is not None or self.log:
                raise ValueError("'step' and 'log' apply to ranges, not to 'choices'")
            return self
        lo, hi = self.int_range if self.int_range is not None else self.float_range  # type: ignore[misc]
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"range [{lo}, {hi}] must be finite")
        if lo > hi:
            raise ValueError(f"range [{lo}, {hi}] has lo > hi: swap the bounds")
        if lo == hi:
            raise ValueError(
                f"range [{lo}, {hi}] holds one value: put it in node.server_args instead"
            )
        if self.log and lo <= 0:
            raise ValueError(f"'log: true' needs lo > 0, got lo = {lo}")
        if self.log and self.step is not None and not (self.int_range and self.step == 1):
            raise ValueError("'log: true' cannot be combined with 'step' (Optuna forbids it)")
        if self.int_range is not None and self.step is not None and self.step != int(self.step):
            raise ValueError(f"'step' of an int range must be an integer, got {self.step}")
        if self.default is not None and not self.contains(self.default):
            raise ValueError(f"'default' {self.default!r} is outside [{lo}, {hi}]")
        return self

    @property
    def kind(self) -> Literal["choices", "int", "float"]:
        """The parameter's kind."""
        if self.choices is not None:
            return "choices"
        return "int" if self.int_range is not None else "float"

    def contains(self, value: Scalar) -> bool:
        """Whether `value` is a value this parameter can take."""
        if self.choices is not None:
            return any(same_scalar(value, c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.int_range is not None:
            lo, hi = self.int_range
            return isinstance(value, int) and lo <= value <= hi
        assert self.float_range is not None
        lo_f, hi_f = self.float_range
        return lo_f <= value <= hi_f

    def domain(self) -> str:
        """The values it takes, for an error's fix: "one of 32, 64, 128", "an integer in [1, 7]"."""
        if self.choices is not None:
            return "one of " + ", ".join("null" if c is None else repr(c) for c in self.choices)
        if self.int_range is not None:
            return f"an integer in [{self.int_range[0]}, {self.int_range[1]}]"
        assert self.float_range is not None
        return f"a number in [{self.float_range[0]}, {self.float_range[1]}]"

    def values(self) -> list[Scalar]:
        """Every value of a discrete parameter (choices, int range, float range with step).

        Raises:
            ValueError: for a continuous float range without `step`.
        """
        if self.choices is not None:
            return list(self.choices)
        if self.int_range is not None:
            lo, hi = self.int_range
            return list(range(lo, hi + 1, int(self.step or 1)))
        assert self.float_range is not None
        if self.step is None:
            raise ValueError("a float range without 'step' has no finite list of values")
        lo_f, hi_f = self.float_range
        n = math.floor((hi_f - lo_f) / self.step + 1e-9)
        return [round(lo_f + i * self.step, 10) for i in range(n + 1)]


class SearchSpaceSpec(_Model):
    """`search_space`: fragment files to include plus parameters added or overridden here."""

    include: tuple[str, ...] = Field((), description="Fragment files from search_spaces/.")
    params: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description="The searched parameters: a launch_server flag without dashes (or env.NAME, "
        "an environment variable of the server) -> its values; these add to and override the "
        "fragments'.",
    )


class _FragmentSpec(_Model):
    description: str = ""
    params: dict[str, ParamSpec] = Field(default_factory=dict)


class NodeSpec(_Model):
    """`node`: what one trial launches and on how many GPUs."""

    backend: Backend = Field(
        Backend.SGLANG,
        description="What a trial launches: sglang, the SGLang server; sim, the simulated node.",
    )
    launch: tuple[str, ...] | None = Field(
        None,
        description="Command prefix; default depends on backend (docs/design.md, Server launch).",
    )
    model: str = Field(description="--model-path of the target model.")
    draft_model: str | tuple[str, ...] | None = Field(
        None,
        description="--speculative-draft-model-path; a list of several draft models makes "
        "the draft model a searched parameter of the speculative trials.",
    )
    gpus: int = Field(8, ge=0, description="GPUs per trial (= per node); 0 for no GPU.")
    server_args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="launch_server flags every trial sets (flag without dashes -> value; true: "
        "a bare flag; false or null: left out; a list: several values).",
    )
    env: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Environment variables of every trial's server."
    )
    secrets: tuple[str, ...] = Field(
        (),
        description="Names of node.env variables or node.server_args flags whose values are "
        "secret besides those whose names look secret (*_TOKEN, *_KEY, *PASSWORD*, *SECRET*, "
        "so api-key): never written to a file or output of spec_sweep, passed to trial nodes "
        "by name (docs/running/security.md).",
    )
    boot_timeout_s: float = Field(
        1800.0, gt=0, description="Seconds a server may take to answer its health check."
    )
    request_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Seconds one request may take; beyond it the server counts as hung.",
    )
    sim_profile: str | None = Field(
        None,
        description="The simulated node's hardware profile (a built-in name such as "
        "rtx-pro-6000-pcie-x8, or a YAML file), for --simulate and backend: sim.",
    )
    sglang_version: str = Field(
        AUTO_VERSION,
        description="The SGLang version `node.launch` starts: `auto` (default) uses the "
        "version found on the node (the launch environment's package, on every node of a Ray "
        "cluster, or the server's own report for a custom launch prefix); an explicit version "
        "must match the node's, else the sweep stops. Without SGLang on the machine (a laptop, "
        "--simulate, --replay) the explicit version, or the newest bundled manifest's. Flags "
        "are checked against that version's manifest (docs/concepts/sglang-versions.md).",
    )
    sglang_version_source: Literal["spec", "auto", "node", "server"] = Field(
        "spec",
        description="Set by spec_sweep, never written in a spec: where sglang_version came "
        "from (spec: written; auto: no SGLang found, the newest bundled manifest's; node: "
        "found in the launch environment; server: reported by the server).",
    )
    cost_per_hour: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="What one node costs per hour (any currency, read as USD in the report).",
    )
    weight_cache: bool = Field(
        False,
        description="Start SGLang's weight-cache daemon (0.5.17+) once per node for the "
        "baseline's model and layout, and boot every non-speculative trial that loads those "
        "weights as its client (docs/concepts/node-hours.md).",
    )
    compile_cache: bool | str = Field(
        True,
        description="Pin the JIT and compile caches (Triton, Inductor, FlashInfer, DeepGEMM, "
        "CUDA; SGLANG_CACHE_DIR) to one folder per node and SGLang version: true = "
        "~/.cache/spec_sweep/compile, a path = that folder (e.g. a volume), false = SGLang's "
        "own defaults.",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_version(cls, data: Any) -> Any:
        """`auto` (or no version) holds the newest bundled manifest's version until the node's
        own is found (`spec_load.load_spec`), so every reader sees a concrete version."""
        if not isinstance(data, dict):
            return data
        version = data.get("sglang_version", AUTO_VERSION)
        if version == AUTO_VERSION:
            data = {**data, "sglang_version": newest_version(), "sglang_version_source": "auto"}
        elif isinstance(version, str) and not _VERSION_RE.match(version):
            raise ValueError(
                f"sglang_version {version!r} is not a version: write auto (the node's SGLang) "
                "or a release such as 0.5.17"
            )
        return data

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, Any]) -> dict[str, Any]:
        for name in env:
            if not _ENV_RE.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return env

    @model_validator(mode="after")
    def _secret_names(self) -> Self:
        for name in self.secrets:
            if name not in self.env and name not in self.server_args:
                raise ValueError(
                    f"secrets: {name!r} is neither in node.env nor in node.server_args: name "
                    "a variable or flag the node sets"
                )
        return self

    @field_validator("draft_model")
    @classmethod
    def _draft_models(cls, value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        if isinstance(value, tuple):
            if not value:
                raise ValueError(
                    "the list of draft models is empty: give one path, a list of paths, or null"
                )
            for path in value:
                if value.count(path) > 1:
                    raise ValueError(f"{path!r} is listed twice: remove the duplicate")
                if not path:
                    raise ValueError("an empty path: give the draft model's path or repo id")
        return value

    @property
    def draft_models(self) -> tuple[str, ...]:
        """The draft models the spec names (none, one, or several to search)."""
        if self.draft_model is None:
            return ()
        if isinstance(self.draft_model, str):
            return (self.draft_model,)
        return self.draft_model

    @field_validator("launch")
    @classmethod
    def _launch_nonempty(cls, launch: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if launch is not None and not launch:
            raise ValueError("'launch' is empty: give a command prefix or leave it out")
        return launch

    def launch_prefix(self, *, simulate: bool = False) -> tuple[str, ...]:
        """The command prefix a trial runs (docs/design.md, "Server launch")."""
        if simulate or self.backend is Backend.SIM:
            if self.backend is Backend.SIM and self.launch:
                return self.launch
            return ("python", "-m", "spec_sweep.sim")
        return self.launch or ("python", "-m", "sglang.launch_server")


class GoodputSpec(_Model):
    """`workload.goodput`: the concurrency range the SLA bisection searches within one boot."""

    min_concurrency: int = Field(1, gt=0, description="Lowest level tried.")
    max_concurrency: int = Field(64, gt=0, description="Highest level tried.")

    @model_validator(mode="after")
    def _range(self) -> Self:
        if self.min_concurrency > self.max_concurrency:
            raise ValueError(
                f"min_concurrency {self.min_concurrency} > max_concurrency "
                f"{self.max_concurrency}: swap them"
            )
        return self


class WorkloadSpec(_Model):
    """`workload`: the prompts sent to each server and at what concurrency."""

    dataset: str = Field(
        "builtin",
        description="'random' token ids, 'builtin' prompt set, or a JSON/JSONL file of text.",
    )
    input_len: int = Field(1024, gt=0, description="Prompt tokens (random dataset).")
    output_len: int = Field(256, gt=0, description="max_new_tokens, with ignore_eos.")
    num_prompts: int = Field(64, gt=0, description="Requests measured per concurrency level.")
    concurrency: tuple[int, ...] = Field((1,), description="A number or a list of levels.")
    warmup_prompts: int = Field(2, ge=0, description="Requests sent before measuring.")
    seed: int = Field(0, description="Seed of the prompt sampling (the same prompts every trial).")
    chat_template: bool | Literal["auto"] = Field(
        "auto",
        description="Send text prompts through the model's chat template, as production "
        "clients do (SGLang bench_serving's --apply-chat-template): auto = when the model is a "
        "local folder whose tokenizer has one; true = required; false = raw text.",
    )
    sla: dict[str, float] = Field(
        default_factory=dict,
        description="Upper bounds on level metrics (e.g. ttft_p99_ms: 2000) the goodput "
        "bisection must meet.",
    )
    goodput: GoodputSpec | None = Field(
        None, description="Find the highest concurrency meeting `sla` (needs `sla`)."
    )
    mix: dict[StrictInt, float] = Field(
        default_factory=dict,
        description="How much each concurrency level counts when one configuration serves "
        "them all (the adaptive configuration's judgement): level -> weight, weights > 0, "
        "normalised to sum 1; levels left out count 0. Default: equal weights.",
    )

    @field_validator("sla")
    @classmethod
    def _sla_metrics(cls, sla: dict[str, float]) -> dict[str, float]:
        for name, bound in sla.items():
            if name not in LEVEL_METRICS:
                raise ValueError(
                    f"sla metric {name!r} is not a level metric: use one of "
                    + ", ".join(LEVEL_METRICS)
                )
            if not math.isfinite(bound) or bound <= 0:
                raise ValueError(f"sla bound {name}: {bound} must be a positive number")
        return sla

    @model_validator(mode="after")
    def _goodput_needs_sla(self) -> Self:
        if self.goodput is not None and not self.sla:
            raise ValueError(
                "'goodput' needs 'sla' (e.g. sla: {itl_p99_ms: 50}) to know when a level holds"
            )
        return self

    @field_validator("mix")
    @classmethod
    def _mix_levels(cls, mix: dict[int, float], info: ValidationInfo) -> dict[int, float]:
        levels = info.data.get("concurrency", ())
        for level, weight in mix.items():
            if level not in levels:
                raise ValueError(
                    f"level {level} is not in concurrency {list(levels)}: weigh only the "
                    "levels that are measured"
                )
            if not math.isfinite(weight) or weight <= 0:
                raise ValueError(f"the weight of level {level} is {weight}: use a number > 0")
        return mix

    @property
    def mix_weights(self) -> dict[int, float]:
        """Each measured level's weight in the mix, summing to 1 (equal without `mix`)."""
        raw = self.mix or dict.fromkeys(self.concurrency, 1.0)
        total = sum(raw.values())
        return {level: raw.get(level, 0.0) / total for level in sorted(self.concurrency)}

    @field_validator("concurrency", mode="before")
    @classmethod
    def _levels(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        return value

    @field_validator("concurrency")
    @classmethod
    def _levels_valid(cls, levels: tuple[int, ...]) -> tuple[int, ...]:
        if not levels:
            raise ValueError("'concurrency' is empty: give a number or a list of numbers")
        if any(level <= 0 for level in levels):
            raise ValueError(f"concurrency levels must be > 0, got {list(levels)}")
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency lists a level twice: {list(levels)}")
        return levels

    @property
    def multi_level(self) -> bool:
        """Whether metrics carry `_c<N>` suffixes."""
        return len(self.concurrency) > 1


class QualitySpec(_Model):
    """`quality`: the output-quality gate (greedy outputs judged against the baseline's)."""

    num_prompts: int = Field(
        16,
        gt=0,
        description="Builtin prompts decoded greedily (the set the defaults were measured on).",
    )
    tokens: int = Field(64, gt=0, description="First N output tokens judged per prompt.")
    margin_nats: float = Field(
        0.5,
        ge=0.0,
        description="Labels each diverging prompt in the record: a first different token the "
        "baseline rated less than this many nats below its own choice is a near-tie flip, any "
        "other a confident divergence. The labels explain a trial; the deficit decides it.",
    )
    max_equivalent_deficit: float = Field(
        0.003,
        gt=0.0,
        description="Largest deficit (nats per token: how much less likely the baseline finds the "
        "trial's tokens than its own) of a numerically equivalent trial; above it the outputs "
        "are lossy. Set between the lossless and lossy configurations measured on H100 and H200 "
        "(docs/concepts/quality-gate.md).",
    )
    min_wrong_deficit: float = Field(
        0.25,
        gt=0.0,
        description="Deficit (nats per token) above which outputs are wrong (tokens the baseline "
        "did not consider, as from a kernel bug): wrong_output even with allow_lossy.",
    )
    allow_lossy: bool = Field(
        False,
        description="Keep lossy configurations (fp8 KV cache, quantized weights) as candidates, "
        "marked lossy in the ranking and the recommendation; false: they are wrong_output.",
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_agreement" in data:
            raise ValueError(
                f"min_agreement ({data['min_agreement']!r}) is retired: token agreement could "
                "not tell a near-tie flip from a bug; remove it (the deficit decides: "
                "max_equivalent_deficit, min_wrong_deficit, allow_lossy)"
            )
        if isinstance(data, dict) and "max_confident_share" in data:
            raise ValueError(
                f"max_confident_share ({data['max_confident_share']!r}) is retired: one token at "
                "a threshold decided a trial on one prompt; remove it (the deficit over all "
                "prompts decides: max_equivalent_deficit, min_wrong_deficit, allow_lossy)"
            )
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_wrong_deficit <= self.max_equivalent_deficit:
            raise ValueError(
                f"min_wrong_deficit {self.min_wrong_deficit:g} must be above "
                "max_equivalent_deficit "
                f"{self.max_equivalent_deficit:g} (equivalent <= max_equivalent_deficit < lossy <= "
                "min_wrong_deficit < wrong)"
            )
        return self


class BoundSpec(_Model):
    """A constraint bound: `{max: x}` or `{min: x}`."""

    max: float | None = Field(None, description="Largest value allowed.")
    min: float | None = Field(None, description="Smallest value allowed.")

    @model_validator(mode="after")
    def _one_bound(self) -> Self:
        if self.max is None and self.min is None:
            raise ValueError("give 'max: x' or 'min: x'")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        return self

    def satisfied(self, value: float) -> bool:
        """Whether `value` meets the bound."""
        return (self.max is None or value <= self.max) and (self.min is None or value >= self.min)

    def violation(self, value: float) -> float:
        """How far `value` is outside the bound (<= 0 when satisfied), Optuna's convention."""
        over = value - self.max if self.max is not None else -math.inf
        under = self.min - value if self.min is not None else -math.inf
        return max(over, under)


class ObjectiveSpec(_Model):
    """`objective`: the metric to optimise and the constraints a winner must meet."""

    metric: str = Field(
        "output_throughput",
        description="The metric to optimise: one a trial of this spec reports (MLflow names).",
    )
    mode: Literal["max", "min"] = Field("max", description="Maximise or minimise `metric`.")
    constraints: dict[str, BoundSpec] = Field(
        default_factory=dict,
        description="metric -> {max: x} or {min: x}: a trial outside a bound is infeasible and "
        "never the winner.",
    )


class FidelitySpec(_Model):
    """`budget.fidelity`: which boots load the model's weights (docs/concepts/two-fidelities.md).

    With `mode: two`, search trials boot with dummy weights (`--load-format dummy`: whether a
    configuration boots and what a decode cycle costs, without the weight load), a speculative
    tree's accept length comes from real boots of a few configurations, the searcher is told
    the objective predicted from both, and after the search the top configurations by
    predicted value are booted with real weights before the confirmation. The recommendation
    is always a configuration measured with real weights.
    """

    mode: Literal["real", "two"] = Field(
        "real",
        description="'real': every boot loads the weights; 'two': search trials boot with dummy "
        "weights, acceptance and the top configurations with real ones (objective "
        "output_throughput at concurrency 1 only).",
    )
    accept_boots: int = Field(
        4,
        ge=0,
        description="The first N distinct speculative trees whose dummy boot came up are booted "
        "again with real weights, for their accept length.",
    )
    accept_cap: int = Field(
        10,
        ge=0,
        description="At most this many distinct trees booted with real weights for their "
        "acceptance during the search.",
    )
    accept_margin: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="After the first accept_boots trees: a new tree is booted for real when its "
        "predicted value is at least this share of the best predicted so far.",
    )
    promote: int = Field(
        3,
        ge=0,
        description="After the search: real boots of the top N configurations by predicted "
        "value not yet booted with real weights (then the confirmation).",
    )

    @model_validator(mode="after")
    def _cap(self) -> Self:
        if self.accept_cap < self.accept_boots:
            raise ValueError(
                f"accept_cap {self.accept_cap} is below accept_boots {self.accept_boots}: set "
                f"accept_cap to at least {self.accept_boots}"
            )
        return self

    @property
    def two(self) -> bool:
        """Whether search trials boot with dummy weights."""
        return self.mode == "two"


class BudgetSpec(_Model):
    """`budget`: how many trials, how many at once, and time limits."""

    trials: int = Field(
        30,
        gt=0,
        description="Search trials, the baseline (trial 0) first; confirmation boots come on top.",
    )
    max_concurrent: int | None = Field(None, gt=0, description="Default: one per node.")
    trial_timeout_s: float = Field(
        3600.0, gt=0, description="Seconds one trial may take, boot and measurement together."
    )
    max_hours: float | None = Field(
        None,
        gt=0,
        description="Hours the run may take; then it stops and the same command resumes it.",
    )
    reuse: bool = Field(
        False,
        description="Answer a configuration already measured on the same node fingerprint (in "
        "any sweep of the MLflow store) from that record instead of launching it again.",
    )
    confirm: int = Field(
        3,
        ge=0,
        description="After the search budget, boot the top N configurations again, interleaved, "
        "and declare the winner on the pooled boots (0: off; docs/design.md, 'Confirmation').",
    )
    confirm_repeats: int = Field(
        2,
        ge=1,
        description="Fresh boots of each confirmed config before the verdict; later rounds go "
        "only to the configurations still undecided.",
    )
    confirm_max_repeats: int | None = Field(
        None,
        ge=1,
        description="While the confirmed configurations are tied within noise, boot the tied "
        "ones again, one interleaved round at a time, up to this many boots each (default: "
        "twice confirm_repeats; equal to confirm_repeats: no extra rounds).",
    )
    remeasure_baseline: bool = Field(
        True, description="Boot the baseline again at the end and report drift beyond noise."
    )
    remeasure_every: int | None = Field(
        None,
        gt=0,
        description="Also boot the baseline again after every N search trials, so drift is "
        "seen while the sweep runs (needs remeasure_baseline).",
    )
    until: Literal["trials", "converged"] = Field(
        "trials",
        description="'trials': search until `trials` are spent; 'converged': stop earlier once "
        "the last `patience` trials raised the best by no more than the measured noise and "
        "the models predict no untried configuration above it by more (`trials` stays the "
        "cap; docs/design.md, 'Node-hours').",
    )
    patience: int = Field(
        10, gt=0, description="With until: converged, trials that must have brought nothing."
    )
    fidelity: FidelitySpec = Field(
        default_factory=FidelitySpec,
        description="Two fidelities: search trials on dummy-weight boots, acceptance and the top "
        "configurations on real ones (off by default; docs/concepts/two-fidelities.md). "
        "`trials` then counts every search trial, dummy and real.",
    )

    @model_validator(mode="after")
    def _repeats(self) -> Self:
        if self.confirm_max_repeats is not None and self.confirm_max_repeats < self.confirm_repeats:
            raise ValueError(
                f"confirm_max_repeats {self.confirm_max_repeats} is below confirm_repeats "
                f"{self.confirm_repeats}: set it to at least {self.confirm_repeats} (equal: no "
                "extra rounds on a tie)"
            )
        if self.remeasure_every is not None and not self.remeasure_baseline:
            raise ValueError(
                f"remeasure_every {self.remeasure_every} needs remeasure_baseline: true; set "
                "it or drop remeasure_every"
            )
        return self

    @property
    def max_repeats(self) -> int:
        """Boots per confirmed configuration at most (`confirm_max_repeats` or its default)."""
        if self.confirm_max_repeats is not None:
            return self.confirm_max_repeats
        return 2 * self.confirm_repeats


class AdaptiveSpec(_Model):
    """`adaptive`: one configuration for every load (adaptive speculative decoding).

    With a concurrency list, after the search, an adaptive configuration is built from the
    per-level results, booted beside the best static configurations and judged per level and
    on `workload.mix` (docs/concepts/adaptive.md).
    """

    enabled: bool = Field(
        True,
        description="Build, boot and judge the adaptive configuration after the search (needs "
        "a concurrency list and speculative-num-steps in the search space).",
    )
    close: float = Field(
        0.02,
        ge=0.0,
        lt=1.0,
        description="A chain within this share of a level's best joins that level's candidate "
        "steps (0: the winner alone).",
    )


class SearcherSpec(_Model):
    """`searcher`: which Optuna sampler proposes configurations."""

    kind: Literal["tpe", "random", "grid"] = Field(
        "tpe",
        description="tpe: Optuna's TPE with spec_sweep's screening and guides; random: uniform "
        "sampling; grid: every combination (float ranges need a step).",
    )
    seed: int = Field(0, description="Seed of the sampler (the same spec proposes the same).")


class TrackingSpec(_Model):
    """`tracking`: where MLflow records the sweep."""

    uri: str | None = Field(
        None,
        description="MLflow tracking URI (--tracking-uri overrides it); default: the SQLite "
        "store mlruns/mlflow.db in the project.",
    )
    experiment: str | None = Field(None, description="MLflow experiment; default: the name.")


class SweepSpec(_Model):
    """A whole sweep, validated. Built by `load_spec`; never constructed from raw YAML elsewhere."""

    name: str = Field(
        description="The sweep's name (letters, digits, '.', '_', '-'): its state folder and "
        "default MLflow experiment."
    )
    description: str = Field("", description="What the sweep asks, shown on its MLflow run.")
    node: NodeSpec = Field(description="What a trial launches and on how many GPUs.")
    search_space: SearchSpaceSpec = Field(
        default_factory=SearchSpaceSpec, description="The parameters searched."
    )
    baseline: dict[str, Scalar] = Field(
        default_factory=dict,
        description="The configuration every trial is compared with (trial 0): parameter -> "
        "value; a parameter left out takes its default, else null where its choices offer it.",
    )
    workload: WorkloadSpec = Field(
        default_factory=WorkloadSpec, description="The requests each trial is measured with."
    )
    objective: ObjectiveSpec = Field(
        default_factory=ObjectiveSpec, description="What the search optimises and requires."
    )
    budget: BudgetSpec = Field(
        default_factory=BudgetSpec, description="How many trials and how much time."
    )
    searcher: SearcherSpec = Field(
        default_factory=SearcherSpec, description="Which sampler proposes configurations."
    )
    tracking: TrackingSpec = Field(
        default_factory=TrackingSpec, description="Where MLflow records the sweep."
    )
    quality: QualitySpec | None = Field(
        None, description="Output-quality gate; off when absent (docs/concepts/quality-gate.md)."
    )
    adaptive: AdaptiveSpec = Field(
        default_factory=AdaptiveSpec,
        description="The adaptive configuration for every load (docs/concepts/adaptive.md).",
    )
    source: str = Field("", description="Set by load_spec: the YAML file it came from.")
    #: The values of the secrets `core.secrets.seal` replaced by placeholders: in this process
    #: only (a `core.secrets.Secrets`, pickled without its values).
    _secrets: Any = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME_RE.match(name):
            raise ValueError(
                f"{name!r} is not a usable sweep name: use letters, digits, '.', '_' and '-'"
            )
        return name

    @property
    def params(self) -> dict[str, ParamSpec]:
        """The resolved search space (fragments merged with `search_space.params`).

        With several draft models in `node.draft_model`, the draft model is one more
        parameter, `speculative-draft-model-path` (`DRAFT_PATH`), right after
        `speculative-algorithm`: its choices are the listed models (the first is the default)
        and it is active with every algorithm that drafts with a model.
        """
        own = self.search_space.params
        heads = self.node.draft_models
        if len(heads) < 2:
            return own
        head = _draft_param(heads, own.get(_ALGORITHM))
        if head is None:
            return own
        out: dict[str, ParamSpec] = {}
        if _ALGORITHM not in own:
            out[DRAFT_PATH] = head
        for key, param in own.items():
            out[key] = param
            if key == _ALGORITHM:
                out[DRAFT_PATH] = head
        return out

    @property
    def experiment(self) -> str:
        """The MLflow experiment name."""
        return self.tracking.experiment or self.name


_DRAFT_PARAMS: dict[tuple[tuple[str, ...], tuple[Scalar, ...] | None], ParamSpec] = {}


def drafting_algorithms(algorithm: ParamSpec | None) -> tuple[Scalar, ...] | None:
    """The values of a searched `speculative-algorithm` that draft with a model (None: the
    algorithm is not searched)."""
    if algorithm is None:
        return None
    try:
        values = algorithm.values()
    except ValueError:
        return ()
    return tuple(v for v in values if isinstance(v, str) and v.upper() not in NO_DRAFT_MODEL and v)


def _draft_param(heads: tuple[str, ...], algorithm: ParamSpec | None) -> ParamSpec | None:
    """The searched draft model over `heads` (None: no searched algorithm drafts with one)."""
    drafting = drafting_algorithms(algorithm)
    key = (heads, drafting)
    if key not in _DRAFT_PARAMS:
        if drafting is not None and not drafting:
            return None
        when: dict[str, Scalar | tuple[Scalar, ...]] = {}
        if drafting:
            when[_ALGORITHM] = drafting[0] if len(drafting) == 1 else drafting
        _DRAFT_PARAMS[key] = ParamSpec(
            choices=heads,
            default=heads[0],
            when=when,
            description="The draft model (node.draft_model lists several).",
        )
    return _DRAFT_PARAMS[key]


# ---------------------------------------------------------------------------------------------
# Loading


def spec_metric_names(spec: SweepSpec) -> list[str]:
    """`metric_names` of a whole spec (its workload, node cost and quality gate)."""
    return metric_names(
        spec.workload, cost=spec.node.cost_per_hour is not None, quality=spec.quality is not None
    )


def parse_value(text: str) -> Scalar:
    """Parse a command-line value (`--set KEY=VALUE`) the way YAML would read it."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return text


def same_scalar(a: Scalar, b: Scalar) -> bool:
    """Equality that keeps True apart from 1 and None apart from everything."""
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )
