"""One trial inside a Ray worker: run it through the backend and record it, losing nothing.

This module owns `run_and_record`, the function Ray Tune runs for every trial. In order: a
trial the record already holds as finished (a driver crashed after it) is answered from the
record (with two fidelities, `budget.fidelity.mode: two`, only by a record of the same
weights: a real boot of a configuration booted with dummy weights is a new measurement);
servers an earlier attempt left on this node are stopped; attempts lost with their worker are
closed KILLED as `node_lost`; with `budget.reuse`, a measurement of the same configuration on
the same node fingerprint is reused; otherwise the trial's MLflow child run is opened (tagged
with its weights in a two-fidelity sweep), the backend runs the trial (a dummy-weight trial
through `node.fidelity.dummy_boot_spec`, keeping only `dummy_result`'s metrics, with no speed-up
and no ranking metric; an `environment` outcome, a node that cannot start any server, is
closed KILLED and stops the sweep instead of being recorded), and the outcome is
**written to the trial folder (`result.json`) before anything is sent to the tracking store**.
Recording then closes the child run FINISHED before the function returns to Tune
(docs/design.md, "Resume"). If the store fails while recording (or the driver dies before the
record is complete), the trial is not lost and never runs again: the retry (Tune's, or a
resumed sweep's) finds `result.json` and records it under the attempt's own child run instead
of launching the server, unless it is a SIGKILL or SIGTERM that nothing in the server's log
explains: a dying worker sees its server killed with it, which is ours, not the
configuration's, and the trial runs again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spec_sweep.core import names
from spec_sweep.core.config import Config, baseline_config, config_key, normalize_config
from spec_sweep.core.history import rank_metrics
from spec_sweep.core.ids import BASELINE_ID, is_repeat, repeated_of
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode, TrialReport, TrialResult
from spec_sweep.core.record import TrialRecord, kill_tags
from spec_sweep.core.secrets import secrets_of
from spec_sweep.errors import SpecError, TrialError
from spec_sweep.node.backends import TrialBackend
from spec_sweep.node.classify import killed_unexplained
from spec_sweep.node.command import ServerCommand, build_command
from spec_sweep.node.fidelity import dummy_boot_spec, dummy_result
from spec_sweep.node.server import kill_recorded_servers
from spec_sweep.orchestrate.cluster import node_id
from spec_sweep.present.names import run_name
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec
from spec_sweep.store.tracker import Tracker

__all__ = ["TrialContext", "run_and_record"]

_RECORD_TRIES = 3

log = logging.getLogger("spec_sweep")


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep run shares (shipped to the Ray workers).

    Attributes:
        backend: Who answers the trials.
        tracker: The MLflow store.
        parent_run_id: The sweep's parent run.
        trials_dir: `<state>/trials/`: one folder per trial and attempt.
        state_dir: The sweep's state folder, where every trial's quality gate finds the
            baseline's reference (`node.quality.baseline_reference`).
        stop_file: Exists while the driver is stopping (a trial ending then is interrupted).
    """

    backend: TrialBackend
    tracker: Tracker
    parent_run_id: str
    trials_dir: Path
    state_dir: Path
    stop_file: Path = Path("/nonexistent/spec_sweep-stop")


