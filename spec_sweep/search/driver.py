"""The sweep driver: Ray Tune schedules the trials, the searcher proposes, MLflow records.

This module owns `sweep()`, from start (or resume) to the report. It opens the sweep's state
folder, starts or joins the Ray cluster (`cluster`), refuses a tracking store the trial nodes
cannot reach, reads the MLflow record (finished trials are told to a fresh `SweepSearcher` once
each; RUNNING ones are closed KILLED and run again first under their old ids), and runs a
`Tuner` over `trainable.run_and_record`, one whole node per trial. A thin Ray `Searcher`
adapter hands the searcher's proposals to Tune and its results back. The first Ctrl-C tears
the running trials down and stops; at the end, speed-ups missing from trials that ran before
the baseline was measured are filled in, the report is published and the parent run closed.
Which backend answers the trials is the caller's choice (`backends.make_backend`): the driver
only asks it whether its GPUs are pretend.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from spec_sweep.backends import TrialBackend
from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.failures import FailureMode
from spec_sweep.progress import SweepProgress
from spec_sweep.search.cluster import NODE_RESOURCE, check_cluster, ray_pids, start_ray
from spec_sweep.search.confirm import (
    ConfirmQueue,
    Repeat,
    Verdict,
    confirm_metrics,
    plan,
    remeasure_due,
    repeated_of,
    search_records,
    verdict,
    workload_warning,
)
from spec_sweep.search.objective import (
    BASELINE_ID,
    SPEEDUP_METRIC,
    best_metrics,
    latest_finished,
    objective_value,
    speedup_metrics,
)
from spec_sweep.search.searcher import SweepSearcher
from spec_sweep.search.trainable import ATTEMPT_KEY, TRIAL_ID_KEY, TrialContext, run_and_record
from spec_sweep.server import kill_recorded_servers
from spec_sweep.space import Config, baseline_config, config_key, secret_values
from spec_sweep.spec import SweepSpec
from spec_sweep.state import SweepState, open_state
from spec_sweep.tracking import Tracker, TrialRecord, resolve_tracking_uri

__all__ = ["SweepOutcome", "sweep"]

log = logging.getLogger("spec_sweep")


class _TuneSearcher(Searcher):
    """Ray Tune's side of `SweepSearcher`: proposals become Tune configs, results go back.

    Tune's own snapshot of the searcher is not used to resume (the MLflow record is), so
    `save` is not implemented and Tune skips it with a warning in the driver log. The
    attribute is not called `searcher`: Tune would take this for a wrapper and descend.
    """

    def __init__(self, searcher: SweepSearcher | ConfirmQueue, spec: SweepSpec) -> None:
        super().__init__(metric=spec.objective.metric, mode=spec.objective.mode)
        self._sweep = searcher

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        """The search space is the spec's; Tune passes no `param_space`."""
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """The searcher's next proposal, tagged with our trial id and attempt number."""
        proposal = self._sweep.suggest(trial_id)
        if proposal is None:
            return Searcher.FINISHED if self._sweep.exhausted else None  # type: ignore[return-value]
        return {**proposal.params, TRIAL_ID_KEY: proposal.trial_id, ATTEMPT_KEY: proposal.attempt}

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """A trial reports once, at its end (`on_trial_complete`); nothing to do here."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell the searcher how the trial ended."""
        self._sweep.complete(trial_id, result, error=error)


@dataclass
class SweepOutcome:
    """What a sweep run ended with."""

    state: SweepState
    parent_run_id: str
    records: list[TrialRecord]
    interrupted: bool = False
    exhausted: bool = False
    study: Any = None
    new_trials: int = 0
    environment: str | None = None
    out_of_time: bool = False  # `budget.max_hours` ran out before the sweep was complete
    report: Path | None = None
    report_error: str | None = None
    verdict: Verdict | None = None
    warnings: list[str] = field(default_factory=list)


