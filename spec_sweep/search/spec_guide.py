"""Domain knowledge in the sweep's search: SGLang's tree rules and the speculative branch's share.

This module owns what the searcher (`spec_sweep.search.searcher.SweepSearcher`) knows about
speculative decoding beyond a generic sampler:

* **Before launch** (`SpecGuide.resolve`): SGLang's tree rules (`spec_sweep.search.tree_rules`). A
  configuration SGLang rejects is never launched; one SGLang rewrites (top-k 1 sets the draft
  tokens to steps + 1) is replaced by the configuration that actually runs, when the search
  space can express it, else launched as given and recognised as the one that runs (no second
  launch of the same effective configuration).
* **The branch keeps a share** (`SpecGuide.propose`): while speculation has not been measured to
  lose, at least `SHARE` of the trials so far are speculative; when one is due, the guide
  proposes the untried tree that `spec_sweep.search.spec_model.SpecModel` (fitted from the
  speculative trials so far) ranks first, times the failure model's probability that it runs, on
  the system knobs of the best trial so far or one knob away from them. A failed tree condemns
  that tree (and, through the failure model, the values or pairs of values that failed), never
  the branch. The branch is dropped only on measured evidence: at least `_DROP_AFTER` measured
  trees whose best is below `_DROP_RATIO` of the best non-speculative trial and a model that
  predicts no untried tree above that trial, or `_GIVE_UP` speculative launches that all failed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spec_sweep.core.config import (
    Config,
    config_key,
    normalize_config,
    ordered_keys,
    resolve_config,
    same_value,
)
from spec_sweep.search.spec_model import SpecModel, TreeObservation
from spec_sweep.search.tpe import FailureModel
from spec_sweep.search.tree_rules import ALGORITHM, DRAFT_TOKENS, STEPS, TOPK, TreeCheck, check_tree
from spec_sweep.spec import Scalar, SweepSpec

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


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _num(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


#: Ridge penalty of the additive model of the system knobs.
_RIDGE = 0.3


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
    oom: bool = False

    @property
    def params(self) -> Config:  # what `FailureModel` reads
        return self.config

    @property
    def constraints(self) -> dict[str, float]:
        return {"failed": 0.0 if self.ok else 1.0}


@dataclass
class SpecGuide:
    """Tree rules and the speculative branch's share for one sweep (see the module doc)."""

    spec: SweepSpec
    seed: int = 0
    trials: list[_Trial] = field(default_factory=list)
    alive: bool = True

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
        concurrency = self.spec.workload.concurrency
        self._concurrency = max(concurrency)
        self._graph_key = next(
            (k for k in ("cuda-graph-max-bs", "cuda-graph-max-bs-decode") if k in params), None
        )
        self._gates = frozenset(dep for param in params.values() for dep in param.when)
        self._risk_cache: tuple[FailureModel, list[tuple[tuple[float, ...], float, bool]]] | None
        self._risk_cache = None

    # -- SGLang's rules ---------------------------------------------------------------------------
    def resolve(self, config: Mapping[str, Scalar]) -> Resolved:
        """What SGLang does with `config`: rejected, rewritten (and expressible), or as is."""
        check = check_tree(config, server_args=self.spec.node.server_args)
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
        """Record a finished trial (value None: it failed or broke a constraint)."""
        length = metrics.get("accept_length")
        self.trials.append(
            _Trial(
                config=dict(config),
                ok=value is not None,
                value=value,
                accept_length=float(length) if isinstance(length, int | float) else None,
                oom=metrics.get("failure_mode") == "oom",
            )
        )
        self._risk_cache = None

    def _risk(self, config: Mapping[str, Scalar]) -> float:
        """log P(`config` runs), from what failed so far, memory read as memory.

        An out-of-memory trial condemns every configuration that needs at least as much memory
        (speculation, as many draft tokens, as large a CUDA-graph size, expert parallelism) at a
        static fraction on the same side: above it when that fraction ran in another trial (too
        little room outside the pool), below it otherwise; other failures go to the failure
        model (values, or pairs of values, that never ran), gates excepted.
        """
        if self._risk_cache is None:
            others = [t for t in self.trials if not t.oom]
            model = FailureModel(others, self._gates)  # type: ignore[arg-type]
            ran_mems = {t.config.get(_MEM) for t in self.trials if t.ok}
            walls = [
                (self._need(t.config), _num(t.config.get(_MEM)), t.config.get(_MEM) in ran_mems)
                for t in self.trials
                if t.oom and _MEM in t.config
            ]
            self._risk_cache = (model, walls)
        model, walls = self._risk_cache
        need, mem = self._need(config), _num(config.get(_MEM))
        for wall_need, wall_mem, high in walls:
            dominated = all(n >= w for n, w in zip(need, wall_need, strict=True))
            if dominated and (mem >= wall_mem if high else mem <= wall_mem):
                return -20.0
        return model.log_ok(config)

    def _need(self, config: Mapping[str, Scalar]) -> tuple[float, ...]:
        """What a configuration asks of memory: speculation, draft tokens, CUDA-graph size."""
        spec_on = 1.0 if self._speculative(config) else 0.0
        draft = float(self._draft(config)) if spec_on else 0.0
        graph = _num(config.get(self._graph_key)) if self._graph_key else 0.0
        return (spec_on, draft, graph, _num(config.get("ep-size")))

    def _speculative(self, config: Mapping[str, Scalar]) -> bool:
        return config.get(ALGORITHM) is not None

    def _static_tree(self, config: Mapping[str, Scalar]) -> bool:
        """A speculative trial that ran one tree (not SGLang's adaptive mode, which picks its
        steps at run time and has no top-k of its own: search_spaces/speculative_adaptive.yaml)."""
        return self._speculative(config) and config.get(_ADAPTIVE) is not True

    def _best(self, *, speculative: bool | None = None) -> _Trial | None:
        ok = [
            t
            for t in self.trials
            if t.ok
            and t.value is not None
            and (speculative is None or self._speculative(t.config) == speculative)
        ]
        return max(ok, key=lambda t: self._sign * (t.value or 0.0)) if ok else None

    # -- the system knobs: an additive model of the measured trials -------------------------------
    def exploit(self, *, seen: set[str]) -> Config | None:
        """The best trial with one or more of its system knobs changed, as the trials suggest.

        Each measured trial's log objective is fitted as a sum of effects of its parameter
        values (ridge, so a value seen once moves little); candidates are the best trial with
        one knob changed, and with every knob at its best-estimated value; the one with the
        highest predicted value times the failure model's probability that it runs.
        """
        best = self._best()
        if best is None:
            return None
        effects = self._effects()
        risk = self._risk
        tree_keys = {ALGORITHM, STEPS, TOPK, DRAFT_TOKENS}
        anchor = dict(best.config)
        candidates = self._system_neighbours(anchor)
        composed = dict(anchor)
        for key in ordered_keys(self.spec.params):
            if key in tree_keys or key not in composed:
                continue
            options = [(effects.get((key, repr(v)), 0.0), v) for v in self._values(key)]
            if options:
                composed[key] = max(options, key=lambda o: o[0])[1]
        candidates.append(composed)
        scored = []
        for candidate in candidates:
            try:
                config = normalize_config(
                    self.spec,
                    resolve_config(self.spec, candidate, what="step", fill=lambda p: p.values()[0]),
                )
            except ValueError:
                continue
            launch = self.unseen_launch(config, seen=seen)
            if launch is None:
                continue
            gain = sum(effects.get((k, repr(v)), 0.0) for k, v in config.items())
            score = gain + risk(launch)
            scored.append((score, self._rng.random(), launch))
        if not scored:
            return None
        scored.sort(key=lambda item: (-item[0], item[1]))
        return scored[0][2]

    def _values(self, key: str) -> list[Scalar]:
        try:
            return list(self.spec.params[key].values())
        except ValueError:
            return []

    def _effects(self) -> dict[tuple[str, str], float]:
        """Ridge estimates of each (parameter, value)'s effect on the log objective."""
        ok = [t for t in self.trials if t.ok and t.value and t.value > 0]
        if len(ok) < 2:
            return {}
        items = sorted({(k, repr(v)) for t in ok for k, v in t.config.items()})
        index = {item: i for i, item in enumerate(items)}
        x = np.zeros((len(ok), len(items) + 1))
        y = np.zeros(len(ok))
        for row, t in enumerate(ok):
            x[row, -1] = 1.0
            for k, v in t.config.items():
                x[row, index[(k, repr(v))]] = 1.0
            y[row] = math.log(t.value or 1.0)
        penalty = np.full(len(items) + 1, _RIDGE)
        penalty[-1] = 1e-6
        coef = np.linalg.solve(x.T @ x + np.diag(penalty), x.T @ y)
        return {item: float(coef[i]) for item, i in index.items()}

    # -- proposals --------------------------------------------------------------------------------
    def due(self) -> bool:
        """Whether the speculative branch is below its share of the trials (and alive)."""
        if not self.enabled or not self.trials:
            return False
        spec_trials = [t for t in self.trials if self._speculative(t.config)]
        self._update_alive(spec_trials)
        return self.alive and len(spec_trials) < SHARE * (len(self.trials) + 1)

    def propose(self, *, seen: set[str]) -> Config | None:
        """The untried tree the model ranks first (None: the branch is dropped or disabled)."""
        if not self.enabled or not self.trials:
            return None
        self._update_alive([t for t in self.trials if self._speculative(t.config)])
        if not self.alive:
            return None
        return self._rank(seen=seen)

    def _update_alive(self, spec_trials: Sequence[_Trial]) -> None:
        measured = [t for t in spec_trials if t.ok]
        if not measured and len(spec_trials) >= _GIVE_UP:
            self.alive = False
            return
        best_plain, best_spec = self._best(speculative=False), self._best(speculative=True)
        if len(measured) < _DROP_AFTER or best_plain is None or best_spec is None:
            return
        plain = self._sign * (best_plain.value or 0.0)
        if self._sign * (best_spec.value or 0.0) >= _DROP_RATIO * plain:
            return
        model = self._model(best_spec.config)
        anchor = best_spec.config
        predicted = max(
            (self._predict(model, anchor, tree, base=best_spec) for tree in self._trees()),
            default=0.0,
        )
        if predicted < plain:
            self.alive = False

    def _trees(self) -> list[tuple[int, int, int, int]]:
        """Every tree SGLang runs: (steps, top-k, draft tokens as given, as run), one per run."""
        params = self.spec.params
        steps = [int(v) for v in params[STEPS].values() if v is not None]
        topks = [int(v) for v in params[TOPK].values() if v is not None]
        drafts = (
            [int(v) for v in params[DRAFT_TOKENS].values() if v is not None]
            if DRAFT_TOKENS in params
            else [0]
        )
        out: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
        for s, k, d in itertools.product(steps, topks, drafts):
            config = {ALGORITHM: self._algorithm, STEPS: s, TOPK: k}
            if DRAFT_TOKENS in params:
                config[DRAFT_TOKENS] = d
            check = check_tree(config, server_args=self.spec.node.server_args)
            if check.runs:
                ran = int(check.config.get(DRAFT_TOKENS, s + 1) or s + 1)
                out.setdefault((s, k, ran), (s, k, d, ran))
        return sorted(out.values())

    def _eager(self, config: Mapping[str, Scalar], draft: int) -> bool:
        if self._graph_key is None:
            return False
        graph = config.get(self._graph_key)
        if not isinstance(graph, int) or isinstance(graph, bool):
            return False
        return self._concurrency * draft > graph

    def _system(self, config: Mapping[str, Scalar]) -> str:
        tree_keys = {ALGORITHM, STEPS, TOPK, DRAFT_TOKENS}
        return config_key({k: v for k, v in config.items() if k not in tree_keys})

    def _model(self, anchor: Mapping[str, Scalar]) -> SpecModel:
        """The model fitted on the measured trees, those on the anchor's system knobs first."""
        measured = [t for t in self.trials if t.ok and self._static_tree(t.config)]
        same = [t for t in measured if self._system(t.config) == self._system(anchor)]
        use = same if len(same) >= 2 else measured
        return SpecModel(
            [
                TreeObservation(
                    steps=_int(t.config[STEPS]),
                    topk=_int(t.config[TOPK]),
                    draft_tokens=self._draft(t.config),
                    throughput=t.value or 0.0,
                    accept_length=t.accept_length,
                    eager=self._eager(t.config, self._draft(t.config)),
                )
                for t in use
            ]
        )

    def _draft(self, config: Mapping[str, Scalar]) -> int:
        check = check_tree(config, server_args=self.spec.node.server_args)
        value = check.config.get(DRAFT_TOKENS)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return int(config[STEPS]) + 1  # type: ignore[arg-type]

    def _predict(
        self,
        model: SpecModel,
        system: Mapping[str, Scalar],
        tree: tuple[int, int, int, int],
        *,
        base: _Trial | None,
    ) -> float:
        """Predicted objective (max-mode units) of `tree` on `system`'s knobs."""
        s, k, _, d = tree
        value = model.throughput(s, k, d, eager=self._eager(system, d))
        if not model.observations:
            # Prior only: scale so the default chain matches the best plain trial.
            plain = self._best(speculative=False)
            ref = model.throughput(3, 1, 4)
            scale = (plain.value or 0.0 if plain else 1.0) / ref
            return value * scale
        del base
        return value

    def _rank(self, *, seen: set[str]) -> Config | None:
        best = self._best()
        if best is None:
            anchor: Config = dict(self.trials[0].config)
        else:
            anchor = dict(best.config)
        model = self._model(anchor)
        trees = self._trees()
        risk = self._risk
        systems = [(anchor, 1.0)] + [
            (n, _NEIGHBOUR_DISCOUNT) for n in self._system_neighbours(anchor)
        ]
        # A tree measured once is tuned further by the system-knob steps, not here: one knob
        # away from the anchor only go the trees that never ran (a failure may be the knob's).
        measured = {
            (_int(t.config[STEPS]), _int(t.config[TOPK]), self._draft(t.config))
            for t in self.trials
            if t.ok and self._static_tree(t.config)
        }
        scored: list[tuple[float, float, Config]] = []
        for system, weight in systems:
            for tree in trees:
                if weight < 1.0 and (tree[0], tree[1], tree[3]) in measured:
                    continue
                config = self._with_tree(system, tree)
                if config is None:
                    continue
                launch = self.unseen_launch(config, seen=seen)
                if launch is None:
                    continue
                predicted = self._predict(model, system, tree, base=best)
                score = math.log(max(predicted * weight, 1e-12)) + risk(launch)
                scored.append((score, self._rng.random(), launch))
        if not scored:
            return None
        scored.sort(key=lambda item: (-item[0], item[1]))
        return scored[0][2]

    def _with_tree(
        self, system: Mapping[str, Scalar], tree: tuple[int, int, int, int]
    ) -> Config | None:
        s, k, d, _ = tree
        values = {key: v for key, v in system.items() if key not in (STEPS, TOPK, DRAFT_TOKENS)}
        values[ALGORITHM] = self._algorithm
        values[STEPS], values[TOPK] = s, k
        if _ADAPTIVE in self.spec.params:
            values[_ADAPTIVE] = False  # a tree is a static configuration
        if DRAFT_TOKENS in self.spec.params:
            values[DRAFT_TOKENS] = d
        try:
            config = resolve_config(self.spec, values, what="tree", fill=lambda p: p.values()[0])
        except ValueError:
            return None
        return normalize_config(self.spec, config)

    def _system_neighbours(self, anchor: Mapping[str, Scalar]) -> list[Config]:
        out = []
        tree_keys = {ALGORITHM, STEPS, TOPK, DRAFT_TOKENS}
        for key in ordered_keys(self.spec.params):
            if key in tree_keys or key not in anchor:
                continue
            try:
                values = self.spec.params[key].values()
            except ValueError:
                continue
            for value in values:
                if same_value(value, anchor[key]):
                    continue
                out.append({**anchor, key: value})
        return out

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
        if effects:
            gains += self._step_gains(best, effects, seen)
        if self.enabled:
            spec_trials = [t for t in self.trials if self._speculative(t.config)]
            self._update_alive(spec_trials)
            if self.alive:
                if sum(1 for t in spec_trials if t.ok) < 2:
                    return math.inf
                gains += self._tree_gains(best, seen)
        return max(gains) if gains else None

    def _step_gains(
        self, best: _Trial, effects: dict[tuple[str, str], float], seen: set[str]
    ) -> list[float]:
        tree_keys = {ALGORITHM, STEPS, TOPK, DRAFT_TOKENS}
        anchor = dict(best.config)
        base = sum(effects.get((k, repr(v)), 0.0) for k, v in anchor.items())
        candidates = self._system_neighbours(anchor)
        composed = dict(anchor)
        for key in ordered_keys(self.spec.params):
            if key in tree_keys or key not in composed:
                continue
            options = [(effects.get((key, repr(v)), 0.0), v) for v in self._values(key)]
            if options:
                composed[key] = max(options, key=lambda o: o[0])[1]
        candidates.append(composed)
        out = []
        for candidate in candidates:
            try:
                config = normalize_config(
                    self.spec,
                    resolve_config(self.spec, candidate, what="step", fill=lambda p: p.values()[0]),
                )
            except ValueError:
                continue
            launch = self.unseen_launch(config, seen=seen)
            if launch is None or self._risk(launch) < math.log(0.5):
                continue
            gain = sum(effects.get((k, repr(v)), 0.0) for k, v in config.items())
            out.append(math.exp(gain - base) - 1.0)
        return out

    def _tree_gains(self, best: _Trial, seen: set[str]) -> list[float]:
        anchor = dict(best.config)
        model = self._model(anchor)
        out = []
        for tree in self._trees():
            config = self._with_tree(anchor, tree)
            if config is None:
                continue
            launch = self.unseen_launch(config, seen=seen)
            if launch is None or self._risk(launch) < math.log(0.5):
                continue
            predicted = self._predict(model, anchor, tree, base=best)
            out.append(predicted / (best.value or 1.0) - 1.0)
        return out
