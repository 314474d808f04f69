"""The search space as Optuna sees it: a define-by-run function over the spec's parameters.

`SearchSpace` suggests every active parameter on an Optuna trial (categorical, int/float ranges
with step and log, `when:` conditions evaluated in dependency order). It only calls the trial's
`suggest_*` methods, so it needs no Optuna import and pickles with the searcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from spec_sweep.core.config import Config, is_active, ordered_keys
from spec_sweep.spec import ParamSpec, Scalar

__all__ = ["SearchSpace"]


class _Trial(Protocol):
    def suggest_categorical(self, name: str, choices: list[Any]) -> Any: ...
    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int: ...
    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...


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
