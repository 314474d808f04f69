"""Unit tests of `search.fidelity`: the two-fidelity option's refusals, prediction and decisions.

The source is driven with a real `SweepSearcher` (Optuna, no Ray) as Ray Tune drives it:
`suggest` per slot, `complete` with the trial's report; what the searcher was told is read
back from its Optuna study.
"""

from __future__ import annotations

import pickle
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from harness import make_spec, record

from spec_sweep.core.config import baseline_config, normalize_config
from spec_sweep.core.history import History
from spec_sweep.core.names import (
    FIDELITY_DUMMY,
    FIDELITY_REAL,
    ROLE_ACCEPTANCE,
    ROLE_PROMOTED,
    TAG_FIDELITY,
    TAG_FIDELITY_ROLE,
)
from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.core.record import TrialRecord
from spec_sweep.errors import SpecError
from spec_sweep.search.fidelity import (
    Acceptance,
    Fidelity,
    TwoFidelitySource,
    predicted_from_decode,
    promotions,
    resume,
    tree_of,
)
from spec_sweep.search.searcher import SweepSearcher

TWO: dict[str, Any] = {"fidelity": {"mode": "two", "accept_boots": 1, "accept_cap": 2}}
CHAIN = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
}
TREE = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 4,
    "speculative-num-draft-tokens": 8,
}
PLAIN = {"speculative-algorithm": None}
#: A dummy boot's level metrics at concurrency 1 (single level: no suffix).
CYCLE = {"decode_cycle_ms": 10.0, "ttft_p50_ms": 20.0}


def _spec(tmp_path: Path, **budget: Any) -> Any:
    return make_spec(tmp_path, budget={**TWO, "trials": 6, **budget})


def _dummy(trial_id: str, config: dict[str, Any], **metrics: float) -> TrialRecord:
    out: TrialRecord = record(trial_id, config, None, mode=FailureMode.NONE, **metrics)
    out.tags[TAG_FIDELITY] = FIDELITY_DUMMY
    return out


def _real(trial_id: str, config: dict[str, Any], role: str | None, **metrics: float) -> TrialRecord:
    out: TrialRecord = record(trial_id, config, 100.0, **metrics)
    out.tags[TAG_FIDELITY] = FIDELITY_REAL
    if role:
        out.tags[TAG_FIDELITY_ROLE] = role
    return out


# -- the spec ----------------------------------------------------------------------------------


def test_two_fidelities_are_off_by_default_and_load_with_a_c1_throughput_objective(
    tmp_path: Path,
) -> None:
    assert make_spec(tmp_path).budget.fidelity.mode == "real"
    spec = _spec(tmp_path)
    assert spec.budget.fidelity.two
    assert spec.budget.fidelity.promote == 3


@pytest.mark.parametrize(
    ("sections", "words"),
    [
        pytest.param(
            {"objective": {"metric": "ttft_p50_ms", "mode": "min"}},
            ["budget.fidelity.mode", "'ttft_p50_ms'", "60%", "output_throughput"],
            id="objective",
        ),
        pytest.param(
            {"workload": {"concurrency": [1, 8]}, "objective": {"metric": "output_throughput_c8"}},
            ["budget.fidelity.mode", "output_throughput_c8", "concurrency 1"],
            id="c8",
        ),
        pytest.param(
            {"node": {"server_args": {"tp-size": 8, "load-format": "auto"}}},
            ["node.server_args.load-format", "remove it"],
            id="load-format",
        ),
        pytest.param(
            {
                "workload": {"concurrency": [1, 8]},
                "objective": {"metric": "output_throughput_c1"},
            },
            ["adaptive.enabled", "mode: real"],
            id="adaptive",
        ),
        pytest.param(
            {"workload": {"output_len": 1}},
            ["workload.output_len", "at least 2"],
            id="one-token",
        ),
        pytest.param(
            {"objective": {"constraints": {"ttft_p99_ms": 500}}},
            ["objective.constraints", "ttft_p99_ms"],
            id="constraints",
        ),
    ],
)
def test_what_two_fidelities_cannot_do_is_refused_in_one_line(
    tmp_path: Path, sections: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(SpecError) as caught:
        make_spec(tmp_path, budget={**TWO}, **sections)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_an_acceptance_cap_below_the_first_boots_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="accept_cap 2 is below accept_boots 4"):
        make_spec(tmp_path, budget={"fidelity": {"mode": "two", "accept_cap": 2}})


def test_a_multi_level_sweep_at_c1_loads_without_adaptive(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        budget={**TWO},
        workload={"concurrency": [1, 8]},
        objective={"metric": "output_throughput_c1"},
        adaptive={"enabled": False},
    )
    assert spec.budget.fidelity.two


