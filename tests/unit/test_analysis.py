"""The report analysis (present.report.analysis): the speculative diagnosis and the Pareto front."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_records import PLAIN, eagle_config, make_record, pcie_sweep, report_spec, trial_metrics

from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.report import diagnose_speculative, pareto_front


def test_diagnosis_arithmetic(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    diags = diagnose_speculative(spec, pcie_sweep())
    assert [d.trial_id for d in diags] == ["t0002", "t0003"]
    d = diags[0]
    assert d.baseline_trial_id == "t0000"
    assert d.baseline_decode_speed == 82.0
    assert d.decode_speed == 54.0
    assert d.accept_length == 2.5
    assert d.cycle_ms == pytest.approx(2.5 / 54.0 * 1000.0)
    assert d.break_even_accept_length == pytest.approx(82.0 * 2.5 / 54.0)
    assert not d.wins
    assert d.speedup == pytest.approx(54.0 / 82.0)
    assert d.algorithm == "EAGLE3"
    assert d.max_accept_length == 4.0  # steps + 1 = 4, draft tokens 4
    assert d.ceiling_decode_speed == pytest.approx(4.0 / (2.5 / 54.0))
    assert d.best_plain_trial_id == "t0001"
    assert d.break_even_vs_best_plain == pytest.approx(89.5 * 2.5 / 54.0)
    assert diags[1].max_accept_length == 6.0  # steps 5 + 1 < 8 draft tokens


def test_diagnosis_winning_draft(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = [
        make_record("t0000", PLAIN, metrics=trial_metrics(60.0, speed=62.0)),
        make_record(
            "t0001", eagle_config(3, 4), metrics=trial_metrics(140.0, speed=150.0, accept=3.2)
        ),
    ]
    (d,) = diagnose_speculative(spec, records)
    assert d.wins
    assert d.break_even_accept_length == pytest.approx(62.0 * 3.2 / 150.0)
    assert d.accept_length > d.break_even_accept_length


def test_diagnosis_falls_back_to_fastest_plain_when_baseline_failed(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = [
        make_record("t0000", PLAIN, mode=FailureMode.CRASH, reason="crash"),
        make_record(
            "t0001", {**PLAIN, "cuda-graph-max-bs": 128}, metrics=trial_metrics(80, speed=70.0)
        ),
        make_record(
            "t0002", {**PLAIN, "mem-fraction-static": 0.8}, metrics=trial_metrics(85, speed=75.0)
        ),
        make_record("t0003", eagle_config(3, 4), metrics=trial_metrics(50, speed=50.0, accept=2.0)),
    ]
    (d,) = diagnose_speculative(spec, records)
    assert d.baseline_trial_id == "t0002"
    assert d.break_even_accept_length == pytest.approx(75.0 * 2.0 / 50.0)


def test_diagnosis_needs_a_measured_plain_trial(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = [
        make_record("t0000", PLAIN, mode=FailureMode.OOM),
        make_record("t0001", eagle_config(3, 4), metrics=trial_metrics(50, speed=50.0, accept=2.0)),
    ]
    assert diagnose_speculative(spec, records) == []


def test_diagnosis_reads_the_objective_level(tmp_path: Path) -> None:
    spec = report_spec(tmp_path, concurrency="[1, 8]", objective="output_throughput_c8")
    records = [
        make_record(
            "t0000",
            PLAIN,
            metrics={"decode_speed_p50_c1": 80.0, "decode_speed_p50_c8": 40.0},
        ),
        make_record(
            "t0001",
            eagle_config(3, 4),
            metrics={
                "decode_speed_p50_c1": 50.0,
                "accept_length_c1": 2.0,
                "decode_speed_p50_c8": 30.0,
                "accept_length_c8": 2.4,
            },
        ),
    ]
    (d,) = diagnose_speculative(spec, records)
    assert d.concurrency == 8
    assert d.break_even_accept_length == pytest.approx(40.0 * 2.4 / 30.0)
    (d1,) = diagnose_speculative(spec, records, concurrency=1)
    assert d1.break_even_accept_length == pytest.approx(80.0 * 2.0 / 50.0)


def test_diagnosis_ignores_unfinished_attempts(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    killed = TrialRecord(
        run_id="r-killed",
        trial_id="t0001",
        status="KILLED",
        config=eagle_config(3, 4),  # type: ignore[arg-type]
        failure_mode=None,
    )
    records = [*pcie_sweep()[:1], killed]
    assert diagnose_speculative(spec, records) == []


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([], []),
        ([(10.0, 100.0)], [0]),
        ([(10.0, 100.0), (20.0, 90.0)], [0]),  # faster and quicker dominates
        ([(10.0, 90.0), (20.0, 100.0)], [0, 1]),  # a trade-off: both on the front
        ([(10.0, 90.0), (20.0, 100.0), (15.0, 80.0), (30.0, 100.0)], [0, 1]),
        ([(5.0, 50.0), (5.0, 50.0)], [0, 1]),  # equal points are both kept
        ([(30.0, 120.0), (10.0, 60.0), (20.0, 100.0)], [1, 2, 0]),  # sorted by latency
    ],
)
def test_pareto_front(points: list[tuple[float, float]], front: list[int]) -> None:
    assert pareto_front(points) == front
