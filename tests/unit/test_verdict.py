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
    # two boots each, 2.5% apart: A is not shown to be within 1% of B, so the best mean it is
    assert v.recommended.trial_id == "t0002"
    assert "tie within noise" in v.reason
    assert "no other is shown to be within 1%" in v.reason
    assert v.winner.ci_low < v.winner.mean < v.winner.ci_high
    assert v.drift is not None
    assert not v.drift.beyond_noise
    m = confirm_metrics(v)
    assert m["confirm_trials"] == 5
    assert m["confirm_tie"] == 1.0


def test_the_lower_risk_pick_is_among_those_shown_within_one_percent(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0003", BAD, None),
        _rec("t0002.r1", B, 110.25),
        _rec("t0001.r1", A, 110.0),
        _rec("t0002.r2", B, 110.35),
        _rec("t0001.r2", A, 110.1),
    ]
    v = verdict(History(spec, records))
    assert v is not None
    assert v.tie
    assert v.winner is not None
    assert v.winner.trial_id == "t0002"
    assert v.recommended is not None
    assert v.recommended.trial_id == "t0001"  # within 1% of the best, fewer flags changed
    assert "within 1% of the best, it changes 1 flag(s)" in v.reason


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


def test_small_df_quantiles_are_exact() -> None:
    # t with 1 and 2 degrees of freedom in closed form (Student's tables: 31.82, 6.965 at 99%)
    assert t_quantile(1, 0.99) == pytest.approx(31.821, rel=1e-3)
    assert t_quantile(2, 0.99) == pytest.approx(6.965, rel=1e-3)
    assert t_quantile(2, 0.975) == pytest.approx(4.303)


def _confirmed(spread: float) -> list[object]:
    """Two candidates booted four times each around 110 and 130, +-`spread` (relative)."""
    out = [_rec("t0000", BASE, 100.0), _rec("t0001", A, 110.0), _rec("t0002", B, 130.0)]
    for n, sign in enumerate((1, -1, 1, -1), start=1):
        out.append(_rec(f"t0001.r{n}", A, 110.0 * (1 + sign * spread), start=10 + n))
        out.append(_rec(f"t0002.r{n}", B, 130.0 * (1 - sign * spread), start=10 + n))
    return out


def test_drift_fires_where_the_boots_are_quiet(tmp_path: Path) -> None:
    # boots spread ~1%: an 8% slower baseline at the end is the node, not noise
    records = [*_confirmed(0.01), _rec("t0000.r1", BASE, 92.0, start=99)]
    v = verdict(History(_spec(tmp_path), records))
    assert v is not None
    assert v.drift is not None
    assert v.drift.decidable
    assert v.drift.bound < 0.08
    assert v.drift.beyond_noise
    assert "between-boot sd" in v.drift.describe()
    assert confirm_metrics(v)["baseline_drift_decidable"] == 1.0


def test_drift_says_plainly_when_the_boots_are_too_noisy_to_tell(tmp_path: Path) -> None:
    # boots spread as the real 0.5.17 baseline on the H200 (616.9, 437.4, 543.8 tok/s: 17% CV)
    records = [*_confirmed(0.17), _rec("t0000.r1", BASE, 92.0, start=99)]
    v = verdict(History(_spec(tmp_path), records))
    assert v is not None
    assert v.drift is not None
    assert not v.drift.decidable
    assert not v.drift.beyond_noise
    assert v.drift.bound > 0.3
    assert "cannot tell a smaller drift from boot-to-boot noise" in v.drift.describe()
    assert confirm_metrics(v)["baseline_drift_decidable"] == 0.0


def test_within_boot_intervals_alone_never_call_a_drift(tmp_path: Path) -> None:
    spec = _spec(tmp_path, confirm=0)
    ci = {"output_throughput_ci_low": 99.0, "output_throughput_ci_high": 101.0}
    records = [
        _rec("t0000", BASE, 100.0, **ci),
        _rec(
            "t0000.r1",
            BASE,
            90.0,
            start=99,
            output_throughput_ci_low=89.0,
            output_throughput_ci_high=91.0,
        ),
    ]
    v = verdict(History(spec, records))
    assert v is not None
    assert v.drift is not None
    assert v.drift.bound == pytest.approx(2 * (0.01**2 + (1 / 90) ** 2) ** 0.5)
    assert not v.drift.beyond_noise  # -10% is beyond the within-boot intervals, not the boots
    assert not v.drift.decidable
    assert "no configuration was booted twice" in v.drift.describe()
