"""The adaptive configuration booted beside the best static ones, and what the boots decided.

This module owns the adaptive phase of a sweep (docs/concepts/adaptive.md):

- `plan_adaptive`: after the search, the configuration `adaptive.build_adaptive` built is booted
  `budget.confirm_repeats` times as the trial `adaptive` (boots `adaptive.r1`, `adaptive.r2`,
  ...; `adaptive2` when a grown search builds another), interleaved with as many boots of each
  static configuration it must beat: the best at each level and the best over the mix. They run
  through the same trial path as every confirmation boot (repeat ids, tagged
  `spec_sweep.confirms`), before the top configurations are confirmed, so those boots count for
  both and the baseline's drift check stays the last boot of all.
- `judge_adaptive`: per level, the adaptive configuration's pooled boots against the best static
  configuration's, with a 95% interval of the difference from the between-boot spread pooled
  over the candidates at that level; over the mix (`workload.mix`), each boot's weighted share of
  the best static mean at each level, compared the same way. It passes when it is not worse
  beyond noise at any level and scores above every static configuration over the mix; the
  recommendation for every load is then the adaptive configuration, else the static one that
  scores best over the mix, and each level it loses says why.

Standard library and the spec only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from spec_sweep.core import names
from spec_sweep.core.adaptive import (
    AdaptiveBuild,
    LevelPlan,
    build_adaptive,
    can_speculate,
    chain_steps,
    level_objective,
    mix_score,
)
from spec_sweep.core.adaptive_rules import ADAPTIVE, ADAPTIVE_CONFIG, DRAFT_TOKENS, STEPS, TOPK
from spec_sweep.core.config import Config, changed_keys, config_key
from spec_sweep.core.confirm import Repeat
from spec_sweep.core.history import History
from spec_sweep.core.ids import is_repeat, repeat_id, repeat_number, repeated_of
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.core.verdict import t_quantile
from spec_sweep.spec import SweepSpec

__all__ = [
    "ORIGIN",
    "AdaptiveAnswer",
    "LevelJudgement",
    "MixRow",
    "adaptive_metrics",
    "adaptive_tags",
    "judge_adaptive",
    "plan_adaptive",
]

#: The trial id the adaptive configuration's boots repeat (`adaptive.r1`, ...).
ORIGIN = "adaptive"
_SPECULATIVE_KEYS = frozenset(
    {"speculative-algorithm", STEPS, TOPK, DRAFT_TOKENS, ADAPTIVE, ADAPTIVE_CONFIG}
)


def _origins(history: History) -> dict[str, Config]:
    """Adaptive configurations in the record: their trial id and configuration."""
    out: dict[str, Config] = {}
    for record in history.records:
        origin = repeated_of(record.trial_id)
        if is_repeat(record.trial_id) and origin.startswith(ORIGIN):
            out.setdefault(origin, record.config)
    return out


def _origin(history: History, build: AdaptiveBuild, *, create: bool) -> str | None:
    assert build.config is not None
    known = _origins(history)
    for origin, config in known.items():
        if config_key(config) == config_key(build.config):
            return origin
    if not create:
        return None
    return ORIGIN if not known else f"{ORIGIN}{len(known) + 1}"


def _statics(history: History, build: AdaptiveBuild) -> list[str]:
    """The static configurations the adaptive one must beat: each level's best, then the best
    single boot over the mix (distinct, in that order)."""
    spec = history.spec
    ids = [p.best_id for p in build.levels if p.best_id is not None]
    reference = {p.concurrency: p.best_value for p in build.levels if p.best_value is not None}
    metric = level_objective(spec).metric
    scored = []
    for record in history.done:
        if record.failure_mode is not FailureMode.NONE or _is_adaptive(record.config):
            continue
        values = {
            c: record.metrics[f"{metric}_c{c}"]
            for c in spec.workload.concurrency
            if f"{metric}_c{c}" in record.metrics
        }
        score = mix_score(spec, values, reference)
        if score is not None:
            scored.append((score, record.trial_id))
    if scored:
        ids.append(max(scored)[1])
    return list(dict.fromkeys(ids))


def _applies(spec: SweepSpec) -> bool:
    """Whether a sweep has an adaptive phase: on, a concurrency list, EAGLE in reach."""
    return spec.adaptive.enabled and spec.workload.multi_level and can_speculate(spec)


def _is_adaptive(config: Mapping[str, object]) -> bool:
    return config.get(ADAPTIVE) is True


def plan_adaptive(history: History) -> list[Repeat]:
    """The adaptive phase's next boots, in launch order (empty: nothing to build or all done).

    A function of the record only (a resumed sweep continues the same sequence): round `k`
    boots the adaptive configuration and each static one once (`<id>.r<k>`), for `k` up to
    `budget.confirm_repeats`; a boot that finished (measured or failed) is not planned again.
    """
    spec = history.spec
    if not _applies(spec):
        return []
    build = build_adaptive(history)
    if not build.ok:
        return []
    assert build.config is not None
    origin = _origin(history, build, create=True)
    assert origin is not None
    finished = history.finished
    members = [(origin, build.config)]
    members += [(tid, finished[tid].config) for tid in _statics(history, build)]
    boots = [
        (repeat_id(tid, k), config)
        for k in range(1, spec.budget.confirm_repeats + 1)
        for tid, config in members
        if repeat_id(tid, k) not in finished
    ]
    return [
        Repeat(trial_id=rid, attempt=history.next_attempt(rid), params=dict(cfg), config=cfg)
        for rid, cfg in boots
    ]


# -- the judgement -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LevelJudgement:
    """The adaptive configuration against the best static one at one level.

    Attributes:
        concurrency: The level.
        weight: Its weight in the mix.
        best_id: The static configuration with the best pooled mean here.
        best_mean: Its pooled mean.
        adaptive_mean: The adaptive configuration's pooled mean (None: not measured).
        diff: (adaptive - best) / best, signed so that > 0 is better.
        bound: Half width of the 95% interval of `diff` (None: no between-boot spread).
        verdict: `better`, `within noise`, `worse` or `not measured`.
        why: Why it loses, when it does.
    """

    concurrency: int
    weight: float
    best_id: str
    best_mean: float
    adaptive_mean: float | None
    diff: float | None
    bound: float | None
    verdict: str
    why: str = ""


@dataclass(frozen=True)
class MixRow:
    """One configuration's score over the mix: its boots' weighted share of the best static
    mean at each level (1.0 = as good as the best static configuration everywhere)."""

    trial_id: str
    mean: float
    values: tuple[float, ...]
    adaptive: bool


@dataclass(frozen=True)
class AdaptiveAnswer:
    """What the sweep says about one configuration for every load.

    Attributes:
        build: The adaptive configuration (or why there is none).
        origin: Its trial id (None: not booted).
        levels: Per level, against the best static configuration.
        mix: Scores over the mix, the adaptive configuration first, then the static ones.
        mix_bound: Half width of the 95% interval of a difference of two mix scores (relative).
        passes: Not worse beyond noise at any level and above every static one over the mix.
        recommended: The configuration for every load (the adaptive one or a static trial id).
        recommended_config: Its configuration.
        reason: One paragraph: the verdict and, where it loses, which level and why.
    """

    build: AdaptiveBuild
    origin: str | None = None
    levels: tuple[LevelJudgement, ...] = ()
    mix: tuple[MixRow, ...] = ()
    mix_bound: float | None = None
    passes: bool = False
    recommended: str | None = None
    recommended_config: Config | None = None
    reason: str = ""

    @property
    def judged(self) -> bool:
        """Whether boots of the adaptive configuration were measured and compared."""
        return bool(self.levels) and self.levels[0].adaptive_mean is not None

    @property
    def label(self) -> str:
        """`adaptive recommended`, `static recommended`, or `not judged`."""
        if not self.judged:
            return "not judged"
        return "adaptive recommended" if self.passes else "static recommended"


def _boots(history: History, trial_id: str) -> list[TrialRecord]:
    """A configuration's fresh boots (with its search boot when it has fewer than two)."""
    finished = history.finished
    fresh = [r for tid, r in finished.items() if is_repeat(tid) and repeated_of(tid) == trial_id]
    fresh.sort(key=lambda r: repeat_number(r.trial_id))
    if len(fresh) < 2 and trial_id in finished:
        fresh.insert(0, finished[trial_id])
    return fresh