class _Interrupt(Stopper):
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


class _EnvironmentStop(Callback):
    """Stops the sweep when a trial says the node cannot start any server."""

    def __init__(self, interrupt: _Interrupt) -> None:
        self.interrupt: _Interrupt | None = interrupt
        self.reason: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}  # pickled into Tune's experiment state; the flag is per run

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.interrupt, self.reason = None, None

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        why = (trial.last_result or {}).get("environment")
        if why and self.interrupt is not None:
            self.reason = self.reason or f"trial {trial.config.get(TRIAL_ID_KEY)}: {why}"
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
            self.progress.started(str(trial.config.get(TRIAL_ID_KEY)), _clean(trial.config))

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.finished(str(trial.config.get(TRIAL_ID_KEY)), trial.last_result or {})

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.errored(str(trial.config.get(TRIAL_ID_KEY)), str(trial.error_file or ""))

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.retrying(str(trial.config.get(TRIAL_ID_KEY)))


def _clean(config: Mapping[str, Any]) -> Config:
    """A Tune trial config without our bookkeeping keys, floats rounded as the space does."""
    return {
        k: float(f"{v:.10g}") if isinstance(v, float) else v
        for k, v in config.items()
        if not k.startswith("__spec_sweep")
    }


def sweep(
    spec: SweepSpec,
    *,
    backend: TrialBackend,
    fresh: bool = False,
    state_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    progress: SweepProgress | None = None,
    failure_aware: bool = True,
    report: bool = True,
) -> SweepOutcome:
    """Run (or resume) a sweep to its budget; the programmatic core of `spec-sweep run`.

    Args:
        spec: The sweep.
        backend: Who answers the trials (`backends.make_backend`).
        fresh: Move old state aside and start over.
        state_dir: Root of the sweep state folders.
        tracking_uri: MLflow store.
        address: Ray cluster to join (else a local one is started, or the one already
            initialised in this process is used).
        progress: Live display (None: silent).
        failure_aware: Let failures teach the sampler (off only for measurements).
        report: Build the report at the end and log it to the parent run.
    """
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    options = _RunOptions(
        backend=backend, progress=progress, failure_aware=failure_aware, report=report
    )
    state = open_state(spec, state_dir=state_dir, fresh=fresh, simulate=backend.simulated)
    try:
        return _sweep_locked(spec, state, options, tracking_uri=tracking_uri, address=address)
    except SpecSweepError:
        state.discard_if_unused()  # refused before it started (cluster, store): leave no trace
        raise
    finally:
        state.close()


@dataclass(frozen=True)
class _RunOptions:
    """How a sweep runs its trials and what it shows (the arguments of `sweep`)."""

    backend: TrialBackend
    progress: SweepProgress | None
    failure_aware: bool
    report: bool


def _sweep_locked(
    spec: SweepSpec,
    state: SweepState,
    options: _RunOptions,
    *,
    tracking_uri: str | None,
    address: str | None,
) -> SweepOutcome:
    state.cleanup_leftovers()
    uri = resolve_tracking_uri(spec, tracking_uri)
    simulated = options.backend.simulated
    started_ray = start_ray(spec, address=address, simulated=simulated, state=state)
    if started_ray:
        state.save_ray_pids(ray_pids())
    try:
        n_nodes = check_cluster(spec, simulated=simulated)
        _check_tracking_reachable(uri, n_nodes=n_nodes)
        return _run(spec, state, options, uri=uri, n_nodes=n_nodes)
    finally:
        if started_ray:
            ray.shutdown()
            state.save_ray_pids([])
            shutil.rmtree(state.ray_temp_dir, ignore_errors=True)


