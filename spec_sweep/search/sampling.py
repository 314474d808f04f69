"""Optuna samplers for a sweep, failure-aware, the screening design, and dry-run proposals.

This module owns how configurations are proposed. `make_sampler` builds the spec's sampler (TPE by
default, random or grid), seeded. Optuna's TPE ignores FAIL trials entirely, so a failed server boot
would teach it nothing; `FailureAwareTPESampler` (in `tpe`, with every use of Optuna's private API)
lets TPE see FAIL trials that carry a violated constraint (`Trial.set_constraint`) as infeasible
observations (TPE puts them on the "bad" side of its density split) and, because that alone barely
steers TPE (the bad side also holds every slow configuration), multiplies TPE's acquisition by the
probability that a candidate runs, from a `FailureModel`: the values, or pairs of values, of failed
trials that no trial that ran ever had are the likely causes. `screening_design` is the start of a
TPE sweep: one-factor-at-a-time changes of the baseline, in seeded random order, which replace TPE's
random start-up trials (near the known-good baseline they fail far less often, and each one tells
which value of which knob fails or helps); `neighbors` is the local step a sweep takes when the
model proposes what was already measured. `benchmarks/search_efficiency.py` measures all of it.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from spec_sweep.core.config import (
    Config,
    baseline_config,
    config_key,
    normalize_config,
    ordered_keys,
    resolve_config,
    same_value,
)
from spec_sweep.core.objective import Objective
from spec_sweep.search.space import SearchSpace
from spec_sweep.search.tpe import FailureAwareTPESampler, FailureModel, failure_model
from spec_sweep.spec import ParamSpec, Scalar, SweepSpec

__all__ = [
    "FAILED_CONSTRAINT",
    "FailureAwareTPESampler",
    "FailureModel",
    "failure_model",
    "gate_params",
    "make_sampler",
    "neighbors",
    "propose",
    "screening_design",
]

#: The constraint key a failed trial carries (1.0 = failed, 0.0 = ran).
FAILED_CONSTRAINT = "failed"

#: TPE candidates drawn per proposal (Optuna's default is 24): with a failure term in the
#: acquisition, more candidates leave more that are both promising and likely to run.
_EI_CANDIDATES = 64
#: Weight of the kernels' uniform prior in TPE's Parzen estimators (Optuna's default is 1.0):
#: sharper kernels around the best trials. On the H200 grid of benchmarks/search_efficiency.py
#: (seeds 20-49) 1.0 needed 33.5 trials at the median and one run never got within 2 %; 0.5
#: needed 27, 65 at worst.
_PRIOR_WEIGHT = 0.5
#: Alternatives per numeric range in the screening design and in neighbour steps.
_RANGE_POINTS = 4


def gate_params(spec: SweepSpec) -> frozenset[str]:
    """Parameters that other parameters depend on (`when:`)."""
    return frozenset(dep for param in spec.params.values() for dep in param.when)


class _Grid(GridSampler):
    """Optuna's grid, without its `study.stop()` once every point was told: that call is only
    allowed inside `study.optimize`, and the searcher drives the study with ask and tell (so
    telling the last grid point raised); the searcher ends a finished grid itself (its repeats
    of measured points run out as `exhausted`)."""

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        return None


def make_sampler(spec: SweepSpec, *, failure_aware: bool = True) -> BaseSampler:
    """The spec's Optuna sampler, seeded by `searcher.seed`.

    TPE is multivariate with group decomposition (the EAGLE tree knobs exist only with EAGLE),
    64 candidates per proposal and a prior weight of 0.5; it models from the first proposal
    after the baseline and the screening design (`screening_design` replaces its random
    start-up trials). `failure_aware=False` gives the same TPE blind to failed trials.
    """
    seed = spec.searcher.seed
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if spec.searcher.kind == "random":
        return RandomSampler(seed=seed)
    if spec.searcher.kind == "grid":
        grid = {key: param.values() for key, param in spec.params.items()}
        return _Grid(grid, seed=seed)
    cls = FailureAwareTPESampler if failure_aware else TPESampler
    extra: dict[str, Any] = {"gates": gate_params(spec)} if failure_aware else {}
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    with warnings.catch_warnings():
        # `prior_weight` is deprecated since Optuna 4.9 (removal planned for 6.0; the project
        # pins optuna<6): it still works and measurably helps here.
        warnings.simplefilter("ignore", FutureWarning)
        return cls(
            **extra,
            seed=seed,
            multivariate=True,
            group=True,
            n_startup_trials=_startup(spec),
            n_ei_candidates=_EI_CANDIDATES,
            prior_weight=_PRIOR_WEIGHT,
        )


def _startup(spec: SweepSpec) -> int:
    """Random TPE start-up trials: none, the screening design takes their place.

    Random start-up trials are uniform over the whole space, where most configurations of a
    real node fail (86 % on the PCIe grid); TPE models from the baseline and the design on.
    """
    del spec
    return 0


# ---------------------------------------------------------------------------------------------
# Screening design and neighbour steps


def _design_size(spec: SweepSpec) -> int:
    """How many screening trials follow the baseline: a quarter of the budget.

    Chosen on the tuning landscapes of `benchmarks/landscapes.py` (a third left the speculative
    branch too few trials on nodes where a tree wins).
    """
    return spec.budget.trials // 4


def screening_design(spec: SweepSpec, *, seed: int, count: int | None = None) -> list[Config]:
    """One-factor-at-a-time changes of the baseline, in seeded random order.

    Every alternative value of every parameter active in the baseline (numeric ranges: up to
    four evenly spaced points), each as the baseline with that one value changed (parameters
    it activates take their default, else null, else a seeded random value). Shuffled with
    `seed` and cut to `count` (default: a quarter of the budget).
    """
    rng = random.Random(f"screening:{seed}")
    base = baseline_config(spec)
    design = neighbors(spec, base, rng=rng)
    rng.shuffle(design)
    return design[: _design_size(spec) if count is None else count]


def neighbors(spec: SweepSpec, config: Mapping[str, Scalar], *, rng: random.Random) -> list[Config]:
    """Every configuration that differs from `config` in one parameter's value (distinct)."""
    out: list[Config] = []
    seen = {config_key(config)}
    for key in ordered_keys(spec.params):
        if key not in config:
            continue
        for value in _alternatives(spec.params[key], config[key]):
            changed = _complete(spec, {**config, key: value}, rng)
            ckey = config_key(changed)
            if ckey not in seen:
                seen.add(ckey)
                out.append(changed)
    return out


