"""One run of a sweep, in phases over one history: resume, search, confirm, finish.

This module owns `SweepRun`, what `driver.sweep` does once the state folder, the cluster and the
store are ready. The MLflow record is the truth (docs/design.md, "Resume"); the run reads it
into a `core.history.History` when it starts and once after every batch of trials, and every
decision is a question to that history:

- resume: the sweep's parent run is created or re-attached; attempts a killed driver left
  RUNNING are closed KILLED and run again first under their ids; a fresh `SweepSearcher` is
  told every finished search trial once;
- search: batches of the searcher's proposals through Ray Tune (`tune.fit`), until the budget
  is spent or the space exhausted, with the baseline booted again every
  `budget.remeasure_every` trials;
- promote: with `budget.fidelity.mode: two` (search trials on dummy-weight boots, wrapped in
  `search.fidelity.TwoFidelitySource`), real boots of the top configurations by predicted
  value (`search.fidelity.promotions`), so the confirmation and the verdict see real boots only;
- adapt: with a concurrency list, the adaptive configuration built from the search's per-level
  results and the best static configurations, booted as `core.adaptive_judge.plan_adaptive`
  asks (`SweepRun.adapt`), before the confirmation so those boots count for both;
- confirm: the boots `core.confirm.plan` asks for, batch after batch, until it asks for none;
- finish: servers left behind are stopped and unfinished runs closed, speed-ups (and the
  ranking metric) missing from trials that ran before the baseline was measured are filled in
  (and, with two fidelities, each dummy trial's `predicted_<objective>`),
  the verdict is judged, the report published and the parent run closed with the final
  metrics (FINISHED when the sweep is complete, KILLED when it can resume).

The first Ctrl-C tears the running trials down and stops; `budget.max_hours` is one deadline
for the whole run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec_sweep.core.adaptive_judge import adaptive_metrics, adaptive_tags, plan_adaptive
from spec_sweep.core.adaptive_rules import CONFIG_FILE
from spec_sweep.core.config import baseline_config
from spec_sweep.core.confirm import Repeat, plan, remeasure_due
from spec_sweep.core.history import History, Rerun, is_dummy
from spec_sweep.core.hours import hours_metrics, node_hours
from spec_sweep.core.ids import BASELINE_ID, next_index, repeated_of
from spec_sweep.core.loads import lost_attempt_seconds
from spec_sweep.core.names import (
    SPEEDUP_METRIC,
    TAG_DRIFT,
    TAG_RECOMMENDED,
    TAG_VERDICT,
    TAG_VERDICT_REASON,
    TAG_WINNER,
    predicted_metric,
)
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import kill_tags
from spec_sweep.core.secrets import secret_values
from spec_sweep.core.verdict import Verdict, confirm_metrics, verdict, workload_warning
from spec_sweep.node.backends import TrialBackend
from spec_sweep.node.server import kill_recorded_servers
from spec_sweep.node.weight_cache import stop_daemons
from spec_sweep.orchestrate.sweep_outcome import SweepOutcome
from spec_sweep.orchestrate.trainable import TrialContext
from spec_sweep.orchestrate.tune import Batch, ConfirmQueue, EnvironmentStop, Interrupt, fit
from spec_sweep.present.live import SweepProgress
from spec_sweep.search.fidelity import (
    FidelityProposal,
    TwoFidelitySource,
    acceptance_of,
    predicted_values,
    promotions,
    resume,
)
from spec_sweep.search.searcher import SweepSearcher
from spec_sweep.spec import SweepSpec
from spec_sweep.store.state import SweepState
from spec_sweep.store.tracker import Tracker

__all__ = ["RunOptions", "SweepRun", "close_lost_attempts"]

log = logging.getLogger("spec_sweep")

#: Why a resumed driver closed an attempt its killed predecessor left running.
_LOST_REASON = (
    "lost with its driver (killed, or its machine gone); closed by the resumed driver, its "
    "node time counted to its last sign of life"
)


@dataclass(frozen=True)
class RunOptions:
    """How a sweep runs its trials and what it shows (the arguments of `driver.sweep`)."""

    backend: TrialBackend
    progress: SweepProgress | None
    failure_aware: bool
    report: bool


class SweepRun:
    """One run of one sweep (see the module doc); `run()` once."""

    def __init__(
        self, spec: SweepSpec, state: SweepState, options: RunOptions, *, uri: str, n_nodes: int
    ) -> None:
        """Prepare a run against the store at `uri` on a cluster of `n_nodes` trial nodes."""
        self.spec = spec
        self.state = state
        self.options = options
        self.tracker = Tracker(uri, spec.experiment, secrets=secret_values(spec))
        self.n_nodes = n_nodes
        self.parent_run_id = ""
        self.history = History(spec, [])
        self.outcome: SweepOutcome | None = None
        self._started_with = 0
        self._requeue: list[Rerun] = []
        self._deadline: float | None = None
        self._batch: Batch | None = None

    # -- the record ----------------------------------------------------------------------------
    def refresh(self) -> History:
        """Read the sweep's record again (once per batch)."""
        self.history = History(self.spec, self.tracker.trials(self.parent_run_id))
        return self.history

    def _progress_note(self, text: str) -> None:
        if self.options.progress is not None:
            self.options.progress.note(text)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> SweepOutcome:
        """Resume, search, confirm and finish; returns how the run ended."""
        outcome = self.resume()
        interrupt = Interrupt()
        previous = _install_sigint(interrupt, self.state)
        hours = self.spec.budget.max_hours
        self._deadline = time.monotonic() + hours * 3600 if hours else None
        backend = self.options.backend
        if self.spec.node.weight_cache and hasattr(backend, "weight_cache_dir"):
            # each node's daemon is recorded beside the trials, stopped at teardown
            backend = dataclasses.replace(backend, weight_cache_dir=self.state.trials_dir)  # type: ignore[type-var]
        self._batch = Batch(
            spec=self.spec,
            ctx=TrialContext(
                backend=backend,
                tracker=self.tracker,
                parent_run_id=self.parent_run_id,
                trials_dir=self.state.trials_dir,
                state_dir=self.state.path,
                stop_file=self.state.stop_file,
            ),
            tune_dir=self.state.path / "tune",
            n_nodes=self.n_nodes,
            interrupt=interrupt,
            environment=EnvironmentStop(interrupt),
            progress=self.options.progress,
        )
        try:
            self.search(outcome)
            self.promote(outcome)
            self.adapt(outcome)
            self.confirm(outcome)
        except BaseException:
            # Stopped at once (a second Ctrl-C) or failed: the sweep run ends KILLED, not RUNNING.
            with contextlib.suppress(Exception):
                self.tracker.finish_sweep(self.parent_run_id, status="KILLED")
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
            self.teardown()
        return self.finish(outcome)

    def resume(self) -> SweepOutcome:
        """Open (or re-attach) the parent run, close what a killed driver left RUNNING, and
        plan the trials that run again first."""
        spec, tracker = self.spec, self.tracker
        self.parent_run_id, reattached = tracker.start_sweep(
            spec, state_id=self.state.state_id, simulate=self.options.backend.simulated
        )
        self.state.save_run(self.parent_run_id, tracker.uri)
        history = self.refresh()
        close_lost_attempts(tracker, spec, history)
        history = self.refresh()
        if BASELINE_ID not in history.finished:
            base = (BASELINE_ID, baseline_config(spec), history.next_attempt(BASELINE_ID))
            self._requeue = [base]
        self._requeue += history.unfinished()
        self._started_with = len(history.done)
        if self.options.progress is not None:
            self.options.progress.begin(spec, finished=history.done, reattached=reattached)
        self.outcome = SweepOutcome(
            state=self.state, parent_run_id=self.parent_run_id, history=history
        )
        return self.outcome

    def _fit(self, outcome: SweepOutcome, source: Any, samples: int) -> History:
        """Run one batch, note how it ended, and read the record again."""
        assert self._batch is not None
        fit(self._batch, source, samples, deadline=self._deadline)
        environment = self._batch.environment.reason
        outcome.environment = environment
        outcome.interrupted = self._batch.interrupt.event.is_set() and environment is None
        return self.refresh()

    def search(self, outcome: SweepOutcome) -> None:
        """Batches of the searcher's proposals until the budget is spent (see the module doc)."""
        spec, budget = self.spec, self.spec.budget
        remaining = budget.trials - self._started_with
        if remaining <= 0:
            return
        start = self.history
        told = [r for r in start.finished.values() if r.search]
        resumed = resume(spec, start) if budget.fidelity.two else None
        first = start.next_index
        if resumed is not None:  # dummy trials told their predicted objective
            told = resumed.told
            first = next_index([r.trial_id for r in start.search] + resumed.queued_ids)
        searcher = SweepSearcher(
            spec,
            history=told,
            requeue=self._requeue[:remaining],
            next_index=first,
            failure_aware=self.options.failure_aware,
        )
        source: SweepSearcher | TwoFidelitySource = searcher
        if resumed is not None:
            source = TwoFidelitySource(
                searcher,
                resumed.fidelity,
                queued=resumed.queued,
                tried=resumed.tried,
                note=self._progress_note,
            )
        every = budget.remeasure_every
        while True:
            now = self.history
            left = budget.trials - len(now.done)
            due = remeasure_due(now)
            if due is not None:  # the baseline again, every `remeasure_every` trials
                self._progress_note("re-measuring the baseline (drift check)")
                batch: SweepSearcher | TwoFidelitySource | ConfirmQueue = ConfirmQueue([due])
                samples = 1
            elif left > 0 and not source.exhausted:
                searched_now = budget.trials - left
                batch = source
                samples = left if every is None else min(left, every - searched_now % every)
            else:
                break
            if _past(self._deadline):
                break
            after = self._fit(outcome, batch, samples)
            if outcome.interrupted or outcome.environment or len(after) == len(now):
                break  # stopped, or a batch that recorded nothing (Tune gave up)
        outcome.exhausted = source.exhausted
        outcome.study = searcher.study
        if searcher.converged is not None and searcher.converged.converged:
            outcome.converged = searcher.converged.reason

    def promote(self, outcome: SweepOutcome) -> None:
        """With `budget.fidelity.mode: two`, after the search: real boots of the top
        configurations by predicted value that no real boot measured yet
        (`search.fidelity.promotions`), so the confirmation ranks real boots only."""
        spec = self.spec
        if not spec.budget.fidelity.two:
            return

        def note(boots: Sequence[FidelityProposal]) -> str:
            ids = ", ".join(b.trial_id for b in boots)
            return (
                f"promoting: {len(boots)} real-weight boot(s) ({ids}) of the top configurations "
                "by predicted value"
            )

        self._boot_batches(outcome, lambda history: promotions(spec, history), note)

    def adapt(self, outcome: SweepOutcome) -> None:
        """With a concurrency list, after the search: boot the adaptive configuration and the
        best static ones it must beat (`core.adaptive_judge.plan_adaptive`), interleaved,
        through the same trial path, until nothing is left to boot."""
        spec = self.spec
        launches = self.options.backend.launches
        if not (spec.adaptive.enabled and spec.workload.multi_level and launches):
            return

        def note(boots: Sequence[Repeat]) -> str:
            origins = ", ".join(dict.fromkeys(b.trial_id.split(".r")[0] for b in boots))
            return (
                f"adaptive: {len(boots)} boot(s) of {origins}, interleaved (one configuration "
                "for every load against the best static ones)"
            )

        self._boot_batches(outcome, plan_adaptive, note)

    def _finish_adaptive(self, outcome: SweepOutcome) -> Path | None:
        """Write the adaptive config file to the state folder and tag the parent run; returns
        the file (None: no adaptive configuration was built)."""
        answer = outcome.view.adaptive
        if answer is None:
            return None
        self.tracker.set_tags(self.parent_run_id, adaptive_tags(answer))
        if answer.build.text is None:
            return None
        path = self.state.path / CONFIG_FILE
        path.write_text(answer.build.text + "\n")
        return path

    def confirm(self, outcome: SweepOutcome) -> None:
        """The top configurations booted again (more rounds while tied within noise), then the
        baseline (drift); each batch is planned from the record."""
        self._boot_batches(outcome, plan, lambda boots: _confirm_note(self.spec, boots))

    def _boot_batches(
        self,
        outcome: SweepOutcome,
        planner: Callable[[History], Sequence[Any]],
        note: Callable[[Sequence[Any]], str],
    ) -> None:
        """Once the search is over: the boots `planner` asks of the record, batch after batch
        through the trial path, until it asks for none (or the deadline, an interrupt, an
        environment failure, or a batch that recorded nothing)."""
        budget = self.spec.budget
        searched = (
            len(self.history.done) >= budget.trials
            or outcome.exhausted
            or outcome.converged is not None
            or budget.trials - self._started_with <= 0
        )
        while searched and not outcome.interrupted and not outcome.environment:
            now = self.history
            boots = planner(now)
            if not boots or _past(self._deadline):
                break
            self._progress_note(note(boots))
            after = self._fit(outcome, ConfirmQueue(boots), len(boots))
            if len(after) == len(now):
                break  # a batch that recorded nothing (Tune gave up): do not plan it again

    def teardown(self) -> None:
        """Stop servers left behind and close runs still open (read the record once more)."""
        kill_recorded_servers(self.state.trials_dir)
        stop_daemons(self.state.trials_dir)
        running = self.refresh().running
        for record in running:
            self.tracker.kill_run(record.run_id)
        if running:
            self.refresh()

    def finish(self, outcome: SweepOutcome) -> SweepOutcome:
        """Fill in what trials missed, judge, report and close the parent run."""
        spec, tracker = self.spec, self.tracker
        added = _backfill(tracker, self.history)
        if spec.budget.fidelity.two:
            added |= _log_predicted(tracker, spec, self.history)
        history = self.history.with_metrics(added)
        outcome.history = history
        done = history.done
        outcome.new_trials = len(done) - self._started_with
        complete = (
            len(done) >= spec.budget.trials or outcome.exhausted or outcome.converged is not None
        ) and not outcome.interrupted
        outcome.out_of_time = (
            _past(self._deadline)
            and not outcome.interrupted
            and (
                not complete
                or bool(plan(history))
                or bool(plan_adaptive(history))
                or (spec.budget.fidelity.two and bool(promotions(spec, history)))
            )
        )
        complete = complete and not outcome.out_of_time
        outcome.verdict = verdict(history)
        outcome.warnings = [w for w in [workload_warning(history)] if w]
        if outcome.verdict is not None:
            outcome.warnings += outcome.verdict.warnings
        outcome.adaptive_file = self._finish_adaptive(outcome)
        if self.options.report and done:
            self._publish_report(outcome)
        if complete:
            final = history.best_metrics() | hours_metrics(node_hours(history))
            if outcome.verdict is not None:
                final |= confirm_metrics(outcome.verdict)
                tracker.set_tags(self.parent_run_id, _verdict_tags(outcome.verdict))
            answer = outcome.view.adaptive
            final |= adaptive_metrics(answer) if answer is not None else {}
            tracker.finish_sweep(self.parent_run_id, metrics=final)
            self.state.mark_complete()
        else:
            tracker.finish_sweep(self.parent_run_id, status="KILLED")
        return outcome

    def _publish_report(self, outcome: SweepOutcome) -> None:
        """Build the report and log it to the parent run; a failure here never fails the sweep."""
        from spec_sweep.present.report import publish_report

        try:
            result = publish_report(
                self.spec,
                self.tracker,
                self.parent_run_id,
                out_dir=self.state.path / "report",
                history=outcome.history,
                judged=outcome.verdict,
            )
        except Exception as exc:
            log.warning("report failed", exc_info=True)
            outcome.report_error = f"{type(exc).__name__}: {exc}"
            return
        outcome.report = result.html


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
    tags = {TAG_VERDICT: v.label, TAG_VERDICT_REASON: v.reason}
    if v.winner is not None:
        tags[TAG_WINNER] = v.winner.trial_id
    if v.recommended is not None:
        tags[TAG_RECOMMENDED] = v.recommended.trial_id
    if v.drift is not None and v.drift.beyond_noise:
        tags[TAG_DRIFT] = "the node changed under the sweep"
    elif v.drift is not None and not v.drift.decidable:
        tags[TAG_DRIFT] = f"cannot tell: noise allows +-{v.drift.bound:.1%} ({v.drift.evidence})"
    return tags


