"""`core.converge`: when a search may stop before its budget (`budget.until: converged`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from harness import DROP, make_spec

from spec_sweep.core.converge import FLOOR, convergence, search_noise
from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.search.searcher import SweepSearcher


def test_patience_counts_only_improvements_beyond_the_noise() -> None:
    flat = [80.0, 85.0, 90.0, 90.3, None, 89.0, 90.5]
    # the last 4 raised the best from 90.0 to 90.5 (+0.6%): nothing beyond 1%
    done = convergence(flat, maximize=True, noise=0.01, predicted_gain=0.004, patience=4)
    assert done.converged
    assert "converged after 7 trials" in done.reason
    rising = [*flat, 95.0]
    more = convergence(rising, maximize=True, noise=0.01, predicted_gain=0.0, patience=4)
    assert not more.converged
    assert "raised the best by 5.2%" in more.reason  # 90.3 -> 95.0


def test_a_model_that_predicts_more_keeps_the_search_going() -> None:
    flat = [90.0] * 12
    assert not convergence(
        flat, maximize=True, noise=0.01, predicted_gain=0.03, patience=5
    ).converged
    unsure = convergence(flat, maximize=True, noise=0.01, predicted_gain=math.inf, patience=5)
    assert not unsure.converged
    assert "cannot say yet" in unsure.reason
    # no model at all (random search): the patience alone decides
    assert convergence(flat, maximize=True, noise=0.01, predicted_gain=None, patience=5).converged


def test_too_few_trials_never_converge_and_min_mode_is_mirrored() -> None:
    assert not convergence(
        [1.0, 1.0], maximize=True, noise=0.01, predicted_gain=0.0, patience=5
    ).converged
    assert not convergence(
        [1.0] * 8, maximize=True, noise=0.01, predicted_gain=0.0, patience=2, min_trials=10
    ).converged
    latency = [50.0, 40.0, 40.1, 39.9, 40.2]
    assert convergence(
        latency, maximize=False, noise=0.01, predicted_gain=0.0, patience=3
    ).converged
    assert not convergence(
        [*latency, 30.0], maximize=False, noise=0.01, predicted_gain=0.0, patience=3
    ).converged
    # nothing measured yet, then something: that is an improvement
    assert not convergence(
        [None, None, None, 5.0], maximize=True, noise=0.01, predicted_gain=0.0, patience=2
    ).converged


def test_the_noise_is_the_within_boot_interval_at_least_one_percent() -> None:
    wide = {
        "output_throughput": 100.0,
        "output_throughput_ci_low": 97.0,
        "output_throughput_ci_high": 103.0,
    }
    narrow = {
        "output_throughput": 100.0,
        "output_throughput_ci_low": 99.8,
        "output_throughput_ci_high": 100.2,
    }
    assert search_noise([wide, wide, narrow], "output_throughput") == pytest.approx(0.03)
    assert search_noise([narrow], "output_throughput") == FLOOR
    assert search_noise([{"output_throughput": 1.0}], "output_throughput") == FLOOR


def test_the_searcher_stops_proposing_once_converged(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        search_space={
            "include": [],
            "params": {"cuda-graph-max-bs": {"choices": list(range(8, 520, 8)), "default": 512}},
        },
        baseline=DROP,
        searcher={"kind": "random", "seed": 0},
        budget={"trials": 60, "until": "converged", "patience": 5},
    )
    searcher = SweepSearcher(
        spec, history=[], requeue=[("t0000", {"cuda-graph-max-bs": 512}, 1)], next_index=1
    )
    proposed = 0
    for i in range(60):
        proposal = searcher.suggest(f"k{i}")
        if proposal is None:
            break
        proposed += 1
        # a flat node: every configuration measures 80 tok/s
        report = TrialReport(
            proposal.trial_id, FailureMode.NONE, metrics={"output_throughput": 80.0}
        )
        searcher.complete(f"k{i}", report)
    assert proposed == 6  # the baseline, then five that brought nothing
    assert searcher.converged is not None
    assert searcher.converged.converged
    assert not searcher.exhausted