def _values(history: History, records: Sequence[TrialRecord], level: int) -> list[float]:
    name = f"{level_objective(history.spec).metric}_c{level}"
    return [
        r.metrics[name] for r in records if r.failure_mode is FailureMode.NONE and name in r.metrics
    ]


def _spread(groups: Sequence[Sequence[float]]) -> tuple[float | None, int]:
    """Between-boot relative sd pooled over groups, and its degrees of freedom."""
    ss, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            m = sum(values) / len(values)
            ss += sum((v / m - 1.0) ** 2 for v in values)
            df += len(values) - 1
    return (math.sqrt(ss / df) if df else None), df


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _bound(sd: float | None, df: int, n_a: int, n_b: int) -> float | None:
    if sd is None or df < 1:
        return None
    return t_quantile(df) * sd * math.sqrt(1 / n_a + 1 / n_b)


def _verdict(diff: float, bound: float | None) -> str:
    if bound is None:
        return "better" if diff >= 0 else "worse"
    if diff > bound:
        return "better"
    return "worse" if diff < -bound else "within noise"


def judge_adaptive(history: History) -> AdaptiveAnswer | None:
    """Judge the adaptive configuration's boots (None: the sweep has no adaptive phase)."""
    spec = history.spec
    if not _applies(spec):
        return None
    build = build_adaptive(history)
    if not build.ok:
        return AdaptiveAnswer(build=build, reason=build.reason)
    origin = _origin(history, build, create=False)
    statics = _statics(history, build)
    adaptive = _boots(history, origin) if origin else []
    measured = [r for r in adaptive if r.failure_mode is FailureMode.NONE]
    if not measured:
        failed = next((r for r in adaptive if r.failure_mode is not FailureMode.NONE), None)
        why = (
            f"its boots failed ({failed.failure_mode.value}: {failed.reason})"
            if failed is not None and failed.failure_mode is not None
            else "it has not been booted yet"
        )
        return AdaptiveAnswer(build=build, origin=origin, reason=f"not judged: {why}")
    assert origin is not None
    pools = {tid: _boots(history, tid) for tid in statics}
    levels = _levels(history, build, origin, measured, pools)
    reference = {j.concurrency: j.best_mean for j in levels}
    mix = _mix(history, origin, measured, pools, reference)
    mix_sd, mix_df = _spread([row.values for row in mix])
    adaptive_row = mix[0] if mix and mix[0].adaptive else None
    static_rows = [row for row in mix if not row.adaptive]
    best_static = max(static_rows, key=lambda r: r.mean, default=None)
    mix_bound = (
        _bound(mix_sd, mix_df, len(adaptive_row.values), len(best_static.values))
        if adaptive_row is not None and best_static is not None
        else None
    )
    passes = (
        all(j.verdict != "worse" for j in levels)
        and adaptive_row is not None
        and all(adaptive_row.mean > row.mean for row in static_rows)
    )
    if passes:
        recommended, config = origin, build.config
    elif best_static is not None:
        recommended, config = best_static.trial_id, history.finished[best_static.trial_id].config
    else:
        recommended, config = None, None
    answer = AdaptiveAnswer(
        build=build,
        origin=origin,
        levels=tuple(levels),
        mix=tuple(mix),
        mix_bound=mix_bound,
        passes=passes,
        recommended=recommended,
        recommended_config=config,
    )
    return _with_reason(spec.workload.mix_weights, answer)


