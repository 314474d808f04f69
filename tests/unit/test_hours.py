"""`core.hours`: where a sweep's node-hours went, from its records."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import harness
import pytest
from harness import CONFIRM_A, CONFIRM_B, CONFIRM_BAD, CONFIRM_BASE

from spec_sweep.core.history import History
from spec_sweep.core.hours import hours_metrics, node_hours
from spec_sweep.core.names import TAG_PREDICTED, boot_metric
from spec_sweep.core.outcome import FailureMode


def _timed(record: object, elapsed: float, **tags: str) -> object:
    return replace(record, elapsed_s=elapsed, tags=dict(tags))  # type: ignore[type-var]


def _sweep(tmp_path: Path) -> History:
    spec = harness.confirm_spec(tmp_path)
    base_metrics = {
        "boot_s": 300.0,
        "measure_s": 60.0,
        boot_metric("load_weight"): 240.0,
        boot_metric("cuda_graph"): 30.0,
        boot_metric("other"): 30.0,
    }
    records = [
        _timed(harness.record("t0000", CONFIRM_BASE, 80.0, **base_metrics), 400.0),
        _timed(harness.record("t0001", CONFIRM_A, 90.0, **base_metrics), 380.0),
        # an OOM during capture: 250 s of a boot that never came up
        _timed(
            harness.record("t0002", CONFIRM_BAD, None, **{boot_metric("load_weight"): 240.0}),
            250.0,
        ),
        _timed(harness.record("t0003", CONFIRM_B, 88.0, **base_metrics), 370.0),
        _timed(harness.record("t0001.r1", CONFIRM_A, 89.0, **base_metrics), 390.0),
        _timed(harness.record("t0000.r1", CONFIRM_BASE, 81.0, **base_metrics), 390.0),
    ]
    return History(spec, records)  # type: ignore[arg-type]


def test_the_split_adds_up_to_every_attempts_wall_time(tmp_path: Path) -> None:
    hours = node_hours(_sweep(tmp_path))
    assert hours.total == pytest.approx((400 + 380 + 250 + 370 + 390 + 390) / 3600)
    assert hours.boot == pytest.approx(3 * 300 / 3600)  # the three measured search trials
    assert hours.measure == pytest.approx(3 * 60 / 3600)
    assert hours.failed == pytest.approx(250 / 3600)
    assert hours.confirm == pytest.approx(780 / 3600)
    # what is left of the measured trials: teardown, waits (40 + 20 + 10 s)
    assert hours.other == pytest.approx(70 / 3600)
    parts = hours.boot + hours.measure + hours.failed + hours.confirm + hours.other
    assert parts == pytest.approx(hours.total)
    assert hours.gpus == 8


def test_boot_time_by_phase_is_split_in_proportion_to_what_sglang_timed(tmp_path: Path) -> None:
    hours = node_hours(_sweep(tmp_path))
    # five booted trials (three search, two confirmation) of 300 s: 240 / 30 / 30
    assert hours.phases["load_weight"] == pytest.approx(5 * 240 / 3600)
    assert hours.phases["cuda_graph"] == pytest.approx(5 * 30 / 3600)
    assert sum(hours.phases.values()) == pytest.approx(5 * 300 / 3600)
    assert hours.phase_sentence() == (
        "boot time by phase: load weight 80%, cuda graph 10%, other 10%"
    )


def test_a_failed_boot_is_charged_to_the_knobs_it_changes(tmp_path: Path) -> None:
    hours = node_hours(_sweep(tmp_path))
    # CONFIRM_BAD changes only cuda-graph-max-bs (512 -> 64) from the baseline
    assert hours.knobs == [("cuda-graph-max-bs", pytest.approx(250 / 2180))]
    assert hours.knob_sentence() == (
        "failed boots cost, by knob changed: cuda-graph-max-bs 11% of all node-hours"
    )


def test_predicted_failures_cost_no_boot_and_are_counted(tmp_path: Path) -> None:
    history = _sweep(tmp_path)
    predicted = _timed(
        harness.record("t0004", {**CONFIRM_B, "disable-custom-all-reduce": False}, None),
        0.01,
        **{TAG_PREDICTED: "memory"},
    )
    hours = node_hours(History(history.spec, [*history.records, predicted]))
    assert hours.predicted == 1
    assert hours.total == pytest.approx(node_hours(history).total)  # not one second of node
    assert hours.saved == pytest.approx(250 / 3600)  # as long as the sweep's own OOM took
    metrics = hours_metrics(hours)
    assert metrics["boots_avoided"] == 1.0
    assert metrics["node_hours_saved"] == pytest.approx(250 / 3600)
    assert "1 boot(s) avoided by SGLang's memory rule" in hours.sentence()


def test_a_trial_rejected_by_the_quality_gate_is_not_a_failed_boot(tmp_path: Path) -> None:
    history = _sweep(tmp_path)
    rejected = _timed(
        harness.record(
            "t0004",
            {**CONFIRM_B, "disable-custom-all-reduce": False},
            None,
            mode=FailureMode.WRONG_OUTPUT,
            boot_s=300.0,
            measure_s=60.0,
        ),
        400.0,
    )
    hours = node_hours(History(history.spec, [*history.records, rejected]))
    assert hours.failed == pytest.approx(250 / 3600)  # the OOM alone
    assert hours.rejected == pytest.approx(400 / 3600)
    parts = hours.boot + hours.measure + hours.failed + hours.rejected + hours.confirm + hours.other
    assert parts == pytest.approx(hours.total)
    assert hours.knobs == [("cuda-graph-max-bs", pytest.approx(250 / 2580))]  # failed boots only
    assert "failed boots 10%, rejected by the quality gate 16%" in hours.sentence()
    assert hours_metrics(hours)["node_hours_rejected"] == pytest.approx(400 / 3600)


def test_a_sweep_without_timing_shows_nothing_to_split(tmp_path: Path) -> None:
    spec = harness.confirm_spec(tmp_path)
    hours = node_hours(History(spec, [harness.record("t0000", CONFIRM_BASE, 80.0)]))
    assert hours.total == 0.0
    assert hours.sentence() == "node-hours: none spent yet"
    assert hours.phase_sentence() is None
    assert hours.knob_sentence() is None
    assert hours_metrics(hours)["node_hours"] == 0.0


def test_a_small_share_keeps_a_decimal() -> None:
    from spec_sweep.core.hours import _share

    assert _share(0.004) == "0.4%"
    assert _share(0.11) == "11%"
