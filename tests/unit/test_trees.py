"""EAGLE trees of a space, their neighbours and the per-draft-model predictor (search.trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spec_sweep.search.spec_model import SpecModel, TreeObservation
from spec_sweep.search.tree_rules import tree_capacity
from spec_sweep.search.trees import (
    Tree,
    TreePredictor,
    TreeResult,
    tree_neighbours,
    tree_of,
    valid_trees,
)
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

SPEC = """\
name: trees
node:
  model: /m/target
  draft_model: [/m/a, /m/b]
  gpus: 8
  sglang_version: "0.5.23"
search_space:
  params:
    speculative-algorithm: {choices: [null, EAGLE3]}
    speculative-num-steps: {choices: [1, 2, 4], default: 2, when: {speculative-algorithm: EAGLE3}}
    speculative-eagle-topk: {choices: [1, 2, 4], default: 1, when: {speculative-algorithm: EAGLE3}}
    speculative-num-draft-tokens: {choices: [2, 4, 8, 16], default: 4,
                                   when: {speculative-algorithm: EAGLE3}}
    mem-fraction-static: {choices: [0.8, 0.9], default: 0.8}
baseline: {speculative-algorithm: null}
"""


@pytest.fixture
def spec(tmp_path: Path) -> SweepSpec:
    path = tmp_path / "trees.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def test_valid_trees_follow_sglangs_rules_per_draft_model(spec: SweepSpec) -> None:
    trees = valid_trees(spec, "EAGLE3")
    assert {t.head for t in trees} == {"/m/a", "/m/b"}
    for tree in trees:
        assert tree.ran <= tree_capacity(tree.steps, tree.topk)
        if tree.topk == 1:
            assert tree.ran == tree.steps + 1  # SGLang's rewrite
    runs = [t.runs_as for t in trees]
    assert len(runs) == len(set(runs))  # a rewritten tree once
    per_head = [t for t in trees if t.head == "/m/a"]
    assert len(per_head) * 2 == len(trees)


def test_neighbours_move_one_coordinate(spec: SweepSpec) -> None:
    trees = valid_trees(spec, "EAGLE3")
    tree = next(t for t in trees if (t.head, t.steps, t.topk, t.draft) == ("/m/a", 2, 2, 4))
    around = tree_neighbours(tree, trees)
    assert Tree(2, 2, 4, 4, "/m/b") in around  # the other draft model
    for other in around:
        moved = [
            other.head != tree.head,
            other.steps != tree.steps,
            other.topk != tree.topk,
            other.ran != tree.ran,
        ]
        assert sum(moved) == 1 or (other.topk == 1 and other.steps == tree.steps)
        assert other.runs_as != tree.runs_as
    assert tree not in around


def test_tree_of_reads_the_draft_model_and_the_rewrite(spec: SweepSpec) -> None:
    config = {
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "/m/b",
        "speculative-num-steps": 4,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 16,
    }
    assert tree_of(config, spec) == Tree(4, 1, 16, 5, "/m/b")


def _result(tree: Tree, speed: float, length: float) -> TreeResult:
    return TreeResult(tree, speed, length, eager=False, system="s")


def test_a_draft_model_measured_better_is_predicted_better() -> None:
    chain, other = Tree(2, 1, 3, 3, "a"), Tree(4, 1, 5, 5, "a")
    results = [_result(chain, 100.0, 2.2), _result(other, 110.0, 2.8)]
    # head b measured once, 20% faster on the same tree than head a
    results.append(_result(Tree(2, 1, 3, 3, "b"), 120.0, 2.6))
    predictor = TreePredictor(results, system="s")
    assert predictor.measured("b") == 1
    wide = Tree(4, 2, 8, 8, "")
    a = predictor.throughput(Tree(4, 2, 8, 8, "a"), eager=False)
    b = predictor.throughput(Tree(4, 2, 8, 8, "b"), eager=False)
    assert b > 1.05 * a
    assert predictor.accept_length(Tree(4, 2, 8, 8, "b")) > predictor.accept_length(
        Tree(4, 2, 8, 8, "a")
    )
    # a draft model never measured borrows the shared fit, unscaled
    shared = SpecModel(
        [
            TreeObservation(r.tree.steps, r.tree.topk, r.tree.ran, r.throughput, r.accept_length)
            for r in results
        ]
    )
    assert predictor.throughput(Tree(4, 2, 8, 8, "c"), eager=False) == pytest.approx(
        shared.throughput(wide.steps, wide.topk, wide.ran)
    )
    assert TreePredictor([], system="s").empty
