"""The sweep: Ray Tune schedules trials on whole nodes, Optuna proposes them, MLflow records them.

This is the only module that imports ray. `run_sweep` starts (or joins) a Ray cluster, checks
that some node can hold a trial's reservation (`node.gpus` GPUs plus one `spec_sweep_node`
unit, so one node runs one trial at a time), rebuilds the searcher's history from the MLflow
record of finished trials, and runs a `Tuner` over a function trainable that calls `run_trial`.
`SweepSearcher` (an `OptunaSearch` subclass) puts the baseline first, re-runs interrupted trials
under their old ids, never proposes a configuration already measured or running, and tells
Optuna every failed trial as FAIL with a violated `failed` constraint, which the failure-aware
TPE sampler learns from. The trainable writes the trial's MLflow child run and closes it
*before* returning to Tune, so a finished trial is never lost nor re-run (DESIGN 4.1).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import ray
from ray import tune
from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.stopper import Stopper

from spec_sweep import sampling
from spec_sweep.failures import FailureMode, SpecSweepError
from spec_sweep.progress import SweepProgress
from spec_sweep.replay import ReplayTable, load_replay
from spec_sweep.server import kill_recorded_servers
from spec_sweep.space import (
    Config,
    SearchSpace,
    baseline_config,
    build_command,
    config_key,
    node_fingerprint,
    normalize_config,
    redact,
    secret_values,
)
from spec_sweep.spec import SpecError, SweepSpec
from spec_sweep.spec_guide import SpecGuide
from spec_sweep.state import SweepState, open_state
from spec_sweep.tracking import Tracker, TrialRecord, resolve_tracking_uri
from spec_sweep.trial import TrialResult, run_trial

__all__ = ["NODE_RESOURCE", "SweepOutcome", "SweepSearcher", "run_sweep", "sweep"]

#: Custom Ray resource every node that can run trials advertises once; a trial takes it whole.
NODE_RESOURCE = "spec_sweep_node"
_TRIAL_ID = "__spec_sweep_trial_id"
_ATTEMPT = "__spec_sweep_attempt"
_BASELINE_ID = "t0000"
_MAX_REPEATS = 200
_MODEL_REPEATS = 3

log = logging.getLogger("spec_sweep")


def trial_name(index: int) -> str:
    """The id of the `index`-th trial of a sweep (`t0000` is the baseline)."""
    return f"t{index:04d}"


# ---------------------------------------------------------------------------------------------
# Objective


def objective_value(spec: SweepSpec, metrics: Mapping[str, float]) -> float | None:
    """The objective metric of a measured trial (None if not measured or not finite)."""
    value = metrics.get(spec.objective.metric)
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def speedup(spec: SweepSpec, value: float | None, baseline: float | None) -> float | None:
    """Speed-up over the baseline on the objective metric (> 1 is better in both modes)."""
    if value is None or baseline is None or value <= 0 or baseline <= 0:
        return None
    return value / baseline if spec.objective.mode == "max" else baseline / value


def constraint_violations(spec: SweepSpec, metrics: Mapping[str, float]) -> dict[str, float]:
    """Optuna constraint values (<= 0 feasible) of the objective's constraints."""
    out: dict[str, float] = {}
    for name, bound in spec.objective.constraints.items():
        value = metrics.get(name)
        out[name] = 1.0 if value is None else bound.violation(value)
    return out


# ---------------------------------------------------------------------------------------------
# Searcher


