"""The report's pure parts: speculative diagnosis, replay-table rows, Pareto front, HTML build."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml
from harness import DROP, make_spec

from spec_sweep.failures import FailureMode
from spec_sweep.replay import export_columns, export_rows
from spec_sweep.report import build_report, diagnose_speculative, pareto_front
from spec_sweep.search.objective import finished_in_order
from spec_sweep.space import normalize_config
from spec_sweep.spec import SweepSpec, metric_names, parse_value
from spec_sweep.tracking import TrialRecord


def _spec(
    tmp_path: Path, *, concurrency: str = "1", objective: str = "output_throughput"
) -> SweepSpec:
    eagle = {"speculative-algorithm": "EAGLE3"}
    return make_spec(
        tmp_path,
        name="rep",
        description="report unit test",
        node={
            "model": "/models/target",
            "draft_model": "/models/draft",
            "env": {"HF_TOKEN": "hf_secret_value_123"},
            "boot_timeout_s": DROP,
            "request_timeout_s": DROP,
            "sim_profile": DROP,
        },
        search_space={
            "include": DROP,
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {"int": [1, 7], "default": 3, "when": eagle},
                "speculative-num-draft-tokens": {
                    "choices": [2, 4, 8],
                    "default": 4,
                    "when": eagle,
                },
                "cuda-graph-max-bs": {"choices": [128, 512], "default": 512},
                "mem-fraction-static": {"float": [0.7, 0.92], "step": 0.01, "default": 0.88},
                "disable-custom-all-reduce": {"choices": [False, True], "default": False},
            },
        },
        workload={
            "output_len": 32,
            "concurrency": yaml.safe_load(concurrency),
            "warmup_prompts": DROP,
        },
        objective={"metric": objective},
        budget={"trials": 10, "max_concurrent": 1, "trial_timeout_s": DROP},
    )


_CLOCK = [1_000]


def _record(
    trial_id: str,
    config: dict[str, object],
    *,
    mode: FailureMode = FailureMode.NONE,
    metrics: dict[str, float] | None = None,
    reason: str = "",
    excerpt: str = "",
    elapsed_s: float = 60.0,
) -> TrialRecord:
    _CLOCK[0] += 1000
    tags = {"spec_sweep.log_excerpt": excerpt} if excerpt else {}
    return TrialRecord(
        run_id=f"run-{trial_id}",
        trial_id=trial_id,
        status="FINISHED",
        config=dict(config),  # type: ignore[arg-type]
        failure_mode=mode,
        metrics=dict(metrics or {}),
        reason=reason,
        elapsed_s=elapsed_s,
        start_time=_CLOCK[0],
        end_time=_CLOCK[0] + 500,
        tags=tags,
    )


PLAIN = {
    "speculative-algorithm": None,
    "cuda-graph-max-bs": 512,
    "mem-fraction-static": 0.88,
    "disable-custom-all-reduce": False,
}


def _eagle(steps: int, tokens: int, **extra: object) -> dict[str, object]:
    return {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": steps,
        "speculative-num-draft-tokens": tokens,
        "cuda-graph-max-bs": 128,
        "mem-fraction-static": 0.88,
        "disable-custom-all-reduce": False,
        **extra,
    }


def _metrics(
    thr: float, *, speed: float, accept: float | None = None, lat: float = 50.0
) -> dict[str, float]:
    out = {
        "output_throughput": thr,
        "decode_speed_p50": speed,
        "ttft_p99_ms": lat,
        "itl_p99_ms": 1000.0 / speed,
        "boot_s": 3.0,
    }
    if accept is not None:
        out["accept_length"] = accept
    return out


def _sweep() -> list[TrialRecord]:
    """A PCIe-like sweep: baseline 82 tok/s, tuned 89.5, EAGLE-3 at ~54, two failures."""
    return [
        _record("t0000", PLAIN, metrics=_metrics(80.0, speed=82.0)),
        _record(
            "t0001",
            {**PLAIN, "cuda-graph-max-bs": 128},
            metrics=_metrics(87.0, speed=89.5, lat=45.0),
        ),
        _record("t0002", _eagle(3, 4), metrics=_metrics(52.0, speed=54.0, accept=2.5, lat=40.0)),
        _record("t0003", _eagle(5, 8), metrics=_metrics(48.0, speed=50.0, accept=2.8, lat=60.0)),
        _record(
            "t0004",
            {**PLAIN, "disable-custom-all-reduce": True, "mem-fraction-static": 0.92},
            mode=FailureMode.OOM,
            reason="OOM: torch.OutOfMemoryError: CUDA out of memory",
            excerpt="Capture cuda graph begin\ntorch.OutOfMemoryError: CUDA out of memory.",
        ),
        _record(
            "t0005",
            _eagle(7, 8),
            mode=FailureMode.ASSERTION,
            reason="assertion: AssertionError: draft tokens",
            excerpt="AssertionError: speculative_num_draft_tokens too large",
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Diagnosis


def test_diagnosis_arithmetic(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    diags = diagnose_speculative(spec, _sweep())
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
    spec = _spec(tmp_path)
    records = [
        _record("t0000", PLAIN, metrics=_metrics(60.0, speed=62.0)),
        _record("t0001", _eagle(3, 4), metrics=_metrics(140.0, speed=150.0, accept=3.2)),
    ]
    (d,) = diagnose_speculative(spec, records)
    assert d.wins
    assert d.break_even_accept_length == pytest.approx(62.0 * 3.2 / 150.0)
    assert d.accept_length > d.break_even_accept_length


def test_diagnosis_falls_back_to_fastest_plain_when_baseline_failed(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _record("t0000", PLAIN, mode=FailureMode.CRASH, reason="crash"),
        _record("t0001", {**PLAIN, "cuda-graph-max-bs": 128}, metrics=_metrics(80, speed=70.0)),
        _record("t0002", {**PLAIN, "mem-fraction-static": 0.8}, metrics=_metrics(85, speed=75.0)),
        _record("t0003", _eagle(3, 4), metrics=_metrics(50, speed=50.0, accept=2.0)),
    ]
    (d,) = diagnose_speculative(spec, records)
    assert d.baseline_trial_id == "t0002"
    assert d.break_even_accept_length == pytest.approx(75.0 * 2.0 / 50.0)


def test_diagnosis_needs_a_measured_plain_trial(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _record("t0000", PLAIN, mode=FailureMode.OOM),
        _record("t0001", _eagle(3, 4), metrics=_metrics(50, speed=50.0, accept=2.0)),
    ]
    assert diagnose_speculative(spec, records) == []


def test_diagnosis_reads_the_objective_level(tmp_path: Path) -> None:
    spec = _spec(tmp_path, concurrency="[1, 8]", objective="output_throughput_c8")
    records = [
        _record(
            "t0000",
            PLAIN,
            metrics={"decode_speed_p50_c1": 80.0, "decode_speed_p50_c8": 40.0},
        ),
        _record(
            "t0001",
            _eagle(3, 4),
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
    spec = _spec(tmp_path)
    killed = TrialRecord(
        run_id="r-killed",
        trial_id="t0001",
        status="KILLED",
        config=_eagle(3, 4),  # type: ignore[arg-type]
        failure_mode=None,
    )
    records = [*_sweep()[:1], killed]
    assert diagnose_speculative(spec, records) == []


# ---------------------------------------------------------------------------------------------
# Pareto front


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


# ---------------------------------------------------------------------------------------------
# Replay table


def test_export_columns(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    columns = export_columns(spec)
    params = list(spec.params)
    assert columns[: len(params)] == params
    assert columns[len(params)] == "output_throughput"
    assert columns[len(params) + 1] == "accept_length"
    assert columns[-1] == "failure_mode"
    assert set(columns[len(params) : -1]) == set(metric_names(spec.workload))


def test_export_columns_per_level(tmp_path: Path) -> None:
    spec = _spec(tmp_path, concurrency="[1, 8]", objective="output_throughput_c1")
    columns = export_columns(spec)
    n = len(spec.params)
    assert columns[n : n + 4] == [
        "output_throughput_c1",
        "output_throughput_c8",
        "accept_length_c1",
        "accept_length_c8",
    ]


def test_export_rows(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    rows = export_rows(spec, finished_in_order(_sweep()))
    assert len(rows) == 6
    assert all(list(row) == export_columns(spec) for row in rows)
    base, _, eagle, _, oom, _ = rows
    assert base["speculative-algorithm"] == "null"
    assert base["speculative-num-steps"] == ""  # inactive
    assert base["disable-custom-all-reduce"] == "false"
    assert base["mem-fraction-static"] == "0.88"
    assert base["cuda-graph-max-bs"] == "512"
    assert base["output_throughput"] == "80.0"
    assert base["accept_length"] == ""
    assert base["failure_mode"] == "none"
    assert eagle["speculative-algorithm"] == "EAGLE3"
    assert eagle["speculative-num-steps"] == "3"
    assert eagle["accept_length"] == "2.5"
    assert oom["failure_mode"] == "oom"
    assert oom["disable-custom-all-reduce"] == "true"
    assert oom["output_throughput"] == ""


def test_export_rows_read_back(tmp_path: Path) -> None:
    """Each row's cells parse back (as `--set` values do) to the trial's configuration."""
    spec = _spec(tmp_path)
    records = _sweep()
    for record, row in zip(records, export_rows(spec, finished_in_order(records)), strict=True):
        parsed = {k: parse_value(row[k]) for k in spec.params}
        assert normalize_config(spec, parsed) == record.config
        for name, value in record.metrics.items():
            assert float(row[name]) == value


def test_export_rows_keep_full_precision(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    value = 1 / 3
    rows = export_rows(
        spec, finished_in_order([_record("t0000", PLAIN, metrics={"output_throughput": value})])
    )
    assert float(rows[0]["output_throughput"]) == value


# ---------------------------------------------------------------------------------------------
# The report itself (hand-built records)


_EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def test_build_report(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = _sweep()
    result = build_report(spec, records, out_dir=tmp_path / "report", parent_run_id="abc123")
    assert result.best_trial_id == "t0001"
    assert [d.trial_id for d in result.diagnosis] == ["t0002", "t0003"]
    names = {p.name for p in result.figures}
    assert {
        "progress.png",
        "effects.png",
        "failures.png",
        "speculative.png",
        "latency.png",
    } <= names
    for path in result.figures:
        assert path.read_bytes().startswith(b"\x89PNG")
    text = result.html.read_text()
    assert not _EXTERNAL.search(text)
    assert "<script" not in text
    assert text.count("data:image/png;base64,") == len(result.figures)
    assert "t0001" in text
    assert "abc123" in text
    assert "x1.087" in text  # 87 / 80
    d = result.diagnosis[0]
    assert f"{d.break_even_accept_length:.3f}" in text
    assert "CUDA out of memory" in text
    assert "AssertionError" in text
    assert "hf_secret_value_123" not in text  # secrets redacted in the launch commands
    assert "loses on this node" in text
    with result.csv.open() as handle:  # type: ignore[union-attr]
        assert len(list(csv.DictReader(handle))) == len(records)


def test_build_report_rebuild_replaces_stale_figures(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    out = tmp_path / "report"
    build_report(spec, _sweep(), out_dir=out)
    assert (out / "speculative.png").exists()
    plain_only = [r for r in _sweep() if "EAGLE3" not in str(r.config)]
    result = build_report(spec, plain_only, out_dir=out)
    assert result.diagnosis == ()
    assert not (out / "speculative.png").exists()
    assert "No speculative trial" in result.html.read_text()


def test_build_report_when_everything_failed(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _record("t0000", PLAIN, mode=FailureMode.OOM, reason="OOM"),
        _record("t0001", _eagle(3, 4), mode=FailureMode.CRASH, reason="crash"),
    ]
    result = build_report(spec, records, out_dir=tmp_path / "r")
    assert result.best_trial_id is None
    assert result.diagnosis == ()
    text = result.html.read_text()
    assert "No trial was measured" in text
    assert "importances need at least" in text


def test_build_report_with_no_trials(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    result = build_report(spec, [], out_dir=tmp_path / "r")
    assert result.best_trial_id is None
    assert result.figures == ()
    assert result.html.exists()


def test_build_report_importances(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    records = [
        _record(
            f"t{i:04d}",
            {
                **PLAIN,
                "mem-fraction-static": 0.7 + 0.02 * i,
                "cuda-graph-max-bs": (128, 512)[i % 2],
            },
            metrics=_metrics(80.0 + 5 * (i % 2) + 0.1 * i, speed=80.0),
        )
        for i in range(8)
    ]
    result = build_report(spec, records, out_dir=tmp_path / "r")
    assert any(p.name == "importance.png" for p in result.figures)
    assert "Importances:" not in result.html.read_text()  # no evaluator failed


def test_failure_excerpt_shows_lines_every_rank_printed_once(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ranks = "\n".join(
        f"[2026-01-01 10:00:0{i} TP{i}] CustomAllreduce is disabled on PCIe" for i in range(8)
    )
    excerpt = ranks + "\n[2026-01-01 10:00:09 TP0] RuntimeError: No supported CUDA architectures"
    records = [
        _record("t0000", PLAIN, metrics=_metrics(80.0, speed=82.0)),
        _record(
            "t0001",
            {**PLAIN, "disable-custom-all-reduce": True},
            mode=FailureMode.UNSUPPORTED,
            reason="unsupported: No supported CUDA architectures",
            excerpt=excerpt,
        ),
    ]
    text = build_report(spec, records, out_dir=tmp_path / "r").html.read_text()
    assert text.count("CustomAllreduce is disabled on PCIe") == 1
    assert "[x8]" in text
    assert "No supported CUDA architectures" in text