# -- trees, acceptance, the prediction ---------------------------------------------------------


def test_tree_of_runs_steps_plus_one_draft_tokens_at_top_k_1() -> None:
    assert tree_of({**CHAIN, "speculative-num-draft-tokens": 16}) == ("EAGLE3", "", 3, 1, 4)
    assert tree_of(TREE) == ("EAGLE3", "", 2, 4, 8)
    assert tree_of({"speculative-algorithm": "NGRAM", "speculative-num-draft-tokens": 8}) == (
        "NGRAM",
        8,
    )
    assert tree_of(PLAIN) is None


def test_acceptance_is_measured_where_booted_and_fitted_per_draft_model_elsewhere() -> None:
    acceptance = Acceptance()
    chain = ("EAGLE3", "head-a", 3, 1, 4)
    assert acceptance.length(chain) == 1.0  # nothing measured: no gain
    acceptance.add(chain, 2.0)
    acceptance.add(chain, 2.4)
    assert acceptance.length(chain) == pytest.approx(2.2)
    longer = acceptance.length(("EAGLE3", "head-a", 5, 1, 6))
    assert longer > 1.0
    assert acceptance.known(chain)
    assert not acceptance.known(("EAGLE3", "head-a", 5, 1, 6))


def test_the_prediction_inverts_the_decode_cycle() -> None:
    # 128 tokens: the first after 20 ms, 127 more at 2.5 a cycle of 10 ms
    value = predicted_from_decode(2.5, 0.010, 0.020, 1, 128)
    assert value == pytest.approx(128 / (0.020 + 127 / 2.5 * 0.010))


