"""Per-trial intervals (metrics) and the confirmation verdict (search.confirm), pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from spec_sweep.client import LevelResult, RequestOutput
from spec_sweep.errors import SpecError
from spec_sweep.failures import FailureMode
from spec_sweep.metrics import level_intervals, level_metrics
from spec_sweep.search import confirm
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import TrialRecord
from tests.harness import DROP, make_spec


def _level(latencies: list[float], tokens: int = 64) -> LevelResult:
    outs = tuple(
        RequestOutput(output_tokens=tokens, ttft_s=0.01, itl_s=[], latency_s=lat)
        for lat in latencies
    )
    return LevelResult(
        concurrency=1,
        outputs=outs,
        duration_s=sum(latencies),
        server_accept_length=None,
        hung=False,
    )


def test_interval_brackets_value_and_narrows_with_steadier_requests() -> None:
    noisy = _level([0.08, 0.09, 0.1, 0.11, 0.12, 0.08, 0.1, 0.12] * 2)
    steady = _level([0.099, 0.1, 0.101, 0.1] * 4)
    widths = []
    for level in (noisy, steady):
        m = level_metrics(level)
        ci = level_intervals(level, m)
        value = m["output_throughput"]
        assert ci["output_throughput_ci_low"] < value < ci["output_throughput_ci_high"]
        assert ci["request_throughput_ci_low"] < m["request_throughput"]
        widths.append((ci["output_throughput_ci_high"] - ci["output_throughput_ci_low"]) / value)
    assert widths[0] > 5 * widths[1]
    # identical requests: the throughput is known exactly from this boot
    exact = _level([0.1] * 8)
    m = level_metrics(exact)
    ci = level_intervals(exact, m)
    assert ci["output_throughput_ci_low"] == pytest.approx(m["output_throughput"])
    assert level_intervals(_level([0.1]), level_metrics(_level([0.1]))) == {}


def _spec(tmp_path: Path, **budget: object) -> SweepSpec:
    spec: SweepSpec = make_spec(
        tmp_path,
        search_space={
            "include": [],
            "params": {
                "cuda-graph-max-bs": {"choices": [64, 128, 256, 512], "default": 512},
                "disable-custom-all-reduce": {"choices": [False, True], "default": False},
            },
        },
        baseline=DROP,
        budget={
            "trials": 6,
            "confirm": 2,
            "confirm_repeats": 2,
            "remeasure_baseline": True,
            **budget,
        },
    )
    return spec


def _rec(
    tid: str, cfg: dict[str, object], value: float | None, start: int | None = None, **extra: float
) -> TrialRecord:
    mode = FailureMode.NONE if value is not None else FailureMode.OOM
    metrics = {"output_throughput": value, **extra} if value is not None else {}
    return TrialRecord(
        run_id=f"r-{tid}",
        trial_id=tid,
        status="FINISHED",
        config=dict(cfg),  # type: ignore[arg-type]
        failure_mode=mode,
        metrics=metrics,  # type: ignore[arg-type]
        start_time=start if start is not None else int(tid[1:5]),
    )


BASE = {"cuda-graph-max-bs": 512, "disable-custom-all-reduce": False}
A = {"cuda-graph-max-bs": 128, "disable-custom-all-reduce": False}
B = {"cuda-graph-max-bs": 64, "disable-custom-all-reduce": True}
BAD = {"cuda-graph-max-bs": 64, "disable-custom-all-reduce": False}


def test_plan_interleaves_top_k_then_remeasures_baseline(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    search = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0003", BAD, None),
    ]
    boots = confirm.plan(spec, search)
    assert [b.trial_id for b in boots] == ["t0002.r1", "t0001.r1", "t0002.r2", "t0001.r2"]
    assert boots[0].config == B
    done = [*search, _rec("t0002.r1", B, 109.0)]
    assert next(b.trial_id for b in confirm.plan(spec, done)) == "t0001.r1"
    # An interrupted boot keeps its id and is launched as its next attempt.
    killed = TrialRecord(**{**_rec("t0001.r1", A, 1.0).__dict__, "status": "KILLED"})
    again = confirm.plan(spec, [*done, killed])
    assert (again[0].trial_id, again[0].attempt) == ("t0001.r1", 2)
    # A clear winner after the fixed rounds: no more rounds, the baseline last (drift) ...
    clear = [
        *done,
        _rec("t0001.r1", A, 100.0),
        _rec("t0002.r2", B, 110.0),
        _rec("t0001.r2", A, 100.5),
    ]
    assert [(b.trial_id, b.config) for b in confirm.plan(spec, clear)] == [("t0000.r1", BASE)]
    # ... and nothing once that boot is the last one.
    assert confirm.plan(spec, [*clear, _rec("t0000.r1", BASE, 99.0, start=99)]) == []
    assert confirm.plan(_spec(tmp_path, confirm=0, remeasure_baseline=False), search) == []


def test_tie_gets_more_rounds_of_the_tied_up_to_max_repeats(tmp_path: Path) -> None:
    spec = _spec(tmp_path, confirm=3, confirm_max_repeats=3)
    C = {"cuda-graph-max-bs": 256, "disable-custom-all-reduce": False}
    records = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0003", C, 112.0),
        _rec("t0003.r1", C, 113.0),
        _rec("t0002.r1", B, 108.0),
        _rec("t0001.r1", A, 100.0),
        _rec("t0003.r2", C, 112.0),
        _rec("t0002.r2", B, 112.5),
        _rec("t0001.r2", A, 101.0),
    ]
    v = confirm.verdict(spec, records)
    assert v is not None
    assert v.tie
    assert v.winner is not None
    assert v.winner.trial_id == "t0003"
    # B cannot be told from the best, A can: only the tied ones are booted again.
    assert [c.trial_id for c in v.tied] == ["t0003", "t0002"]
    boots = confirm.plan(spec, records)
    assert [b.trial_id for b in boots] == [f"{c.trial_id}.r3" for c in v.tied]
    more = [*records, *(_rec(b.trial_id, b.config, 110.0) for b in boots)]
    # At confirm_max_repeats the tie stands: the baseline's drift boot ends the confirmation.
    assert [b.trial_id for b in confirm.plan(spec, more)] == ["t0000.r1"]


def test_no_more_rounds_when_a_tie_is_within_the_resolution(tmp_path: Path) -> None:
    # Steady boots, means 0.2% apart: tied, but the interval of the difference is inside +-1%,
    # so more boots would only rank noise; the confirmation ends with the drift boot.
    spec = _spec(tmp_path, confirm_max_repeats=6)
    steady = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0002.r1", B, 110.1),
        _rec("t0001.r1", A, 110.0),
        _rec("t0002.r2", B, 110.3),
        _rec("t0001.r2", A, 110.0),
    ]
    v = confirm.verdict(spec, steady)
    assert v is not None
    assert v.tie
    assert [b.trial_id for b in confirm.plan(spec, steady)] == ["t0000.r1"]
    # The same means with a wider spread leave the difference open: both get another boot.
    noisy = [
        *steady[:3],
        *(
            _rec(r.trial_id, r.config, x)
            for r, x in zip(steady[3:], (108.0, 112.0, 112.6, 108.0), strict=True)
        ),
    ]
    assert [b.trial_id for b in confirm.plan(spec, noisy)] == ["t0002.r3", "t0001.r3"]


def test_remeasure_due_every_n_search_trials(tmp_path: Path) -> None:
    spec = _spec(tmp_path, remeasure_every=2)
    records = [_rec("t0000", BASE, 100.0)]
    assert confirm.remeasure_due(spec, records) is None
    records.append(_rec("t0001", A, 110.0))
    due = confirm.remeasure_due(spec, records)
    assert due is not None
    assert (due.trial_id, due.config) == ("t0000.r1", BASE)
    records.append(_rec("t0000.r1", BASE, 101.0))
    assert confirm.remeasure_due(spec, records) is None
    records += [_rec("t0002", B, 111.0), _rec("t0003", BAD, None)]
    due = confirm.remeasure_due(spec, records)
    assert due is not None
    assert due.trial_id == "t0000.r2"
    assert confirm.remeasure_due(_spec(tmp_path), records) is None
    # A failed baseline has nothing to re-measure.
    assert confirm.remeasure_due(spec, [_rec("t0000", BASE, None), records[1]]) is None


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
    v = confirm.verdict(spec, base + series)
    assert v is not None
    assert v.drift is not None
    assert v.drift.boots == 3
    assert v.drift.change == pytest.approx(0.005)  # the last boot alone looks fine
    assert v.drift.worst == pytest.approx(-0.15)
    assert confirm.confirm_metrics(v)["baseline_drift_max"] == pytest.approx(-0.15)
    assert v.drift.beyond_noise
    assert any("-15.0%" in w and "3 re-measure(s)" in w for w in v.warnings)
    # Three comparisons get a wider bound than one (Bonferroni).
    one = confirm.verdict(spec, [*base, series[0]])
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
    v = confirm.verdict(spec, records)
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
    m = confirm.confirm_metrics(v)
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
    v = confirm.verdict(spec, records)
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
    warning = confirm.workload_warning(spec, [loose])
    assert warning is not None
    assert "workload.num_prompts" in warning
    assert "+-3.0%" in warning
    tight = _rec(
        "t0000", BASE, 100.0, output_throughput_ci_low=99.5, output_throughput_ci_high=100.5
    )
    assert confirm.workload_warning(spec, [tight]) is None


def test_t_quantile() -> None:
    assert confirm.t_quantile(2) == pytest.approx(4.303)
    assert confirm.t_quantile(1000) == pytest.approx(1.96, abs=0.01)
    # other levels: Cornish-Fisher, checked against exact values of Student's t
    assert confirm.t_quantile(10, 0.995) == pytest.approx(3.169, rel=0.01)
    assert confirm.t_quantile(30, 1 - 0.025 / 3) == pytest.approx(2.536, rel=0.01)
    assert confirm.t_quantile(4, 0.975 + 1e-12) == pytest.approx(2.776, rel=0.01)
    with pytest.raises(ValueError, match="degrees of freedom"):
        confirm.t_quantile(0)