def _levels(
    history: History,
    build: AdaptiveBuild,
    origin: str,
    adaptive: Sequence[TrialRecord],
    pools: Mapping[str, Sequence[TrialRecord]],
) -> list[LevelJudgement]:
    sign = level_objective(history.spec).sign
    out = []
    for plan in build.levels:
        level = plan.concurrency
        values = {tid: _values(history, boots, level) for tid, boots in pools.items()}
        values = {tid: v for tid, v in values.items() if v}
        mine = _values(history, adaptive, level)
        if not values:
            continue
        best_id = max(values, key=lambda tid: (sign * _mean(values[tid]), tid))
        best = _mean(values[best_id])
        if not mine:
            out.append(
                LevelJudgement(level, plan.weight, best_id, best, None, None, None, "not measured")
            )
            continue
        sd, df = _spread([mine, *values.values()])
        diff = sign * (_mean(mine) - best) / best
        bound = _bound(sd, df, len(mine), len(values[best_id]))
        verdict = _verdict(diff, bound)
        why = ""
        if verdict == "worse":
            why = _why(history, build, plan, best_id, adaptive)
        out.append(
            LevelJudgement(
                level, plan.weight, best_id, best, _mean(mine), diff, bound, verdict, why
            )
        )
    return out


def _mix(
    history: History,
    origin: str,
    adaptive: Sequence[TrialRecord],
    pools: Mapping[str, Sequence[TrialRecord]],
    reference: Mapping[int, float],
) -> list[MixRow]:
    spec = history.spec
    metric = level_objective(spec).metric
    rows = []
    for tid, boots in [(origin, adaptive), *pools.items()]:
        scores = []
        for boot in boots:
            if boot.failure_mode is not FailureMode.NONE:
                continue
            values = {
                c: boot.metrics[f"{metric}_c{c}"]
                for c in spec.workload.concurrency
                if f"{metric}_c{c}" in boot.metrics
            }
            score = mix_score(spec, values, reference)
            if score is not None:
                scores.append(score)
        if scores:
            rows.append(MixRow(tid, _mean(scores), tuple(scores), adaptive=tid == origin))
    statics = sorted((r for r in rows if not r.adaptive), key=lambda r: (-r.mean, r.trial_id))
    return [r for r in rows if r.adaptive] + statics


