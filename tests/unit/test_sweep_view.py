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


def test_the_quality_line_counts_classes_and_says_why_a_trial_was_wrong(tmp_path: Path) -> None:
    assert SweepView.of(History(_spec(tmp_path), RECORDS)).quality_lines() == []
    spec = graph_spec(tmp_path, quality={"num_prompts": 8, "tokens": 32})
    same = {"quality_deficit": 0.0, "quality_first_divergence": 32.0, "quality_lossy": 0.0}
    flipped = {"quality_deficit": 0.001, "quality_first_divergence": 7.0, "quality_lossy": 0.0}
    lossy = {"quality_deficit": 0.02, "quality_first_divergence": 2.0, "quality_lossy": 1.0}
    records = [
        rec("t0000", BASE, 80.0, **same),
        rec("t0001", A, 95.0, **same),
        rec("t0002", B, 88.0, **flipped),
        rec("t0003", {"cuda-graph-max-bs": 256}, 90.0),  # finished before the reference
        replace(
            rec("t0004", A, None, mode=FailureMode.WRONG_OUTPUT, **lossy),
            reason="wrong output: lossy (deficit 0.02 nats/token > ...",
        ),
        replace(
            rec("t0005", B, None, mode=FailureMode.WRONG_OUTPUT, quality_deficit=1.9),
            reason="wrong output: wrong (deficit 1.9 nats/token > ...",
        ),
    ]
    line, why = SweepView.of(History(spec, records)).quality_lines()
    assert line == (
        "quality gate (8 prompts x 32 tokens; equivalent up to a deficit of 0.003 nats/token, "
        "lossy rejected): reference t0000 (the baseline); "
        "1 identical to the baseline, 1 numerically equivalent, 1 not judged, "
        "2 wrong_output (1 lossy, 1 wrong)"
    )
    assert why == "  first wrong_output, t0004: lossy (deficit 0.02 nats/token > ..."
    # With allow_lossy, a lossy trial is a candidate, counted as such.
    kept = graph_spec(tmp_path, quality={"num_prompts": 8, "tokens": 32, "allow_lossy": True})
    records[4] = replace(records[4], failure_mode=FailureMode.NONE, reason="")
    (line,) = SweepView.of(History(kept, records[:5])).quality_lines()
    assert "lossy kept" in line
    assert (
        "1 numerically equivalent, 1 lossy, kept as candidates, 1 not judged, 0 wrong_output"
        in (line)
    )


def test_a_lossy_pick_says_so_beside_the_speed_it_buys_over_the_best_lossless(
    tmp_path: Path,
) -> None:
    spec = graph_spec(tmp_path, quality={"allow_lossy": True})
    lossy = {"quality_deficit": 0.0123, "quality_lossy": 1.0, "quality_first_divergence": 3.0}
    fine = {"quality_deficit": 0.001, "quality_lossy": 0.0, "quality_first_divergence": 9.0}
    records = [
        rec("t0000", BASE, 80.0, quality_deficit=0.0, quality_lossy=0.0),
        rec("t0001", A, 110.0, **lossy),
        rec("t0002", B, 88.0, **fine),
    ]
    view = SweepView.of(History(spec, records))
    assert view.pick is not None
    assert view.pick.trial_id == "t0001"
    assert view.lossy_lines() == [
        "t0001 is lossy: its greedy outputs differ from the baseline's beyond numerical noise "
        "(deficit 0.0123 nats per token; kept by quality.allow_lossy); the best lossless trial "
        "is t0002 at output_throughput = 88, so the lossy one buys x1.250"
    ]
    # A lossless pick says nothing more.
    records[1] = rec("t0001", A, 70.0, **lossy)
    assert SweepView.of(History(spec, records)).lossy_lines() == []