def _check_tracking_reachable(uri: str, *, n_nodes: int) -> None:
    """Refuse a store on the driver's disk when trials run on several nodes."""
    local = uri.startswith(("sqlite:", "file:", "/", "./")) or "://" not in uri
    if n_nodes > 1 and local:
        raise SpecError(
            f"tracking URI {uri!r} is a file on this machine, which the {n_nodes} nodes that "
            "run trials cannot all reach: run an MLflow server on the "
            "head node (mlflow server --backend-store-uri sqlite:///mlruns/mlflow.db "
            "--artifacts-destination ./mlruns/artifacts --host 0.0.0.0 --port 5000) and pass "
            "--tracking-uri http://<head>:5000 (or set tracking.uri)"
        )


def _run(
    spec: SweepSpec, state: SweepState, options: _RunOptions, *, uri: str, n_nodes: int
) -> SweepOutcome:
    progress, report = options.progress, options.report
    tracker = Tracker(
        uri, spec.experiment, secrets=secret_values(spec), baseline=baseline_config(spec)
    )
    parent_run_id, reattached = tracker.start_sweep(
        spec, state_id=state.state_id, simulate=options.backend.simulated
    )
    state.save_run(parent_run_id, uri)

    all_records = tracker.trials(parent_run_id)
    for record in all_records:
        if record.status == "RUNNING":
            tracker.kill_run(record.run_id)
    records = search_records(all_records)  # confirmation boots are not search trials
    finished = latest_finished(records)
    requeue, next_index = _plan(spec, records, finished)
    remaining = spec.budget.trials - len(finished)
    if progress is not None:
        progress.begin(spec, finished=list(finished.values()), reattached=reattached)
    outcome = SweepOutcome(state=state, parent_run_id=parent_run_id, records=[])
    ctx = TrialContext(
        backend=options.backend,
        tracker=tracker,
        parent_run_id=parent_run_id,
        trials_dir=state.path / "trials",
        stop_file=state.stop_file,
    )
    interrupt = _Interrupt()
    previous = _install_sigint(interrupt, state)
    # `budget.max_hours` bounds this run as a whole, across its Tune batches.
    hours = spec.budget.max_hours
    deadline = time.monotonic() + hours * 3600 if hours else None
    try:
        environment = _EnvironmentStop(interrupt)
        if remaining > 0:
            searcher = SweepSearcher(
                spec,
                history=list(finished.values()),
                requeue=requeue[:remaining],
                next_index=next_index,
                failure_aware=options.failure_aware,
            )
            every = spec.budget.remeasure_every
            while True:
                now = tracker.trials(parent_run_id)
                left = spec.budget.trials - len(latest_finished(search_records(now)))
                due = remeasure_due(spec, now)
                if due is not None:  # the baseline again, every `remeasure_every` trials
                    if progress is not None:
                        progress.note("re-measuring the baseline (drift check)")
                    batch: SweepSearcher | ConfirmQueue = ConfirmQueue([due])
                    samples = 1
                elif left > 0 and not searcher.exhausted:
                    searched_now = spec.budget.trials - left
                    batch = searcher
                    samples = left if every is None else min(left, every - searched_now % every)
                else:
                    break
                if _past(deadline):
                    break
                _fit(spec, state, batch, ctx, samples, options, n_nodes, interrupt, environment,
                     deadline=deadline)  # fmt: skip
                outcome.environment = environment.reason
                outcome.interrupted = interrupt.event.is_set() and environment.reason is None
                after = tracker.trials(parent_run_id)
                if outcome.interrupted or outcome.environment or len(after) == len(now):
                    break  # stopped, or a batch that recorded nothing (Tune gave up)
            outcome.exhausted = searcher.exhausted
            outcome.study = searcher.study
        done = latest_finished(search_records(tracker.trials(parent_run_id)))
        searched = len(done) >= spec.budget.trials or outcome.exhausted or remaining <= 0
        # Confirmation: the top configurations booted again (more rounds while tied within
        # noise), then the baseline (drift); each batch is planned from the record.
        while searched and not outcome.interrupted and not outcome.environment:
            now = tracker.trials(parent_run_id)
            boots = plan(spec, now)
            if not boots or _past(deadline):
                break
            if progress is not None:
                progress.note(_confirm_note(spec, boots))
            _fit(
                spec, state, ConfirmQueue(boots), ctx, len(boots), options, n_nodes,
                interrupt, environment, deadline=deadline,
            )  # fmt: skip
            outcome.environment = environment.reason
            outcome.interrupted = interrupt.event.is_set() and environment.reason is None
            if len(tracker.trials(parent_run_id)) == len(now):
                break  # a batch that recorded nothing (Tune gave up): do not plan it again
    except BaseException:
        # Stopped at once (a second Ctrl-C) or failed: the sweep run ends KILLED, not RUNNING.
        with contextlib.suppress(Exception):
            tracker.finish_sweep(parent_run_id, status="KILLED")
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        kill_recorded_servers(state.path / "trials")
        for record in tracker.trials(parent_run_id):
            if record.status == "RUNNING":
                tracker.kill_run(record.run_id)
    _backfill_speedup(spec, tracker, tracker.trials(parent_run_id))
    everything = tracker.trials(parent_run_id)
    outcome.records = search_records(everything)
    done = latest_finished(outcome.records)
    outcome.new_trials = len(done) - len(finished)
    complete = (len(done) >= spec.budget.trials or outcome.exhausted) and not outcome.interrupted
    outcome.out_of_time = (
        _past(deadline)
        and not outcome.interrupted
        and (not complete or bool(plan(spec, everything)))
    )
    complete = complete and not outcome.out_of_time
    outcome.verdict = verdict(spec, everything)
    outcome.warnings = [w for w in [workload_warning(spec, everything)] if w]
    if outcome.verdict is not None:
        outcome.warnings += outcome.verdict.warnings
    if report and done:
        _publish_report(spec, tracker, outcome)
    if complete:
        final = best_metrics(spec, outcome.records)
        if outcome.verdict is not None:
            final |= confirm_metrics(outcome.verdict)
            tracker.set_tags(parent_run_id, _verdict_tags(outcome.verdict))
        tracker.finish_sweep(parent_run_id, metrics=final)
        state.mark_complete()
    else:
        tracker.finish_sweep(parent_run_id, status="KILLED")
    return outcome