def run_and_record(config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    """Run one Tune trial and record it; returns what Tune reports (`TrialReport.to_tune`)."""
    return _run(config, ctx).to_tune()


def _run(config: dict[str, Any], ctx: TrialContext) -> TrialReport:
    t0 = time.monotonic()
    config = dict(config)
    trial_id = str(config.pop(names.CONFIG_TRIAL_ID))
    attempt = int(config.pop(names.CONFIG_ATTEMPT, 1))
    predicted = config.pop(names.CONFIG_PREDICTED, None)
    fidelity = config.pop(names.CONFIG_FIDELITY, None)  # None: one fidelity, real weights
    role = config.pop(names.CONFIG_FIDELITY_ROLE, None)
    spec = ctx.backend.spec
    _fill_secrets(spec)
    cfg = normalize_config(spec, config)
    tracker = ctx.tracker
    repeat = is_repeat(trial_id)  # a confirmation boot: the same configuration, booted again
    # With two fidelities a real boot of a configuration booted with dummy weights is a new
    # measurement, never answered from the dummy record (nor a dummy boot from a real one).
    weights = None if fidelity is None else str(fidelity)
    done = (
        tracker.finished_trial_by_id(ctx.parent_run_id, trial_id)
        if repeat
        else tracker.finished_trial_by_config(ctx.parent_run_id, cfg, fidelity=weights)
    )
    if done is not None:  # finished before a crash of the driver: answered from the record
        return _report(
            trial_id, done.failure_mode, done.metrics, done.reason, True,
            time_record_s=time.monotonic() - t0,
        )  # fmt: skip
    dummy = weights == names.FIDELITY_DUMMY
    tags = _fidelity_tags(weights, role)
    saved = _saved_result(ctx, trial_id, cfg)
    if saved is not None:
        # It ran and its outcome was saved, but recording failed or the driver died before it
        # could record: record it now under the attempt's own run, never run it again. (A
        # resumed driver closed that run as KILLED; the attempt did finish, so it is reopened.)
        result, run_id, folder = saved
        if tracker.run_status(run_id) != "RUNNING":
            tracker.reopen_run(run_id)
        return _finish(ctx, run_id, result, folder, t0=t0, dummy=dummy)
    here = node_id()
    # Whatever an earlier attempt left on this node goes first (a trial holds the whole node).
    kill_recorded_servers(ctx.trials_dir, node_id=here)
    attempt = _close_lost(ctx, trial_id, attempt)
    fingerprint = ctx.backend.fingerprint()
    if predicted:  # SGLang's own memory rule says it cannot boot: recorded, never launched
        return _predicted(ctx, trial_id, cfg, attempt, fingerprint, str(predicted), tags=tags)
    if spec.budget.reuse and not repeat and not dummy:
        earlier = tracker.find_reusable(fingerprint, cfg, exclude_parent=ctx.parent_run_id)
        if earlier is not None:
            report = _reuse(ctx, trial_id, cfg, attempt, fingerprint, earlier, tags=tags)
            return _timed(report, record_s=time.monotonic() - t0)
    backend = ctx.backend
    if dummy:  # random weights of the real shapes, nothing read (`node.fidelity`)
        manifests = ctx.state_dir / "manifests"
        boot_spec = dummy_boot_spec(spec, cfg, manifest_dir=manifests)
        backend = replace(backend, spec=boot_spec)  # type: ignore[type-var]
    # A replayed trial runs nothing worth watching: no system metrics.
    run_id = _open(ctx, trial_id, cfg, attempt, fingerprint, system_metrics=backend.launches)
    if tags:
        tracker.set_tags(run_id, tags)
    trial_dir = ctx.trials_dir / trial_id / f"attempt{attempt}"
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / names.RUN_ID_FILE).write_text(run_id)
    record_s = time.monotonic() - t0
    try:
        result = backend.run(
            cfg, trial_dir=trial_dir, trial_id=trial_id, node_id=here, state_dir=ctx.state_dir
        )
    except Exception as exc:
        # The machinery failed (GPUs held by others, ...), not the configuration: the attempt
        # ends KILLED with the reason and Tune retries the trial once.
        tracker.kill_run(run_id, tags=kill_tags(f"{type(exc).__name__}: {exc}"))
        raise
    if ctx.stop_file.exists():
        # The driver is stopping (Ctrl-C) and tore the server down: this trial did not finish.
        tracker.kill_run(run_id)
        return TrialReport(trial_id=trial_id, interrupted=True, reason="interrupted")
    if result.failure_mode is FailureMode.ENVIRONMENT:
        # The node cannot start any server (an import error, no GPU, a missing model): not this
        # configuration's fault. Nothing is saved or told to the searcher; the attempt ends
        # KILLED with the reason, and the driver stops the sweep (resumable once fixed).
        why = f"{result.reason} (server log: {result.log_path})"
        tracker.kill_run(run_id, tags=kill_tags(why, failure_mode=FailureMode.ENVIRONMENT))
        return TrialReport(trial_id=trial_id, interrupted=True, environment=why, reason=why)
    if dummy:  # only what a dummy boot can tell is kept, saved and recorded
        result = dummy_result(spec, cfg, result)
    (trial_dir / names.RESULT_FILE).write_text(json.dumps(result.to_dict()))
    return _finish(
        ctx, run_id, result, trial_dir, t0=time.monotonic(), spent_s=record_s, dummy=dummy
    )


def _fidelity_tags(fidelity: str | None, role: object) -> dict[str, str]:
    """The tags of a trial of a two-fidelity sweep: its weights, and why a real one runs."""
    if fidelity is None:
        return {}
    tags = {names.TAG_FIDELITY: fidelity}
    if role:
        tags[names.TAG_FIDELITY_ROLE] = str(role)
    return tags


