"""Ray Tune's side of a sweep: one batch of trials, one whole node per trial.

This module owns `fit`, which runs a batch of trials through a `Tuner` over
`trainable.run_and_record`, and the small adapters Tune needs: a `Searcher` that hands a
`ProposalSource`'s proposals (the Optuna searcher's, the two-fidelity source's, or a queue of
planned boots) to Tune, with the weights each boot loads, and the trials' `TrialReport`s
back; a stopper for Ctrl-C; a callback that stops the sweep when a trial finds the node unable
to start any server; and a callback that feeds the live table. Tune's own experiment snapshot
is never used to resume (the MLflow record is).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ray import tune
from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from spec_sweep.core import names
from spec_sweep.core.config import Config
from spec_sweep.core.confirm import Repeat
from spec_sweep.core.outcome import TrialReport
from spec_sweep.orchestrate.cluster import NODE_RESOURCE
from spec_sweep.orchestrate.trainable import TrialContext, run_and_record
from spec_sweep.present.live import SweepProgress
from spec_sweep.spec import SweepSpec

__all__ = ["ConfirmQueue", "EnvironmentStop", "Interrupt", "ProposalSource", "fit"]


class _Proposal(Protocol):
    @property
    def trial_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


class ProposalSource(Protocol):
    """What proposes a batch's trials: `search.searcher.SweepSearcher`,
    `search.fidelity.TwoFidelitySource`, or a `ConfirmQueue`."""

    @property
    def exhausted(self) -> bool: ...
    def suggest(self, key: str) -> _Proposal | None: ...
    def complete(
        self, key: str, report: TrialReport | None = None, *, error: bool = False
    ) -> None: ...


class ConfirmQueue:
    """Hands the planned confirmation boots to the scheduler in order (no model involved)."""

    def __init__(self, boots: Sequence[Repeat]) -> None:
        self._queue = list(boots)
        self.exhausted = False

    def suggest(self, key: str) -> Repeat | None:
        """The next boot, or None (and `exhausted`) when all were handed out."""
        if not self._queue:
            self.exhausted = True
            return None
        return self._queue.pop(0)

    def complete(self, key: str, report: TrialReport | None = None, *, error: bool = False) -> None:
        """Nothing to learn: the verdict is computed from the record."""


class _TuneSearcher(Searcher):
    """Ray Tune's side of a `ProposalSource`: proposals become Tune configs, reports go back.

    Tune's own snapshot of the searcher is not used to resume (the MLflow record is), so
    `save` is not implemented and Tune skips it with a warning in the driver log. The
    attribute is not called `searcher`: Tune would take this for a wrapper and descend.
    """

    def __init__(self, source: ProposalSource, spec: SweepSpec) -> None:
        super().__init__(metric=spec.objective.metric, mode=spec.objective.mode)
        self._sweep = source
        self._fidelity_tagged = spec.budget.fidelity.two

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        """The search space is the spec's; Tune passes no `param_space`."""
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """The source's next proposal, tagged with our trial id and attempt number."""
        proposal = self._sweep.suggest(trial_id)
        if proposal is None:
            done = self._sweep.exhausted or _converged(self._sweep)
            return Searcher.FINISHED if done else None  # type: ignore[return-value]
        config = {
            **proposal.params,
            names.CONFIG_TRIAL_ID: proposal.trial_id,
            names.CONFIG_ATTEMPT: proposal.attempt,
        }
        predicted = getattr(proposal, "predicted", None)  # SGLang's memory rule: no boot
        if predicted:
            config[names.CONFIG_PREDICTED] = predicted
        if self._fidelity_tagged:  # budget.fidelity.mode: two (a confirmation boot: real)
            config[names.CONFIG_FIDELITY] = getattr(proposal, "fidelity", names.FIDELITY_REAL)
            role = getattr(proposal, "role", None)
            if role:
                config[names.CONFIG_FIDELITY_ROLE] = role
        return config

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """A trial reports once, at its end (`on_trial_complete`); nothing to do here."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell the source how the trial ended."""
        report = TrialReport.from_tune(result) if result is not None else None
        self._sweep.complete(trial_id, report, error=error)


