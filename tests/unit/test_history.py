"""A sweep's history (core.history) and trial ids (core.ids): one answer to each question."""

from __future__ import annotations

from pathlib import Path

from harness import graph_spec
from harness import record as rec

from spec_sweep.core.history import History, rank_metrics
from spec_sweep.core.ids import is_repeat, next_index, repeat_id, repeat_number, repeated_of
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode
from spec_sweep.spec import SweepSpec

A = {"cuda-graph-max-bs": 128}
B = {"cuda-graph-max-bs": 64}
C = {"cuda-graph-max-bs": 256}
BASE = {"cuda-graph-max-bs": 512}


def _spec(tmp_path: Path, **objective: object) -> SweepSpec:
    spec: SweepSpec = graph_spec(tmp_path, objective={"metric": "output_throughput", **objective})
    return spec


def test_trial_ids() -> None:
    assert repeat_id("t0007", 2) == "t0007.r2"
    assert is_repeat("t0007.r2")
    assert not is_repeat("t0007")
    assert repeated_of("t0007.r2") == repeated_of("t0007") == "t0007"
    assert repeat_number("t0007.r12") == 12
    assert next_index(["t0000", "t0003", "t0001.r1", "manual"]) == 4
    assert next_index([]) == 1


def test_search_trials_and_repeats_apart(tmp_path: Path) -> None:
    records = [
        rec("t0000", BASE, 80.0),
        rec("t0001", A, 90.0),
        rec("t0001.r1", A, 99.0, start=5),  # a lucky boot is not a search trial
        rec("t0002", B, None),
    ]
    history = History(_spec(tmp_path), records)
    assert [r.trial_id for r in history.search] == ["t0000", "t0001", "t0002"]
    assert [r.trial_id for r in history.done] == ["t0000", "t0001", "t0002"]
    assert set(history.finished) == {"t0000", "t0001", "t0001.r1", "t0002"}
    assert [r.trial_id for r in history.measured] == ["t0000", "t0001"]
    assert [r.trial_id for r in history.ranked] == ["t0001", "t0000"]
    best = history.best
    assert best is not None
    assert best.trial_id == "t0001"
    assert history.baseline_value == 80.0
    assert history.best_metrics() == {"best_output_throughput": 90.0}
    assert history.repeats_of("t0001") == [1]
    assert history.next_repeat("t0001") == 2
    assert [r.trial_id for r in history.repeat_boots] == ["t0001.r1"]


def test_the_first_finished_attempt_counts_and_attempts_are_counted(tmp_path: Path) -> None:
    records = [
        rec("t0001", A, None, status="KILLED", start=1),
        rec("t0001", A, 85.0, start=2),
        rec("t0002", B, None, status="RUNNING", start=3),
    ]
    history = History(_spec(tmp_path), records)
    assert history.attempt_counts == {"t0001": 2, "t0002": 1}
    assert history.next_attempt("t0001") == 3
    assert history.finished["t0001"].metrics == {"output_throughput": 85.0}
    assert [r.trial_id for r in history.running] == ["t0002"]
    # The interrupted trial runs again first, under its id; the baseline is the caller's.
    assert history.unfinished() == [("t0002", B, 2)]
    assert history.next_index == 3


def test_a_trial_whose_configuration_was_measured_since_is_not_run_again(tmp_path: Path) -> None:
    records = [rec("t0001", A, None, status="KILLED"), rec("t0002", A, 85.0)]
    assert History(_spec(tmp_path), records).unfinished() == []


def test_ranking_puts_constraint_breakers_last_and_ties_to_the_earlier_trial(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path, constraints={"ttft_p99_ms": {"max": 2000}})
    records = [
        rec("t0000", BASE, 80.0, ttft_p99_ms=900.0),
        rec("t0001", A, 95.0, ttft_p99_ms=2500.0),  # fastest, breaks the constraint
        rec("t0002", B, 88.0, ttft_p99_ms=1200.0),
        rec("t0003", C, 88.0, ttft_p99_ms=1000.0),  # ties t0002, started later
        rec("t0004", C, 99.0, mode=FailureMode.WRONG_OUTPUT),  # measured, then failed
    ]
    history = History(spec, records)
    assert [r.trial_id for r in history.ranked] == ["t0002", "t0003", "t0000", "t0001"]
    assert [r.trial_id for r in history.feasible] == ["t0002", "t0003", "t0000"]
    assert not history.is_measured(records[4])
    best = history.best
    assert best is not None
    assert best.trial_id == "t0002"
    assert history.rank_metrics(records[2]) == {"feasible_output_throughput": 88.0}
    assert history.rank_metrics(records[1]) == {}  # breaks a constraint
    assert history.rank_metrics(records[4]) == {}  # failed
    objective = Objective.of(spec)
    ok = {"output_throughput": 90.0, "ttft_p99_ms": 100.0}
    assert rank_metrics(objective, "t0002.r1", FailureMode.NONE, ok) == {}  # a repeat


def test_no_feasible_trial_has_no_best(tmp_path: Path) -> None:
    spec = _spec(tmp_path, constraints={"ttft_p99_ms": {"max": 100}})
    history = History(spec, [rec("t0000", BASE, 80.0, ttft_p99_ms=900.0)])
    assert [r.trial_id for r in history.ranked] == ["t0000"]
    assert history.best is None
    assert history.best_metrics() == {}


def test_minimised_objective_ranks_lowest_first(tmp_path: Path) -> None:
    spec = _spec(tmp_path, metric="ttft_p99_ms", mode="min")
    records = [
        rec("t0000", BASE, 900.0, metric="ttft_p99_ms"),
        rec("t0001", A, 700.0, metric="ttft_p99_ms"),
    ]
    assert [r.trial_id for r in History(spec, records).ranked] == ["t0001", "t0000"]


def test_with_metrics_adds_to_the_named_runs_only(tmp_path: Path) -> None:
    history = History(_spec(tmp_path), [rec("t0000", BASE, 80.0), rec("t0001", A, 90.0)])
    added = history.with_metrics({"r-t0001": {"speedup_vs_baseline": 1.125}})
    assert added.finished["t0001"].metrics["speedup_vs_baseline"] == 1.125
    assert "speedup_vs_baseline" not in added.finished["t0000"].metrics
    assert "speedup_vs_baseline" not in history.finished["t0001"].metrics
