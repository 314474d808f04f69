"""The searcher learns from a trial one way (search.searcher), whether the trial is read from
the record (a resumed sweep) or reported by Ray Tune as it ends."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ROOT, graph_spec
from harness import record as rec

from spec_sweep.core.outcome import FailureMode, TrialReport
from spec_sweep.search.searcher import SweepSearcher
from spec_sweep.spec import SweepSpec

CONFIG = {"cuda-graph-max-bs": 128}


def _spec(tmp_path: Path) -> SweepSpec:
    spec: SweepSpec = graph_spec(
        tmp_path,
        objective={"metric": "output_throughput", "constraints": {"ttft_p99_ms": {"max": 2000}}},
        searcher={"kind": "random", "seed": 0},
    )
    return spec


def _told(trial: Any) -> tuple[Any, Any, Any]:
    return trial.state, trial.value if trial.values else None, trial.system_attrs.get("constraints")


@pytest.mark.parametrize(
    ("mode", "metrics"),
    [
        (FailureMode.NONE, {"output_throughput": 88.0, "ttft_p99_ms": 1200.0}),
        (FailureMode.NONE, {"output_throughput": 95.0, "ttft_p99_ms": 2500.0}),  # breaks it
        (FailureMode.NONE, {"ttft_p99_ms": 1200.0}),  # ran, but the objective is missing
        (FailureMode.OOM, {}),
        (FailureMode.WRONG_OUTPUT, {"output_throughput": 99.0, "ttft_p99_ms": 900.0}),
    ],
)
def test_the_record_and_the_live_report_teach_the_same(
    tmp_path: Path, mode: FailureMode, metrics: dict[str, float]
) -> None:
    spec = _spec(tmp_path)
    record = rec("t0001", CONFIG, None, mode=mode, **metrics)
    resumed = SweepSearcher(spec, history=[record], requeue=[], next_index=2)
    live = SweepSearcher(spec, history=[], requeue=[("t0001", CONFIG, 1)], next_index=2)
    proposal = live.suggest("slot")
    assert proposal is not None
    assert proposal.config == CONFIG
    report = TrialReport(trial_id="t0001", failure_mode=mode, metrics=metrics)
    live.complete("slot", report)
    assert _told(resumed.study.trials[-1]) == _told(live.study.trials[-1])
    # Tune's own dict says the same as the report it was made from.
    again = SweepSearcher(spec, history=[], requeue=[("t0001", CONFIG, 1)], next_index=2)
    again.suggest("slot")
    again.complete("slot", report.to_tune())
    assert _told(again.study.trials[-1]) == _told(live.study.trials[-1])


def test_a_trial_whose_machinery_failed_teaches_nothing(tmp_path: Path) -> None:
    searcher = SweepSearcher(
        _spec(tmp_path), history=[], requeue=[("t0001", CONFIG, 1)], next_index=2
    )
    searcher.suggest("slot")
    searcher.complete("slot", TrialReport(trial_id="t0001", interrupted=True), error=False)
    state, value, constraints = _told(searcher.study.trials[-1])
    assert value is None
    assert constraints is None or all(c <= 0 for c in constraints)
    assert state.name == "FAIL"


def test_a_proposal_sglangs_memory_rule_rejects_is_marked_predicted(tmp_path: Path) -> None:
    from harness import DROP, make_spec

    from spec_sweep.core.names import AVAIL_METRIC, WEIGHTS_METRIC

    spec = make_spec(
        tmp_path,
        search_space={
            "include": [],
            "params": {"mem-fraction-static": {"choices": [0.3, 0.5, 0.8, 0.9], "default": 0.8}},
        },
        baseline=DROP,
        searcher={"kind": "random", "seed": 0},
    )
    searcher = SweepSearcher(
        spec, history=[], requeue=[("t0000", {"mem-fraction-static": 0.8}, 1)], next_index=1
    )
    base = searcher.suggest("k0")
    assert base is not None
    assert base.predicted is None  # nothing known before the baseline's log
    # the baseline's log: 80 GB free before the weights, 60 GB of weights per GPU
    searcher.complete(
        "k0",
        TrialReport(
            "t0000",
            FailureMode.NONE,
            metrics={"output_throughput": 80.0, AVAIL_METRIC: 80.0, WEIGHTS_METRIC: 60.0},
        ),
    )
    marked = {}
    for i in range(1, 4):
        proposal = searcher.suggest(f"k{i}")
        assert proposal is not None
        marked[proposal.config["mem-fraction-static"]] = proposal.predicted
        searcher.complete(f"k{i}", TrialReport(proposal.trial_id, FailureMode.OOM))
    # 0.3 and 0.5 x 81.6 GB hold less than 59.99 GB of weights; 0.9 may boot
    assert marked[0.9] is None
    assert marked[0.3] is not None
    assert "t0000" in marked[0.3]
    assert marked[0.5] is not None


def test_a_grid_skips_the_trees_sglang_rejects_or_rewrites_into_one_that_ran(
    tmp_path: Path,
) -> None:
    """The real table's grid (sweeps/real_table_smollm2.yaml): 108 points, of which SGLang
    rejects (1, 2, 4), (1, 2, 8), (1, 4, 8) and (2, 2, 8) (more draft tokens than scored
    candidates: the real 0.5.17 crash "selected index k out of range" of the real table's pilot
    rows),
    0.5.17 crashes on (5, 2, 4) and (5, 4, 4) at the first request (4 draft tokens < 5 + 1: the
    real table's t0025), and rewrites (s, 1, 8) into (s, 1, 4) (draft tokens = steps + 1): 68
    configurations boot."""
    from harness import make_spec

    from spec_sweep.core.config import config_key, normalize_config
    from spec_sweep.search.tree_rules import check_tree

    raw = yaml.safe_load((ROOT / "sweeps" / "real_table_smollm2.yaml").read_text())
    raw["node"].update(model=str(tmp_path), draft_model=str(tmp_path))
    spec = make_spec(tmp_path, **raw)
    searcher = SweepSearcher(spec, history=[], requeue=[], next_index=0)
    ran: list[str] = []
    for i in range(120):
        proposal = searcher.suggest(f"k{i}")
        if proposal is None:
            break
        check = check_tree(proposal.config, server_args=spec.node.server_args)
        assert check.runs, (proposal.config, check.rejected)
        ran.append(config_key(normalize_config(spec, check.config)))
        searcher.complete(f"k{i}", TrialReport(proposal.trial_id, FailureMode.NONE, {"x": 1.0}))
    assert len(ran) == len(set(ran)) == 68


def test_a_resumed_grid_search_proposes_every_point_it_has_left(tmp_path: Path) -> None:
    """The real table's grid resumed with all but two of its launchable points measured: the
    grid search proposes both before it calls itself exhausted. (Resumed, the study no longer
    knows which raw grid points were drawn, and most of the 288 it draws from are repeats or
    trees SGLang rejects: with a fixed number of draws the real table's resume at 66 ended its
    grid with two points never booted.)"""
    from spec_sweep.core.config import config_key, normalize_config
    from spec_sweep.core.ids import trial_name
    from spec_sweep.search.tree_rules import check_tree
    from spec_sweep.spec_load import load_spec

    spec = load_spec(ROOT / "sweeps" / "real_table_smollm2.yaml")
    launchable: dict[str, dict[str, Any]] = {}
    values = [param.values() for param in spec.params.values()]
    for combo in itertools.product(*values):
        config = normalize_config(spec, dict(zip(spec.params, combo, strict=True)))
        check = check_tree(
            config, server_args=spec.node.server_args, version=spec.node.sglang_version
        )
        if check.runs:
            launchable.setdefault(config_key(normalize_config(spec, check.config)), config)
    assert len(launchable) == 68
    eagle = {"speculative-algorithm": "EAGLE3"}
    missing = [
        {**eagle, "speculative-num-steps": 3, "speculative-eagle-topk": 4,
         "speculative-num-draft-tokens": 8, "cuda-graph-max-bs-decode": 16,
         "mem-fraction-static": 0.8},
        {**eagle, "speculative-num-steps": 5, "speculative-eagle-topk": 2,
         "speculative-num-draft-tokens": 8, "cuda-graph-max-bs-decode": 32,
         "mem-fraction-static": 0.9},
    ]  # fmt: skip
    left = {config_key(normalize_config(spec, c)) for c in missing}
    assert left <= set(launchable)
    history = [
        rec(trial_name(i), config, 500.0, metric="output_throughput_c1")
        for i, (key, config) in enumerate(sorted(launchable.items()))
        if key not in left
    ]
    searcher = SweepSearcher(spec, history=history, requeue=[], next_index=len(history))
    proposed = set()
    for n in range(3):
        proposal = searcher.suggest(f"slot{n}")
        if proposal is None:
            break
        proposed.add(config_key(proposal.config))
        searcher.complete(f"slot{n}", {"output_throughput_c1": 500.0})
    assert proposed == left
    assert searcher.exhausted
