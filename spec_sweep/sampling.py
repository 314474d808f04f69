"""Optuna samplers for a sweep, failure-aware, and the proposals a dry run shows.

This module owns how configurations are proposed. `make_sampler` builds the spec's sampler
(TPE by default, random or grid), seeded. Optuna's TPE ignores FAIL trials entirely, so a failed
server boot would teach it nothing; `FailureAwareTPESampler` lets TPE see FAIL trials that carry
a violated constraint (`Trial.set_constraint`) as infeasible observations, which TPE then places
on the "bad" side of its density split, steering proposals away from regions that fail.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from spec_sweep.space import Config, SearchSpace, baseline_config, config_key
from spec_sweep.spec import SweepSpec

__all__ = ["FAILED_CONSTRAINT", "FailureAwareTPESampler", "make_sampler", "propose"]

#: The constraint key a failed trial carries (1.0 = failed, 0.0 = ran).
FAILED_CONSTRAINT = "failed"


class _StudyWithFailures:
    """A read-only view of a study whose COMPLETE trials include infeasible FAIL trials."""

    def __init__(self, study: Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Sequence[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        if states is None or TrialState.COMPLETE not in states:
            return trials
        failed = [
            t
            for t in self._study._get_trials(
                deepcopy=deepcopy, states=(TrialState.FAIL,), use_cache=use_cache
            )
            if any(v > 0 for v in t.constraints.values())
        ]
        return sorted(trials + failed, key=lambda t: t.number)


class FailureAwareTPESampler(TPESampler):
    """TPE that learns from failed trials marked with a violated constraint."""

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """Relative sampling over COMPLETE trials plus infeasible FAIL trials."""
        return super().sample_relative(_StudyWithFailures(study), trial, search_space)  # type: ignore[arg-type]

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        """Independent sampling over COMPLETE trials plus infeasible FAIL trials."""
        return super().sample_independent(
            _StudyWithFailures(study),  # type: ignore[arg-type]
            trial,
            param_name,
            param_distribution,
        )


def make_sampler(spec: SweepSpec, *, failure_aware: bool = True) -> BaseSampler:
    """The spec's Optuna sampler, seeded by `searcher.seed`."""
    seed = spec.searcher.seed
    if spec.searcher.kind == "random":
        return RandomSampler(seed=seed)
    if spec.searcher.kind == "grid":
        grid = {key: param.values() for key, param in spec.params.items()}
        return GridSampler(grid, seed=seed)
    cls = FailureAwareTPESampler if failure_aware else TPESampler
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return cls(seed=seed, multivariate=True, group=True, n_startup_trials=_startup(spec))


def _startup(spec: SweepSpec) -> int:
    """Random trials before TPE models: a third of the budget, between 5 and 10."""
    return max(5, min(10, spec.budget.trials // 3))


def propose(spec: SweepSpec, count: int) -> list[tuple[Config, bool]]:
    """The baseline and the next `count - 1` configurations the sampler would propose.

    No trial runs, so TPE samples its random start-up points. Returns each configuration with
    whether it repeats an earlier one (a sweep answers repeats from its record, never launches
    them).
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=_direction(spec), sampler=make_sampler(spec))
    space = SearchSpace(spec.params)
    study.enqueue_trial(baseline_config(spec))
    out: list[tuple[Config, bool]] = []
    seen: set[str] = set()
    for _ in range(count):
        trial = study.ask()
        config = space.sample(trial)
        key = config_key(config)
        out.append((config, key in seen))
        seen.add(key)
    return out


def _direction(spec: SweepSpec) -> Literal["maximize", "minimize"]:
    return "maximize" if spec.objective.mode == "max" else "minimize"


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
    system_attrs = _constraint_attrs(failed, constraints)
    state = TrialState.COMPLETE if (value is not None and not failed) else TrialState.FAIL
    trial = optuna.trial.create_trial(
        params=params,
        distributions=dists,
        value=value if state is TrialState.COMPLETE else None,
        state=state,
        system_attrs=system_attrs,
        user_attrs={_USER_TRIAL_ID: trial_id},
    )
    study.add_trial(trial)


def _constraint_attrs(failed: bool, constraints: dict[str, float] | None) -> dict[str, float]:
    attrs = {f"constraints:{FAILED_CONSTRAINT}": 1.0 if failed else 0.0}
    if not failed:
        attrs.update({f"constraints:{k}": float(v) for k, v in (constraints or {}).items()})
    return attrs


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
        for key, violation in _constraint_attrs(False, constraints).items():
            trial.set_constraint(key.removeprefix("constraints:"), violation)
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
