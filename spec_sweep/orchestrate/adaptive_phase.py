"""The adaptive phase of a sweep run: boot the adaptive configuration, then record the answer.

A phase of `phases.SweepRun`, kept in its own module (README, "One configuration for every
load"). After the search, with a concurrency list, `run_adaptive_phase` runs the boots
`core.adaptive_judge.plan_adaptive` asks for (the adaptive configuration built from the
search's per-level results, interleaved with the best static configurations), batch after batch
through the same Ray Tune trial path as every confirmation boot, until it asks for none; it runs
before the confirmation, so boots of a static configuration that is also among the top count
for both. At the end `finish_adaptive` writes the adaptive config file to the state folder
(`adaptive-config.json`, the file the summary's launch command names) and tags the parent run
with the judgement; `adaptive_final_metrics` adds its metrics to the parent run's. A replayed
sweep skips the phase: a recorded table cannot answer a configuration built after the search.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from spec_sweep.core.adaptive_judge import adaptive_metrics, adaptive_tags, plan_adaptive
from spec_sweep.core.adaptive_rules import CONFIG_FILE
from spec_sweep.orchestrate.sweep_outcome import SweepOutcome
from spec_sweep.orchestrate.tune import ConfirmQueue

if TYPE_CHECKING:
    from spec_sweep.orchestrate.phases import SweepRun

__all__ = ["adaptive_final_metrics", "finish_adaptive", "run_adaptive_phase"]


def run_adaptive_phase(run: SweepRun, outcome: SweepOutcome) -> None:
    """Boot the adaptive configuration and the static ones it must beat (see the module doc)."""
    spec = run.spec
    if not (spec.adaptive.enabled and spec.workload.multi_level and run.options.backend.launches):
        return
    budget = spec.budget
    searched = (
        len(run.history.done) >= budget.trials
        or outcome.exhausted
        or budget.trials - run._started_with <= 0
    )
    deadline = run._deadline
    while searched and not outcome.interrupted and not outcome.environment:
        now = run.history
        boots = plan_adaptive(now)
        if not boots or (deadline is not None and time.monotonic() >= deadline):
            break
        origins = ", ".join(dict.fromkeys(b.trial_id.split(".r")[0] for b in boots))
        run._progress_note(
            f"adaptive: {len(boots)} boot(s) of {origins}, interleaved (one configuration for "
            "every load against the best static ones)"
        )
        after = run._fit(outcome, ConfirmQueue(boots), len(boots))
        if len(after) == len(now):
            break  # a batch that recorded nothing (Tune gave up): do not plan it again


def finish_adaptive(run: SweepRun, outcome: SweepOutcome) -> Path | None:
    """Write the adaptive config file to the state folder and tag the parent run; returns the
    file (None: no adaptive configuration was built)."""
    answer = outcome.view.adaptive
    if answer is None:
        return None
    run.tracker.set_tags(run.parent_run_id, adaptive_tags(answer))
    if answer.build.text is None:
        return None
    path = run.state.path / CONFIG_FILE
    path.write_text(answer.build.text + "\n")
    return path


def adaptive_final_metrics(run: SweepRun, outcome: SweepOutcome) -> dict[str, float]:
    """The parent run's metrics of the adaptive judgement (empty when there is none)."""
    del run
    answer = outcome.view.adaptive
    return adaptive_metrics(answer) if answer is not None else {}