def _why(
    history: History,
    build: AdaptiveBuild,
    plan: LevelPlan,
    best_id: str,
    adaptive: Sequence[TrialRecord],
) -> str:
    """Why the adaptive configuration loses at one level, from what the record shows."""
    spec = history.spec
    level = plan.concurrency
    best = history.finished[best_id].config
    reasons = list(plan.notes)
    steps = chain_steps(spec, best)
    if steps == 0 and 0 in plan.candidates:
        reasons.append(
            "the best there is plain decoding, and a 0-step adaptive state still runs the "
            "draft model's extend on every batch, which a plain server does not"
        )
    assert build.config is not None
    knobs = [k for k in changed_keys(best, build.config) if k not in _SPECULATIVE_KEYS]
    if knobs:
        shown = ", ".join(f"{k}={best.get(k)!r} (adaptive: {build.config.get(k)!r})" for k in knobs)
        reasons.append(
            f"{best_id} also differs in system knobs, {shown}: one configuration takes them from "
            f"{build.base_id}, the best over the mix"
        )
    accept = [
        r.metrics[f"accept_length_c{level}"]
        for r in adaptive
        if f"accept_length_c{level}" in r.metrics
    ]
    chain = {c.steps: c for c in plan.chains}
    expect = chain.get(plan.settles) if plan.settles is not None else None
    if accept and expect is not None and expect.accept_length:
        ran = _mean(accept)
        if abs(ran / expect.accept_length - 1.0) > 0.05:
            reasons.append(
                f"it accepted {ran:.2f} tokens per cycle there against {expect.accept_length:.2f} "
                f"for the {expect.steps}-step chain the slot should settle on: the controller "
                "ran other steps (warm-up, or its acceptance thresholds)"
            )
    if not reasons:
        reasons.append(
            f"the slot's candidates {list(plan.candidates)} come from one boot of each chain in "
            "the search, and the chains there are within a few percent of each other: the "
            "search's pick did not hold up over more boots"
        )
    return "; ".join(reasons)


def _with_reason(weights: Mapping[int, float], answer: AdaptiveAnswer) -> AdaptiveAnswer:
    mix = ", ".join(f"c{c}: {w:.2g}" for c, w in weights.items() if w)
    worse = [j for j in answer.levels if j.verdict == "worse"]
    parts = []
    for j in worse:
        assert j.diff is not None
        parts.append(
            f"it loses at c{j.concurrency}: {j.diff:+.1%} against {j.best_id}"
            + (f", beyond the +-{j.bound:.1%} noise" if j.bound is not None else "")
            + (f" ({j.why})" if j.why else "")
        )
    adaptive = answer.mix[0] if answer.mix and answer.mix[0].adaptive else None
    statics = [r for r in answer.mix if not r.adaptive]
    if adaptive is not None and statics:
        top = statics[0]
        gain = adaptive.mean / top.mean - 1.0
        noise = (
            f" (within the +-{answer.mix_bound:.1%} noise)"
            if answer.mix_bound is not None and abs(gain) <= answer.mix_bound
            else (" (beyond noise)" if answer.mix_bound is not None else "")
        )
        parts.append(
            f"over the mix ({mix}) it scores {adaptive.mean:.3f} against {top.mean:.3f} for the "
            f"best static configuration {top.trial_id}, {gain:+.1%}{noise}"
        )
    if answer.passes:
        head = (
            f"{answer.origin} is within noise of the best static configuration at every level "
            "or better, and above every static one over the mix: recommended for every load"
        )
    else:
        head = f"{answer.recommended} is recommended for every load, not {answer.origin}"
    return replace(answer, reason=head + "; " + "; ".join(parts) if parts else head)


# -- the parent run ----------------------------------------------------------------------------
def adaptive_metrics(answer: AdaptiveAnswer) -> dict[str, float]:
    """Parent-run metrics of the judgement (docs/design.md, "MLflow layout")."""
    out: dict[str, float] = {}
    for j in answer.levels:
        if j.diff is not None:
            out[f"{names.ADAPTIVE_DIFF}_c{j.concurrency}"] = j.diff
    if answer.mix and answer.mix[0].adaptive:
        out[names.ADAPTIVE_MIX] = answer.mix[0].mean
    statics = [r.mean for r in answer.mix if not r.adaptive]
    if statics:
        out[names.ADAPTIVE_MIX_STATIC] = max(statics)
    return out


def adaptive_tags(answer: AdaptiveAnswer) -> dict[str, str]:
    """Parent-run tags of the judgement: its label, reason, config and the recommendation."""
    tags = {
        names.TAG_ADAPTIVE: answer.label if answer.build.ok else "not built",
        names.TAG_ADAPTIVE_REASON: (answer.reason or answer.build.reason)[:4000],
    }
    if answer.build.text is not None:
        tags[names.TAG_ADAPTIVE_CONFIG] = answer.build.text
    if answer.recommended is not None:
        tags[names.TAG_OVERALL] = answer.recommended
    return tags
