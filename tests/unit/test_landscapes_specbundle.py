"""Family B of generated nodes (benchmarks/landscapes_specbundle.py) and its calibration.

The calibration points are the published SpecBundle values stored beside the fit
(`benchmarks/data/specbundle_fits.csv`); one generated node (seed 7, a tuning seed) is built
once for the table checks.
"""

from __future__ import annotations

import csv
import random
import statistics
import sys
from pathlib import Path

import pytest

from spec_sweep.core.config import baseline_config, config_key
from spec_sweep.core.outcome import FailureMode
from spec_sweep.search.tree_rules import check_tree
from spec_sweep.spec_load import load_spec
from spec_sweep.store.replay import ReplayTable, load_replay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import landscapes_specbundle as fam
import specbundle_fit

TREES = specbundle_fit.TREES
#: Stated in the module docstring: worst and 90th-percentile relative error of the fit.
CHAIN_WORST, CHAIN_P90 = 0.08, 0.015
TREE_WORST, TREE_P90 = 0.10, 0.06


def _published() -> list[dict[str, str]]:
    with fam.FITS.open(encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def _name(tree: tuple[int, int, int]) -> str:
    return "_".join(map(str, tree))


def test_fitted_heads_reproduce_the_published_accept_lengths() -> None:
    fits = fam.load_fits()
    chains, trees = [], []
    for row in _published():
        head = fits[(row["model"], row["dataset"], row["head"])]
        for tree in TREES:
            err = abs(fam.accept_length(head, *tree) / float(row[f"al_{_name(tree)}"]) - 1)
            (chains if tree[1] == 1 else trees).append(err)
    assert len(chains) >= 200
    assert max(chains) <= CHAIN_WORST
    assert statistics.quantiles(chains, n=10)[-1] <= CHAIN_P90
    assert max(trees) <= TREE_WORST
    assert statistics.quantiles(trees, n=10)[-1] <= TREE_P90


def test_published_tree_penalty_is_reproduced() -> None:
    """Qwen3-235B on gsm8k, SpecForge head: chains 2.88/3.35/3.51, trees 2.59 and 2.51."""
    head = fam.load_fits()[
        (
            "Qwen3-235B-A22B-Instruct-2507",
            "gsm8k",
            "lmsys/SGLang-EAGLE3-Qwen3-235B-A22B-Instruct-2507-SpecForge",
        )
    ]
    published = {
        (3, 1, 4): 2.88,
        (5, 1, 6): 3.35,
        (7, 1, 8): 3.51,
        (5, 3, 6): 2.59,
        (7, 4, 8): 2.51,
    }
    for tree, value in published.items():
        assert fam.accept_length(head, *tree) == pytest.approx(value, rel=0.03)
    assert fam.accept_length(head, 5, 3, 6) < fam.accept_length(head, 5, 1, 6)


def test_cost_law_reproduces_the_published_cycle_times() -> None:
    rows = specbundle_fit.load_rows_from_fits()
    models = fam.archetypes()
    for name in fam.COST_FITTED:
        mine = [r for r in rows if r.model == name]
        for published, model in specbundle_fit.cycle_ratios(models[name], mine):
            assert model == pytest.approx(published, rel=0.12), name


def test_pr22246_best_chain_by_batch() -> None:
    """Qwen3-235B-A22B performs best with 4 steps at batch 1 and 2 at batch 64."""
    model = fam.archetypes()["Qwen3-235B-A22B-Instruct-2507"]
    head = specbundle_fit.reference_head()
    phys = specbundle_fit.physics(model)
    assert specbundle_fit.best_chain(phys, head, 1) == 4
    assert specbundle_fit.best_chain(phys, head, 64) == 2


def test_draft_tree_is_sglangs_selection() -> None:
    for steps, topk, draft in [(3, 2, 6), (5, 3, 6), (7, 4, 8), (4, 8, 32), (2, 2, 7)]:
        nodes = fam.draft_tree(steps, topk, draft, 3.0, 1.2, 0.2)
        assert len(nodes) == min(draft - 1, topk + (steps - 1) * topk * topk)
        depth: dict[int, int] = {}
        children: dict[int, int] = {}
        for i, (parent, rank) in enumerate(nodes):
            assert parent < i
            assert 1 <= rank <= topk
            depth[i] = 1 if parent < 0 else depth[parent] + 1
            children[parent] = children.get(parent, 0) + 1
        assert max(depth.values()) <= steps
        assert max(children.values()) <= topk
    head = fam.Head("h", 3.0, 1.2, 0.2, 1.0)
    lengths = [fam.accept_length(head, s, 1, s + 1) for s in range(1, 9)]
    assert lengths == sorted(lengths)
    assert lengths[0] == pytest.approx(1 + fam.survival(1, 3.0, 1.2))


@pytest.fixture(scope="module")
def land(tmp_path_factory: pytest.TempPathFactory) -> fam.Landscape:
    return fam.build(7, tmp_path_factory.mktemp("b7"))


def test_table_is_whole_and_well_formed(land: fam.Landscape, tmp_path: Path) -> None:
    spec, rows = land.spec, list(land.table.rows.values())
    node: fam.Node = land.node
    assert len(rows) == len({config_key(r.config) for r in rows}) > 10_000
    base = land.table.lookup(baseline_config(spec))
    assert base is not None
    assert base.failure_mode is FailureMode.NONE
    for row in rows:
        if row.failure_mode is FailureMode.NONE:
            assert row.metrics["output_throughput"] > 0
            if row.config.get(fam.ALGO) is not None:
                assert row.metrics["accept_length"] >= 1.0
        else:
            assert not row.metrics
    if len(node.heads) > 1:
        assert tuple(spec.params[fam.HEAD].values()) == tuple(h.path for h in node.heads)
        assert spec.params[fam.HEAD].when == {fam.ALGO: node.algorithm}
    # A sample of the rows through the replay-table writer and reader (the whole table: the
    # same code, 20 times longer).
    sample = {config_key(r.config): r for r in rows[::20]}
    part = fam.Landscape(land.name, spec, ReplayTable(path="sample", rows=sample), node)
    path = tmp_path / "b7.csv"
    assert fam.write_table(part, path) == len(sample)
    replay = load_replay(path, spec)
    for row in sample.values():
        again = replay.lookup(row.config)
        assert again is not None
        assert again.failure_mode is row.failure_mode
        assert again.metrics == pytest.approx(row.metrics)


def test_sglang_tree_rules_are_respected(land: fam.Landscape) -> None:
    lengths: dict[tuple[object, ...], set[float]] = {}
    for row in land.table.rows.values():
        config = row.config
        if config.get(fam.ALGO) is None:
            continue
        check = check_tree(config)
        if not check.runs:
            assert row.failure_mode in (FailureMode.INVALID_ARGS, FailureMode.CRASH)
            continue
        if row.failure_mode is FailureMode.NONE and config[fam.TOPK] == 1:
            head = config.get(fam.HEAD)
            lengths.setdefault((head, config[fam.STEPS]), set()).add(
                fam.accept_length(land.node.head(head), config[fam.STEPS], 1, 99)
            )
    assert lengths
    assert all(len(v) == 1 for v in lengths.values())  # top-k 1: steps + 1 draft tokens


def test_generation_is_deterministic_per_seed(land: fam.Landscape) -> None:
    again = fam.draw_node(7)
    assert fam.spec_yaml(again) == fam.spec_yaml(land.node)
    rows = list(land.table.rows.values())
    for row in random.Random(0).sample(rows, 300):
        config = dict(row.config)
        assert fam.outcome(again, config) == (row.failure_mode, row.metrics)
    assert fam.spec_yaml(fam.draw_node(8)) != fam.spec_yaml(again)


def test_full_spec_lists_the_heads_in_draft_model(land: fam.Landscape, tmp_path: Path) -> None:
    fam.build(7, tmp_path)
    spec = load_spec(tmp_path / "specbundle-7.yaml")
    heads = tuple(h.path for h in land.node.heads)
    assert len(heads) > 1
    assert spec.node.draft_model == heads
    assert spec.params[fam.HEAD].choices == heads
    assert list(spec.params)[:2] == [fam.ALGO, fam.HEAD]
    assert fam.HEAD not in spec.search_space.params


def test_pinned_head_spec_loads(land: fam.Landscape, tmp_path: Path) -> None:
    pinned = fam.build(7, tmp_path, draft_head=0)
    spec = load_spec(tmp_path / "specbundle-7.yaml")
    assert fam.HEAD not in spec.params
    assert spec.node.draft_model == land.node.heads[0].path
    path = tmp_path / "b7-pinned.csv"
    fam.write_table(pinned, path)
    assert len(load_replay(path, spec)) == len(pinned.table) < len(land.table)
    first = land.node.heads[0].path
    for row in list(pinned.table.rows.values())[::50]:
        config = dict(row.config)
        if config.get(fam.ALGO) is not None and fam.HEAD in land.spec.params:
            config[fam.HEAD] = first
        full = land.table.lookup(config)
        assert full is not None
        assert (full.failure_mode, full.metrics) == (row.failure_mode, row.metrics)
