"""The speculative performance model (spec_sweep.spec_model): fit and ranking."""

from __future__ import annotations

import itertools

from spec_sweep.search.spec_model import SpecModel, TreeObservation, accept_length, depth_widths


def truth(steps: int, topk: int, draft: int) -> tuple[float, float]:
    """A node: a = 0.8, r = 0.9, g = 0.4; cost 10 + 1.0 steps (1 + 0.08 (k - 1)) + 0.3 draft."""
    length = accept_length(0.8, 0.9, 0.4, depth_widths(steps, topk, draft))
    cost = 10 + 1.0 * steps * (1 + 0.08 * (topk - 1)) + 0.3 * draft
    return length, 1000 * length / cost


def test_depth_widths_fill_depths_then_widen() -> None:
    assert depth_widths(3, 1, 4) == [1, 1, 1]
    assert depth_widths(3, 4, 8) == [4, 2, 1]
    assert depth_widths(4, 2, 3) == [1, 1, 0, 0]


def test_fit_recovers_the_node_and_ranks_untried_trees() -> None:
    tried = [(3, 1, 4), (2, 2, 4), (4, 4, 12), (5, 1, 6)]
    observations = [
        TreeObservation(s, k, d, truth(s, k, d)[1], truth(s, k, d)[0]) for s, k, d in tried
    ]
    model = SpecModel(observations)
    a, _r, g = model.accept
    assert abs(a - 0.8) < 0.1
    assert abs(g - 0.4) < 0.15
    untried = [
        t
        for t in itertools.product([1, 2, 3, 4, 5, 6], [1, 2, 4], [2, 4, 6, 8, 12, 16])
        if t not in tried and t[2] - 1 <= t[1] + (t[0] - 1) * t[1] ** 2
    ]
    predicted = max(untried, key=lambda t: model.throughput(*t))
    best = max(truth(*t)[1] for t in untried)
    assert truth(*predicted)[1] >= 0.97 * best


def test_prior_without_observations_prefers_a_real_tree_over_one_step() -> None:
    model = SpecModel([])
    assert model.throughput(3, 1, 4) > model.throughput(1, 1, 2)
    assert model.throughput(3, 1, 4, eager=True) < model.throughput(3, 1, 4)