class SweepSearcher(OptunaSearch):
    """OptunaSearch with a fixed trial order, no repeats, and failures that teach the sampler.

    Order of proposals: the queue (the baseline on a fresh sweep, interrupted trials on a
    resumed one), then for TPE the screening design (`sampling.screening_design`: one-factor
    changes of the baseline, a quarter of the budget), then the model. A model proposal that
    repeats a measured configuration is asked again (three times); if the model insists, the
    sweep takes a local step instead: an unmeasured neighbour of that configuration (one value
    changed), the one least likely to fail by `sampling.FailureModel`, seeded ties. Random
    search stays random: it just draws again.
    """

    def __init__(
        self,
        spec: SweepSpec,
        *,
        history: Sequence[TrialRecord],
        requeue: Sequence[tuple[str, Config, int]],
        next_index: int,
        failure_aware: bool = True,
    ) -> None:
        """Build the study and replay the finished trials into it.

        Args:
            spec: The sweep.
            history: Finished trials from the record (told to Optuna once each).
            requeue: (trial id, configuration, attempt) to run first, in order: the baseline on
                a fresh sweep, interrupted trials on a resumed one.
            next_index: Index of the next new trial id.
            failure_aware: Let the sampler (and the local steps) learn from failed trials.
        """
        self._spec = spec
        super().__init__(
            space=SearchSpace(spec.params),
            metric=spec.objective.metric,
            mode=spec.objective.mode,
            sampler=sampling.make_sampler(spec, failure_aware=failure_aware),
        )
        self._queue = list(requeue)
        self._next_index = next_index
        self._ids: dict[str, tuple[str, Config]] = {}
        self._seen: set[str] = set()
        self._failure_aware = failure_aware
        self._rng = random.Random(f"steps:{spec.searcher.seed}")
        self.exhausted = False
        # Domain knowledge (spec_sweep.spec_guide): SGLang's tree rules before launch, and the
        # speculative branch's share of the budget. Part of the failure-aware TPE searcher.
        self._guide: SpecGuide | None = None
        if spec.searcher.kind == "tpe" and failure_aware:
            self._guide = SpecGuide(spec, seed=spec.searcher.seed)
        self._gates = sampling.gate_params(spec) if failure_aware else frozenset()
        self._turn = 0  # model proposals take turns with TPE's
        for record in history:
            sampling.add_finished(
                self.study,
                spec,
                record.config,
                value=objective_value(spec, record.metrics)
                if record.failure_mode is FailureMode.NONE
                else None,
                failed=record.failure_mode is not FailureMode.NONE,
                constraints=constraint_violations(spec, record.metrics),
                trial_id=record.trial_id,
            )
            self._seen.add(config_key(record.config))
            if self._guide is not None:
                self._seen.add(self._guide.resolve(record.config).effective_key)
                ok = record.failure_mode is FailureMode.NONE and not any(
                    v > 0 for v in constraint_violations(spec, record.metrics).values()
                )
                self._guide.observe(
                    record.config,
                    value=objective_value(spec, record.metrics) if ok else None,
                    metrics={
                        **record.metrics,
                        "failure_mode": (record.failure_mode or FailureMode.CRASH).value,
                    },
                )
        for _, config, _ in self._queue:
            self._seen.add(config_key(config))
        self._design: list[Config] = []
        if spec.searcher.kind == "tpe":
            design = sampling.screening_design(spec, seed=spec.searcher.seed)
            self._design = [c for c in design if config_key(c) not in self._seen]

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """The next configuration, tagged with our trial id and attempt number."""
        if self._queue:
            our_id, config, attempt = self._queue.pop(0)
            return self._fixed(trial_id, config, our_id=our_id, attempt=attempt)
        while self._design:
            launch = self._launchable(self._design.pop(0))
            if launch is not None:
                return self._fixed(trial_id, launch)
        if self._guide is not None:
            # Turns: a tree the speculative model ranks first (at once when the branch is below
            # its share), a system-knob step from the best trial, then TPE.
            turn, self._turn = self._turn % 3, self._turn + 1
            proposal = None
            if turn == 0 or self._guide.due():
                proposal = self._guide.propose(seen=self._seen)
            elif turn == 1:
                proposal = self._guide.exploit(seen=self._seen)
            if proposal is not None:
                return self._fixed(trial_id, proposal)
        repeated: Config | None = None
        for attempt in range(_MAX_REPEATS):
            if attempt >= _MODEL_REPEATS and repeated is not None:
                step = self._local_step(repeated)
                if step is not None:
                    return self._fixed(trial_id, step)
            if attempt < _MODEL_REPEATS or self._spec.searcher.kind != "tpe":
                params = super().suggest(trial_id)
            else:
                # No unmeasured neighbour: explore with one random proposal.
                seed = self._rng.randrange(2**31)
                with sampling.random_sampling(self.study, seed=seed):
                    params = super().suggest(trial_id)
            if params is None:
                return None
            config = normalize_config(self._spec, params)
            key = config_key(config)
            if self._guide is not None:
                launch = self._launchable(config)
                if launch is None or config_key(launch) != key:
                    # SGLang rejects it (never launched) or runs another configuration: Optuna
                    # forgets the proposal; the rewritten one is proposed as what runs.
                    ot_trial = self._ot_trials.pop(trial_id)
                    sampling.discard_repeat(self.study, ot_trial)
                    if launch is not None:
                        return self._fixed(trial_id, launch)
                    repeated = config
                    continue
            if key not in self._seen:
                return self._accept(trial_id, params, config)
            # A repeat: answered by the record, never launched. Optuna forgets it.
            repeated = config
            ot_trial = self._ot_trials.pop(trial_id)
            sampling.discard_repeat(self.study, ot_trial)
        self.exhausted = True
        return Searcher.FINISHED  # type: ignore[return-value]

    def _fixed(
        self, trial_id: str, config: Config, *, our_id: str | None = None, attempt: int = 1
    ) -> dict[str, Any] | None:
        """Propose exactly `config` (through the study, so Optuna records it)."""
        self.study.enqueue_trial(dict(config))
        params = super().suggest(trial_id)
        normalized = normalize_config(self._spec, params or {})
        return self._accept(trial_id, params or {}, normalized, our_id=our_id, attempt=attempt)

    def _launchable(self, config: Config) -> Config | None:
        """What to launch for `config` after SGLang's tree rules (None: rejected or seen)."""
        if config_key(config) in self._seen:
            return None
        if self._guide is None:
            return config
        resolved = self._guide.resolve(config)
        if resolved.launch is None or resolved.effective_key in self._seen:
            return None
        if config_key(resolved.launch) in self._seen:
            return None
        return resolved.launch

    def _accept(
        self,
        trial_id: str,
        params: dict[str, Any],
        config: Config,
        *,
        our_id: str | None = None,
        attempt: int = 1,
    ) -> dict[str, Any]:
        self._seen.add(config_key(config))
        if self._guide is not None:
            self._seen.add(self._guide.resolve(config).effective_key)
        if our_id is None:
            our_id = trial_name(self._next_index)
            self._next_index += 1
        self._ids[trial_id] = (our_id, config)
        return {**params, _TRIAL_ID: our_id, _ATTEMPT: attempt}

    def _local_step(self, config: Config) -> Config | None:
        """An unmeasured neighbour of `config`, the least likely to fail (seeded ties)."""
        launchable = (
            self._launchable(c) for c in sampling.neighbors(self._spec, config, rng=self._rng)
        )
        options = [c for c in launchable if c is not None]
        if not options:
            return None
        self._rng.shuffle(options)
        if self._failure_aware:
            model = sampling.failure_model(self.study, self._gates)
            options.sort(key=lambda c: -model.log_ok(c))
        return options[0]

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """A trial reports once, at its end (`on_trial_complete`); nothing to do here."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Tell Optuna: COMPLETE with constraints, or FAIL with a violated `failed` constraint."""
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot_trial = self._ot_trials[trial_id]
        result = result or {}
        mode = result.get("failure_mode")
        value = result.get(self._spec.objective.metric) if mode == FailureMode.NONE.value else None
        if error or mode is None or result.get("interrupted"):
            # The machinery failed (not the configuration): FAIL without a constraint, which
            # the sampler ignores.
            sampling.tell_result(self.study, ot_trial, value=None, failed=False)
        elif isinstance(value, int | float) and math.isfinite(value):
            sampling.tell_result(
                self.study,
                ot_trial,
                value=float(value),
                failed=False,
                constraints=constraint_violations(self._spec, result),
            )
        else:
            sampling.tell_result(self.study, ot_trial, value=None, failed=True)
        self._completed_trials.add(trial_id)
        if self._guide is not None and trial_id in self._ids and not error and mode is not None:
            measured = float(value) if isinstance(value, int | float) else None
            if measured is not None and (
                not math.isfinite(measured)
                or any(v > 0 for v in constraint_violations(self._spec, result).values())
            ):
                measured = None
            self._guide.observe(self._ids[trial_id][1], value=measured, metrics=result)

    @property
    def study(self) -> Any:
        """The Optuna study (typed loosely: Ray's attribute is untyped)."""
        return self._ot_study


