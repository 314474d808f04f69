"""The EAGLE trees of a search space, their neighbours, and the per-draft-model tree predictor.

This module owns the speculative side of the search's arithmetic, free of any sampler:

* `valid_trees`: every tree SGLang runs in the space (`tree_rules.check_tree`), one per
  configuration that actually runs (a rewritten tree counts once), times every draft model the
  spec lists (`node.draft_model`, searched as `speculative-draft-model-path`).
* `tree_neighbours`: the model-free step around a tree: one of draft model, steps, top-k or
  draft tokens moved to the next value of its list (any other draft model).
* `TreePredictor`: `spec_model.SpecModel` fitted per draft model. A draft model with two or more
  measured trees gets its own fit; one with fewer borrows the fit of all measured trees, scaled by
  its own measured-over-predicted throughput and accept length (a per-draft-model factor; 1 when
  it has none), so a head that measured better than the others is predicted better everywhere.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from spec_sweep.search.spec_model import SpecModel, TreeObservation
from spec_sweep.search.tree_rules import ALGORITHM, DRAFT_TOKENS, STEPS, TOPK, check_tree
from spec_sweep.spec import DRAFT_PATH, Scalar, SweepSpec

__all__ = ["Tree", "TreePredictor", "TreeResult", "tree_neighbours", "tree_of", "valid_trees"]


@dataclass(frozen=True, order=True)
class Tree:
    """One EAGLE tree as configured (`draft`) and as it runs (`ran`), on one draft model."""

    steps: int
    topk: int
    draft: int
    ran: int
    head: str = ""  # "" when the spec names one draft model (not searched)

    @property
    def runs_as(self) -> tuple[str, int, int, int]:
        """What runs: draft model, steps, top-k and draft tokens after SGLang's rewrite."""
        return (self.head, self.steps, self.topk, self.ran)


@dataclass(frozen=True)
class TreeResult:
    """One measured speculative trial, as the predictor reads it."""

    tree: Tree
    throughput: float
    accept_length: float | None
    eager: bool
    system: str  # the configuration's system knobs, as a key


def _ints(spec: SweepSpec, key: str) -> list[int]:
    return [int(v) for v in spec.params[key].values() if isinstance(v, int) and v is not None]


def valid_trees(spec: SweepSpec, algorithm: Scalar) -> list[Tree]:
    """Every tree SGLang runs in the space, one per configuration that runs, per draft model."""
    steps = _ints(spec, STEPS)
    topks = _ints(spec, TOPK)
    drafts = _ints(spec, DRAFT_TOKENS) if DRAFT_TOKENS in spec.params else [0]
    heads: list[str] = [""]
    if DRAFT_PATH in spec.params:
        heads = [str(v) for v in spec.params[DRAFT_PATH].values()]
    out: dict[tuple[int, int, int], Tree] = {}
    for s, k, d in itertools.product(steps, topks, drafts):
        config: dict[str, Scalar] = {ALGORITHM: algorithm, STEPS: s, TOPK: k}
        if DRAFT_TOKENS in spec.params:
            config[DRAFT_TOKENS] = d
        check = check_tree(
            config, server_args=spec.node.server_args, version=spec.node.sglang_version
        )
        if check.runs:
            ran = int(check.config.get(DRAFT_TOKENS, s + 1) or s + 1)
            out.setdefault((s, k, ran), Tree(s, k, d, ran))
    return sorted(
        Tree(t.steps, t.topk, t.draft, t.ran, head) for head in heads for t in out.values()
    )


def _next_values(values: Sequence[int], value: int) -> list[int]:
    """The values beside `value` in the sorted list (or the nearest ones when it is absent)."""
    ordered = sorted(set(values))
    below = [v for v in ordered if v < value]
    above = [v for v in ordered if v > value]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def tree_neighbours(tree: Tree, trees: Sequence[Tree]) -> list[Tree]:
    """The valid trees one move from `tree`: another draft model, or the next steps, top-k or
    draft-token value (the others kept), as SGLang runs them; `tree` itself left out."""
    by_config = {(t.head, t.steps, t.topk, t.draft): t for t in trees}
    by_run = {t.runs_as: t for t in trees}
    heads = sorted({t.head for t in trees})
    steps = sorted({t.steps for t in trees})
    topks = sorted({t.topk for t in trees})
    drafts = sorted({t.draft for t in trees})
    wanted: list[tuple[str, int, int, int]] = [
        (h, tree.steps, tree.topk, tree.draft) for h in heads if h != tree.head
    ]
    wanted += [(tree.head, s, tree.topk, tree.draft) for s in _next_values(steps, tree.steps)]
    wanted += [(tree.head, tree.steps, k, tree.draft) for k in _next_values(topks, tree.topk)]
    wanted += [(tree.head, tree.steps, tree.topk, d) for d in _next_values(drafts, tree.draft)]
    wanted += [(tree.head, tree.steps, tree.topk, d) for d in _next_values(drafts, tree.ran)]
    out: list[Tree] = []
    for key in wanted:
        found = by_config.get(key)
        if found is None:
            continue
        found = by_run.get(found.runs_as, found)
        if found.runs_as != tree.runs_as and found not in out:
            out.append(found)
    return out


