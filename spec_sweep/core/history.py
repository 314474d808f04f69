"""A sweep's history: its records, and one answer to each question asked about them (pure).

This module owns `History`, made from every record of a sweep (every attempt of every trial,
search trials and confirmation boots alike, oldest first as the store returns them). It
answers, once for every caller: which records are search trials and which repeat one; the
finished record of each trial; which search trials were measured, which meet the
constraints, their ranking and the best; the baseline; the attempts of a trial; and the
trials a resumed sweep runs again. The ranking rule is here and nowhere else: measured (no
failure, objective known), then meeting the constraints before breaking them, then the
objective in its direction, the earlier trial first on a tie; a boot with dummy weights
(`budget.fidelity.mode: two`, `is_dummy`) is never measured. The terminal summary, the
report, the MLflow trials view (through `rank_metrics`) and the confirmation plan all rank
with it. Standard library and the spec only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property

from spec_sweep.core.config import Config, config_key
from spec_sweep.core.ids import BASELINE_ID, is_repeat, next_index, repeat_number, repeated_of
from spec_sweep.core.names import FIDELITY_DUMMY, TAG_FIDELITY, ranked_metric
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.spec import SweepSpec

__all__ = ["History", "Rerun", "is_dummy", "rank_metrics"]

#: A trial to run again: its id, configuration and attempt number.
Rerun = tuple[str, Config, int]


class History:
    """Every record of one sweep, and the answers about them."""

    def __init__(self, spec: SweepSpec, records: Iterable[TrialRecord]) -> None:
        """Hold `records` (every attempt, oldest first) of the sweep `spec`."""
        self.spec = spec
        self.objective = Objective.of(spec)
        self.records: list[TrialRecord] = list(records)

    def __len__(self) -> int:
        return len(self.records)

    # -- partitions ----------------------------------------------------------------------------
    @cached_property
    def search(self) -> list[TrialRecord]:
        """Every attempt of the search trials (confirmation boots left out)."""
        return [r for r in self.records if not is_repeat(r.trial_id)]

    @cached_property
    def finished(self) -> dict[str, TrialRecord]:
        """The finished record of each trial id, search and repeats (the first that finished)."""
        out: dict[str, TrialRecord] = {}
        for record in self.records:
            if record.finished and record.trial_id not in out:
                out[record.trial_id] = record
        return out

    @cached_property
    def done(self) -> list[TrialRecord]:
        """One finished record per search trial, in the order the trials started."""
        records = (r for tid, r in self.finished.items() if not is_repeat(tid))
        return sorted(records, key=lambda r: (r.start_time, r.trial_id))

    @cached_property
    def repeat_boots(self) -> list[TrialRecord]:
        """One finished record per confirmation boot (`t0007.r1`), in the order they started."""
        records = (r for tid, r in self.finished.items() if is_repeat(tid))
        return sorted(records, key=lambda r: (r.start_time, r.trial_id))

    @property
    def running(self) -> list[TrialRecord]:
        """Attempts the store still holds as RUNNING."""
        return [r for r in self.records if r.status == "RUNNING"]

    # -- measured, feasible, ranked ------------------------------------------------------------
    def value(self, record: TrialRecord) -> float | None:
        """The objective value of a measured trial (None for a failed one, and for a boot with
        dummy weights, which measures no objective: `budget.fidelity`)."""
        if record.failure_mode is not FailureMode.NONE or is_dummy(record):
            return None
        return self.objective.value(record.metrics)

    def is_measured(self, record: TrialRecord) -> bool:
        """Whether a trial was measured: no failure and the objective known."""
        return self.value(record) is not None

    def is_feasible(self, record: TrialRecord) -> bool:
        """Whether a trial was measured and meets every constraint of the objective."""
        return self.is_measured(record) and self.objective.meets(record.metrics)

    @cached_property
    def measured(self) -> list[TrialRecord]:
        """The measured search trials, in the order they started."""
        return [r for r in self.done if self.is_measured(r)]

    @cached_property
    def ranked(self) -> list[TrialRecord]:
        """The measured search trials, best first: the one ranking rule (see the module doc)."""
        o = self.objective

        def key(record: TrialRecord) -> tuple[bool, float]:
            return (not o.meets(record.metrics), o.key(self.value(record) or 0.0))

        return sorted(self.measured, key=key)

    @property
    def feasible(self) -> list[TrialRecord]:
        """The measured search trials that meet the constraints, best first."""
        return [r for r in self.ranked if self.objective.meets(r.metrics)]

    @property
    def best(self) -> TrialRecord | None:
        """The best search trial that meets the constraints (rank 1 of `ranked`), if any."""
        feasible = self.feasible
        return feasible[0] if feasible else None

    def best_metrics(self) -> dict[str, float]:
        """`{"best_<objective metric>": value}` for the sweep's parent run, or `{}`."""
        best = self.best
        value = self.value(best) if best is not None else None
        return {f"best_{self.objective.metric}": value} if value is not None else {}

    def rank_metrics(self, record: TrialRecord) -> dict[str, float]:
        """The metric the MLflow trials view sorts on (`rank_metrics`) of a finished record."""
        if record.failure_mode is None or is_dummy(record):
            return {}
        return rank_metrics(self.objective, record.trial_id, record.failure_mode, record.metrics)

    # -- the baseline --------------------------------------------------------------------------
    @property
    def baseline(self) -> TrialRecord | None:
        """The baseline's finished record, measured or not."""
        return self.finished.get(BASELINE_ID)

    @property
    def baseline_value(self) -> float | None:
        """The baseline's objective value (None until it is measured)."""
        base = self.baseline
        return self.value(base) if base is not None else None

    # -- attempts and repeats ------------------------------------------------------------------
    @cached_property
    def attempt_counts(self) -> dict[str, int]:
        """Attempts recorded per trial id."""
        out: dict[str, int] = {}
        for record in self.records:
            out[record.trial_id] = out.get(record.trial_id, 0) + 1
        return out

    def next_attempt(self, trial_id: str) -> int:
        """The attempt number a new run of `trial_id` gets."""
        return self.attempt_counts.get(trial_id, 0) + 1

    def repeats_of(self, trial_id: str) -> list[int]:
        """The numbers of the finished boots repeating `trial_id` (`t0007.r2` -> 2), sorted."""
        return sorted(
            repeat_number(tid)
            for tid in self.finished
            if is_repeat(tid) and repeated_of(tid) == trial_id
        )

    def next_repeat(self, trial_id: str) -> int:
        """The lowest boot number of `trial_id` not finished yet (an interrupted boot keeps its
        number and runs again as its next attempt)."""
        done = set(self.repeats_of(trial_id))
        k = 1
        while k in done:
            k += 1
        return k

    # -- resuming ------------------------------------------------------------------------------
    def unfinished(self) -> list[Rerun]:
        """Search trials that started but never finished, to run again first under their ids.

        The baseline is left to the caller; a trial whose configuration another trial has
        measured since is not run again.
        """
        configs: dict[str, Config] = {}
        for record in self.search:
            configs.setdefault(record.trial_id, record.config)
        finished_keys = {config_key(r.config) for r in self.done}
        return [
            (tid, configs[tid], self.next_attempt(tid))
            for tid in sorted(configs)
            if tid != BASELINE_ID
            and tid not in self.finished
            and config_key(configs[tid]) not in finished_keys
        ]

    @property
    def next_index(self) -> int:
        """The index of the next new search trial."""
        return next_index({r.trial_id for r in self.search})

    # -- updates -------------------------------------------------------------------------------
    def with_metrics(self, added: Mapping[str, Mapping[str, float]]) -> History:
        """The same history with metrics added to some runs (run id -> metrics)."""
        return History(
            self.spec,
            [r.with_metrics(added[r.run_id]) if r.run_id in added else r for r in self.records],
        )


def is_dummy(record: TrialRecord) -> bool:
    """Whether a record is a boot with dummy weights (`budget.fidelity.mode: two`): its failure
    is the configuration's, but it measured no objective, so it is never measured, ranked,
    confirmed or recommended."""
    return record.tags.get(TAG_FIDELITY) == FIDELITY_DUMMY


def rank_metrics(
    objective: Objective, trial_id: str, mode: FailureMode, metrics: Mapping[str, float]
) -> dict[str, float]:
    """The metric the MLflow trials view sorts on, for a trial that counts in the ranking.

    `{"feasible_<objective>": value}` for a measured search trial that meets the constraints
    (`History.feasible`), else `{}`: sorted on it, the view's rank 1 is `History.best`.
    """
    if is_repeat(trial_id) or mode is not FailureMode.NONE or not objective.meets(metrics):
        return {}
    value = objective.value(metrics)
    return {ranked_metric(objective.metric): value} if value is not None else {}