# ---------------------------------------------------------------------------------------------
# Trainable (runs in a Ray worker)


@dataclass(frozen=True)
class _Context:
    spec: SweepSpec
    tracker: Tracker
    parent_run_id: str
    trials_dir: Path
    simulate: bool
    sim_env: dict[str, str] = field(default_factory=dict)
    grace_s: float = 10.0
    stop_file: Path = Path("/nonexistent/spec_sweep-stop")
    replay: ReplayTable | None = None
    replay_noise: float = 0.0


def _trainable(config: dict[str, Any], ctx: _Context) -> dict[str, Any]:
    t0 = time.monotonic()
    config = dict(config)
    trial_id = str(config.pop(_TRIAL_ID))
    attempt = int(config.pop(_ATTEMPT, 1))
    spec = ctx.spec
    cfg = normalize_config(spec, config)
    tracker = ctx.tracker
    done = tracker.finished_trial_by_config(ctx.parent_run_id, cfg)
    if done is not None:  # finished before a crash of the driver: answered from the record
        out = _result_dict(spec, trial_id, done.failure_mode, done.metrics, done.reason, True)
        out["time_record_s"] = time.monotonic() - t0
        return out
    node_id = ray.get_runtime_context().get_node_id()
    # Whatever an earlier attempt left on this node goes first (a trial holds the whole node).
    kill_recorded_servers(ctx.trials_dir, node_id=node_id)
    previous = tracker.attempts(ctx.parent_run_id, trial_id)
    for lost in previous:
        if lost.status == "RUNNING":
            # Its worker died mid-trial (Tune retries the trial): the attempt was lost.
            tracker.kill_run(
                lost.run_id,
                tags={
                    "failure_mode": FailureMode.NODE_LOST.value,
                    "spec_sweep.reason": "node lost: the node or its Ray worker went away "
                    "mid-trial; retried elsewhere",
                },
            )
    attempt = max(attempt, len(previous) + 1)
    fingerprint = node_fingerprint(spec, hardware=_hardware(ctx))
    if spec.budget.reuse:
        earlier = tracker.find_reusable(fingerprint, cfg, exclude_parent=ctx.parent_run_id)
        if earlier is not None:
            out = _reuse(ctx, trial_id, cfg, attempt, fingerprint, earlier)
            out["time_record_s"] = time.monotonic() - t0
            return out
    run_id = tracker.start_trial(
        ctx.parent_run_id, trial_id=trial_id, config=cfg, attempt=attempt, fingerprint=fingerprint
    )
    trial_dir = ctx.trials_dir / trial_id / f"attempt{attempt}"
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "mlflow_run_id").write_text(run_id)
    record_s = time.monotonic() - t0
    try:
        result = run_trial(
            spec,
            cfg,
            trial_dir=trial_dir,
            trial_id=trial_id,
            simulate=ctx.simulate,
            extra_env=ctx.sim_env,
            grace_s=ctx.grace_s,
            replay=ctx.replay,
            replay_noise=ctx.replay_noise,
            node_id=node_id,
        )
    except Exception as exc:
        # The machinery failed (GPUs held by others, ...), not the configuration: the attempt
        # ends KILLED with the reason and Tune retries the trial once.
        tracker.kill_run(run_id, tags={"spec_sweep.reason": f"{type(exc).__name__}: {exc}"[:4000]})
        raise
    t1 = time.monotonic()
    if ctx.stop_file.exists():
        # The driver is stopping (Ctrl-C) and tore the server down: this trial did not finish.
        tracker.kill_run(run_id)
        return {"trial_id": trial_id, "interrupted": True, "reason": "interrupted"}
    metrics = dict(result.metrics)
    value = objective_value(spec, metrics) if result.ok else None
    base = value if trial_id == _BASELINE_ID else _baseline_value(ctx)
    up = speedup(spec, value, base)
    if up is not None:
        metrics["speedup_vs_baseline"] = round(up, 4)
    _record(tracker, run_id, result, metrics, trial_dir)
    out = _result_dict(spec, trial_id, result.failure_mode, metrics, result.reason, False)
    out["time_trial_s"] = result.elapsed_s
    out["time_record_s"] = record_s + time.monotonic() - t1
    return out


