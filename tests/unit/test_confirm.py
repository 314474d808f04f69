"""Which confirmation boots run next (core.confirm.plan, remeasure_due), pure."""

from __future__ import annotations

from pathlib import Path

from harness import CONFIRM_A, CONFIRM_B, CONFIRM_BAD, CONFIRM_BASE
from harness import confirm_spec as _spec
from harness import record as _rec

from spec_sweep.core.confirm import plan, remeasure_due
from spec_sweep.core.history import History
from spec_sweep.core.verdict import verdict

BASE, A, B, BAD = CONFIRM_BASE, CONFIRM_A, CONFIRM_B, CONFIRM_BAD


def test_plan_interleaves_top_k_then_remeasures_baseline(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    search = [
        _rec("t0000", BASE, 100.0),
        _rec("t0001", A, 110.0),
        _rec("t0002", B, 111.0),
        _rec("t0003", BAD, None),
    ]
    boots = plan(History(spec, search))
    assert [b.trial_id for b in boots] == ["t0002.r1", "t0001.r1", "t0002.r2", "t0001.r2"]
    assert boots[0].config == B
    done = [*search, _rec("t0002.r1", B, 109.0)]
    assert next(b.trial_id for b in plan(History(spec, done))) == "t0001.r1"
    # An interrupted boot keeps its id and is launched as its next attempt.
    killed = _rec("t0001.r1", A, 1.0, status="KILLED")
    again = plan(History(spec, [*done, killed]))
    assert (again[0].trial_id, again[0].attempt) == ("t0001.r1", 2)
    # A clear winner after the fixed rounds: no more rounds, the baseline last (drift) ...
    clear = [
        *done,
        _rec("t0001.r1", A, 100.0),
        _rec("t0002.r2", B, 110.0),
        _rec("t0001.r2", A, 100.5),
    ]
    assert [(b.trial_id, b.config) for b in plan(History(spec, clear))] == [("t0000.r1", BASE)]
    # ... and nothing once that boot is the last one.
    assert plan(History(spec, [*clear, _rec("t0000.r1", BASE, 99.0, start=99)])) == []
    assert plan(History(_spec(tmp_path, confirm=0, remeasure_baseline=False), search)) == []


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
    v = verdict(History(spec, records))
    assert v is not None
    assert v.tie
    assert v.winner is not None
    assert v.winner.trial_id == "t0003"
    # B cannot be told from the best, A can: only the tied ones are booted again.
    assert [c.trial_id for c in v.tied] == ["t0003", "t0002"]
    boots = plan(History(spec, records))
    assert [b.trial_id for b in boots] == [f"{c.trial_id}.r3" for c in v.tied]
    more = [*records, *(_rec(b.trial_id, b.config, 110.0) for b in boots)]
    # At confirm_max_repeats the tie stands: the baseline's drift boot ends the confirmation.
    assert [b.trial_id for b in plan(History(spec, more))] == ["t0000.r1"]


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
    v = verdict(History(spec, steady))
    assert v is not None
    assert v.tie
    assert [b.trial_id for b in plan(History(spec, steady))] == ["t0000.r1"]
    # The same means with a wider spread leave the difference open: both get another boot.
    noisy = [
        *steady[:3],
        *(
            _rec(r.trial_id, r.config, x)
            for r, x in zip(steady[3:], (108.0, 112.0, 112.6, 108.0), strict=True)
        ),
    ]
    assert [b.trial_id for b in plan(History(spec, noisy))] == ["t0002.r3", "t0001.r3"]


def test_remeasure_due_every_n_search_trials(tmp_path: Path) -> None:
    spec = _spec(tmp_path, remeasure_every=2)
    records = [_rec("t0000", BASE, 100.0)]
    assert remeasure_due(History(spec, records)) is None
    records.append(_rec("t0001", A, 110.0))
    due = remeasure_due(History(spec, records))
    assert due is not None
    assert (due.trial_id, due.config) == ("t0000.r1", BASE)
    records.append(_rec("t0000.r1", BASE, 101.0))
    assert remeasure_due(History(spec, records)) is None
    records += [_rec("t0002", B, 111.0), _rec("t0003", BAD, None)]
    due = remeasure_due(History(spec, records))
    assert due is not None
    assert due.trial_id == "t0000.r2"
    assert remeasure_due(History(_spec(tmp_path), records)) is None
    # A failed baseline has nothing to re-measure.
    assert remeasure_due(History(spec, [_rec("t0000", BASE, None), records[1]])) is None