class TreePredictor:
    """Throughput and accept length of trees, fitted per draft model on the measured trees."""

    def __init__(self, results: Sequence[TreeResult], *, system: str) -> None:
        """Fit on `results` (those on the `system` knobs first, when there are two or more)."""
        same = [r for r in results if r.system == system]
        self._results = same if len(same) >= 2 else list(results)
        self._all = self._fit(self._results)
        self._heads: dict[str, tuple[SpecModel, float, float]] = {}

    @property
    def empty(self) -> bool:
        """Whether nothing measured backs the predictions (the model's prior alone)."""
        return not self._results

    def measured(self, head: str) -> int:
        """How many measured trees of this draft model the predictions rest on."""
        return sum(1 for r in self._results if r.tree.head == head)

    @staticmethod
    def _fit(results: Sequence[TreeResult]) -> SpecModel:
        return SpecModel(
            [
                TreeObservation(
                    steps=r.tree.steps,
                    topk=r.tree.topk,
                    draft_tokens=r.tree.ran,
                    throughput=r.throughput,
                    accept_length=r.accept_length,
                    eager=r.eager,
                )
                for r in results
            ]
        )

    def _for(self, head: str) -> tuple[SpecModel, float, float]:
        """The model for a draft model, with its throughput and accept-length factors."""
        if head not in self._heads:
            own = [r for r in self._results if r.tree.head == head]
            if len(own) == len(self._results):
                self._heads[head] = (self._all, 1.0, 1.0)  # one draft model measured
            elif len(own) >= 2:
                self._heads[head] = (self._fit(own), 1.0, 1.0)
            else:
                self._heads[head] = (
                    self._all,
                    _factor(own, lambda r: r.throughput, self._all, speed=True),
                    _factor(own, lambda r: r.accept_length, self._all, speed=False),
                )
        return self._heads[head]

    def throughput(self, tree: Tree, *, eager: bool) -> float:
        """Predicted throughput, in the units of the measured trees."""
        model, speed, _ = self._for(tree.head)
        return speed * model.throughput(tree.steps, tree.topk, tree.ran, eager=eager)

    def accept_length(self, tree: Tree) -> float:
        """Predicted accept length."""
        model, _, length = self._for(tree.head)
        return length * model.length(tree.steps, tree.topk, tree.ran)


def _factor(
    own: Sequence[TreeResult],
    read: Callable[[TreeResult], float | None],
    model: SpecModel,
    *,
    speed: bool,
) -> float:
    """Geometric mean of measured over predicted for a draft model's own trees (1 if none)."""
    logs = []
    for r in own:
        value = read(r)
        if value is None or value <= 0:
            continue
        t = r.tree
        predicted = (
            model.throughput(t.steps, t.topk, t.ran, eager=r.eager)
            if speed
            else model.length(t.steps, t.topk, t.ran)
        )
        if predicted > 0:
            logs.append(math.log(value / predicted))
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def tree_of(config: Mapping[str, Scalar], spec: SweepSpec) -> Tree:
    """The tree of a speculative configuration (as given and as it runs)."""
    check = check_tree(config, server_args=spec.node.server_args, version=spec.node.sglang_version)
    steps = _int(config.get(STEPS))
    topk = _int(config.get(TOPK))
    draft = _int(config.get(DRAFT_TOKENS))
    ran_value = check.config.get(DRAFT_TOKENS)
    ran = _int(ran_value) if ran_value is not None else steps + 1
    head = config.get(DRAFT_PATH)
    return Tree(steps, topk, draft, ran, str(head) if head is not None else "")


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