def _hardware(ctx: _Context) -> str:
    """What the trial runs on, for the node fingerprint (read on the node itself)."""
    if ctx.replay is not None:
        return f"replay:{ctx.replay.path}"
    if ctx.simulate:
        return f"sim:{ctx.spec.node.sim_profile}"
    from spec_sweep.gpu import describe_gpus

    return describe_gpus()


def _reuse(
    ctx: _Context,
    trial_id: str,
    config: Config,
    attempt: int,
    fingerprint: str,
    earlier: TrialRecord,
) -> dict[str, Any]:
    """Answer a trial from a measurement made by an earlier sweep on the same node fingerprint."""
    spec, tracker = ctx.spec, ctx.tracker
    run_id = tracker.start_trial(
        ctx.parent_run_id,
        trial_id=trial_id,
        config=config,
        attempt=attempt,
        fingerprint=fingerprint,
    )
    metrics = {k: v for k, v in earlier.metrics.items() if k != "speedup_vs_baseline"}
    mode = earlier.failure_mode or FailureMode.CRASH
    value = objective_value(spec, metrics) if mode is FailureMode.NONE else None
    base = value if trial_id == _BASELINE_ID else _baseline_value(ctx)
    up = speedup(spec, value, base)
    if up is not None:
        metrics["speedup_vs_baseline"] = round(up, 4)
    command = redact(build_command(spec, config).shell(), tracker.secrets)
    tracker.finish_trial(
        run_id,
        failure_mode=mode,
        metrics=metrics,
        reason=f"{earlier.reason} (reused from run {earlier.run_id})",
        elapsed_s=0.0,
        command=command,
        extra_tags={"spec_sweep.reused_from": earlier.run_id},
    )
    return _result_dict(spec, trial_id, mode, metrics, earlier.reason, True)