def _backfill(tracker: Tracker, history: History) -> dict[str, dict[str, float]]:
    """Log what finished trials miss: the speed-up of trials measured before the baseline was,
    and the ranking metric of trials recorded before it existed. Returns what was logged."""
    base_value = history.baseline_value
    base = history.baseline
    added: dict[str, dict[str, float]] = {}
    for record in history.finished.values():
        if record.failure_mode is not FailureMode.NONE or is_dummy(record):
            continue  # a dummy-weight boot measured no objective: no speed-up, no rank
        missing: dict[str, float] = {}
        measured_base = base is not None and base.failure_mode is FailureMode.NONE
        if measured_base and SPEEDUP_METRIC not in record.metrics:
            missing |= history.objective.speedup_metrics(record.metrics, base_value)
        missing |= {
            k: v for k, v in history.rank_metrics(record).items() if k not in record.metrics
        }
        if missing:
            tracker.log_metrics(record.run_id, missing)
            added[record.run_id] = missing
    return added


def _log_predicted(
    tracker: Tracker, spec: SweepSpec, history: History
) -> dict[str, dict[str, float]]:
    """Log `predicted_<objective>` on each dummy-weight trial that came up: the objective its
    decode cycle and first-token time predict with the acceptance every real boot measured by
    the end (`search.fidelity`). Returns what was logged."""
    name = predicted_metric(spec.objective.metric)
    values = predicted_values(acceptance_of(spec, history), history)
    added: dict[str, dict[str, float]] = {}
    for record in history.done:
        value = values.get(record.trial_id)
        if value is not None and record.metrics.get(name) != value:
            tracker.log_metrics(record.run_id, {name: value})
            added[record.run_id] = {name: value}
    return added


