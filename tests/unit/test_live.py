"""The live table (present.live): its best so far follows the ranking rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import make_spec
from rich.console import Console

from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.present.live import SweepProgress


def _report(trial_id: str, thr: float, ttft: float, mode: FailureMode = FailureMode.NONE) -> Any:
    return TrialReport(
        trial_id=trial_id,
        failure_mode=mode,
        metrics={"output_throughput": thr, "ttft_p99_ms": ttft},
    )


def test_the_best_so_far_is_a_search_trial_that_meets_the_constraints(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        objective={"metric": "output_throughput", "constraints": {"ttft_p99_ms": {"max": 2000}}},
    )
    console = Console(record=True, width=200, color_system=None)
    progress = SweepProgress(console)
    progress.begin(spec, finished=[], reattached=False)
    for trial_id, thr, ttft, mode in [
        ("t0000", 80.0, 900.0, FailureMode.NONE),
        ("t0001", 95.0, 2500.0, FailureMode.NONE),  # breaks the constraint
        ("t0002", 99.0, 900.0, FailureMode.WRONG_OUTPUT),  # failed the quality gate
        ("t0003", 88.0, 1200.0, FailureMode.NONE),
        ("t0003.r1", 90.0, 1200.0, FailureMode.NONE),  # a confirmation boot
    ]:
        progress.started(trial_id, {})
        progress.finished(trial_id, _report(trial_id, thr, ttft, mode))
    assert "| best t0003: 88" in progress._render().title  # type: ignore[operator]
    progress.finished("t0004", TrialReport(trial_id="t0004", interrupted=True))
    assert "t0004 interrupted" in console.export_text()


def test_a_dummy_weight_trial_is_marked_and_never_the_best(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, budget={"fidelity": {"mode": "two"}})
    console = Console(record=True, width=200, color_system=None)
    progress = SweepProgress(console)
    progress.begin(spec, finished=[], reattached=False)
    progress.started("t0000", {}, fidelity="real")
    progress.finished("t0000", _report("t0000", 80.0, 900.0))
    progress.started("t0001", {}, fidelity="dummy")  # a plain dummy boot reports throughput
    progress.finished("t0001", _report("t0001", 120.0, 900.0))
    title = str(progress._render().title)
    assert "| best t0000: 80" in title
    assert "(1 with dummy weights; the budget counts both fidelities)" in title
    text = console.export_text()
    assert "two fidelities: search trials boot with dummy weights" in text
    assert "t0001 none" in text
    assert "(defaults) (dummy weights)" in text