def _baseline_value(ctx: _Context) -> float | None:
    record = ctx.tracker.finished_trial_by_id(ctx.parent_run_id, _BASELINE_ID)
    if record is None or record.failure_mode is not FailureMode.NONE:
        return None
    return objective_value(ctx.spec, record.metrics)


def _record(
    tracker: Tracker,
    run_id: str,
    result: TrialResult,
    metrics: Mapping[str, float],
    trial_dir: Path,
) -> None:
    from spec_sweep.space import ServerCommand

    command = ServerCommand(result.command, result.env).shell()
    bench = trial_dir / "bench.json"
    tracker.finish_trial(
        run_id,
        failure_mode=result.failure_mode,
        metrics=metrics,
        reason=result.reason,
        elapsed_s=result.elapsed_s,
        prompt_source=result.prompt_source,
        command=command,
        log_path=result.log_path,
        bench_path=bench if bench.is_file() else None,
        extra_tags={"spec_sweep.log_excerpt": result.log_excerpt[-4000:]}
        if result.log_excerpt
        else None,
    )


def _result_dict(
    spec: SweepSpec,
    trial_id: str,
    mode: FailureMode | None,
    metrics: Mapping[str, float],
    reason: str,
    from_record: bool,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "trial_id": trial_id,
        "failure_mode": (mode or FailureMode.CRASH).value,
        "reason": reason,
        "from_record": from_record,
    }
    out.update({k: float(v) for k, v in metrics.items()})
    return out