class Interrupt(Stopper):
    """Stops the whole experiment at the first Ctrl-C."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        return {}  # Tune pickles its stopper into the experiment state; the flag is per run

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.event = threading.Event()

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return self.event.is_set()

    def stop_all(self) -> bool:
        return self.event.is_set()


class EnvironmentStop(Callback):
    """Stops the sweep when a trial says the node cannot start any server."""

    def __init__(self, interrupt: Interrupt) -> None:
        self.interrupt: Interrupt | None = interrupt
        self.reason: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}  # pickled into Tune's experiment state; the flag is per run

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.interrupt, self.reason = None, None

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        why = TrialReport.from_tune(trial.last_result).environment
        if why and self.interrupt is not None:
            trial_id = trial.config.get(names.CONFIG_TRIAL_ID)
            self.reason = self.reason or f"trial {trial_id}: {why}"
            self.interrupt.event.set()


class _ProgressCallback(Callback):
    def __init__(self, progress: SweepProgress) -> None:
        self.progress: SweepProgress | None = progress

    def __getstate__(self) -> dict[str, Any]:
        return {}  # Tune pickles callbacks into the experiment state; the display is per run

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.progress = None

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            fidelity = trial.config.get(names.CONFIG_FIDELITY)
            self.progress.started(_trial_id(trial), _clean(trial.config), fidelity=fidelity)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.finished(_trial_id(trial), TrialReport.from_tune(trial.last_result))

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.errored(_trial_id(trial), str(trial.error_file or ""))

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.retrying(_trial_id(trial))


def _converged(source: ProposalSource) -> bool:
    """Whether the source stopped because the search converged (`budget.until: converged`)."""
    converged = getattr(source, "converged", None)
    return bool(converged is not None and converged.converged)


def _trial_id(trial: Trial) -> str:
    return str(trial.config.get(names.CONFIG_TRIAL_ID))


def _clean(config: Mapping[str, Any]) -> Config:
    """A Tune trial config without our bookkeeping keys, floats rounded as the space does."""
    return {
        k: float(f"{v:.10g}") if isinstance(v, float) else v
        for k, v in config.items()
        if not k.startswith(names.CONFIG_PREFIX)
    }


@dataclass(frozen=True)
class Batch:
    """Where a batch of trials runs and what stops it (shared by every batch of one run)."""

    spec: SweepSpec
    ctx: TrialContext
    tune_dir: Path
    n_nodes: int
    interrupt: Interrupt
    environment: EnvironmentStop
    progress: SweepProgress | None = None


def fit(batch: Batch, source: ProposalSource, samples: int, *, deadline: float | None) -> None:
    """Run `samples` trials of `source` through Ray Tune, one whole node per trial; a trial
    that finds the node unable to start any server stops it (`EnvironmentStop`)."""
    spec = batch.spec
    trainable = tune.with_resources(
        tune.with_parameters(run_and_record, ctx=batch.ctx),
        {"cpu": 1, "gpu": spec.node.gpus, NODE_RESOURCE: 1},
    )
    callbacks: list[Callback] = [batch.environment]
    if batch.progress is not None:
        callbacks.append(_ProgressCallback(batch.progress))
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=_TuneSearcher(source, spec),
            num_samples=samples,
            max_concurrent_trials=spec.budget.max_concurrent or batch.n_nodes,
            reuse_actors=True,
            time_budget_s=max(1.0, deadline - time.monotonic()) if deadline else None,
        ),
        run_config=tune.RunConfig(
            name=f"tune-{time.time_ns()}",
            storage_path=str(batch.tune_dir),
            verbose=0,
            stop=batch.interrupt,
            callbacks=callbacks,
            progress_reporter=None,
            log_to_file=True,
            # A node (or its Ray worker) lost mid-trial: retry the trial once, elsewhere.
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    )
    tuner.fit()
