"""One configuration for every load: the adaptive speculative configuration, built (pure).

With a concurrency list, a sweep measures every configuration at each level. The longest chain
that pays at one level is not the one that pays at another (on the simulated H200 node 3 steps
win at 1 and 8 concurrent requests, 2 at 32), and a server takes one configuration. SGLang's
adaptive mode (`--speculative-adaptive` with a config file) picks the steps per batch size at
run time; this module writes that config from what the sweep measured (docs/concepts/adaptive.md):

- per level, the measured static configurations are grouped by chain: EAGLE-family, top-k 1,
  `s` steps (draft tokens are steps + 1 at top-k 1 whatever was asked), or plain (`0`, no
  speculation); the best of each at that level;
- the level's candidates are the best chain and every chain within `adaptive.close` of it, and
  `0` where the plain configuration won (SGLang 0.5.14+; 0.5.13 has no candidate 0 and runs the
  best chain there, which the report says);
- one slot per level, keyed at the lower edge of the batch sizes that level's load runs at: 1
  for the lowest level, else one above the geometric mean of the level and the one below it
  (levels 1, 8, 32 -> keys 1, 3, 17; a level counts as `workload.num_prompts` when that is
  smaller: the benchmark never has more requests in flight than it sends). A load's running
  batch moves below its level as requests finish and start; a key at the level itself made
  SGLang 0.5.17 switch between two slots' steps a dozen times a second at c8 on the H200
  (2026-12-02), each switch a change of CUDA-graph set;
- the rest of the configuration (system knobs) comes from the chain that scores best over the
  mix (`workload.mix`), with the initial steps that of the heaviest level, top-k 1 and draft
  tokens = steps + 1, checked against the version's rules (`adaptive_rules`) before anything
  launches.

Before per-level results exist (a search trial that turns `speculative-adaptive` on), the config
comes from the spec alone: every level's slot offers the steps the search space offers
(`spec_candidates_text`), and SGLang's controller picks among them by acceptance. Standard
library and the spec only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from spec_sweep.core.adaptive_rules import (
    ADAPTIVE,
    ADAPTIVE_CONFIG,
    DRAFT_TOKENS,
    STEPS,
    TOPK,
    AdaptiveVersion,
    Slot,
    adaptive_on,
    adaptive_version,
    config_text,
    launch_problem,
    off_reason,
    settle,
)
from spec_sweep.core.config import Config, normalize_config
from spec_sweep.core.history import History
from spec_sweep.core.objective import Objective
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.spec import SweepSpec

__all__ = [
    "AdaptiveBuild",
    "Chain",
    "LevelPlan",
    "adaptive_text",
    "build_adaptive",
    "can_speculate",
    "chain_steps",
    "level_objective",
    "mix_score",
    "slot_key",
    "spec_candidates_text",
    "spec_problems",
]

_LEVEL = re.compile(r"_c\d+$")
_EAGLE = ("EAGLE", "EAGLE3", "NEXTN")


@dataclass(frozen=True)
class Chain:
    """The best measured static configuration of one chain at one level.

    Attributes:
        steps: Draft steps (0: no speculative decoding).
        trial_id: The trial.
        value: Its value of the level metric.
        accept_length: Its measured accept length at the level (None: not recorded).
    """

    steps: int
    trial_id: str
    value: float
    accept_length: float | None


@dataclass(frozen=True)
class LevelPlan:
    """One level's slot of the adaptive configuration and what it was built from.

    Attributes:
        concurrency: The level.
        weight: Its weight in the mix.
        key: The slot's batch-size key.
        best_id: The best measured static configuration at the level, of any kind.
        best_value: Its value.
        chains: The best trial of each chain at the level (0: plain), best first.
        winner: The steps of the best chain (or 0) the version can run.
        candidates: The slot's candidate steps.
        settles: Where SGLang's controller settles on this slot, fed the measured acceptance
            (None: unknown, or it keeps moving).
        notes: Why the slot is what it is, where that needs saying.
    """

    concurrency: int
    weight: float
    key: int
    best_id: str | None
    best_value: float | None
    chains: tuple[Chain, ...]
    winner: int | None
    candidates: tuple[int, ...]
    settles: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AdaptiveBuild:
    """The adaptive configuration built from a sweep's record, or why there is none.

    Attributes:
        rules: The SGLang version's adaptive rules (None: it has no adaptive mode).
        levels: One plan per measured level.
        text: The config file's contents (None: no configuration).
        config: The trial configuration that launches it (None: no configuration).
        base_id: The trial whose system knobs it takes.
        initial_steps: `--speculative-num-steps` (the state it starts in).
        reason: Why there is no configuration, or one line on how it was built.
    """

    rules: AdaptiveVersion | None
    levels: tuple[LevelPlan, ...]
    text: str | None
    config: Config | None
    base_id: str | None
    initial_steps: int | None
    reason: str

    @property
    def ok(self) -> bool:
        """Whether a configuration was built."""
        return self.text is not None and self.config is not None


def level_objective(spec: SweepSpec) -> Objective:
    """The metric compared at each level (the objective's, when it names a level, else output
    throughput) and its direction, as the per-load answer compares levels."""
    metric = spec.objective.metric
    if _LEVEL.search(metric):
        return Objective(metric=_LEVEL.sub("", metric), mode=spec.objective.mode)
    return Objective(metric="output_throughput", mode="max")


def slot_key(spec: SweepSpec, level: int) -> int:
    """The key of a level's slot: the smallest batch size its load is served with.

    1 for the lowest level; else one above the geometric mean of the level and the next lower
    one, so that a load's running batch, which moves below its level as requests finish and
    start, stays in its own slot instead of switching steps at a key it sits on. Levels count
    as `workload.num_prompts` when that is smaller; levels measured at one batch share a key.
    """
    cap = spec.workload.num_prompts
    measured = sorted({min(c, cap) for c in spec.workload.concurrency} | {min(level, cap)})
    at = min(level, cap)
    index = measured.index(at)
    if index == 0:
        return 1
    below = measured[index - 1]
    return max(below + 1, math.isqrt(below * at) + 1)


def _setting(spec: SweepSpec, config: Mapping[str, Any], key: str) -> Any:
    return config[key] if key in config else spec.node.server_args.get(key)


def chain_steps(spec: SweepSpec, config: Mapping[str, Any]) -> int | None:
    """A static configuration's chain: its steps (0: no speculation), None for anything an
    adaptive slot cannot run (a tree, another algorithm, adaptive itself, unknown steps)."""
    if adaptive_on(config, spec.node.server_args):
        return None
    algorithm = _setting(spec, config, "speculative-algorithm")
    if not algorithm:
        return 0
    if str(algorithm).upper() not in _EAGLE:
        return None
    topk, steps = _setting(spec, config, TOPK), _setting(spec, config, STEPS)
    if topk not in (None, 1) or not isinstance(steps, int) or isinstance(steps, bool):
        return None
    return steps if steps >= 1 else None


def _within(level: Objective, value: float, best: float, margin: float) -> bool:
    if level.mode == "max":
        return value >= best * (1.0 - margin)
    return value <= best * (1.0 + margin)


def _gap(level: Objective, value: float, best: float) -> float:
    """How much worse `value` is than `best`, relative (>= 0)."""
    if best == 0:
        return 0.0
    return max(0.0, level.sign * (best - value) / abs(best))


def _measured(history: History) -> list[TrialRecord]:
    """The measured static search trials (adaptive ones searched with the switch left out)."""
    server_args = history.spec.node.server_args
    return [
        r
        for r in history.done
        if r.failure_mode is FailureMode.NONE and not adaptive_on(r.config, server_args)
    ]


def can_speculate(spec: SweepSpec) -> bool:
    """Whether the spec can run an EAGLE-family algorithm at all (else there is nothing to
    adapt and the adaptive phase stays silent)."""
    values: list[Any] = [spec.node.server_args.get("speculative-algorithm")]
    param = spec.params.get("speculative-algorithm")
    if param is not None and param.choices is not None:
        values += list(param.choices)
    return any(isinstance(v, str) and v.upper() in _EAGLE for v in values)


def _kind(spec: SweepSpec, record: TrialRecord) -> str:
    algorithm = _setting(spec, record.config, "speculative-algorithm")
    if adaptive_on(record.config, spec.node.server_args):
        return "an adaptive configuration"
    if algorithm and str(algorithm).upper() in _EAGLE:
        return f"a tree (top-k {_setting(spec, record.config, TOPK)})"
    return f"{algorithm}"


def _level_plan(history: History, rules: AdaptiveVersion, level: int, weight: float) -> LevelPlan:
    spec = history.spec
    objective = level_objective(spec)
    name = f"{objective.metric}_c{level}"
    scored = [
        (r, r.metrics[name])
        for r in _measured(history)
        if name in r.metrics and math.isfinite(r.metrics[name])
    ]
    scored.sort(key=lambda rv: (objective.key(rv[1]), rv[0].trial_id))
    best: dict[int, Chain] = {}
    for record, value in scored:
        steps = chain_steps(spec, record.config)
        if steps is not None and steps not in best:
            accept = record.metrics.get(f"accept_length_c{level}")
            best[steps] = Chain(steps, record.trial_id, value, accept)
    chains = tuple(sorted(best.values(), key=lambda c: (objective.key(c.value), c.steps)))
    notes: list[str] = []
    usable = [c for c in chains if c.steps >= rules.floor]
    top = scored[0] if scored else None
    plan = LevelPlan(
        concurrency=level,
        weight=weight,
        key=slot_key(spec, level),
        best_id=top[0].trial_id if top else None,
        best_value=top[1] if top else None,
        chains=chains,
        winner=usable[0].steps if usable else None,
        candidates=(),
    )
    if not usable:
        return replace(plan, notes=(f"no measured chain at c{level}",))
    winner = usable[0]
    if chains[0].steps == 0 and not rules.zero_step:
        gap = _gap(objective, winner.value, chains[0].value)
        notes.append(
            f"plain decoding won at c{level} by {gap:.1%}, but SGLang {rules.version} has no "
            "candidate 0 (from 0.5.14): the slot runs the "
            f"best chain ({winner.steps} steps)"
        )
    if top is not None and chain_steps(spec, top[0].config) is None:
        notes.append(
            f"the best at c{level} is {top[0].trial_id}, {_kind(spec, top[0])}, which an "
            f"adaptive slot cannot run (top-k 1 chains only): its best chain is "
            f"{winner.trial_id} ({winner.steps} steps, {_gap(objective, winner.value, top[1]):.1%}"
            " behind)"
        )
    margin = spec.adaptive.close
    close = [c.steps for c in usable if _within(objective, c.value, winner.value, margin)]
    return replace(plan, candidates=tuple(sorted(close)), notes=tuple(notes))


def mix_score(
    spec: SweepSpec, values: Mapping[int, float], reference: Mapping[int, float]
) -> float | None:
    """A configuration's score over the mix: the weighted share of the reference it reaches at
    each level (1.0: as good as the reference everywhere; for a `min` metric, the reference
    over the value). None when a weighted level is missing."""
    objective = level_objective(spec)
    total = 0.0
    for level, weight in spec.workload.mix_weights.items():
        if weight == 0:
            continue
        value, ref = values.get(level), reference.get(level)
        if value is None or ref is None or value <= 0 or ref <= 0:
            return None
        total += weight * (value / ref if objective.mode == "max" else ref / value)
    return total


def _level_values(spec: SweepSpec, record: TrialRecord) -> dict[int, float]:
    name = level_objective(spec).metric
    return {
        level: record.metrics[f"{name}_c{level}"]
        for level in spec.workload.concurrency
        if f"{name}_c{level}" in record.metrics
    }


def _base(history: History, plans: Sequence[LevelPlan]) -> TrialRecord | None:
    """The chain trial with the best single-boot score over the mix (its system knobs)."""
    spec = history.spec
    reference = {p.concurrency: p.best_value for p in plans if p.best_value is not None}
    scored = []
    for record in _measured(history):
        steps = chain_steps(spec, record.config)
        if not steps:
            continue
        score = mix_score(spec, _level_values(spec, record), reference)
        if score is not None:
            scored.append((score, record.trial_id, record))
    return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None


def _initial_steps(plans: Sequence[LevelPlan]) -> int | None:
    """The steps the server starts in: the winner of the heaviest level that speculates."""
    for plan in sorted(plans, key=lambda p: (-p.weight, p.concurrency)):
        positive = [s for s in plan.candidates if s > 0]
        if positive:
            return plan.winner if plan.winner else min(positive)
    return None


def _slots(plans: Sequence[LevelPlan]) -> tuple[list[Slot], list[str]]:
    """One slot per key; two levels measured at one batch size share it (candidates merged)."""
    merged: dict[int, set[int]] = {}
    notes: list[str] = []
    for plan in plans:
        if plan.key in merged:
            notes.append(
                f"c{plan.concurrency} is measured at the batch of a lower level "
                "(workload.num_prompts): their candidates are merged in its slot"
            )
        merged.setdefault(plan.key, set()).update(plan.candidates)
    return [Slot(k, tuple(sorted(v))) for k, v in sorted(merged.items())], notes


def _decline(rules: AdaptiveVersion | None, plans: Sequence[LevelPlan], why: str) -> AdaptiveBuild:
    return AdaptiveBuild(rules, tuple(plans), None, None, None, None, why)


def build_adaptive(history: History) -> AdaptiveBuild:
    """The adaptive configuration of a sweep's search trials (see the module doc)."""
    spec = history.spec
    rules = adaptive_version(spec.node.sglang_version)
    if not spec.workload.multi_level:
        return _decline(rules, [], "one concurrency level: there is no load to adapt to")
    if rules is None or not rules.per_batch_size:
        return _decline(
            rules,
            [],
            f"SGLang {spec.node.sglang_version} has no per-batch-size adaptive slots (0.5.13+)",
        )
    if STEPS not in spec.params:
        return _decline(
            rules, [], f"{STEPS} is not searched: no chains of different lengths to choose from"
        )
    weights = spec.workload.mix_weights
    plans = [_level_plan(history, rules, c, weights[c]) for c in sorted(weights)]
    missing = [p for p in plans if p.winner is None]
    if missing:
        return _decline(rules, plans, "; ".join(n for p in missing for n in p.notes))
    if all(p.chains[0].steps == 0 for p in plans):
        return _decline(
            rules, plans, "speculative decoding won at no level: the plain configuration is the "
            "answer at every load"
        )  # fmt: skip
    if len({p.candidates for p in plans}) == 1 and len(plans[0].candidates) == 1:
        steps = plans[0].candidates[0]
        return _decline(
            rules,
            plans,
            f"the same chain ({steps} steps) won at every level: nothing to adapt, the static "
            "configuration is the answer",
        )
    base = _base(history, plans)
    initial = _initial_steps(plans)
    if base is None or initial is None:
        return _decline(rules, plans, "no speculative chain was measured at every level")
    slots, merge_notes = _slots(plans)
    text = config_text(slots, rules)
    config = dict(base.config)
    config |= {STEPS: initial, TOPK: 1, DRAFT_TOKENS: initial + 1, ADAPTIVE: True}
    config[ADAPTIVE_CONFIG] = text
    config = normalize_config(spec, config)
    problem = off_reason(rules, config, spec.node.server_args)
    if problem is not None:
        return _decline(rules, plans, f"SGLang would turn adaptive mode off: {problem}")
    problem = launch_problem(rules, config, spec.node.server_args, text)
    if problem is not None:
        return _decline(rules, plans, f"SGLang would refuse the configuration: {problem}")
    plans = [replace(p, settles=_settles(p, initial, rules)) for p in plans]
    if merge_notes:
        plans[0] = replace(plans[0], notes=(*plans[0].notes, *merge_notes))
    reason = (
        f"candidates per level from the chains within {spec.adaptive.close:.0%} of each level's "
        f"best; system knobs of {base.trial_id}; --speculative-num-steps {initial} to start"
    )
    return AdaptiveBuild(rules, tuple(plans), text, config, base.trial_id, initial, reason)