def _install_sigint(interrupt: Interrupt, state: SweepState) -> Any:
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
            target=kill_recorded_servers, args=(state.trials_dir,), daemon=True
        ).start()

    return signal.signal(signal.SIGINT, handler)


def close_lost_attempts(tracker: Tracker, spec: SweepSpec, history: History) -> None:
    """Close what a killed driver left RUNNING, each timed to its last sign of life, and time
    the same way any attempt an earlier resume closed at its own start
    (`loads.lost_attempt_seconds`): a lost attempt held the node until it was lost, not until
    the next driver came."""
    now_ms, timeout_s = int(time.time() * 1000), spec.budget.trial_timeout_s
    for record in history.records:
        running = record.status == "RUNNING"  # closed whatever its time
        if not running and lost_attempt_seconds(record, None, now_ms, timeout_s) is None:
            continue  # finished, or closed in time: its run's own times stand (no store read)
        seen = tracker.last_logged_ms(record.run_id)
        elapsed = lost_attempt_seconds(record, seen, now_ms, timeout_s)
        tags = kill_tags(_LOST_REASON, elapsed_s=elapsed) if elapsed is not None else None
        if running:
            tracker.kill_run(record.run_id, tags=tags)
        elif tags is not None:
            tracker.set_tags(record.run_id, tags)