def test_a_dummy_boot_predicts_with_its_trees_real_acceptance(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    fidelity = Fidelity(spec)
    out = spec.workload.output_len
    plain = fidelity.predict(PLAIN, CYCLE)
    assert plain == pytest.approx(predicted_from_decode(1.0, 0.010, 0.020, 1, out))
    assert fidelity.predict(CHAIN, CYCLE) == plain  # no acceptance measured: no gain
    fidelity.learn(CHAIN, {"accept_length": 3.0, "output_throughput": 200.0})
    assert fidelity.predict(CHAIN, CYCLE) == pytest.approx(
        predicted_from_decode(3.0, 0.010, 0.020, 1, out)
    )
    assert fidelity.predict(CHAIN, {"ttft_p50_ms": 20.0}) is None  # no decode cycle


# -- the source --------------------------------------------------------------------------------


def _source(spec: Any, *configs: dict[str, Any]) -> TwoFidelitySource:
    requeue = [("t0000", baseline_config(spec), 1)]
    requeue += [(f"t{i:04d}", normalize_config(spec, c), 1) for i, c in enumerate(configs, 1)]
    searcher = SweepSearcher(spec, history=[], requeue=requeue, next_index=len(requeue))
    return TwoFidelitySource(searcher, Fidelity(spec))


def _told(source: TwoFidelitySource) -> list[tuple[optuna.trial.TrialState, float | None]]:
    return [(t.state, t.value) for t in source.searcher.study.trials]


def _up(trial_id: str, **metrics: float) -> TrialReport:
    return TrialReport(trial_id=trial_id, failure_mode=FailureMode.NONE, metrics=metrics)


def test_the_source_holds_a_dummy_report_until_its_acceptance_boot_measured_the_tree(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    source = _source(spec, CHAIN, TREE)
    base = source.suggest("k0")
    assert base is not None
    assert (base.trial_id, base.fidelity) == ("t0000", FIDELITY_REAL)
    source.complete("k0", _up("t0000", output_throughput=90.0, **CYCLE))
    dummy = source.suggest("k1")
    assert dummy is not None
    assert (dummy.trial_id, dummy.fidelity, dummy.role) == ("t0001", FIDELITY_DUMMY, None)
    source.complete("k1", _up("t0001", **CYCLE))
    # held: the searcher has not been told the dummy trial yet
    assert _told(source)[1][0] is optuna.trial.TrialState.RUNNING
    boot = source.suggest("k2")
    assert boot is not None
    assert (boot.fidelity, boot.role) == (FIDELITY_REAL, ROLE_ACCEPTANCE)
    assert boot.config == dummy.config
    assert boot.trial_id == "t0003"  # a new id after the searcher's own
    source.complete("k2", _up(boot.trial_id, accept_length=3.0, output_throughput=150.0))
    state, value = _told(source)[1]
    assert state is optuna.trial.TrialState.COMPLETE
    out = spec.workload.output_len
    assert value == pytest.approx(predicted_from_decode(3.0, 0.010, 0.020, 1, out))
    # the next tree: accept_boots 1 is used up; predicted below the margin, it gets no real
    # boot and is told its prediction with the fitted law at once
    tree = source.suggest("k3")
    assert tree is not None
    assert tree.fidelity == FIDELITY_DUMMY
    source.complete("k3", _up(tree.trial_id, decode_cycle_ms=40.0, ttft_p50_ms=20.0))
    state, value = _told(source)[2]
    assert state is optuna.trial.TrialState.COMPLETE
    assert source.queued == []


class _Lock:
    """A note callback that cannot be pickled, as the live display's is not."""

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def __call__(self, line: str) -> None:
        pass


def test_each_speculative_prediction_is_noted_with_where_its_acceptance_came_from(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    lines: list[str] = []
    plain = _source(spec, CHAIN, TREE)
    source = TwoFidelitySource(plain.searcher, Fidelity(spec), note=lines.append)
    # a result's trial id is Tune's own (Tune writes its id over ours): lines name ours
    for key, metrics in (("k0", {"output_throughput": 90.0, **CYCLE}), ("k1", CYCLE)):
        assert source.suggest(key) is not None
        source.complete(key, _up(f"tune-{key}", **metrics))
    assert lines == []  # the baseline is measured; the chain's dummy waits for its real boot
    boot = source.suggest("k2")
    assert boot is not None
    source.complete("k2", _up(boot.trial_id, accept_length=3.0, output_throughput=150.0))
    metric = spec.objective.metric
    assert len(lines) == 1
    assert lines[0].startswith(f"t0001: predicted {metric} ")
    assert lines[0].endswith("accept length 3.00 measured)")
    tree = source.suggest("k3")
    assert tree is not None
    source.complete("k3", _up("tune-k3", decode_cycle_ms=40.0, ttft_p50_ms=20.0))
    assert lines[1].startswith(f"{tree.trial_id}: predicted {metric} ")
    assert lines[1].endswith("fitted)")
    # Tune pickles the source with its experiment state: the per-run callback stays behind
    copy = pickle.loads(
        pickle.dumps(TwoFidelitySource(plain.searcher, Fidelity(spec), note=_Lock()))
    )
    assert copy._note is None


def test_a_dummy_failure_is_told_as_the_configurations_failure_at_once(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    source = _source(spec, CHAIN)
    source.suggest("k0")
    source.complete("k0", _up("t0000", output_throughput=90.0, **CYCLE))
    dummy = source.suggest("k1")
    assert dummy is not None
    source.complete("k1", TrialReport(trial_id="t0001", failure_mode=FailureMode.OOM))
    assert _told(source)[1][0] is optuna.trial.TrialState.FAIL
    assert source.queued == []


def test_a_real_boot_failing_where_the_dummy_came_up_is_the_configurations_failure(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    source = _source(spec, CHAIN)
    source.suggest("k0")
    source.complete("k0", _up("t0000", output_throughput=90.0, **CYCLE))
    source.suggest("k1")
    source.complete("k1", _up("t0001", **CYCLE))
    boot = source.suggest("k2")
    assert boot is not None
    assert boot.role == ROLE_ACCEPTANCE
    source.complete("k2", TrialReport(trial_id=boot.trial_id, failure_mode=FailureMode.CRASH))
    assert _told(source)[1][0] is optuna.trial.TrialState.FAIL


# -- resume and promotion ----------------------------------------------------------------------


def test_resume_tells_predictions_and_replans_an_acceptance_boot_never_run(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path, trials=10)
    chain, tree = normalize_config(spec, CHAIN), normalize_config(spec, TREE)
    base = _real("t0000", baseline_config(spec), None, **CYCLE)
    records = [
        base,
        _dummy("t0001", chain, **CYCLE),
        _real("t0002", chain, ROLE_ACCEPTANCE, accept_length=3.0),
        # a fast cycle: predicted above the chain, so the rule asks for the tree's acceptance
        _dummy("t0003", tree, decode_cycle_ms=2.0, ttft_p50_ms=20.0),
        # a killed driver's acceptance boot of the tree, never finished
        replace(
            _real("t0004", tree, ROLE_ACCEPTANCE, status="KILLED"), failure_mode=None, metrics={}
        ),
    ]
    resumed = resume(spec, History(spec, records))
    assert resumed.fidelity.acceptance.length(resumed.fidelity.tree(chain) or ()) == 3.0
    told = {r.trial_id: r for r in resumed.told}
    assert sorted(told) == ["t0000", "t0001", "t0003"]  # the acceptance boot is not told
    out = spec.workload.output_len
    assert told["t0001"].metrics["output_throughput"] == pytest.approx(
        predicted_from_decode(3.0, 0.010, 0.020, 1, out)
    )
    # the killed boot runs again under its id, as its next attempt
    queued = [(b.trial_id, b.attempt, b.role, b.config) for b in resumed.queued]
    assert queued == [("t0004", 2, ROLE_ACCEPTANCE, tree)]
    # without the tree's dummy trial there is nothing to re-plan
    assert resume(spec, History(spec, records[:3])).queued == []


def test_promotion_boots_the_top_not_yet_real_until_promote_finished(tmp_path: Path) -> None:
    spec = _spec(tmp_path, fidelity={**TWO["fidelity"], "promote": 2})
    chain, tree = normalize_config(spec, CHAIN), normalize_config(spec, TREE)
    steps5 = normalize_config(spec, {**CHAIN, "speculative-num-steps": 5})
    records = [
        _real("t0000", baseline_config(spec), None, **CYCLE),
        _dummy("t0001", chain, decode_cycle_ms=8.0, ttft_p50_ms=20.0),
        _real("t0002", chain, ROLE_ACCEPTANCE, accept_length=3.0),
        _dummy("t0003", tree, decode_cycle_ms=9.0, ttft_p50_ms=20.0),
        _dummy("t0004", steps5, decode_cycle_ms=30.0, ttft_p50_ms=20.0),
        _dummy("t0005", dict(baseline_config(spec)), **CYCLE),
    ]
    history = History(spec, records)
    assert [r.trial_id for r in history.ranked] == ["t0000", "t0002"]  # dummies never ranked
    boots = promotions(spec, history)
    # the top two by prediction: the chain (booted for real already) and the tree
    assert [(b.trial_id, b.config, b.role) for b in boots] == [("t0006", tree, ROLE_PROMOTED)]
    records.append(_real("t0006", tree, ROLE_PROMOTED, accept_length=2.0))
    assert promotions(spec, History(spec, records)) == []  # the top two are real now
    # a promoted boot left unfinished by a killed driver runs again under its id
    killed = replace(records.pop(), status="KILLED", failure_mode=None, metrics={})
    again = promotions(spec, History(spec, [*records, killed]))
    assert [(b.trial_id, b.attempt) for b in again] == [("t0006", 2)]


def test_a_dummy_record_is_never_measured_ranked_or_best(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    dummy = _dummy("t0001", PLAIN, output_throughput=500.0, **CYCLE)
    history = History(spec, [_real("t0000", PLAIN, None), dummy])
    assert history.value(dummy) is None
    assert not history.is_measured(dummy)
    assert [r.trial_id for r in history.ranked] == ["t0000"]
    assert history.best is not None
    assert history.best.trial_id == "t0000"
    assert history.rank_metrics(dummy) == {}


def test_a_replayed_two_fidelity_sweep_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from spec_sweep.node.backends import ReplayBackend
    from spec_sweep.orchestrate.driver import sweep

    spec = _spec(tmp_path)
    state = tmp_path / "state"
    backend = ReplayBackend(spec, table=None)  # type: ignore[arg-type]  # never read
    with pytest.raises(SpecError, match=r"'two' with --replay: .* set budget.fidelity.mode: real"):
        sweep(spec, backend=backend, state_dir=state, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    assert not state.exists()


def test_the_summary_says_how_many_trials_each_fidelity_measured(tmp_path: Path) -> None:
    from spec_sweep.present.sweep_view import SweepView

    spec = _spec(tmp_path)
    chain = normalize_config(spec, CHAIN)
    failed = replace(_dummy("t0003", normalize_config(spec, TREE)), failure_mode=FailureMode.OOM)
    records = [
        _real("t0000", baseline_config(spec), None, **CYCLE),
        _dummy("t0001", chain, **CYCLE),
        _real("t0002", chain, ROLE_ACCEPTANCE, accept_length=3.0),
        failed,
        _real("t0004", chain, ROLE_PROMOTED, accept_length=3.0),
    ]
    view = SweepView.of(History(spec, records))
    assert view.fidelity == {
        "dummy": 2,
        "dummy_failed": 1,
        "real": 3,
        "acceptance": 1,
        "promoted": 1,
    }
    (line,) = view.fidelity_lines()
    assert line.startswith("two fidelities: 2 search trial(s) with dummy weights (1 failed)")
    assert "recommended: real-weight boots only" in line
    assert SweepView.of(History(make_spec(tmp_path), records)).fidelity_lines() == []
