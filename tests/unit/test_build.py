"""The report built from hand-made records (present.report.build): files, figures, the page."""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path

from harness import CONFIRM_A, CONFIRM_B, CONFIRM_BAD, CONFIRM_BASE, confirm_spec
from report_records import PLAIN, eagle_config, make_record, pcie_sweep, report_spec, trial_metrics

from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.verdict import verdict
from spec_sweep.present.report import build_report
from spec_sweep.present.sweep_view import SweepView

_EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)


def test_build_report(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = pcie_sweep()
    result = build_report(
        History(spec, records), out_dir=tmp_path / "report", parent_run_id="abc123"
    )
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


def test_the_report_names_the_configuration_the_sweep_recommends(tmp_path: Path) -> None:
    """The best single measurement (t0001) is not what its repeat boots confirm (t0002): the
    report names the sweep's recommendation, as the summary does (`SweepView.pick`)."""
    spec = confirm_spec(tmp_path)
    records = [
        make_record("t0000", CONFIRM_BASE, metrics={"output_throughput": 80.0}),
        make_record("t0001", CONFIRM_A, metrics={"output_throughput": 90.0}),  # lucky
        make_record("t0002", CONFIRM_B, metrics={"output_throughput": 88.0}),
        make_record("t0003", CONFIRM_BAD, mode=FailureMode.OOM, reason="OOM"),
        make_record("t0001.r1", CONFIRM_A, metrics={"output_throughput": 82.0}),
        make_record("t0002.r1", CONFIRM_B, metrics={"output_throughput": 88.0}),
        make_record("t0001.r2", CONFIRM_A, metrics={"output_throughput": 81.0}),
        make_record("t0002.r2", CONFIRM_B, metrics={"output_throughput": 89.0}),
    ]
    history = History(spec, records)
    assert history.best is not None
    assert history.best.trial_id == "t0001"
    judged = verdict(history)
    assert judged is not None
    assert judged.recommended is not None
    pick = SweepView.of(history, judged).pick
    assert pick is not None
    assert judged.recommended.trial_id == "t0002"
    assert (pick.trial_id, pick.recommended) == ("t0002", True)

    result = build_report(history, out_dir=tmp_path / "report")

    assert (result.best_trial_id, result.recommended) == ("t0002", True)
    text = result.html.read_text()
    assert "Recommended (confirmed by its repeat boots): t0002, output_throughput = 88 " in text
    assert html.escape(SweepView.of(history, judged).command(pick.config)) in text


def test_build_report_rebuild_replaces_stale_figures(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    out = tmp_path / "report"
    build_report(History(spec, pcie_sweep()), out_dir=out)
    assert (out / "speculative.png").exists()
    plain_only = [r for r in pcie_sweep() if "EAGLE3" not in str(r.config)]
    result = build_report(History(spec, plain_only), out_dir=out)
    assert result.diagnosis == ()
    assert not (out / "speculative.png").exists()
    assert "No speculative trial" in result.html.read_text()


def test_build_report_when_everything_failed(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = [
        make_record("t0000", PLAIN, mode=FailureMode.OOM, reason="OOM"),
        make_record("t0001", eagle_config(3, 4), mode=FailureMode.CRASH, reason="crash"),
    ]
    result = build_report(History(spec, records), out_dir=tmp_path / "r")
    assert result.best_trial_id is None
    assert result.diagnosis == ()
    text = result.html.read_text()
    assert "No trial was measured" in text
    assert "importances need at least" in text


def test_build_report_with_no_trials(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    result = build_report(History(spec, []), out_dir=tmp_path / "r")
    assert result.best_trial_id is None
    assert result.figures == ()
    assert result.html.exists()


def test_build_report_importances(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    records = [
        make_record(
            f"t{i:04d}",
            {
                **PLAIN,
                "mem-fraction-static": 0.7 + 0.02 * i,
                "cuda-graph-max-bs": (128, 512)[i % 2],
            },
            metrics=trial_metrics(80.0 + 5 * (i % 2) + 0.1 * i, speed=80.0),
        )
        for i in range(8)
    ]
    result = build_report(History(spec, records), out_dir=tmp_path / "r")
    assert any(p.name == "importance.png" for p in result.figures)
    assert "Importances:" not in result.html.read_text()  # no evaluator failed


def test_failure_excerpt_shows_lines_every_rank_printed_once(tmp_path: Path) -> None:
    spec = report_spec(tmp_path)
    ranks = "\n".join(
        f"[2026-01-01 10:00:0{i} TP{i}] CustomAllreduce is disabled on PCIe" for i in range(8)
    )
    excerpt = ranks + "\n[2026-01-01 10:00:09 TP0] RuntimeError: No supported CUDA architectures"
    records = [
        make_record("t0000", PLAIN, metrics=trial_metrics(80.0, speed=82.0)),
        make_record(
            "t0001",
            {**PLAIN, "disable-custom-all-reduce": True},
            mode=FailureMode.UNSUPPORTED,
            reason="unsupported: No supported CUDA architectures",
            excerpt=excerpt,
        ),
    ]
    text = build_report(History(spec, records), out_dir=tmp_path / "r").html.read_text()
    assert text.count("CustomAllreduce is disabled on PCIe") == 1
    assert "[x8]" in text
    assert "No supported CUDA architectures" in text


def test_build_report_with_a_workload_warning_and_no_confirmation(tmp_path: Path) -> None:
    """A baseline measured too loosely (its within-boot interval wider than +-1%) and no
    confirmation verdict: the report's confirmation section shows the warning alone."""
    spec = report_spec(tmp_path)
    loose = {
        **trial_metrics(80.0, speed=82.0),
        "output_throughput_ci_low": 76.0,
        "output_throughput_ci_high": 84.0,
    }
    records = [make_record("t0000", PLAIN, metrics=loose), *pcie_sweep()[1:]]
    result = build_report(History(spec, records), out_dir=tmp_path / "report")
    text = result.html.read_text()
    assert "workload too small to rank close configurations" in text
    assert 'id="confirm-verdict"' not in text