def _fill_secrets(spec: SweepSpec) -> None:
    """Learn the values of the spec's secrets on this node from the spec file.

    They travel by name, never through Ray (`core.secrets`): a worker reads them from the spec
    file when it is readable here and sets the same `node.env` and `node.server_args`; what it
    does not find there, the trial looks up in this node's environment (`trial.run_trial`).
    """
    secrets = secrets_of(spec)
    if secrets is None or not secrets.missing() or not spec.source:
        return
    try:
        here = load_spec(spec.source, defer_flags=True)  # only its values are read here
    except (SpecError, OSError, ValueError):
        return
    known = secrets_of(here)
    node, mine = here.node, spec.node
    if known is not None and (node.env, node.server_args) == (mine.env, mine.server_args):
        secrets.fill(known.value_of)


def _predicted(
    ctx: TrialContext,
    trial_id: str,
    config: Config,
    attempt: int,
    fingerprint: str,
    why: str,
    *,
    tags: Mapping[str, str],
) -> TrialReport:
    """Record a trial SGLang's memory rule says cannot boot (`core.memory`) as a predicted
    `oom`, without launching anything: tagged `spec_sweep.predicted`, no node time spent."""
    t0 = time.monotonic()
    run_id = _open(ctx, trial_id, config, attempt, fingerprint, system_metrics=False)
    ctx.tracker.set_tags(run_id, {**tags, names.TAG_PREDICTED: "sglang memory rule"})
    trial_dir = ctx.trials_dir / trial_id / f"attempt{attempt}"
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / names.RUN_ID_FILE).write_text(run_id)
    command = ctx.backend.command(config)
    result = TrialResult(
        trial_id=trial_id,
        config=dict(config),
        failure_mode=FailureMode.OOM,
        reason=why,
        command=command.argv,
        env=dict(command.env),
        log_excerpt=why,
        started_at=time.time(),
    )
    (trial_dir / names.RESULT_FILE).write_text(json.dumps(result.to_dict()))
    return _finish(ctx, run_id, result, trial_dir, t0=t0)


def _open(
    ctx: TrialContext,
    trial_id: str,
    config: Config,
    attempt: int,
    fingerprint: str,
    *,
    system_metrics: bool,
) -> str:
    """Open the attempt's child run, named for what differs from the baseline."""
    return ctx.tracker.start_trial(
        ctx.parent_run_id,
        trial_id=trial_id,
        config=config,
        run_name=run_name(trial_id, config, baseline_config(ctx.backend.spec), attempt=attempt),
        attempt=attempt,
        fingerprint=fingerprint,
        confirms=repeated_of(trial_id) if is_repeat(trial_id) else None,
        system_metrics=system_metrics,
    )


def _close_lost(ctx: TrialContext, trial_id: str, attempt: int) -> int:
    """Close the attempts whose worker died mid-trial (Tune retries the trial) as `node_lost`;
    returns this attempt's number."""
    previous = ctx.tracker.attempts(ctx.parent_run_id, trial_id)
    for lost in previous:
        if lost.status == "RUNNING":
            ctx.tracker.kill_run(
                lost.run_id,
                tags=kill_tags(
                    "node lost: the node or its Ray worker went away mid-trial; retried elsewhere",
                    failure_mode=FailureMode.NODE_LOST,
                ),
            )
    return max(attempt, len(previous) + 1)


