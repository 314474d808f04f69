"""What a run of `driver.sweep` ended with.

`SweepOutcome` carries the sweep's history as the run left it, how the run ended (finished,
interrupted, out of time, stopped by the environment, search space exhausted), the verdict of
its confirmation boots, the report it published and the warnings; `view` is what the terminal
summary renders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from spec_sweep.core.history import History
from spec_sweep.core.record import TrialRecord
from spec_sweep.core.verdict import Verdict
from spec_sweep.present.sweep_view import SweepView
from spec_sweep.store.state import SweepState

__all__ = ["SweepOutcome"]


@dataclass
class SweepOutcome:
    """What a sweep run ended with."""

    state: SweepState
    parent_run_id: str
    history: History
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
    converged: str | None = None  # why the search stopped before its budget (until: converged)
    adaptive_file: Path | None = None  # the adaptive config file the summary's command names

    @property
    def records(self) -> list[TrialRecord]:
        """Every attempt of the search trials (confirmation boots left out)."""
        return self.history.search

    @cached_property
    def view(self) -> SweepView:
        """What a person is shown about the sweep (the terminal summary renders it)."""
        return SweepView.of(self.history, self.verdict)