def _settles(plan: LevelPlan, initial: int, rules: AdaptiveVersion) -> int | None:
    accepted = {
        c.steps: c.accept_length - 1.0
        for c in plan.chains
        if c.steps > 0 and c.accept_length is not None
    }
    return settle(plan.candidates, start=initial, accepted=accepted, zero_step=rules.zero_step)


def _space_steps(spec: SweepSpec, rules: AdaptiveVersion) -> list[int]:
    param = spec.params.get(STEPS)
    if param is None:
        return []
    try:
        values = param.values()
    except ValueError:
        return []
    return sorted({v for v in values if isinstance(v, int) and v >= max(1, rules.floor)})


def spec_candidates_text(spec: SweepSpec) -> str | None:
    """The config of an adaptive trial proposed before per-level results exist: every level's
    slot offers the steps the search space offers (None: the space has no steps to offer, and
    SGLang's own default config is used)."""
    rules = adaptive_version(spec.node.sglang_version)
    if rules is None or not rules.per_batch_size:
        return None
    steps = _space_steps(spec, rules)
    if not steps:
        return None
    keys = sorted({slot_key(spec, level) for level in spec.workload.concurrency})
    return config_text([Slot(k, tuple(steps)) for k in keys], rules)


def adaptive_text(spec: SweepSpec, config: Mapping[str, Any]) -> str | None:
    """The adaptive config a trial of `config` launches with (None: adaptive mode is off, or
    SGLang's default config): the configuration's own (built after the search, or given with
    `--set`), else the spec's candidates."""
    if not adaptive_on(config, spec.node.server_args):
        return None
    text = config.get(ADAPTIVE_CONFIG)
    if isinstance(text, str) and text:
        return text
    return spec_candidates_text(spec)