def _saved_result(
    ctx: TrialContext, trial_id: str, config: Config
) -> tuple[TrialResult, str, Path] | None:
    """The newest saved outcome of this trial and configuration, with its run id and folder.

    A saved crash that is a SIGKILL or SIGTERM nothing in the log explains
    (`classify.killed_unexplained`) is not an outcome: a retry follows a store error or a dead
    driver or worker, and a dying worker sees its server killed with it (the launching thread's
    death signal, or the process-tree cleanup) and saves that as a crash. Charging it to the
    configuration would make our own kill its failure (a driver killed during the baseline's
    boot recorded the baseline as a crash), and the saved outcome cannot tell the two cases
    apart, so the trial runs again (one boot more after a store error)."""
    key = config_key(config)
    found: tuple[TrialResult, str, Path] | None = None
    for path in sorted((ctx.trials_dir / trial_id).glob(f"attempt*/{names.RESULT_FILE}")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            result = TrialResult.from_dict(json.loads(path.read_text()))
            run_id = (path.parent / names.RUN_ID_FILE).read_text().strip()
            killed = killed_unexplained(result.failure_mode, result.reason, result.exit_code)
            if config_key(normalize_config(ctx.backend.spec, result.config)) == key and not killed:
                found = (result, run_id, path.parent)
    return found


def _finish(
    ctx: TrialContext,
    run_id: str,
    result: TrialResult,
    trial_dir: Path,
    *,
    t0: float,
    spent_s: float = 0.0,
    dummy: bool = False,
) -> TrialReport:
    """Record a saved outcome (a few tries); a store that keeps failing raises `TrialError`.
    A dummy-weight boot gets no speed-up and no ranking metric: it measured no objective."""
    error: Exception | None = None
    for attempt in range(_RECORD_TRIES):
        try:
            metrics = (
                dict(result.metrics)
                if dummy
                else _derived(ctx, result.trial_id, result.failure_mode, result.metrics)
            )
            _record(ctx.tracker, run_id, result, metrics, trial_dir)
            break
        except Exception as exc:
            error = exc
            log.warning("recording trial %s failed (try %d)", result.trial_id, attempt + 1)
            time.sleep(0.5 * 2**attempt)
    else:
        raise TrialError(
            f"trial {result.trial_id} ran, but recording it in the tracking store failed "
            f"({type(error).__name__}: {error}); its outcome is kept in "
            f"{trial_dir / names.RESULT_FILE} and is recorded, not run again, when the trial is "
            "retried or the sweep resumed"
        ) from error
    return _report(
        result.trial_id,
        result.failure_mode,
        metrics,
        result.reason,
        False,
        time_trial_s=result.elapsed_s,
        time_record_s=spent_s + time.monotonic() - t0,
    )


def _derived(
    ctx: TrialContext, trial_id: str, mode: FailureMode, metrics: Mapping[str, float]
) -> dict[str, float]:
    """A measured trial's metrics with the speed-up over the baseline (once the baseline is
    measured) and the metric the MLflow trials view ranks on (`History.rank_metrics`)."""
    out = dict(metrics)
    if mode is FailureMode.NONE:
        objective = Objective.of(ctx.backend.spec)
        base = objective.value(out) if trial_id == BASELINE_ID else _baseline_value(ctx)
        out.update(objective.speedup_metrics(out, base))
        out.update(rank_metrics(objective, trial_id, mode, out))
    return out


def _reuse(
    ctx: TrialContext,
    trial_id: str,
    config: Config,
    attempt: int,
    fingerprint: str,
    earlier: TrialRecord,
    *,
    tags: Mapping[str, str],
) -> TrialReport:
    """Answer a trial from a measurement made by an earlier sweep on the same node fingerprint."""
    spec, tracker = ctx.backend.spec, ctx.tracker
    run_id = _open(ctx, trial_id, config, attempt, fingerprint, system_metrics=False)
    if tags:
        tracker.set_tags(run_id, dict(tags))
    mode = earlier.failure_mode or FailureMode.CRASH
    derived = {names.SPEEDUP_METRIC, names.ranked_metric(spec.objective.metric)}
    kept = {k: v for k, v in earlier.metrics.items() if k not in derived}
    metrics = _derived(ctx, trial_id, mode, kept)
    tracker.finish_trial(
        run_id,
        failure_mode=mode,
        metrics=metrics,
        reason=f"{earlier.reason} (reused from run {earlier.run_id})",
        elapsed_s=0.0,
        reused_from=earlier.run_id,
        command=build_command(spec, config).shell(),
    )
    return _report(trial_id, mode, metrics, earlier.reason, True)


def _baseline_value(ctx: TrialContext) -> float | None:
    record = ctx.tracker.finished_trial_by_id(ctx.parent_run_id, BASELINE_ID)
    if record is None or record.failure_mode is not FailureMode.NONE:
        return None
    return Objective.of(ctx.backend.spec).value(record.metrics)


def _record(
    tracker: Tracker,
    run_id: str,
    result: TrialResult,
    metrics: Mapping[str, float],
    trial_dir: Path,
) -> None:
    command = ServerCommand(result.command, result.env).shell()
    tracker.record_result(run_id, result, command=command, folder=trial_dir, metrics=metrics)


def _report(
    trial_id: str,
    mode: FailureMode | None,
    metrics: Mapping[str, float],
    reason: str,
    from_record: bool,
    *,
    time_trial_s: float | None = None,
    time_record_s: float | None = None,
) -> TrialReport:
    return TrialReport(
        trial_id=trial_id,
        failure_mode=mode or FailureMode.CRASH,
        reason=reason,
        metrics=dict(metrics),
        from_record=from_record,
        time_trial_s=time_trial_s,
        time_record_s=time_record_s,
    )


def _timed(report: TrialReport, *, record_s: float) -> TrialReport:
    return replace(report, time_record_s=record_s)