# ---------------------------------------------------------------------------------------------
# Driver


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
    report: Path | None = None
    report_error: str | None = None


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
            self.progress.started(str(trial.config.get(_TRIAL_ID)), _clean(trial.config))

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.finished(str(trial.config.get(_TRIAL_ID)), trial.last_result or {})

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.errored(str(trial.config.get(_TRIAL_ID)), str(trial.error_file or ""))

    def on_trial_recover(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        if self.progress is not None:
            self.progress.retrying(str(trial.config.get(_TRIAL_ID)))


def _clean(config: Mapping[str, Any]) -> Config:
    """A Tune trial config without our bookkeeping keys, floats rounded as the space does."""
    return {
        k: float(f"{v:.10g}") if isinstance(v, float) else v
        for k, v in config.items()
        if not k.startswith("__spec_sweep")
    }


def _check_cluster(spec: SweepSpec, *, simulate: bool) -> int:
    """Number of nodes that can hold one trial; fails fast when there is none."""
    need_gpus = float(spec.node.gpus)
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    fit = [
        n
        for n in nodes
        if n["Resources"].get("GPU", 0.0) >= need_gpus and n["Resources"].get(NODE_RESOURCE, 0) >= 1
    ]
    if not fit:
        have = ", ".join(
            f"{n['NodeManagerAddress']}: {int(n['Resources'].get('GPU', 0))} GPUs"
            + ("" if n["Resources"].get(NODE_RESOURCE) else f" (no {NODE_RESOURCE})")
            for n in nodes
        )
        hint = (
            "use --simulate to rehearse on the simulated node"
            if not simulate
            else f"start worker nodes with --num-gpus {spec.node.gpus} "
            f"--resources '{{\"{NODE_RESOURCE}\": 1}}'"
        )
        raise SpecSweepError(
            f"no node of the Ray cluster can hold a trial (node.gpus = {spec.node.gpus}); "
            f"nodes: {have or 'none'}: {hint}"
        )
    return len(fit)


def _start_ray(spec: SweepSpec, *, address: str | None, simulate: bool, state: SweepState) -> bool:
    """Connect to (or start) Ray; returns whether this call started a local cluster."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    _quiet_logs(state.path / "driver.log")
    quiet: dict[str, Any] = {
        "log_to_driver": False,
        "configure_logging": False,
        "include_dashboard": False,
    }
    if address:
        _token_auth_like_head()
        ray.init(address=address, **quiet)
        _quiet_logs(state.path / "driver.log")
        return False
    gpus: int | None = None
    if simulate:
        gpus = spec.node.gpus
    state.data["ray_temp_dir"] = state.ray_temp_dir
    state.save_ray_pids([])
    ray.init(
        num_gpus=gpus,
        resources={NODE_RESOURCE: 1},
        _temp_dir=state.ray_temp_dir,
        **quiet,
    )
    _quiet_logs(state.path / "driver.log")
    return True


def _token_auth_like_head() -> None:
    """Use token auth to join a cluster when a token is at hand and no mode is set.

    Ray 2.60's `ray start --head` turns token auth on when a token exists and RAY_AUTH_MODE is
    unset, but a driver joining with an address does not, and is then refused ("Authentication
    token is missing or incorrect"). Apply the head's own rule on the driver side.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private.authentication import authentication_token_setup as auth

        auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _quiet_logs(path: Path) -> None:
    """Send Ray's, MLflow's and Optuna's own logging to a file instead of the terminal."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    # ray.init drops the handlers of the "ray" logger; its auth module's logger keeps ours.
    names = ("ray", "ray._private.authentication", "mlflow", "optuna", "alembic", "spec_sweep")
    for name in names:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
            if isinstance(old, logging.FileHandler):
                old.close()
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET or logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


def sweep(
    spec: SweepSpec,
    *,
    simulate: bool = False,
    fresh: bool = False,
    state_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    sim_env: Mapping[str, str] | None = None,
    progress: SweepProgress | None = None,
    grace_s: float = 10.0,
    failure_aware: bool = True,
    report: bool = True,
    replay: str | Path | None = None,
    replay_noise: float = 0.0,
) -> SweepOutcome:
    """Run (or resume) a sweep to its budget; the programmatic core of `spec-sweep run`.

    Args:
        spec: The sweep.
        simulate: Use the simulated node.
        fresh: Move old state aside and start over.
        state_dir: Root of the sweep state folders.
        tracking_uri: MLflow store.
        address: Ray cluster to join (else a local one is started, or the one already
            initialised in this process is used).
        sim_env: Environment for simulated servers (e.g. `SPEC_SWEEP_SIM_TIME_SCALE`).
        progress: Live display (None: silent).
        grace_s: SIGTERM-to-SIGKILL grace at server teardown.
        failure_aware: Let failures teach the sampler (off only for measurements).
        report: Build the report at the end and log it to the parent run.
        replay: Answer trials from this recorded table (DESIGN 4.6) instead of servers.
        replay_noise: Relative sd of seeded noise on replayed metrics.
    """
    table = load_replay(replay, spec) if replay is not None else None
    simulate = simulate or table is not None
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    options = _RunOptions(
        simulate=simulate,
        sim_env=dict(sim_env or {}),
        progress=progress,
        grace_s=grace_s,
        failure_aware=failure_aware,
        report=report,
        replay=table,
        replay_noise=replay_noise,
    )
    state = open_state(spec, state_dir=state_dir, fresh=fresh, simulate=simulate)
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

    simulate: bool
    sim_env: dict[str, str]
    progress: SweepProgress | None
    grace_s: float
    failure_aware: bool
    report: bool
    replay: ReplayTable | None
    replay_noise: float


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
    simulate = options.simulate
    started_ray = _start_ray(spec, address=address, simulate=simulate, state=state)
    if started_ray:
        state.save_ray_pids(_ray_pids())
    try:
        n_nodes = _check_cluster(spec, simulate=simulate)
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
    simulate, progress, report = options.simulate, options.progress, options.report
    tracker = Tracker(uri, spec.experiment, secrets=secret_values(spec))
    parent_run_id, reattached = tracker.start_sweep(
        spec, state_id=state.state_id, simulate=simulate
    )
    state.save_run(parent_run_id, uri)

    records = tracker.trials(parent_run_id)
    finished = _latest_finished(records)
    for record in records:
        if record.status == "RUNNING":
            tracker.kill_run(record.run_id)
    requeue, next_index = _plan(spec, records, finished)
    remaining = spec.budget.trials - len(finished)
    if progress is not None:
        progress.begin(spec, finished=list(finished.values()), reattached=reattached)
    outcome = SweepOutcome(state=state, parent_run_id=parent_run_id, records=[])
    if remaining <= 0:
        outcome.records = tracker.trials(parent_run_id)
        if report:
            _publish_report(spec, tracker, outcome)
        tracker.finish_sweep(parent_run_id, metrics=_best_metrics(spec, outcome.records))
        return outcome

    interrupt = _Interrupt()
    previous = _install_sigint(interrupt, state)
    try:
        searcher = SweepSearcher(
            spec,
            history=list(finished.values()),
            requeue=requeue[:remaining],
            next_index=next_index,
            failure_aware=options.failure_aware,
        )
        ctx = _Context(
            spec=spec,
            tracker=tracker,
            parent_run_id=parent_run_id,
            trials_dir=state.path / "trials",
            simulate=simulate,
            sim_env=options.sim_env,
            grace_s=options.grace_s,
            stop_file=state.stop_file,
            replay=options.replay,
            replay_noise=options.replay_noise,
        )
        trainable = tune.with_resources(
            tune.with_parameters(_trainable, ctx=ctx),
            {"cpu": 1, "gpu": spec.node.gpus, NODE_RESOURCE: 1},
        )
        callbacks: list[Callback] = [_ProgressCallback(progress)] if progress is not None else []
        max_concurrent = spec.budget.max_concurrent or n_nodes
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=searcher,
                num_samples=remaining,
                max_concurrent_trials=max_concurrent,
                reuse_actors=True,
                time_budget_s=spec.budget.max_hours * 3600 if spec.budget.max_hours else None,
            ),
            run_config=tune.RunConfig(
                name=f"tune-{int(time.time())}",
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
        outcome.interrupted = interrupt.event.is_set()
        outcome.exhausted = searcher.exhausted
        outcome.study = searcher.study
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
    outcome.records = tracker.trials(parent_run_id)
    _backfill_speedup(spec, tracker, outcome.records)
    outcome.records = tracker.trials(parent_run_id)
    done = _latest_finished(outcome.records)
    outcome.new_trials = len(done) - len(finished)
    complete = len(done) >= spec.budget.trials or outcome.exhausted
    if report and done:
        _publish_report(spec, tracker, outcome)
    if complete:
        tracker.finish_sweep(parent_run_id, metrics=_best_metrics(spec, outcome.records))
        state.mark_complete()
    else:
        tracker.finish_sweep(parent_run_id, status="KILLED")
    return outcome


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


def _latest_finished(records: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
    """Finished trials by trial id (one each)."""
    out: dict[str, TrialRecord] = {}
    for record in records:
        if record.finished and record.trial_id not in out:
            out[record.trial_id] = record
    return out


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
    if _BASELINE_ID not in finished:
        requeue.append((_BASELINE_ID, baseline_config(spec), attempts.get(_BASELINE_ID, 0) + 1))
    finished_keys = {config_key(r.config) for r in finished.values()}
    for trial_id in sorted(configs):
        if trial_id == _BASELINE_ID or trial_id in finished:
            continue
        if config_key(configs[trial_id]) in finished_keys:
            continue
        requeue.append((trial_id, configs[trial_id], attempts[trial_id] + 1))
    indices = [int(t[1:]) for t in configs if t[1:].isdigit()]
    return requeue, max(indices, default=0) + 1


def _best_metrics(spec: SweepSpec, records: Sequence[TrialRecord]) -> dict[str, float]:
    best = best_record(spec, records)
    if best is None:
        return {}
    value = objective_value(spec, best.metrics)
    return {f"best_{spec.objective.metric}": value} if value is not None else {}


def best_record(spec: SweepSpec, records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The best finished trial that meets the constraints."""
    ok = [
        r
        for r in _latest_finished(records).values()
        if r.failure_mode is FailureMode.NONE
        and objective_value(spec, r.metrics) is not None
        and all(v <= 0 for v in constraint_violations(spec, r.metrics).values())
    ]
    if not ok:
        return None
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    return max(ok, key=lambda r: sign * (objective_value(spec, r.metrics) or 0.0))


def _backfill_speedup(spec: SweepSpec, tracker: Tracker, records: Sequence[TrialRecord]) -> None:
    finished = _latest_finished(records)
    base = finished.get(_BASELINE_ID)
    if base is None or base.failure_mode is not FailureMode.NONE:
        return
    base_value = objective_value(spec, base.metrics)
    for record in finished.values():
        if "speedup_vs_baseline" in record.metrics or record.failure_mode is not FailureMode.NONE:
            continue
        up = speedup(spec, objective_value(spec, record.metrics), base_value)
        if up is not None:
            tracker.log_metrics(record.run_id, {"speedup_vs_baseline": round(up, 4)})


def _ray_pids() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out.append({"pid": proc.pid, "create_time": proc.create_time(), "name": proc.name()})
    return out


def run_sweep(spec: SweepSpec, args: argparse.Namespace) -> int:
    """`spec-sweep run SWEEP.yaml`: run or resume the sweep with a live display."""
    from spec_sweep.cli import EXIT_INTERRUPTED, EXIT_OK

    simulate = bool(args.simulate or args.replay)
    # Simulator settings reach servers on every node, not only those that inherit this process.
    sim_env = {k: v for k, v in os.environ.items() if k.startswith("SPEC_SWEEP_SIM_")}
    progress = SweepProgress()
    with progress:
        outcome = sweep(
            spec,
            simulate=simulate,
            sim_env=sim_env if simulate else None,
            replay=args.replay,
            replay_noise=args.replay_noise,
            fresh=args.fresh,
            state_dir=args.state_dir,
            tracking_uri=args.tracking_uri,
            address=args.address,
            progress=progress,
        )
    progress.summary(spec, outcome)
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK
