"""The failure-aware TPE sampler: every use of Optuna's private API lives here.

Optuna's TPE ignores FAIL trials entirely, so a failed server boot would teach it nothing.
`FailureAwareTPESampler` lets TPE see FAIL trials that carry a violated constraint (set with the
public `Trial.set_constraint`) as infeasible observations (TPE puts them on the "bad" side of
its density split) and, because that alone barely steers TPE (the bad side also holds every
slow configuration), multiplies TPE's acquisition by the probability that a candidate runs, from
a `FailureModel`. Doing so needs three private pieces of Optuna 5.0 (unchanged in 5.1), and this
module is the only one that touches them: the `_compute_acquisition_func` hook of `TPESampler`, the
`_ParzenEstimator` type it receives, and `Study._get_trials`, which TPE calls to read the
history (a read-only view adds the infeasible FAIL trials to what it returns).
`tests/unit/test_private_api_contracts.py` checks the installed Optuna is one of
`OPTUNA_VERSIONS` (pyproject.toml admits no newer one) and checks each of them, so an upgrade that
changes them fails there first.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

__all__ = ["OPTUNA_VERSIONS", "FailureAwareTPESampler", "FailureModel", "failure_model"]

#: The Optuna versions whose private API this module was checked against (5.0.0 -> 5.1.0 changed
#: none of it: `_tpe/` only a comment and a docstring; `GridSampler.after_trial`, which
#: `sampling._Grid` replaces whole, learnt to skip enqueued trials).
OPTUNA_VERSIONS = ("5.0.0", "5.1.0")
#: Weight of log P(runs) in the acquisition (log l(x) - log g(x) + w log P(runs | x)).
_RISK_WEIGHT = 3.0
#: Pseudo-count of the failure model: a value blamed for b failures fails with b / (b + this).
_BLAME_PRIOR = 0.5


def _infeasible(trial: FrozenTrial) -> bool:
    return any(v > 0 for v in trial.constraints.values())


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
            if _infeasible(t)
        ]
        return sorted(trials + failed, key=lambda t: t.number)


def _item(name: str, value: Any) -> tuple[str, str]:
    return name, json.dumps(value, default=str)


class FailureModel:
    """Which values of a configuration are likely to make it fail, learnt from the trials so far.

    Explaining away, the way an engineer reads a failed launch: a value (``fusion=true``) that
    no trial that ran ever had is a suspect of every failed trial that had it; a failed trial
    whose values all ran elsewhere must fail from a combination, so its never-ran pairs of values
    are the suspects (an EAGLE tree of steps 1, top-k 2 and 8 draft tokens). Each failed trial
    spreads one unit of blame over its suspects, and a suspect blamed `b` times makes a
    configuration that has it fail with probability `b / (b + 0.5)`. Trials that violate an
    objective constraint count as failed (they cannot be the answer either).
    """

    def __init__(self, trials: Sequence[FrozenTrial], gates: frozenset[str] = frozenset()) -> None:
        """Learn from finished trials (COMPLETE ones, and FAIL ones with a violated constraint).

        `gates` are the parameters others depend on (`when:`): a gate's value (speculation on)
        is a suspect only when nothing more specific that never ran is, so a failed tree
        condemns the tree, not the whole branch.
        """
        ran_items: set[tuple[str, str]] = set()
        ran_pairs: set[tuple[tuple[str, str], tuple[str, str]]] = set()
        failed: list[list[tuple[str, str]]] = []
        for trial in trials:
            items = sorted(_item(k, v) for k, v in trial.params.items())
            if _infeasible(trial):
                failed.append(items)
            else:
                ran_items.update(items)
                ran_pairs.update(itertools.combinations(items, 2))
        self.blame: dict[Any, float] = {}
        self._pairs = False
        for items in failed:
            suspects: list[Any] = [i for i in items if i not in ran_items]
            specific = [i for i in suspects if i[0] not in gates]
            if specific:  # a failure condemns what failed, not its branch
                suspects = specific
            if not suspects:
                suspects = [p for p in itertools.combinations(items, 2) if p not in ran_pairs]
                self._pairs = self._pairs or bool(suspects)
            for suspect in suspects:
                self.blame[suspect] = self.blame.get(suspect, 0.0) + 1.0 / len(suspects)

    def log_ok(self, params: Mapping[str, Any]) -> float:
        """log P(a configuration with these parameter values runs); 0.0 when nothing is blamed."""
        if not self.blame:
            return 0.0
        items = sorted(_item(k, v) for k, v in params.items())
        keys: Iterator[Any] = iter(items)
        if self._pairs:
            keys = itertools.chain(items, itertools.combinations(items, 2))
        total = 0.0
        for key in keys:
            blame = self.blame.get(key)
            if blame:
                total += math.log(_BLAME_PRIOR / (blame + _BLAME_PRIOR))
        return total

    def partners(self, params: Mapping[str, Any], names: Collection[str]) -> set[str]:
        """The parameters whose value in `params` is blamed in a pair with the value of one of
        `names` (what else to change when a change of `names` carries a pair's blame)."""
        items = {_item(k, v): k for k, v in params.items()}
        out: set[str] = set()
        for key, blame in self.blame.items():
            if not blame or not isinstance(key[0], tuple):
                continue
            first, second = (items.get(i) for i in key)
            if first is None or second is None:
                continue
            if first in names and second not in names:
                out.add(second)
            elif second in names and first not in names:
                out.add(first)
        return out


def failure_model(study: Study, gates: frozenset[str] = frozenset()) -> FailureModel:
    """The failure model of a study's finished trials (failed ones included)."""
    trials = _StudyWithFailures(study)._get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return FailureModel(trials, gates)


class FailureAwareTPESampler(TPESampler):
    """TPE that learns from failed trials marked with a violated constraint.

    Failed trials are infeasible observations for TPE's split, and every candidate's
    acquisition `log l(x) - log g(x)` gets `3 log P(x runs)` from the `FailureModel` (the
    constrained-TPE idea: optimise expected improvement times the probability of feasibility).
    """

    def __init__(self, *, gates: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        """Arguments of `TPESampler`; `gates` as in `FailureModel`."""
        super().__init__(**kwargs)
        self._gates = gates
        self._failures = FailureModel(())
        self._distributions: dict[str, BaseDistribution] = {}

    def _learn(self, study: Study, distributions: Mapping[str, BaseDistribution]) -> Study:
        view = _StudyWithFailures(study)
        self._failures = FailureModel(
            view._get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), self._gates
        )
        self._distributions = dict(distributions)
        return view  # type: ignore[return-value]

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """Relative sampling over COMPLETE trials plus infeasible FAIL trials."""
        if not search_space:
            return {}
        view = self._learn(study, search_space)
        return super().sample_relative(view, trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        """Independent sampling over COMPLETE trials plus infeasible FAIL trials."""
        view = self._learn(study, {param_name: param_distribution})
        return super().sample_independent(view, trial, param_name, param_distribution)

    def _compute_acquisition_func(
        self,
        samples: dict[str, np.ndarray],
        mpe_below: _ParzenEstimator,
        mpe_above: _ParzenEstimator,
    ) -> np.ndarray:
        """TPE's acquisition plus the failure model's log P(runs) of each candidate."""
        values = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        if not self._failures.blame or not samples:
            return values
        names = [n for n in samples if n in self._distributions]
        count = len(values)
        risk = np.zeros(count)
        for j in range(count):
            params = {n: self._distributions[n].to_external_repr(samples[n][j]) for n in names}
            risk[j] = self._failures.log_ok(params)
        return np.asarray(values + _RISK_WEIGHT * risk)