def _past(deadline: float | None) -> bool:
    """Whether the run's `budget.max_hours` is used up."""
    return deadline is not None and time.monotonic() >= deadline


def _confirm_note(spec: SweepSpec, boots: Sequence[Repeat]) -> str:
    origins = list(dict.fromkeys(repeated_of(b.trial_id) for b in boots))
    if origins == [BASELINE_ID] and len(boots) == 1:
        return "re-measuring the baseline (drift check)"
    return (
        f"confirming: {len(boots)} more boot(s) of {', '.join(origins)}, interleaved "
        f"(up to {spec.budget.max_repeats} each while tied within noise)"
    )


def _verdict_tags(v: Verdict) -> dict[str, str]:
    tags = {"spec_sweep.confirm_verdict": v.label, "spec_sweep.confirm_reason": v.reason}
    if v.winner is not None:
        tags["spec_sweep.winner"] = v.winner.trial_id
    if v.recommended is not None:
        tags["spec_sweep.recommended"] = v.recommended.trial_id
    if v.drift is not None and v.drift.beyond_noise:
        tags["spec_sweep.drift"] = "the node changed under the sweep"
    return tags


def _fit(
    spec: SweepSpec,
    state: SweepState,
    source: SweepSearcher | ConfirmQueue,
    ctx: TrialContext,
    samples: int,
    options: _RunOptions,
    n_nodes: int,
    interrupt: _Interrupt,
    environment: _EnvironmentStop,
    *,
    deadline: float | None = None,
) -> None:
    """Run `samples` trials of `source` through Ray Tune, one whole node per trial; a trial
    that finds the node unable to start any server stops it (`environment`)."""
    trainable = tune.with_resources(
        tune.with_parameters(run_and_record, ctx=ctx),
        {"cpu": 1, "gpu": spec.node.gpus, NODE_RESOURCE: 1},
    )
    progress = options.progress
    callbacks: list[Callback] = [environment]
    if progress is not None:
        callbacks.append(_ProgressCallback(progress))
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=_TuneSearcher(source, spec),
            num_samples=samples,
            max_concurrent_trials=spec.budget.max_concurrent or n_nodes,
            reuse_actors=True,
            time_budget_s=max(1.0, deadline - time.monotonic()) if deadline else None,
        ),
        run_config=tune.RunConfig(
            name=f"tune-{time.time_ns()}",
            storage_path=str(state.path / "tune"),
            verbose=0,
            stop=interrupt,
            callbacks=callbacks,
            progress_reporter=None,
            log_to_file=True,
            # A node (or its Ray worker) lost mid-trial: retry the trial once, elsewhere.
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    )
    tuner.fit()


