"""What the confirmation boots decided, and the baseline's drift (core.verdict), pure."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import CONFIRM_A, CONFIRM_B, CONFIRM_BAD, CONFIRM_BASE
from harness import confirm_spec as _spec
from harness import record as _rec

from spec_sweep.core.history import History
from spec_sweep.core.verdict import confirm_metrics, t_quantile, verdict, workload_warning
from spec_sweep.errors import SpecError

BASE, A, B, BAD = CONFIRM_BASE, CONFIRM_A, CONFIRM_B, CONFIRM_BAD


def test_drift_over_several_remeasures_reports_the_worst(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    base = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 130.0),
        _rec("t0002.r1", B, 131.0),
        _rec("t0001.r1", A, 110.5),
        _rec("t0002.r2", B, 129.0),
        _rec("t0001.r2", A, 109.5),
    ]
    # The node slowed in the middle of the sweep and recovered by the end.
    series = [
        _rec("t0000.r1", BASE, 99.5, start=3),
        _rec("t0000.r2", BASE, 85.0, start=5),
        _rec("t0000.r3", BASE, 100.5, start=99),
    ]
    v = verdict(History(spec, base + series))
    assert v is not None
    assert v.drift is not None
    assert v.drift.boots == 3
    assert v.drift.change == pytest.approx(0.005)  # the last boot alone looks fine
    assert v.drift.worst == pytest.approx(-0.15)
    assert confirm_metrics(v)["baseline_drift_max"] == pytest.approx(-0.15)
    assert v.drift.beyond_noise
    assert any("-15.0%" in w and "3 re-measure(s)" in w for w in v.warnings)
    # Three comparisons get a wider bound than one (Bonferroni).
    one = verdict(History(spec, [*base, series[0]]))
    assert one is not None
    assert one.drift is not None
    assert v.drift.bound > one.drift.bound
    assert not one.drift.beyond_noise


def test_budget_repeat_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(
        SpecError, match=r"test.yaml: budget: confirm_max_repeats 2 is below confirm_repeats 3"
    ):
        _spec(tmp_path, confirm_repeats=3, confirm_max_repeats=2)
    with pytest.raises(SpecError, match="remeasure_every 5 needs remeasure_baseline: true"):
        _spec(tmp_path, remeasure_every=5, remeasure_baseline=False)
    assert _spec(tmp_path).budget.max_repeats == 4  # twice confirm_repeats


def test_tie_within_noise_recommends_lower_risk(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0003", BAD, None),  # one step from both A and B
        _rec("t0002.r1", B, 108.0),
        _rec("t0001.r1", A, 112.0),
        _rec("t0002.r2", B, 112.5),
        _rec("t0001.r2", A, 107.0),
        _rec("t0000.r1", BASE, 101.0),
    ]
    v = verdict(History(spec, records))
    assert v is not None
    assert v.spent == 5
    assert v.tie
    assert v.label == "tie within noise"
    assert v.winner is not None
    assert v.winner.trial_id == "t0002"
    assert v.recommended is not None
    assert v.recommended.trial_id == "t0001"
    assert "tie within noise" in v.reason
    assert "t0001" in v.reason
    assert v.winner.ci_low < v.winner.mean < v.winner.ci_high
    assert v.drift is not None
    assert not v.drift.beyond_noise
    m = confirm_metrics(v)
    assert m["confirm_trials"] == 5
    assert m["confirm_tie"] == 1.0


def test_clear_winner_and_drift_beyond_noise(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 130.0),
        _rec("t0002.r1", B, 131.0),
        _rec("t0001.r1", A, 110.5),
        _rec("t0002.r2", B, 129.0),
        _rec("t0001.r2", A, 109.5),
        _rec("t0000.r1", BASE, 90.0),
    ]
    v = verdict(History(spec, records))
    assert v is not None
    assert not v.tie
    assert v.label == "confirmed winner"
    assert v.recommended is v.winner
    assert v.winner is not None
    assert v.winner.trial_id == "t0002"
    assert v.winner.values == (131.0, 129.0)  # fresh boots only: t0002 was picked for 130
    assert v.drift is not None
    assert v.drift.beyond_noise
    assert v.drift.change == pytest.approx(-0.1)
    assert any("node changed under the sweep" in w for w in v.warnings)


def test_workload_warning_from_baseline_interval(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    loose = _rec(
        "t0000", BASE, 100.0, output_throughput_ci_low=97.0, output_throughput_ci_high=103.0
    )
    warning = workload_warning(History(spec, [loose]))
    assert warning is not None
    assert "workload.num_prompts" in warning
    assert "+-3.0%" in warning
    tight = _rec(
        "t0000", BASE, 100.0, output_throughput_ci_low=99.5, output_throughput_ci_high=100.5
    )
    assert workload_warning(History(spec, [tight])) is None


def test_t_quantile() -> None:
    assert t_quantile(2) == pytest.approx(4.303)
    assert t_quantile(1000) == pytest.approx(1.96, abs=0.01)
    # other levels: Cornish-Fisher, checked against exact values of Student's t
    assert t_quantile(10, 0.995) == pytest.approx(3.169, rel=0.01)
    assert t_quantile(30, 1 - 0.025 / 3) == pytest.approx(2.536, rel=0.01)
    assert t_quantile(4, 0.975 + 1e-12) == pytest.approx(2.776, rel=0.01)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)
