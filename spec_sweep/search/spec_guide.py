"""Domain knowledge in the sweep's search: SGLang's tree rules, the speculative branch's share,
and models that lose their turns when they are wrong.

This module owns what the searcher (`spec_sweep.search.searcher.SweepSearcher`) knows about
speculative decoding beyond a generic sampler:

* **Before launch** (`SpecGuide.resolve`): SGLang's tree rules (`spec_sweep.search.tree_rules`). A
  configuration SGLang rejects is never launched; one SGLang rewrites (top-k 1 sets the draft
  tokens to steps + 1) is replaced by the configuration that actually runs, when the search
  space can express it, else launched as given and recognised as the one that runs (no second
  launch of the same effective configuration).
* **The branch keeps a share** (`SpecGuide.propose`): while speculation has not been measured to
  lose, at least `SHARE` of the trials so far are speculative. A speculative turn first tries
  every listed draft model once (`node.draft_model` with several: the best speculative trial
  so far with another draft model), then proposes the untried tree that the per-draft-model
  tree predictor (`spec_sweep.search.trees.TreePredictor`, fitted from the speculative trials
  so far) ranks first, times the failure model's probability that it runs, on the system knobs
  of the best trial so far or one knob away from them. A failed tree condemns that tree (and,
  through the failure model, the values or pairs of values that failed), never the branch. The
  branch is dropped only on measured evidence: at least `_DROP_AFTER` measured trees whose best
  is below `_DROP_RATIO` of the best non-speculative trial and a model that predicts no untried
  tree above that trial (twice as many trees, and no model, while the model is distrusted), or
  `_GIVE_UP` speculative launches that all failed; before it is dropped on measurements, the
  shortest chain runs once on the best non-speculative trial's knobs (when no trial had a tree
  that short): its cost is the model's furthest extrapolation from long trees.
* **System-knob steps** (`SpecGuide.exploit`): the best trial with one or more system knobs
  changed, ranked by their expected improvement over the best trial (the gain the additive
  model of `spec_sweep.search.knobs` predicts, times the failure model's probability that the
  step runs; a value measured only beside another new value is not charged the loss the model
  gives it); before them, a value
  that never ran and failed only beside other changes is launched once on the baseline (a
  failure may be a pair's); a step blamed in a pair with another of the best trial's values
  also comes with that knob moved.
* **Models that are tested** (`spec_sweep.search.model_check`): every measured speculative trial
  tests the tree predictor's throughput and accept length for it, every measured trial whose
  values were all measured before tests the knob model; a distrusted model's turns go to
  model-free exploration: for trees, a greedy step around the best tree (one of draft model,
  steps, top-k or draft tokens moved) and a tree drawn uniformly from the valid ones, in turn;
  for the knobs, a uniformly drawn one-knob change of the best trial. Both likely to run by the
  failure model (`_EXPLORE_RISK`).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.core.config import (
    Config,
    baseline_config,
    config_key,
    normalize_config,
    ordered_keys,
    resolve_config,
    same_value,
)
from spec_sweep.core.names import CI_HIGH, CI_LOW
from spec_sweep.core.outcome import FailureMode
from spec_sweep.search.knobs import Effects, fit_effects
from spec_sweep.search.model_check import ModelCheck, Quantity
from spec_sweep.search.tpe import FailureModel
from spec_sweep.search.tree_rules import ALGORITHM, DRAFT_TOKENS, STEPS, TOPK, TreeCheck, check_tree
from spec_sweep.search.trees import (
    Tree,
    TreePredictor,
    TreeResult,
    tree_neighbours,
    tree_of,
    valid_trees,
)
from spec_sweep.spec import DRAFT_PATH, Scalar, SweepSpec

__all__ = ["SHARE", "Resolved", "SpecGuide"]

#: Least share of the trials so far that are speculative while the branch is alive.
SHARE = 0.35
_DROP_AFTER = 4
_DROP_RATIO = 0.85
_GIVE_UP = 8
#: Preference for the best trial's own system knobs over a one-knob change of them.
_NEIGHBOUR_DISCOUNT = 0.97
_MEM = "mem-fraction-static"
_ADAPTIVE = "speculative-adaptive"
_TREE_KEYS = frozenset({ALGORITHM, DRAFT_PATH, STEPS, TOPK, DRAFT_TOKENS})
#: Least relative error that counts as a miss of the tree predictor's throughput and accept
#: length, and of the knob model's objective (chosen on the tuning seeds, model_check).
SPEED_FLOOR = 0.15
LENGTH_FLOOR = 0.10
KNOB_FLOOR = 0.15
#: Model-free proposals skip configurations the failure model gives less than this log P(runs).
_EXPLORE_RISK = math.log(0.3)
#: A knob step's predicted loss smaller than this ratio counts as a near tie for a value that no
#: trial within `_CLOSE` of the best trial has had (`SpecGuide.exploit`; chosen on the tuning
#: seeds: below random's median at 40 in 9 -> 7 of 360 runs).
_NEAR_TIE = 0.9
_CLOSE = 0.98
#: The share of a near tie's learnt loss that still counts: near ties rank among themselves by
#: what the model learnt of them instead of by the failure model's small differences and a
#: seeded draw (the four tuning sets, 360 runs per budget: every mean change within its
#: standard error, the largest +0.006 on A's tuning set at 20; the H200 grid's trials to within
#: 2% 56.5 / > 300 -> 47.5 / 89, median / worst of 10 seeds).
_NEAR_TIE_KEEP = 0.25
#: The trees' turn goes to a knob step (`SpecGuide.propose`, `step_if_losing`) once the tree
#: model has been tested on `_STEP_AFTER` trees and predicts the tree it ranks first below the
#: best trial by more than `_STEP_MARGIN` and more than its own typical miss on this node (the
#: root mean square of its logged throughput errors). On the simulated H200 grid the trusted
#: model predicted 0.91-0.97 of the best for every tree it proposed from trial 14 on, while the
#: knob step that reached the optimum (NCCL's NVLS) waited for its turn until trial 49.
_STEP_AFTER = 6
_STEP_MARGIN = -math.log(0.97)
#: Failures the engine's own checks report (arguments rejected, a feature or an NCCL algorithm
#: not supported): what they reject is named, so they are never probed (`SpecGuide._probe`).
_NAMED = frozenset({FailureMode.INVALID_ARGS, FailureMode.UNSUPPORTED, FailureMode.NCCL})


def _num(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


@dataclass(frozen=True)
class Resolved:
    """A proposal after SGLang's rules: what to launch, and what actually runs."""

    launch: Config | None  # None: SGLang rejects it (never launched)
    effective_key: str  # the key of the configuration that actually runs
    check: TreeCheck