def spec_problems(spec: SweepSpec) -> list[tuple[str, str]]:
    """What in a spec would make SGLang refuse or quietly turn off adaptive mode: (field,
    message) pairs for `spec_load` (empty: nothing).

    The config file is spec_sweep's to write (never a parameter or a fixed flag); a searched
    `speculative-adaptive` must only be on where SGLang keeps it on: with an EAGLE algorithm,
    top-k 1 (a top-k parameter inactive while it is on, as `search_spaces/speculative_adaptive
    .yaml` has it) and none of the fixed flags SGLang turns it off for.
    """
    problems: list[tuple[str, str]] = []
    params, fixed = spec.params, spec.node.server_args
    for where, holder in (("search_space.params", params), ("node.server_args", fixed)):
        if ADAPTIVE_CONFIG in holder:
            problems.append(
                (
                    f"{where}.{ADAPTIVE_CONFIG}",
                    "spec_sweep writes the adaptive config file of every trial itself (built "
                    "from the per-level results after the search, or from the spec's steps "
                    "during it): leave it out",
                )
            )
    switch = params.get(ADAPTIVE)
    if switch is None and fixed.get(ADAPTIVE) is not True:
        return problems
    rules = adaptive_version(spec.node.sglang_version)
    if rules is None:
        return [*problems, (f"search_space.params.{ADAPTIVE}", "needs SGLang 0.5.11 or later")]
    where = "search_space.params" if switch is not None else "node.server_args"
    field = f"{where}.{ADAPTIVE}"
    algorithms = _algorithms_with_adaptive(spec)
    bad = [a for a in algorithms if a is None or str(a).upper() not in _EAGLE]
    if bad:
        problems.append(
            (
                field,
                f"it can be on with speculative-algorithm={bad[0]}, for which SGLang turns "
                "adaptive mode off and runs static parameters: make it active only for EAGLE "
                "algorithms (when: {speculative-algorithm: EAGLE3})",
            )
        )
    topk = params.get(TOPK)
    if topk is not None and _active_with_adaptive(topk.when):
        many = [v for v in topk.values() if v != 1]
        if many:
            problems.append(
                (
                    f"search_space.params.{TOPK}",
                    f"it can be {many[0]} while {ADAPTIVE} is on, and SGLang turns adaptive mode "
                    f"off for top-k > 1: make it inactive then (when: {{{ADAPTIVE}: false}}), as "
                    "search_spaces/speculative_adaptive.yaml does",
                )
            )
    reason = off_reason(rules, {"speculative-algorithm": "EAGLE3", TOPK: None}, fixed)
    if reason is not None:
        problems.append(("node.server_args", f"SGLang turns adaptive mode off here: {reason}"))
    return problems


def _active_with_adaptive(when: Mapping[str, Any]) -> bool:
    wanted = when.get(ADAPTIVE, True)
    options = wanted if isinstance(wanted, tuple) else (wanted,)
    return any(o is True for o in options)


def _algorithms_with_adaptive(spec: SweepSpec) -> list[Any]:
    """The speculative algorithms the switch can be on with."""
    switch = spec.params.get(ADAPTIVE)
    fixed = spec.node.server_args.get("speculative-algorithm")
    algo = spec.params.get("speculative-algorithm")
    if switch is not None and "speculative-algorithm" in switch.when:
        wanted = switch.when["speculative-algorithm"]
        return list(wanted) if isinstance(wanted, tuple) else [wanted]
    if algo is not None and algo.choices is not None:
        return list(algo.choices)
    return [fixed]
