"""Confirmation: which boots of the best configurations run next (pure).

A sweep measures each configuration once, and one boot of a node is not the node: on real
SGLang 0.5.13 on an H200 (docs/evidence/real-gpus.md) three fresh boots of one configuration spread
4.9% (CV) at concurrency 1, while each boot's own mean was known to 0.5-1.6% from its requests.
The spread between boots is several times the uncertainty within one, so more boots, not more
prompts, separate close configurations. This module plans those boots; `verdict` judges them.

- `plan`: after the search budget the top `budget.confirm` configurations are booted again
  `budget.confirm_repeats` times each, interleaved (A B C A B C); while the verdict is a tie,
  the configurations tied with the best get one more interleaved round, up to
  `budget.max_repeats` boots each (sequential confirmation: boots go where the decision is
  close; not those already known to be within `verdict.RESOLUTION` of the best); last the
  baseline once more (drift). Repeats have their own trial ids, `<trial id>.r<n>` (`ids`), run
  through the same trial path and are tagged `spec_sweep.confirms=<trial id>` in MLflow.
- `remeasure_due`: with `budget.remeasure_every` the baseline is also booted again during the
  search, after every N search trials.

Standard library and the spec only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spec_sweep.core.config import Config
from spec_sweep.core.history import History
from spec_sweep.core.ids import BASELINE_ID, is_repeat, repeat_id, repeated_of
from spec_sweep.core.verdict import RESOLUTION, Candidate, Verdict, separation, verdict

__all__ = ["Repeat", "plan", "remeasure_due"]


@dataclass(frozen=True)
class Repeat:
    """One planned confirmation boot: its trial id, the configuration, the attempt number."""

    trial_id: str
    attempt: int
    params: dict[str, object]
    config: Config


def _repeats(history: History, boots: Sequence[tuple[str, Config]]) -> list[Repeat]:
    return [
        Repeat(trial_id=tid, attempt=history.next_attempt(tid), params=dict(cfg), config=cfg)
        for tid, cfg in boots
    ]


def plan(history: History) -> list[Repeat]:
    """The next confirmation boots to run, in launch order (empty: confirmation is over).

    A function of the record only, so an interrupted sweep resumes where it stopped. Called
    again after each batch: first the `budget.confirm_repeats` boots of each of the top
    `budget.confirm` configurations, interleaved (A B C A B C); then, while the verdict is a
    tie, one more interleaved round of the tied configurations, up to `budget.max_repeats`
    boots each; last the baseline once more (drift), unless a baseline boot is already the
    last one.

    Args:
        history: Every record of the sweep so far (search and confirmation).

    Returns:
        The boots of the next batch; attempt > 1 for one that was interrupted.
    """
    budget = history.spec.budget
    top = history.feasible[: budget.confirm]
    finished = history.finished
    if len(top) >= 2:
        fixed = [
            (repeat_id(r.trial_id, n), r.config)
            for n in range(1, budget.confirm_repeats + 1)
            for r in top
            if repeat_id(r.trial_id, n) not in finished
        ]
        if fixed:
            return _repeats(history, fixed)
        judged = verdict(history)
        if judged is not None and judged.tie:
            more = [
                (repeat_id(c.trial_id, history.next_repeat(c.trial_id)), c.config)
                for c in _undecided(judged)
                if len(history.repeats_of(c.trial_id)) < budget.max_repeats
            ]
            if more:
                return _repeats(history, more)
    base = history.baseline
    if budget.remeasure_baseline and base is not None and history.is_feasible(base):
        # The drift check is always the baseline's last boot, after everything else.
        boots = [r for r in finished.values() if is_repeat(r.trial_id)]
        last = max(boots, key=lambda r: (r.start_time, r.trial_id), default=None)
        if last is None or repeated_of(last.trial_id) != BASELINE_ID:
            boot = repeat_id(BASELINE_ID, history.next_repeat(BASELINE_ID))
            return _repeats(history, [(boot, base.config)])
    return []


def _undecided(judged: Verdict) -> list[Candidate]:
    """The tied candidates whose difference from the best may still exceed `RESOLUTION`.

    A tied candidate whose 95% interval of the difference from the best lies within
    +-`RESOLUTION` is as good as the best for the user's purpose: more boots would only rank
    noise. The best is booted again along with any candidate still open.
    """
    if judged.noise_rel_sd is None or judged.t is None or len(judged.tied) < 2:
        return []
    best = judged.tied[0]
    open_ = []
    for other in judged.tied[1:]:
        diff, se = separation(best, other, judged.noise_rel_sd)
        if diff + judged.t * se > RESOLUTION:
            open_.append(other)
    return [best, *open_] if open_ else []


def remeasure_due(history: History) -> Repeat | None:
    """A baseline boot owed during the search (`budget.remeasure_every`), or None.

    After every `remeasure_every` finished search trials the baseline is booted once more, so
    a node that changes while the sweep runs shows in the drift check before the end.
    """
    budget = history.spec.budget
    every = budget.remeasure_every
    if every is None or not budget.remeasure_baseline:
        return None
    base = history.baseline
    if base is None or not history.is_feasible(base):
        return None
    searched = sum(1 for tid in history.finished if not is_repeat(tid))
    if len(history.repeats_of(BASELINE_ID)) >= searched // every:
        return None
    boot = repeat_id(BASELINE_ID, history.next_repeat(BASELINE_ID))
    return _repeats(history, [(boot, base.config)])[0]