def _alternatives(param: ParamSpec, current: Scalar) -> list[Scalar]:
    """The values of a parameter other than `current` (numeric ranges: a few spread points)."""
    if param.choices is not None:
        values = list(param.choices)
    else:
        try:
            values = param.values()
        except ValueError:  # a continuous float range
            assert param.float_range is not None
            lo, hi = param.float_range
            n = _RANGE_POINTS
            points = (
                [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
                if param.log
                else [lo + (hi - lo) * i / (n - 1) for i in range(n)]
            )
            values = list(dict.fromkeys(float(f"{x:.4g}") for x in points))
        if len(values) > _RANGE_POINTS:
            last = len(values) - 1
            picks = sorted({round(i * last / (_RANGE_POINTS - 1)) for i in range(_RANGE_POINTS)})
            values = [values[i] for i in picks]
    return [v for v in values if not same_value(v, current)]


def _complete(spec: SweepSpec, values: Mapping[str, Scalar], rng: random.Random) -> Config:
    """A configuration from `values`; parameters that become active take their default."""
    config = resolve_config(
        spec, values, what="neighbour", fill=lambda param: rng.choice(_alternatives(param, None))
    )
    return normalize_config(spec, config)


def propose(spec: SweepSpec, count: int) -> list[tuple[Config, bool]]:
    """The baseline and the next `count - 1` configurations a fresh sweep would propose.

    For TPE that is the screening design, then (no trial has run) what TPE draws from its
    prior. Returns each configuration with whether it repeats an earlier one (a sweep answers
    repeats from its record, never launches them).
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=Objective.of(spec).direction, sampler=make_sampler(spec))
    space = SearchSpace(spec.params)
    study.enqueue_trial(baseline_config(spec))
    if spec.searcher.kind == "tpe":
        for config in screening_design(spec, seed=spec.searcher.seed):
            study.enqueue_trial(dict(config))
    out: list[tuple[Config, bool]] = []
    seen: set[str] = set()
    for _ in range(count):
        trial = study.ask()
        config = space.sample(trial)
        key = config_key(config)
        out.append((config, key in seen))
        seen.add(key)
    return out


def distributions(spec: SweepSpec, config: Config) -> dict[str, BaseDistribution]:
    """Optuna distributions of the parameters present in `config`."""
    out: dict[str, BaseDistribution] = {}
    for key in config:
        param = spec.params.get(key)
        if param is None:
            continue
        if param.choices is not None:
            out[key] = optuna.distributions.CategoricalDistribution(list(param.choices))
        elif param.int_range is not None:
            lo, hi = param.int_range
            out[key] = optuna.distributions.IntDistribution(
                lo, hi, log=param.log, step=int(param.step or 1)
            )
        else:
            assert param.float_range is not None
            lo_f, hi_f = param.float_range
            out[key] = optuna.distributions.FloatDistribution(
                lo_f, hi_f, log=param.log, step=param.step
            )
    return out


_USER_TRIAL_ID = "spec_sweep.trial_id"
_USER_REPEAT = "spec_sweep.repeat"


def add_finished(
    study: Study,
    spec: SweepSpec,
    config: Config,
    *,
    value: float | None,
    failed: bool,
    constraints: dict[str, float] | None = None,
    trial_id: str = "",
) -> None:
    """Add a trial finished earlier (from the record) to the study, exactly as if told now."""
    dists = distributions(spec, config)
    params = {k: v for k, v in config.items() if k in dists}
    state = TrialState.COMPLETE if (value is not None and not failed) else TrialState.FAIL
    trial = optuna.trial.create_trial(
        params=params,
        distributions=dists,
        value=value if state is TrialState.COMPLETE else None,
        state=state,
        user_attrs={_USER_TRIAL_ID: trial_id},
        constraints=_constraints(failed, constraints),
    )
    study.add_trial(trial)


def _constraints(failed: bool, constraints: dict[str, float] | None) -> dict[str, float]:
    """Constraint values of a finished trial: `failed` first, then the objective's (if it ran)."""
    out = {FAILED_CONSTRAINT: 1.0 if failed else 0.0}
    if not failed:
        out.update({k: float(v) for k, v in (constraints or {}).items()})
    return out


def tell_result(
    study: Study,
    trial: optuna.Trial,
    *,
    value: float | None,
    failed: bool,
    constraints: dict[str, float] | None = None,
) -> None:
    """Tell a finished trial: COMPLETE with its constraints, or FAIL.

    A failed configuration carries the violated `failed` constraint (the failure-aware sampler
    learns from it); a FAIL without it (the machinery failed, not the configuration) is ignored
    by the samplers.
    """
    if value is not None and not failed:
        for key, violation in _constraints(False, constraints).items():
            trial.set_constraint(key, violation)
        study.tell(trial, value)
        return
    if failed:
        trial.set_constraint(FAILED_CONSTRAINT, 1.0)
    study.tell(trial, None, state=TrialState.FAIL)


def discard_repeat(study: Study, trial: optuna.Trial) -> None:
    """Close a proposal that repeats a measured configuration (never launched, never learned)."""
    trial.set_user_attr(_USER_REPEAT, True)
    study.tell(trial, None, state=TrialState.FAIL)


def history_trials(study: Study) -> list[FrozenTrial]:
    """The study's trials that stand for real trials (proposals that repeated one are left out)."""
    return [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(_USER_REPEAT)]


@contextlib.contextmanager
def random_sampling(study: Study, *, seed: int) -> Iterator[None]:
    """Within the block, the study proposes uniformly at random (one exploration step)."""
    saved = study.sampler
    study.sampler = RandomSampler(seed=seed)
    try:
        yield
    finally:
        study.sampler = saved