@dataclass
class _Trial:
    config: Config
    ok: bool
    value: float | None
    accept_length: float | None
    mode: str = ""  # how it ended (`FailureMode`'s value; "" when unknown)

    @property
    def oom(self) -> bool:
        return self.mode == FailureMode.OOM

    @property
    def params(self) -> Config:  # what `FailureModel` reads
        return self.config

    @property
    def constraints(self) -> dict[str, float]:
        return {"failed": 0.0 if self.ok else 1.0}


@dataclass
class SpecGuide:
    """Tree rules, the speculative branch's share and the tested models for one sweep."""

    spec: SweepSpec
    seed: int = 0
    trials: list[_Trial] = field(default_factory=list)
    alive: bool = True
    trees_check: ModelCheck = field(default_factory=lambda: ModelCheck("trees"))
    knobs_check: ModelCheck = field(default_factory=lambda: ModelCheck("system knobs"))

    def __post_init__(self) -> None:
        params = self.spec.params
        # The model ranks trees by throughput: only for objectives to maximise.
        self.enabled = (
            self.spec.objective.mode == "max"
            and ALGORITHM in params
            and any(v is not None for v in params[ALGORITHM].values())
            and all(k in params for k in (STEPS, TOPK))
        )
        self._sign = 1.0
        self._rng = random.Random(f"spec-guide:{self.seed}")
        algorithms = (
            [v for v in params[ALGORITHM].values() if v is not None] if self.enabled else []
        )
        self._algorithm: Scalar = algorithms[0] if algorithms else None
        self._trees = valid_trees(self.spec, self._algorithm) if self.enabled else []
        concurrency = self.spec.workload.concurrency
        self._concurrency = max(concurrency)
        self._graph_key = next(
            (k for k in ("cuda-graph-max-bs", "cuda-graph-max-bs-decode") if k in params), None
        )
        self._gates = frozenset(dep for param in params.values() for dep in param.when)
        self._risk_cache: tuple[FailureModel, list[tuple[tuple[float, ...], float, bool]]] | None
        self._risk_cache = None
        self._explore_turn = 0
        self._shortest_tried = False
        self._last_chance: Config | None = None
        #: Where the last proposal came from: "draft model" (an untried one), "model" (the
        #: tree predictor or the knob model), "greedy" or "uniform" (model-free), "probe" (a
        #: failed value on the baseline alone), "shortest chain" (before the branch is dropped).
        self.last_source = ""

    # -- SGLang's rules ---------------------------------------------------------------------------
    def resolve(self, config: Mapping[str, Scalar]) -> Resolved:
        """What SGLang does with `config`: rejected, rewritten (and expressible), or as is."""
        check = check_tree(
            config, server_args=self.spec.node.server_args, version=self.spec.node.sglang_version
        )
        effective = normalize_config(self.spec, check.config)
        if not check.runs:
            return Resolved(None, config_key(effective), check)
        launch = effective if self._expressible(effective) else normalize_config(self.spec, config)
        return Resolved(launch, config_key(effective), check)

    def unseen_launch(self, config: Mapping[str, Scalar], *, seen: set[str]) -> Config | None:
        """What to launch for `config` after SGLang's rules, if it runs and was not seen yet.

        None when SGLang rejects it, or when what would run (as given or as SGLang rewrites
        it) is among `seen` (configuration keys of what ran, runs, or was proposed).
        """
        resolved = self.resolve(config)
        if resolved.launch is None or resolved.effective_key in seen:
            return None
        if config_key(resolved.launch) in seen:
            return None
        return resolved.launch

    def _expressible(self, config: Mapping[str, Scalar]) -> bool:
        for key, value in config.items():
            param = self.spec.params.get(key)
            if param is None:
                return False
            try:
                values = param.values()
            except ValueError:
                continue  # a continuous range
            if not any(same_value(v, value) for v in values):
                return False
        return True

    # -- what the trials measured -----------------------------------------------------------------
    def observe(
        self, config: Mapping[str, Scalar], *, value: float | None, metrics: Mapping[str, Any]
    ) -> None:
        """Record a finished trial (value None: it failed or broke a constraint); a measured
        one first tests the models fitted on the trials before it."""
        length = metrics.get("accept_length")
        trial = _Trial(
            config=dict(config),
            ok=value is not None,
            value=value,
            accept_length=float(length) if isinstance(length, int | float) else None,
            mode=str(metrics.get("failure_mode") or ""),
        )
        if trial.ok and (value or 0.0) > 0:
            self._test_models(trial, self._noise(metrics))
        self.trials.append(trial)
        self._risk_cache = None

    def _noise(self, metrics: Mapping[str, Any]) -> float:
        """The trial's relative noise on its objective: its within-boot 95% half width."""
        metric = self.spec.objective.metric
        value, lo, hi = (metrics.get(metric + s) for s in ("", CI_LOW, CI_HIGH))
        if not all(isinstance(v, int | float) for v in (value, lo, hi)) or not value:
            return 0.0
        return abs(float(hi) - float(lo)) / 2.0 / abs(float(value))  # type: ignore[arg-type]

    def _test_models(self, trial: _Trial, noise: float) -> None:
        """Each model's prediction for `trial` (fitted without it) against its measurement."""
        label = f"#{len(self.trials)}"
        value = trial.value or 0.0
        if self.enabled and self._static_tree(trial.config):
            predictor = self._predictor(trial.config)
            tree = tree_of(trial.config, self.spec)
            if not predictor.empty and predictor.measured(tree.head) > 0:
                eager = self._eager(trial.config, tree.ran)
                quantities = [
                    Quantity(
                        "throughput",
                        predictor.throughput(tree, eager=eager),
                        value,
                        SPEED_FLOOR,
                        noise,
                    )
                ]
                if trial.accept_length:
                    predicted = predictor.accept_length(tree)
                    quantities.append(
                        Quantity("accept_length", predicted, trial.accept_length, LENGTH_FLOOR)
                    )
                self.trees_check.record(label, quantities)
        effects = self._effects()
        if effects.knows(trial.config):
            predicted = effects.predict(trial.config)
            self.knobs_check.record(label, [Quantity("objective", predicted, value, KNOB_FLOOR)])

    def _risk(self, config: Mapping[str, Scalar]) -> float:
        """log P(`config` runs), from what failed so far, memory read as memory.

        An out-of-memory trial condemns every configuration that needs at least as much memory
        (speculation, as many draft tokens, as large a CUDA-graph size, expert parallelism) at a
        static fraction on the same side: above it when that fraction or a smaller one ran in
        another trial (the pool fitted, so too little room was left outside it), below it
        otherwise; other failures go to the failure model (values, or pairs of values, that
        never ran), gates excepted.
        """
        model, walls = self._failures()
        need, mem = self._need(config), _num(config.get(_MEM))
        for wall_need, wall_mem, high in walls:
            dominated = all(n >= w for n, w in zip(need, wall_need, strict=True))
            if dominated and (mem >= wall_mem if high else mem <= wall_mem):
                return -20.0
        return model.log_ok(config)

    def _failures(self) -> tuple[FailureModel, list[tuple[tuple[float, ...], float, bool]]]:
        """The failure model of the non-OOM failures and the memory walls of the OOM ones
        (need, static fraction, high end), built once per trial told."""
        if self._risk_cache is None:
            others = [t for t in self.trials if not t.oom]
            model = FailureModel(others, self._gates)  # type: ignore[arg-type]
            ran_mems = [_num(t.config.get(_MEM)) for t in self.trials if t.ok and _MEM in t.config]
            walls = []
            for t in self.trials:
                if t.oom and _MEM in t.config:
                    mem = _num(t.config[_MEM])
                    walls.append((self._need(t.config), mem, any(m <= mem for m in ran_mems)))
            self._risk_cache = (model, walls)
        return self._risk_cache

    def _need(self, config: Mapping[str, Scalar]) -> tuple[float, ...]:
        """What a configuration asks of memory: speculation, draft tokens, CUDA-graph size."""
        spec_on = 1.0 if self._speculative(config) else 0.0
        draft = float(tree_of(config, self.spec).ran) if spec_on else 0.0
        graph = _num(config.get(self._graph_key)) if self._graph_key else 0.0
        return (spec_on, draft, graph, _num(config.get("ep-size")))

    def _speculative(self, config: Mapping[str, Scalar]) -> bool:
        return config.get(ALGORITHM) is not None

    def _static_tree(self, config: Mapping[str, Scalar]) -> bool:
        """A speculative trial that ran one tree (not SGLang's adaptive mode, which picks its
        steps at run time and has no top-k of its own: search_spaces/speculative_adaptive.yaml)."""
        return self._speculative(config) and config.get(_ADAPTIVE) is not True

    def _best(self, *, speculative: bool | None = None, tree: bool = False) -> _Trial | None:
        """The best measured trial (of one branch; `tree`: of the static trees)."""
        ok = [
            t
            for t in self.trials
            if t.ok
            and t.value is not None
            and (speculative is None or self._speculative(t.config) == speculative)
            and (not tree or self._static_tree(t.config))
        ]
        return max(ok, key=lambda t: self._sign * (t.value or 0.0)) if ok else None

    # -- the system knobs -------------------------------------------------------------------------
    def exploit(self, *, seen: set[str]) -> Config | None:
        """The best trial with one or more of its system knobs changed, as the trials suggest.

        First a probe of a value that failed only beside other changes (`_probe`). Then the
        candidates: the best trial with one knob changed, and with every knob at its
        best-estimated value (`knobs.fit_effects`); the one with the highest expected
        improvement over the best trial: the failure model's probability that it runs times the
        predicted gain (when no candidate is predicted to gain, the highest predicted value
        times that probability). A value that no trial close to the best has had, and that the
        model puts less than `_NEAR_TIE` below the best's, is predicted at a quarter of that
        loss (the model learnt it elsewhere; near ties still rank among themselves by it); a
        value measured only beside another new value (`_confounded`) is not charged its learnt
        loss. While the knob model is distrusted, one of the one-knob changes drawn uniformly
        among those likely to run.
        """
        best = self._best()
        if best is None:
            return None
        probe = self._probe(seen=seen)
        if probe is not None:
            self.last_source = "probe"
            return probe
        anchor = dict(best.config)
        if not self.knobs_check.trusted:
            self.last_source = "uniform"
            return self._draw(self._system_neighbours(anchor), seen=seen)
        self.last_source = "model"
        effects = self._effects()
        candidates = self._step_candidates(anchor, effects)
        candidates += self._resolved(anchor, candidates)
        untried = self._untried_near_best(best)
        confounded = self._confounded()
        base = effects.total(anchor)
        scored = []
        for candidate in candidates:
            config = self._complete(candidate, what="step")
            launch = None if config is None else self.unseen_launch(config, seen=seen)
            if config is None or launch is None:
                continue
            gain = effects.total(config)
            for k, v in config.items():
                if k not in anchor or same_value(v, anchor[k]):
                    continue
                loss = effects.get((k, repr(v))) - effects.get((k, repr(anchor[k])))
                if (k, repr(v)) in confounded:
                    # its only measurements cannot tell it from another new value: no loss
                    gain -= min(loss, 0.0)
                elif (k, repr(v)) in untried and math.log(_NEAR_TIE) < loss < 0.0:
                    # learnt away from the best: a near tie keeps a quarter of its loss
                    gain -= (1.0 - _NEAR_TIE_KEEP) * loss
            risk = self._risk(launch)
            # The expected improvement over the best trial: a failed step costs a trial, not
            # the best, so a likely failure with a large predicted gain goes ahead of a sure
            # step predicted at a tie; steps that no model expects to improve rank by their
            # predicted value times P(runs).
            improvement = math.exp(risk) * max(math.expm1(gain - base), 0.0)
            scored.append((improvement, gain + risk, self._rng.random(), launch))
        if not scored:
            return None
        scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
        return scored[0][3]

    def _resolved(
        self, anchor: Mapping[str, Scalar], candidates: Sequence[Mapping[str, Scalar]]
    ) -> list[Config]:
        """Each step that carries a failed pair's blame (its new value beside one of the anchor's
        other values) with that other knob moved too, to each of its other values."""
        model = self._failures()[0]
        out: list[Config] = []
        for candidate in candidates:
            config = self._complete(candidate, what="step")
            if config is None:
                continue
            changed = {
                k for k, v in config.items() if k not in anchor or not same_value(v, anchor[k])
            }
            if not changed:
                continue
            for other in model.partners(config, changed):
                if other in _TREE_KEYS or other not in self.spec.params:
                    continue
                out += [
                    {**candidate, other: v}
                    for v in self._values(other)
                    if not same_value(v, config[other])
                ]
        return out

    def _probe(self, *, seen: set[str]) -> Config | None:
        """A system-knob value that never ran and failed only beside other changes from the
        baseline, launched on the baseline alone (with the knobs it needs turned on).

        The failure model blames a value that never ran for its failures, but a failure beside
        other changes may be the pair's (family A's FlashInfer all-to-all with all-reduce
        fusion on), and the one-knob steps from the best trial never reach the two-knob change
        that both switches it on and the partner off. One launch on the baseline tells the two
        apart: run, the value is measured and the knob model ranks it; failed, it is blamed
        alone (that launch is then seen, and nothing is probed again). Only failures at run
        time count (a crash, an assertion, a hang): out-of-memory ones are memory's (`_risk`),
        and the engine's own checks (`_NAMED`) name what they reject. (The extra tuning sets,
        three runs per node: A's runs below random's median at 20 / 40 / 80 11 / 5 / 3 -> 8 / 4
        / 1 of 120, mean change +0.006 / +0.002 / +0.002; the other three sets and the two grids
        within a standard error or unchanged; probing after the engine's checks too cost the
        H200 grid a failed probe per run.)"""
        ran = {(k, repr(v)) for t in self.trials if t.ok for k, v in t.config.items()}
        suspects: list[tuple[str, Scalar]] = []
        for t in self.trials:
            if t.ok or t.oom or t.mode in _NAMED:
                continue
            for k, v in t.config.items():
                if k in _TREE_KEYS or (k, repr(v)) in ran or (k, v) in suspects:
                    continue
                suspects.append((k, v))
        if not suspects:
            return None
        base = baseline_config(self.spec)
        moves = self._system_neighbours(base, children=True)
        for key, value in suspects:
            for move in moves:
                if key not in move or not same_value(move[key], value):
                    continue
                config = self._complete(move, what="step")
                launch = None if config is None else self.unseen_launch(config, seen=seen)
                if launch is not None and same_value(launch.get(key), value):
                    return launch
        return None

    def _confounded(self) -> set[tuple[str, str]]:
        """System-knob values whose every measured trial also had a value (of any parameter, a
        tree's included) that no other measured trial had.

        The additive knob model splits such a trial's loss between the two, but nothing measured
        says which one lost it: on family A's node42 (run 2042) TPE's trial with 8 draft steps
        and FlashInfer's all-to-all, both never measured before, measured 0.29 of the optimum,
        and the model's share of that loss kept the all-to-all step (0.85 -> 0.97 of the
        optimum, from the best trial) out of every knob step to trial 40. A knob step to such a
        value is not charged the loss (`exploit`); a gain still counts."""
        measured = [t for t in self.trials if t.ok and t.value]
        counts = Counter((k, repr(v)) for t in measured for k, v in t.config.items())
        blurred: set[tuple[str, str]] = set()
        clear: set[tuple[str, str]] = set()
        for t in measured:
            items = [(k, repr(v)) for k, v in t.config.items()]
            for item in items:
                if item[0] in _TREE_KEYS:
                    continue
                alone = not any(counts[other] == 1 for other in items if other != item)
                (clear if alone else blurred).add(item)
        return blurred - clear

    def _untried_near_best(self, best: _Trial) -> set[tuple[str, str]]:
        """System-knob values that no trial within `_CLOSE` of the best has had.

        What the additive knob model knows of them it learnt on configurations that differ from
        the best in other knobs too, where a knob's effect may differ (on the simulated H200 grid
        NCCL's NVLS loses to the default algorithm at decode graph size 512 and wins at 128)."""
        had = {
            (key, repr(value))
            for t in self.trials
            if t.ok
            and (t.value or 0.0) > 0.0
            and (best.value or 0.0) > 0.0
            and self._sign * math.log((t.value or 1.0) / (best.value or 1.0)) >= math.log(_CLOSE)
            for key, value in t.config.items()
        }
        return {
            (key, repr(value))
            for key in self.spec.params
            if key not in _TREE_KEYS
            for value in self._values(key)
            if (key, repr(value)) not in had
        }

    def _complete(self, values: Mapping[str, Scalar], *, what: str) -> Config | None:
        try:
            config = resolve_config(self.spec, values, what=what, fill=lambda p: p.values()[0])
        except ValueError:
            return None
        return normalize_config(self.spec, config)

    def _draw(self, candidates: Sequence[Mapping[str, Scalar]], *, seen: set[str]) -> Config | None:
        """One of `candidates` drawn uniformly among the unseen ones likely to run (else the
        unseen one most likely to run)."""
        options: list[tuple[float, Config]] = []
        for candidate in candidates:
            config = self._complete(candidate, what="step")
            launch = None if config is None else self.unseen_launch(config, seen=seen)
            if launch is not None and config_key(launch) not in {config_key(o) for _, o in options}:
                options.append((self._risk(launch), launch))
        if not options:
            return None
        likely = [launch for risk, launch in options if risk >= _EXPLORE_RISK]
        if likely:
            return self._rng.choice(likely)
        return max(options, key=lambda o: o[0])[1]

    def _values(self, key: str) -> list[Scalar]:
        try:
            return list(self.spec.params[key].values())
        except ValueError:
            return []

    def _effects(self) -> Effects:
        """The knob model fitted on the measured trials so far."""
        return fit_effects([(t.config, t.value or 0.0) for t in self.trials if t.ok and t.value])

    def _system_neighbours(
        self, anchor: Mapping[str, Scalar], *, children: bool = False
    ) -> list[Config]:
        """`anchor` with one system knob changed; with `children`, a change that turns other
        knobs on (expert parallelism turns its all-to-all backend on) comes with each of their
        values too, since the value they default to says little about the ones never tried."""
        out = []
        for key in ordered_keys(self.spec.params):
            if key in _TREE_KEYS or key not in anchor:
                continue
            try:
                values = self.spec.params[key].values()
            except ValueError:
                continue
            for value in values:
                if same_value(value, anchor[key]):
                    continue
                moved = {**anchor, key: value}
                out.append(moved)
                if children:
                    out += self._turned_on(anchor, moved)
        return out

    def _turned_on(self, anchor: Mapping[str, Scalar], moved: Config) -> list[Config]:
        """`moved` with each other value of every system knob it turns on (absent in `anchor`)."""
        config = self._complete(moved, what="step")
        if config is None:
            return []
        return [
            {**moved, new: v}
            for new in config
            if new not in anchor and new not in _TREE_KEYS
            for v in self._values(new)
            if not same_value(v, config[new])
        ]

    # -- convergence (`core.converge`, `budget.until: converged`) -------------------------------
    def predicted_gain(self, *, seen: set[str]) -> float | None:
        """The most the models predict an untried configuration beats the best trial by.

        Relative to the best measured value. Candidates: the best trial with one system knob
        changed and with every knob at its best-estimated value (the additive model,
        `_effects`), and every untried tree on the best trial's knobs (the speculative model),
        each only when it probably runs (the failure model's probability at least one half).
        `math.inf` while the speculative branch is alive with fewer than two measured trees
        (its model cannot say yet); None when no model can rank anything.
        """
        best = self._best()
        if best is None or not best.value or best.value <= 0:
            return None
        gains: list[float] = []
        effects = self._effects()
        if effects.effects:
            gains += self._step_gains(best, effects, seen)
        if self.enabled:
            spec_trials = [t for t in self.trials if self._speculative(t.config)]
            self._update_alive(spec_trials)
            if self.alive:
                if sum(1 for t in spec_trials if t.ok) < 2:
                    return math.inf
                gains += self._tree_gains(best, seen)
        return max(gains) if gains else None

    def _step_candidates(self, anchor: Mapping[str, Scalar], effects: Effects) -> list[Config]:
        """The system-knob steps from `anchor`: each one-knob change, and every knob at the
        value the knob model rates best."""
        candidates = self._system_neighbours(anchor, children=True)
        composed = dict(anchor)
        for key in ordered_keys(self.spec.params):
            if key in _TREE_KEYS or key not in composed:
                continue
            options = [(effects.get((key, repr(v))), v) for v in self._values(key)]
            if options:
                composed[key] = max(options, key=lambda o: o[0])[1]
        candidates.append(composed)
        return candidates

    def _step_gains(self, best: _Trial, effects: Effects, seen: set[str]) -> list[float]:
        anchor = dict(best.config)
        base = effects.total(anchor)
        candidates = self._step_candidates(anchor, effects)
        out = []
        for candidate in candidates:
            config = self._complete(candidate, what="step")
            if config is None:
                continue
            launch = self.unseen_launch(config, seen=seen)
            if launch is None or self._risk(launch) < math.log(0.5):
                continue
            gain = effects.total(config)
            out.append(math.exp(gain - base) - 1.0)
        return out

    def _tree_gains(self, best: _Trial, seen: set[str]) -> list[float]:
        anchor = dict(best.config)
        predictor = self._predictor(anchor)
        out = []
        for tree in self._trees:
            launch = self._launch_tree(anchor, tree, seen=seen)
            if launch is None or self._risk(launch) < math.log(0.5):
                continue
            predicted = self._predict(predictor, anchor, tree)
            out.append(predicted / (best.value or 1.0) - 1.0)
        return out

    # -- the speculative branch -------------------------------------------------------------------
    def due(self) -> bool:
        """Whether the speculative branch is below its share of the trials (and alive)."""
        if not self.enabled or not self.trials:
            return False
        spec_trials = [t for t in self.trials if self._speculative(t.config)]
        self._update_alive(spec_trials)
        return self.alive and len(spec_trials) < SHARE * (len(self.trials) + 1)

    def propose(self, *, seen: set[str], step_if_losing: bool = False) -> Config | None:
        """The branch's next tree (None: the branch is dropped or disabled): an untried draft
        model, else the tree the predictor ranks first, or, while it is distrusted, a
        model-free step. With `step_if_losing` (a turn the branch does not need for its share),
        a tree the model predicts to lose (`_tree_loses`) gives the turn to a knob step from the
        best trial (`exploit`; `last_source` then says "knob step (...)")."""
        if not self.enabled or not self.trials:
            return None
        self._update_alive([t for t in self.trials if self._speculative(t.config)])
        if not self.alive:
            return None
        probe = self._untried_head(seen=seen)
        if probe is not None:
            self.last_source = "draft model"
            return probe
        if self._last_chance is not None:
            shortest = self.unseen_launch(self._last_chance, seen=seen)
            self._last_chance = None
            if shortest is not None:
                self.last_source = "shortest chain"
                return shortest
        if not self.trees_check.trusted:
            return self._explore(seen=seen)
        self.last_source = "model"
        ranked = self._rank(seen=seen)
        if ranked is None:
            return None
        launch, predicted = ranked
        if step_if_losing and self._tree_loses(predicted):
            step = self.exploit(seen=seen)
            if step is not None:
                self.last_source = f"knob step ({self.last_source})"
                return step
            self.last_source = "model"
        return launch

    def _tree_loses(self, predicted: float) -> bool:
        """Whether a tree the model predicts at `predicted` loses to the best trial by more than
        `_STEP_MARGIN` and the model's typical miss, once it has been tested on `_STEP_AFTER`
        trees."""
        best = self._best()
        tested = len(self.trees_check.checks)
        if tested < _STEP_AFTER or best is None or not best.value or best.value <= 0:
            return False
        if predicted <= 0:
            return False
        typical = self.trees_check.typical_miss("throughput")
        return self._sign * math.log(predicted / best.value) < -max(_STEP_MARGIN, typical)

    def _update_alive(self, spec_trials: Sequence[_Trial]) -> None:
        measured = [t for t in spec_trials if t.ok]
        if not measured and len(spec_trials) >= _GIVE_UP:
            self.alive = False
            return
        best_plain, best_spec = self._best(speculative=False), self._best(speculative=True)
        trusted = self.trees_check.trusted
        needed = _DROP_AFTER if trusted else 2 * _DROP_AFTER
        if len(measured) < needed or best_plain is None or best_spec is None:
            return
        plain = self._sign * (best_plain.value or 0.0)
        if self._sign * (best_spec.value or 0.0) >= _DROP_RATIO * plain:
            return
        if trusted:
            anchor = best_spec.config
            predicted = max(
                (self._predict(self._predictor(anchor), anchor, tree) for tree in self._trees),
                default=0.0,
            )
            if predicted >= plain:
                return
        # Before the branch is dropped, its cheapest tree runs once on the plain best's knobs.
        if self._last_chance is None and not self._shortest_tried:
            self._shortest_tried = True
            self._last_chance = self._shortest_chain(best_plain.config)
        if self._last_chance is not None:
            return
        self.alive = False

    def _eager(self, config: Mapping[str, Scalar], draft: int) -> bool:
        if self._graph_key is None:
            return False
        graph = config.get(self._graph_key)
        if not isinstance(graph, int) or isinstance(graph, bool):
            return False
        return self._concurrency * draft > graph

    def _system(self, config: Mapping[str, Scalar]) -> str:
        return config_key({k: v for k, v in config.items() if k not in _TREE_KEYS})

    def _predictor(self, anchor: Mapping[str, Scalar]) -> TreePredictor:
        """The tree predictor fitted on the measured trees (those on the anchor's knobs first)."""
        results = [
            TreeResult(
                tree=(tree := tree_of(t.config, self.spec)),
                throughput=t.value or 0.0,
                accept_length=t.accept_length,
                eager=self._eager(t.config, tree.ran),
                system=self._system(t.config),
            )
            for t in self.trials
            if t.ok and self._static_tree(t.config)
        ]
        return TreePredictor(results, system=self._system(anchor))

    def _predict(self, predictor: TreePredictor, system: Mapping[str, Scalar], tree: Tree) -> float:
        """Predicted objective (max-mode units) of `tree` on `system`'s knobs."""
        value = predictor.throughput(tree, eager=self._eager(system, tree.ran))
        if predictor.empty:
            # Prior only: scale so the default chain matches the best plain trial.
            plain = self._best(speculative=False)
            ref = predictor.throughput(Tree(3, 1, 4, 4, tree.head), eager=False)
            return value * (plain.value or 0.0 if plain else 1.0) / ref
        return value

    def _anchor(self) -> Config:
        best = self._best()
        return dict(best.config if best is not None else self.trials[0].config)

    def _rank(self, *, seen: set[str]) -> tuple[Config, float] | None:
        """The launch of the tree ranked first, and its predicted objective."""
        anchor = self._anchor()
        predictor = self._predictor(anchor)
        systems = [(anchor, 1.0)] + [
            (n, _NEIGHBOUR_DISCOUNT) for n in self._system_neighbours(anchor)
        ]
        # A tree measured once is tuned further by the system-knob steps, not here: one knob
        # away from the anchor only go the trees that never ran (a failure may be the knob's).
        measured = {
            tree_of(t.config, self.spec).runs_as
            for t in self.trials
            if t.ok and self._static_tree(t.config)
        }
        # Score bounds first (the failure term only lowers a score), then launchable
        # configurations in bound order until no bound can beat the best score found.
        bounds: list[tuple[float, float, Config, Tree, float]] = []
        # Before any tree has run, the ranking is the prior's alone, and the prior puts the
        # widest trees first: on a node short of memory they fail on one set of knobs after
        # another. The first trees are chains (the least memory per draft token; SGLang's own
        # presets start from one); the measured ones then rank the rest.
        trees = self._trees
        if predictor.empty:
            trees = [t for t in trees if t.topk == 1] or trees
        for system, weight in systems:
            for tree in trees:
                if weight < 1.0 and tree.runs_as in measured:
                    continue
                predicted = self._predict(predictor, system, tree)
                bound = math.log(max(predicted * weight, 1e-12))
                bounds.append((bound, self._rng.random(), system, tree, predicted))
        bounds.sort(key=lambda item: (-item[0], item[1]))
        best: tuple[float, float, Config, float] | None = None
        for bound, tie, system, tree, predicted in bounds:
            if best is not None and bound < best[0]:
                break
            launch = self._launch_tree(system, tree, seen=seen)
            if launch is None:
                continue
            score = bound + self._risk(launch)
            if best is None or (score, -tie) > (best[0], -best[1]):
                best = (score, tie, launch, predicted)
        return None if best is None else (best[2], best[3])

    def _launch_tree(
        self, system: Mapping[str, Scalar], tree: Tree, *, seen: set[str]
    ) -> Config | None:
        """`system`'s knobs with `tree`, as launched (None: rejected, inexpressible or seen)."""
        values = {key: v for key, v in system.items() if key not in _TREE_KEYS}
        values[ALGORITHM] = self._algorithm
        values[STEPS], values[TOPK] = tree.steps, tree.topk
        if _ADAPTIVE in self.spec.params:
            values[_ADAPTIVE] = False  # a tree is a static configuration
        if DRAFT_TOKENS in self.spec.params:
            values[DRAFT_TOKENS] = tree.draft
        if tree.head:
            values[DRAFT_PATH] = tree.head
        config = self._complete(values, what="tree")
        return None if config is None else self.unseen_launch(config, seen=seen)

    def _untried_head(self, *, seen: set[str]) -> Config | None:
        """The best speculative trial's configuration with a draft model no trial used yet."""
        if DRAFT_PATH not in self.spec.params:
            return None
        best = self._best(speculative=True, tree=True)
        if best is None:
            return None
        tried = {t.config.get(DRAFT_PATH) for t in self.trials if self._speculative(t.config)}
        tree = tree_of(best.config, self.spec)
        for head in self.spec.params[DRAFT_PATH].values():
            if head in tried:
                continue
            moved = Tree(tree.steps, tree.topk, tree.draft, tree.ran, str(head))
            launch = self._launch_tree(best.config, moved, seen=seen)
            if launch is not None:
                return launch
        return None

    def _shortest_chain(self, system: Mapping[str, Scalar]) -> Config | None:
        """The shortest chain on `system`'s knobs, when no trial has had a tree that short."""
        spec_trials = [t for t in self.trials if self._static_tree(t.config)]
        best = self._best(speculative=True, tree=True)
        head = tree_of(best.config, self.spec).head if best is not None else ""
        chains = [t for t in self._trees if t.topk == 1 and t.head == head]
        if not chains:
            return None
        shortest = min(chains, key=lambda t: (t.steps, t.ran))
        if any(tree_of(t.config, self.spec).steps <= shortest.steps for t in spec_trials):
            return None
        launch = self._launch_tree(system, shortest, seen=set())
        if launch is None or self._risk(launch) < _EXPLORE_RISK:
            return None
        return launch

    def _explore(self, *, seen: set[str]) -> Config | None:
        """A model-free tree: in turn, a greedy step around the best tree (on its knobs) and a
        tree drawn uniformly from the valid ones (on the best trial's knobs)."""
        self._explore_turn += 1
        best_spec = self._best(speculative=True, tree=True)
        if self._explore_turn % 2 == 1 and best_spec is not None:
            around = tree_neighbours(tree_of(best_spec.config, self.spec), self._trees)
            step = self._draw_tree(best_spec.config, around, seen=seen)
            if step is not None:
                self.last_source = "greedy"
                return step
        self.last_source = "uniform"
        return self._draw_tree(self._anchor(), self._trees, seen=seen)

    def _draw_tree(
        self, system: Mapping[str, Scalar], trees: Sequence[Tree], *, seen: set[str]
    ) -> Config | None:
        """One of `trees` on `system`'s knobs, drawn uniformly among the unseen ones likely to
        run (else the one most likely to run)."""
        options: list[tuple[float, Config]] = []
        for tree in trees:
            launch = self._launch_tree(system, tree, seen=seen)
            if launch is not None:
                options.append((self._risk(launch), launch))
        if not options:
            return None
        likely = [launch for risk, launch in options if risk >= _EXPLORE_RISK]
        if likely:
            return self._rng.choice(likely)
        return max(options, key=lambda o: o[0])[1]