def _publish_report(spec: SweepSpec, tracker: Tracker, outcome: SweepOutcome) -> None:
    """Build the report and log it to the parent run; a failure here never fails the sweep."""
    from spec_sweep.report import publish_report

    try:
        result = publish_report(
            spec, tracker, outcome.parent_run_id, out_dir=outcome.state.path / "report"
        )
    except Exception as exc:
        log.warning("report failed", exc_info=True)
        outcome.report_error = f"{type(exc).__name__}: {exc}"
        return
    outcome.report = result.html


def _install_sigint(interrupt: _Interrupt, state: SweepState) -> Any:
    """First Ctrl-C: stop after tearing down the running trials; second: stop at once."""
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        if interrupt.event.is_set():
            raise KeyboardInterrupt
        interrupt.event.set()
        print(
            "\nstopping: tearing down the running trial (Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
        state.stop_file.touch()  # trials ending now are interrupted, not finished
        threading.Thread(
            target=kill_recorded_servers, args=(state.path / "trials",), daemon=True
        ).start()

    return signal.signal(signal.SIGINT, handler)


def _plan(
    spec: SweepSpec, records: Sequence[TrialRecord], finished: Mapping[str, TrialRecord]
) -> tuple[list[tuple[str, Config, int]], int]:
    """Trials to run first (baseline, interrupted ones) and the next new trial index."""
    attempts: dict[str, int] = {}
    configs: dict[str, Config] = {}
    for record in records:
        attempts[record.trial_id] = attempts.get(record.trial_id, 0) + 1
        configs.setdefault(record.trial_id, record.config)
    requeue: list[tuple[str, Config, int]] = []
    if BASELINE_ID not in finished:
        requeue.append((BASELINE_ID, baseline_config(spec), attempts.get(BASELINE_ID, 0) + 1))
    finished_keys = {config_key(r.config) for r in finished.values()}
    for trial_id in sorted(configs):
        if trial_id == BASELINE_ID or trial_id in finished:
            continue
        if config_key(configs[trial_id]) in finished_keys:
            continue
        requeue.append((trial_id, configs[trial_id], attempts[trial_id] + 1))
    indices = [int(t[1:]) for t in configs if t[1:].isdigit()]
    return requeue, max(indices, default=0) + 1


def _backfill_speedup(spec: SweepSpec, tracker: Tracker, records: Sequence[TrialRecord]) -> None:
    finished = latest_finished(records)
    base = finished.get(BASELINE_ID)
    if base is None or base.failure_mode is not FailureMode.NONE:
        return
    base_value = objective_value(spec, base.metrics)
    for record in finished.values():
        if SPEEDUP_METRIC in record.metrics or record.failure_mode is not FailureMode.NONE:
            continue
        up = speedup_metrics(spec, record.metrics, base_value)
        if up:
            tracker.log_metrics(record.run_id, up)
