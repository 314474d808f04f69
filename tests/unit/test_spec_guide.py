"""The searcher's domain knowledge (spec_sweep.search.spec_guide) on a generated node landscape.

The landscape comes from `benchmarks/landscapes.py` (one seed, ~10k configurations); its table
is written in the replay-table format and read back by the replay backend.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from spec_sweep.core.config import baseline_config, config_key
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.search.searcher import SweepSearcher
from spec_sweep.search.tree_rules import check_tree
from spec_sweep.store.replay import load_replay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import landscapes

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
optuna.logging.set_verbosity(optuna.logging.WARNING)
ALGO = "speculative-algorithm"


@pytest.fixture(scope="module")
def land(tmp_path_factory: pytest.TempPathFactory) -> landscapes.Landscape:
    return landscapes.build(13, tmp_path_factory.mktemp("land"))


def test_written_table_replays_as_generated(land: landscapes.Landscape, tmp_path: Path) -> None:
    path = tmp_path / "node13.csv"
    assert landscapes.write_table(land, path) == len(land.table)
    replay = load_replay(path, land.spec)
    assert len(replay) == len(land.table)
    for key, row in land.table.rows.items():
        back = replay.rows[key]
        assert (back.config, back.failure_mode, back.metrics) == (
            row.config,
            row.failure_mode,
            row.metrics,
        )


def _searcher(
    land: landscapes.Landscape, seed: int, history: list[TrialRecord], next_index: int
) -> SweepSearcher:
    spec = land.spec.model_copy(
        update={"searcher": land.spec.searcher.model_copy(update={"seed": seed})}
    )
    requeue = [] if history else [("t0000", baseline_config(spec), 1)]
    return SweepSearcher(spec, history=history, requeue=requeue, next_index=next_index)


def drive(
    land: landscapes.Landscape,
    trials: int,
    seed: int = 0,
    *,
    history: list[TrialRecord] | None = None,
) -> list[tuple[Any, ...]]:
    """Ask and tell `trials` times, answering from the landscape's table (the replay path)."""
    history = list(history or [])
    searcher = _searcher(land, seed, history, next_index=len(history))
    out = []
    for i in range(trials):
        proposal = searcher.suggest(f"x{i}")
        assert proposal is not None
        config = proposal.config
        row = land.table.lookup(config)
        assert row is not None
        searcher.complete(f"x{i}", {"failure_mode": row.failure_mode.value, **row.metrics})
        out.append((config, row.failure_mode, row.metrics.get("output_throughput")))
    return out


@pytest.fixture(scope="module")
def run40(land: landscapes.Landscape) -> list[tuple[Any, ...]]:
    return drive(land, 40)


def test_no_trial_on_a_rejected_tree_and_rewrites_run_once(
    land: landscapes.Landscape, run40: list[tuple[Any, ...]]
) -> None:
    trials = run40
    effective = [config_key(check_tree(c).config) for c, _, _ in trials]
    assert len(set(effective)) == len(effective)  # no configuration that runs, run twice
    for config, _, _ in trials:
        assert check_tree(config).runs
        if config.get(ALGO) is not None and config["speculative-eagle-topk"] == 1:
            # a rewritten tree is launched as what runs, when the space can say it
            steps = config["speculative-num-steps"]
            if steps + 1 in land.spec.params["speculative-num-draft-tokens"].values():
                assert config["speculative-num-draft-tokens"] == steps + 1
    assert drive(land, 40) == trials  # seeded


def test_speculation_keeps_its_share_and_wins(
    land: landscapes.Landscape, run40: list[tuple[Any, ...]]
) -> None:
    """On this node a tree is ~1.75x the best plain configuration: the search must find it."""
    trials = run40
    speculative = [t for t in trials if t[0].get(ALGO) is not None]
    assert len(speculative) >= 0.35 * len(trials)
    best = max((t for t in trials if t[1] is FailureMode.NONE), key=lambda t: t[2])
    assert best[0][ALGO] is not None
    optimum = max(
        r.metrics["output_throughput"]
        for r in land.table.rows.values()
        if r.failure_mode is FailureMode.NONE
    )
    assert best[2] >= 0.9 * optimum


def test_a_resumed_searcher_keeps_its_guide(
    land: landscapes.Landscape, run40: list[tuple[Any, ...]]
) -> None:
    """Resume rebuilds the searcher from the record (Ray Tune's snapshot is not used): the guide
    learns the finished trials again, so no configuration that runs is launched twice."""
    history = [
        TrialRecord(
            run_id=f"r{i}",
            trial_id=f"t{i:04d}",
            status="FINISHED",
            config=config,
            failure_mode=mode,
            metrics=dict(land.table.lookup(config).metrics),  # type: ignore[union-attr]
        )
        for i, (config, mode, _) in enumerate(run40[:20])
    ]
    more = drive(land, 12, history=history)
    effective = [config_key(check_tree(c).config) for c, _, _ in run40[:20] + more]
    assert len(set(effective)) == len(effective)


def test_adaptive_trials_are_not_trees_to_the_guide(tmp_path: Path) -> None:
    """With search_spaces/speculative_adaptive.yaml a measured trial may run SGLang's adaptive
    mode (no top-k of its own): the guide models trees on the static ones and keeps proposing."""
    from harness import make_spec, record

    spec = make_spec(
        tmp_path,
        node={"sglang_version": "0.5.23", "sim_profile": "h200-nvlink-x8"},
        search_space={"include": ["speculative_adaptive.yaml"]},
        budget={"trials": 12},
    )
    eagle = {ALGO: "EAGLE3", "speculative-adaptive": False, "speculative-num-steps": 3,
             "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4}  # fmt: skip
    history = [
        record("t0000", {ALGO: None}, 30.0, start=0),
        record("t0001", eagle, 50.0, start=1, accept_length=2.1),
        record(
            "t0002",
            {ALGO: "EAGLE3", "speculative-adaptive": True, "speculative-num-steps": 4},
            52.0,
            start=2,
        ),
    ]
    searcher = SweepSearcher(spec, history=history, requeue=[], next_index=3)
    proposed = [searcher.suggest(f"k{i}") for i in range(6)]
    assert all(p is not None for p in proposed)
