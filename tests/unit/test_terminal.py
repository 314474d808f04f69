"""The end-of-run summary (present.terminal) ranks as the report does: measured, meeting the
constraints, objective (core.history.History.ranked)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import DROP, make_spec
from rich.console import Console

from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.sweep_view import SweepView
from spec_sweep.present.terminal import print_summary
from spec_sweep.spec import SweepSpec


@dataclass
class _State:
    path: Path


@dataclass
class _Outcome:
    view: SweepView
    state: _State = field(default_factory=lambda: _State(Path("/tmp/state")))
    parent_run_id: str = "parent"
    interrupted: bool = False
    exhausted: bool = False
    report: Path | None = None
    report_error: str | None = None
    environment: str | None = None
    out_of_time: bool = False
    warnings: list[str] = field(default_factory=list)
    converged: str | None = None


def _spec(tmp_path: Path, constraints: dict[str, object]) -> SweepSpec:
    return make_spec(
        tmp_path,
        node={"boot_timeout_s": DROP, "request_timeout_s": DROP},
        objective={"metric": "output_throughput", "constraints": constraints},
    )


def _record(trial_id: str, mbs: int, thr: float | None, ttft: float, start: int) -> TrialRecord:
    metrics = {} if thr is None else {"output_throughput": thr, "ttft_p99_ms": ttft}
    return TrialRecord(
        run_id=f"run-{trial_id}",
        trial_id=trial_id,
        status="FINISHED",
        config={"cuda-graph-max-bs": mbs},
        failure_mode=FailureMode.NONE if thr is not None else FailureMode.OOM,
        metrics=metrics,
        start_time=start,
        end_time=start + 10,
    )


RECORDS = [
    _record("t0000", 512, 80.0, 900.0, 1000),
    _record("t0001", 256, 95.0, 2500.0, 2000),  # fastest, breaks ttft_p99_ms <= 2000
    _record("t0002", 128, 88.0, 1200.0, 3000),
    _record("t0003", 64, None, 0.0, 4000),  # failed
]


def _summary_lines(spec: SweepSpec, records: list[TrialRecord]) -> list[str]:
    console = Console(record=True, width=200, color_system=None)
    print_summary(console, _Outcome(SweepView.of(History(spec, records))))
    return console.export_text().splitlines()


def test_rank_one_of_the_table_is_the_best_line_when_a_constraint_is_set(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"ttft_p99_ms": {"max": 2000}})
    lines = _summary_lines(spec, RECORDS)
    rows = [line for line in lines if re.match(r"^\W\s*\d+\s+\W\s*t\d{4}", line)]
    assert [re.findall(r"t\d{4}", row)[0] for row in rows] == ["t0002", "t0000", "t0001"]
    assert "broken: ttft_p99_ms" in rows[-1]
    assert "ok" in rows[0]
    best = next(line for line in lines if line.startswith("best:"))
    assert best.startswith("best: t0002 ")
    assert "3 measured of 4 trials" in "\n".join(lines)


def test_without_constraints_the_objective_alone_ranks(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {})
    assert [r.trial_id for r in History(spec, RECORDS).ranked] == ["t0001", "t0002", "t0000"]
    best = History(spec, RECORDS).best
    assert best is not None
    assert best.trial_id == "t0001"
    lines = _summary_lines(spec, RECORDS)
    assert next(line for line in lines if line.startswith("best:")).startswith("best: t0001 ")
    assert not any("constraints" in line for line in lines if "rank" in line)


def test_no_trial_meeting_the_constraints_has_no_best(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"ttft_p99_ms": {"max": 100}})
    assert [r.trial_id for r in History(spec, RECORDS).ranked] == ["t0001", "t0002", "t0000"]
    assert History(spec, RECORDS).best is None
    assert "no trial met the objective's constraints yet" in "\n".join(
        _summary_lines(spec, RECORDS)
    )


#: A real gate's reason (fp8 e4m3 KV cache on an H100, SGLang 0.5.17): longer than a terminal line.
_WRONG = (
    "wrong output: lossy (deficit 0.0075 nats/token > quality.max_equivalent_deficit 0.003): "
    "0/16 prompts identical, 15 diverge at a near tie, 1 where the baseline was confident, first "
    "at token 5; set quality.allow_lossy to keep lossy configurations; first confident: prompt "
    "#14 at token 40: token 768 0.5 nats below the baseline's 3920 (top-2 margin 0.5 nats)"
)


def test_the_quality_gate_line_keeps_a_wrong_trials_whole_reason_wrapped_at_words(
    tmp_path: Path,
) -> None:
    spec = make_spec(tmp_path, quality={"num_prompts": 16, "tokens": 64})
    same = {"quality_deficit": 0.0, "quality_first_divergence": 64.0, "quality_lossy": 0.0}
    wrong = replace(
        _record("t0001", 256, 95.0, 900.0, 2000),
        failure_mode=FailureMode.WRONG_OUTPUT,
        reason=_WRONG,
        metrics={"quality_deficit": 0.0075, "quality_first_divergence": 5.0, "quality_lossy": 1.0},
    )
    records = [replace(RECORDS[0], metrics={**RECORDS[0].metrics, **same}), wrong]
    console = Console(record=True, width=100, color_system=None)
    print_summary(console, _Outcome(SweepView.of(History(spec, records))))
    lines = console.export_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("quality gate"))
    end = next(i for i, line in enumerate(lines) if line.startswith("node-hours"))
    words = " ".join(" ".join(lines[start:end]).split())
    assert "reference t0000 (the baseline); 0 identical" in words
    # whole, every word intact (it was cut at 200 characters: "...3 identical; fi)")
    why = _WRONG.removeprefix("wrong output: ")
    assert words.endswith(f"1 wrong_output (1 lossy, 0 wrong) first wrong_output, t0001: {why}")
    assert all(len(line) <= 100 for line in lines)
    # it booted and was measured: rejected by the gate, not a failed boot
    assert "rejected by the quality gate 50%" in lines[end]
    assert "failed boots" not in "\n".join(lines)


def test_minimised_objective_ranks_lowest_first(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        node={"boot_timeout_s": DROP, "request_timeout_s": DROP},
        objective={"metric": "ttft_p99_ms", "mode": "min", "constraints": {}},
    )
    assert [r.trial_id for r in History(spec, RECORDS).ranked] == ["t0000", "t0002", "t0001"]
