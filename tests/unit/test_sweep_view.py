"""One view of a sweep (present.sweep_view): the ranking, the best and what to launch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness import graph_spec
from harness import record as rec

from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.verdict import Candidate, Verdict
from spec_sweep.present.sweep_view import SweepView
from spec_sweep.spec import SweepSpec

BASE = {"cuda-graph-max-bs": 512}
A = {"cuda-graph-max-bs": 128}
B = {"cuda-graph-max-bs": 64}


def _spec(tmp_path: Path) -> SweepSpec:
    spec: SweepSpec = graph_spec(
        tmp_path,
        node={"env": {"HF_TOKEN": "hf_secret_value"}},
        objective={"metric": "output_throughput", "constraints": {"ttft_p99_ms": {"max": 2000}}},
    )
    return spec


RECORDS = [
    rec("t0000", BASE, 80.0, ttft_p99_ms=900.0),
    rec("t0001", A, 95.0, ttft_p99_ms=2500.0),
    rec("t0002", B, 88.0, ttft_p99_ms=1200.0),
    rec("t0003", A, None),
]


def test_the_view_ranks_with_the_history_and_picks_the_best(tmp_path: Path) -> None:
    view = SweepView.of(History(_spec(tmp_path), RECORDS))
    assert [(r.rank, r.record.trial_id, r.broken) for r in view.ranked] == [
        (1, "t0002", ()),
        (2, "t0000", ()),
        (3, "t0001", ("ttft_p99_ms",)),
    ]
    assert view.best is not None
    assert view.best.trial_id == "t0002"
    assert view.pick is not None
    assert (view.pick.trial_id, view.pick.recommended) == ("t0002", False)
    assert view.failures == {"oom": 1}
    assert view.finished == 4
    assert view.top(1)[0].value == 88.0
    assert "hf_secret_value" not in view.command(B)
    assert any("GPU-hours" in line for line in view.load_and_cost_lines())


def test_the_recommendation_of_a_verdict_is_what_to_launch(tmp_path: Path) -> None:
    candidate = Candidate("t0000", BASE, (80.0, 81.0), 80.5, 80.0, 81.0, 0, 0)
    judged = Verdict(
        metric="output_throughput",
        candidates=[candidate],
        winner=candidate,
        recommended=candidate,
        tie=False,
        reason="",
        spent=2,
        noise_rel_sd=None,
    )
    view = SweepView.of(History(_spec(tmp_path), RECORDS), judged)
    assert view.pick is not None
    assert (view.pick.trial_id, view.pick.recommended) == ("t0000", True)


def test_the_quality_line_counts_verdicts_and_says_why_a_trial_was_wrong(tmp_path: Path) -> None:
    assert SweepView.of(History(_spec(tmp_path), RECORDS)).quality_lines() == []
    spec = graph_spec(tmp_path, quality={"num_prompts": 8, "tokens": 32})
    same = {"quality_confident_share": 0.0, "quality_near_tie_flips": 0.0}
    flipped = {"quality_confident_share": 0.0, "quality_near_tie_flips": 3.0}
    records = [
        rec("t0000", BASE, 80.0, **same),
        rec("t0001", A, 95.0, **same),
        rec("t0002", B, 88.0, **flipped),
        rec("t0003", {"cuda-graph-max-bs": 256}, 90.0),  # finished before the reference
        replace(
            rec("t0004", A, None, mode=FailureMode.WRONG_OUTPUT, quality_confident_share=1.0),
            reason="wrong output: 8/8 prompts diverge where ...",
        ),
    ]
    line, why = SweepView.of(History(spec, records)).quality_lines()
    assert line == (
        "quality gate (8 prompts x 32 tokens; near tie < 0.5 nats; confident share <= 0): "
        "reference t0000 (the baseline); "
        "1 identical to the baseline, 1 passed with near-tie flips only, 1 not judged, "
        "1 wrong_output"
    )
    assert why == "  first wrong_output, t0004: 8/8 prompts diverge where ..."
