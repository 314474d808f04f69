"""Confirmation and drift: repeated boots of the best configurations decide the winner (pure).

A sweep measures each configuration once, and one boot of a node is not the node: on real
SGLang 0.5.13 on an H200 (README, "Real GPUs") three fresh boots of one configuration spread
4.9% (CV) at concurrency 1, while each boot's own mean was known to 0.5-1.6% from its requests.
The spread between boots is several times the uncertainty within one, so more boots, not more
prompts, separate close configurations. This module plans and judges those boots:

- `plan`: after the search budget the top `budget.confirm` configurations are booted again
  `budget.confirm_repeats` times each, interleaved (A B C A B C); while the verdict is a tie,
  the configurations tied with the best get one more interleaved round, up to
  `budget.max_repeats` boots each (sequential confirmation: boots go where the decision is
  close; not those already known to be within `RESOLUTION` of the best); last the baseline once
  more (drift). Repeats have their own trial ids,
  `<trial id>.r<n>`, run through the same trial path and are tagged
  `spec_sweep.confirms=<trial id>` in MLflow. `remeasure_due`: with `budget.remeasure_every`
  the baseline is also booted again during the search, after every N search trials.
- `verdict`: each candidate's boots are pooled (mean; with two or more confirmation boots each,
  only those: the search measurement that put it in the top is biased upward by selection,
  the winner's curse); the between-boot spread is pooled over
  the candidates (relative sd, `k * (n - 1)` degrees of freedom) and gives each mean a 95% t
  interval. The best pooled mean wins outright only if a t test of its difference to every
  other candidate rejects equality; otherwise the result is a "tie within noise" and the
  recommendation is the lower-risk of the tied configurations: fewer flags changed from the
  baseline, then fewer failed configurations one step away (nearer a failure boundary), then
  the higher mean.
- Drift: every re-measure of the baseline against its first boot; a change larger than the
  between-boot noise allows (the t bound of a difference of two single boots, Bonferroni over
  the re-measures) is "the node changed under the sweep".

No Ray, no MLflow client, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from spec_sweep.failures import FailureMode
from spec_sweep.metrics import CI_HIGH, CI_LOW
from spec_sweep.search.objective import (
    BASELINE_ID,
    constraint_violations,
    latest_finished,
    objective_value,
)
from spec_sweep.space import Config, baseline_config, config_key
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import TrialRecord

__all__ = [
    "CONFIRM_TAG",
    "Candidate",
    "ConfirmQueue",
    "Drift",
    "Repeat",
    "Verdict",
    "confirm_metrics",
    "is_repeat",
    "plan",
    "remeasure_due",
    "repeat_id",
    "repeated_of",
    "search_records",
    "t_quantile",
    "verdict",
    "workload_warning",
]

#: MLflow tag on a confirmation run: the trial id it repeats.
CONFIRM_TAG = "spec_sweep.confirms"
_SEP = ".r"
#: Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int, p: float = 0.975) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (df >= 1).

    The 97.5% quantile (a two-sided 95% interval) is tabulated; other levels use the
    Cornish-Fisher expansion around the normal quantile (within 3% of the exact value for
    df >= 3 at the levels a Bonferroni correction over a few comparisons asks for: 4.75
    against 4.86 for df 3 at 99.17%; within 0.1% at 97.5% for df >= 10).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if p == 0.975:
        if df <= len(_T975):
            return _T975[df - 1]
        return 1.96 + 2.4 / df  # within 0.002 of the exact value above 30
    z = NormalDist().inv_cdf(p)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def repeat_id(trial_id: str, n: int) -> str:
    """The id of the `n`-th confirmation boot of `trial_id` (`t0007.r1`)."""
    return f"{trial_id}{_SEP}{n}"


def is_repeat(trial_id: str) -> bool:
    """Whether a trial id is a confirmation boot (or a baseline re-measure)."""
    return _SEP in trial_id


def repeated_of(trial_id: str) -> str:
    """The trial id a confirmation boot repeats (the id itself for a search trial)."""
    return trial_id.split(_SEP, 1)[0]


def search_records(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The records of the search itself (confirmation boots left out)."""
    return [r for r in records if not is_repeat(r.trial_id)]


@dataclass(frozen=True)
class Repeat:
    """One planned confirmation boot: its trial id, the configuration, the attempt number."""

    trial_id: str
    attempt: int
    params: dict[str, object]
    config: Config


def _feasible(spec: SweepSpec, record: TrialRecord) -> bool:
    return (
        record.failure_mode is FailureMode.NONE
        and objective_value(spec, record.metrics) is not None
        and all(v <= 0 for v in constraint_violations(spec, record.metrics).values())
    )


def _ranked(spec: SweepSpec, records: Sequence[TrialRecord]) -> list[TrialRecord]:
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    ok = [r for r in latest_finished(search_records(records)).values() if _feasible(spec, r)]
    return sorted(ok, key=lambda r: (-sign * (objective_value(spec, r.metrics) or 0.0), r.trial_id))


def _repeat_numbers(finished: Mapping[str, TrialRecord], trial_id: str) -> list[int]:
    """The numbers of the finished boots repeating `trial_id` (`t0007.r2` -> 2)."""
    out = []
    for tid in finished:
        if is_repeat(tid) and repeated_of(tid) == trial_id:
            out.append(int(tid.rsplit(_SEP, 1)[1]))
    return sorted(out)


def _next_id(finished: Mapping[str, TrialRecord], trial_id: str) -> str:
    """The next boot id of `trial_id`: the lowest number not finished yet (an interrupted boot
    keeps its id and is launched again as its next attempt)."""
    done = set(_repeat_numbers(finished, trial_id))
    k = 1
    while k in done:
        k += 1
    return repeat_id(trial_id, k)


def _repeats(records: Sequence[TrialRecord], boots: Sequence[tuple[str, Config]]) -> list[Repeat]:
    attempts: dict[str, int] = {}
    for record in records:
        attempts[record.trial_id] = attempts.get(record.trial_id, 0) + 1
    return [
        Repeat(trial_id=tid, attempt=attempts.get(tid, 0) + 1, params=dict(cfg), config=cfg)
        for tid, cfg in boots
    ]


def plan(spec: SweepSpec, records: Sequence[TrialRecord]) -> list[Repeat]:
    """The next confirmation boots to run, in launch order (empty: confirmation is over).

    A function of the record only, so an interrupted sweep resumes where it stopped. Called
    again after each batch: first the `budget.confirm_repeats` boots of each of the top
    `budget.confirm` configurations, interleaved (A B C A B C); then, while the verdict is a
    tie, one more interleaved round of the tied configurations, up to `budget.max_repeats`
    boots each; last the baseline once more (drift), unless a baseline boot is already the
    last one.

    Args:
        spec: The sweep (`budget.confirm`, `budget.confirm_repeats`,
            `budget.confirm_max_repeats`, `budget.remeasure_baseline`).
        records: Every record of the sweep so far (search and confirmation).

    Returns:
        The boots of the next batch; attempt > 1 for one that was interrupted.
    """
    top = _ranked(spec, records)[: spec.budget.confirm]
    finished = latest_finished(records)
    if len(top) >= 2:
        fixed = [
            (repeat_id(r.trial_id, n), r.config)
            for n in range(1, spec.budget.confirm_repeats + 1)
            for r in top
            if repeat_id(r.trial_id, n) not in finished
        ]
        if fixed:
            return _repeats(records, fixed)
        judged = verdict(spec, records)
        if judged is not None and judged.tie:
            open_ = _undecided(judged)
            more = [
                (_next_id(finished, c.trial_id), c.config)
                for c in open_
                if len(_repeat_numbers(finished, c.trial_id)) < spec.budget.max_repeats
            ]
            if more:
                return _repeats(records, more)
    base = finished.get(BASELINE_ID)
    if spec.budget.remeasure_baseline and base is not None and _feasible(spec, base):
        # The drift check is always the baseline's last boot, after everything else.
        boots = [r for r in finished.values() if is_repeat(r.trial_id)]
        last = max(boots, key=lambda r: (r.start_time, r.trial_id), default=None)
        if last is None or repeated_of(last.trial_id) != BASELINE_ID:
            return _repeats(records, [(_next_id(finished, BASELINE_ID), base.config)])
    return []


#: Differences smaller than this (relative) are not worth more boots to resolve.
RESOLUTION = 0.01


def _undecided(judged: Verdict) -> list[Candidate]:
    """The tied candidates whose difference from the best may still exceed `RESOLUTION`.

    A tied candidate whose 95% interval of the difference from the best lies within
    +-`RESOLUTION` is as good as the best for the user's purpose: more boots would only rank
    noise. The best is booted again along with any candidate still open.
    """
    if judged.noise_rel_sd is None or judged.t is None or len(judged.tied) < 2:
        return []
    best = judged.tied[0]
    open_ = []
    for other in judged.tied[1:]:
        diff, se = _separation(best, other, judged.noise_rel_sd)
        if diff + judged.t * se > RESOLUTION:
            open_.append(other)
    return [best, *open_] if open_ else []


def _separation(a: Candidate, b: Candidate, rel_sd: float) -> tuple[float, float]:
    """The relative difference of two pooled means and its standard error."""
    se = rel_sd * math.sqrt(1 / len(a.values) + 1 / len(b.values))
    return abs(a.mean - b.mean) / ((a.mean + b.mean) / 2), se


def remeasure_due(spec: SweepSpec, records: Sequence[TrialRecord]) -> Repeat | None:
    """A baseline boot owed during the search (`budget.remeasure_every`), or None.

    After every `remeasure_every` finished search trials the baseline is booted once more, so
    a node that changes while the sweep runs shows in the drift check before the end.
    """
    every = spec.budget.remeasure_every
    if every is None or not spec.budget.remeasure_baseline:
        return None
    finished = latest_finished(records)
    base = finished.get(BASELINE_ID)
    if base is None or not _feasible(spec, base):
        return None
    searched = sum(1 for tid in finished if not is_repeat(tid))
    if len(_repeat_numbers(finished, BASELINE_ID)) >= searched // every:
        return None
    return _repeats(records, [(_next_id(finished, BASELINE_ID), base.config)])[0]


class ConfirmQueue:
    """Hands the planned confirmation boots to the scheduler in order (no model involved)."""

    def __init__(self, boots: Sequence[Repeat]) -> None:
        self._queue = list(boots)
        self.exhausted = False

    def suggest(self, key: str) -> Repeat | None:
        """The next boot, or None (and `exhausted`) when all were handed out."""
        if not self._queue:
            self.exhausted = True
            return None
        return self._queue.pop(0)

    def complete(
        self, key: str, result: Mapping[str, object] | None = None, *, error: bool = False
    ) -> None:
        """Nothing to learn: the verdict is computed from the record at the end."""


@dataclass(frozen=True)
class Candidate:
    """One confirmed configuration: its boots pooled."""

    trial_id: str
    config: Config
    values: tuple[float, ...]
    mean: float
    ci_low: float
    ci_high: float
    changed_flags: int
    failed_neighbours: int


@dataclass(frozen=True)
class Drift:
    """The baseline measured at the start and again during and at the end of the sweep."""

    first: float
    again: float  # the last boot
    change: float  # relative, (again - first) / first
    bound: float  # relative change the noise allows (95%, over all the re-measures together)
    beyond_noise: bool
    worst: float = 0.0  # the largest relative change of any re-measure, signed
    boots: int = 1  # baseline re-measures compared with the first boot

    def describe(self) -> str:
        """One line for the summary and the report."""
        text = f"{self.change:+.1%} at the end ({self.first:.4g} -> {self.again:.4g})"
        if self.boots > 1:
            text += f"; largest of {self.boots} re-measures {self.worst:+.1%}"
        return f"{text}; noise allows +-{self.bound:.1%}"


@dataclass
class Verdict:
    """What the confirmation boots decided."""

    metric: str
    candidates: list[Candidate]
    winner: Candidate | None
    recommended: Candidate | None
    tie: bool
    reason: str
    spent: int
    noise_rel_sd: float | None
    t: float | None = None  # the 95% t quantile of the pooled between-boot spread
    tied: list[Candidate] = field(default_factory=list)
    drift: Drift | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """`confirmed winner`, `tie within noise`, or `not confirmed`."""
        if self.winner is None:
            return "not confirmed"
        return "tie within noise" if self.tie else "confirmed winner"


def _changed_flags(config: Config, base: Config) -> int:
    keys = set(config) | set(base)
    return sum(1 for k in keys if config_key({k: config.get(k)}) != config_key({k: base.get(k)}))


def _failed_neighbours(config: Config, failed: Sequence[Config]) -> int:
    return sum(1 for f in failed if _changed_flags(config, f) == 1)


def verdict(spec: SweepSpec, records: Sequence[TrialRecord]) -> Verdict | None:
    """Judge the confirmation boots recorded for a sweep (None when none were run).

    Args:
        spec: The sweep.
        records: Every record of the sweep (search and confirmation).
    """
    finished = latest_finished(records)
    repeats = [r for r in finished.values() if is_repeat(r.trial_id)]
    if not repeats:
        return None
    metric = spec.objective.metric
    base_cfg = baseline_config(spec)
    failed = [
        r.config
        for r in latest_finished(search_records(records)).values()
        if r.failure_mode is not FailureMode.NONE
    ]
    top = {r.trial_id for r in _ranked(spec, records)[: spec.budget.confirm]}
    # A candidate is in the top because its search measurement was high, partly by luck; pooling
    # that measurement biases every candidate up by its luck. With two or more fresh boots each,
    # only the fresh boots are pooled.
    fresh_only = spec.budget.confirm_repeats >= 2
    pools: dict[str, list[float]] = {}
    for record in sorted(finished.values(), key=lambda r: (r.start_time, r.trial_id)):
        origin = repeated_of(record.trial_id)
        if origin not in top or not any(repeated_of(r.trial_id) == origin for r in repeats):
            continue
        if record.trial_id == origin and fresh_only:
            continue  # selected for being high: biased upward (the winner's curse)
        value = objective_value(spec, record.metrics)
        if _feasible(spec, record) and value is not None:
            pools.setdefault(origin, []).append(value)
    # Between-boot spread, pooled over the candidates on a relative scale.
    ss, df = 0.0, 0
    for values in pools.values():
        if len(values) >= 2:
            m = sum(values) / len(values)
            ss += sum((v / m - 1.0) ** 2 for v in values)
            df += len(values) - 1
    rel_sd = math.sqrt(ss / df) if df else None
    t = t_quantile(df) if df else None
    candidates: list[Candidate] = []
    for origin, values in pools.items():
        mean = sum(values) / len(values)
        half = (t or 0.0) * (rel_sd or 0.0) / math.sqrt(len(values)) * mean
        candidates.append(
            Candidate(
                trial_id=origin,
                config=finished[origin].config,
                values=tuple(values),
                mean=mean,
                ci_low=mean - half,
                ci_high=mean + half,
                changed_flags=_changed_flags(finished[origin].config, base_cfg),
                failed_neighbours=_failed_neighbours(finished[origin].config, failed),
            )
        )
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    candidates.sort(key=lambda c: (-sign * c.mean, c.trial_id))
    out = Verdict(
        metric=metric,
        candidates=candidates,
        winner=candidates[0] if candidates else None,
        recommended=candidates[0] if candidates else None,
        tie=False,
        reason="",
        spent=len(repeats),
        noise_rel_sd=rel_sd,
        t=t,
    )
    if candidates:
        _decide(out, candidates, t=t, rel_sd=rel_sd)
    out.drift = _drift(spec, finished, rel_sd=rel_sd, df=df)
    if out.drift is not None and out.drift.beyond_noise:
        out.warnings.append(
            f"the node changed under the sweep: the baseline measured {out.drift.worst:+.1%} "
            f"against its first boot ({out.drift.boots} re-measure(s), last "
            f"{out.drift.first:.4g} -> {out.drift.again:.4g}), beyond the "
            f"+-{out.drift.bound:.1%} two boots differ by noise; compare trials run far apart "
            "with care"
        )
    return out


def _decide(out: Verdict, cands: list[Candidate], *, t: float | None, rel_sd: float | None) -> None:
    best = cands[0]
    if t is None or rel_sd is None:
        out.reason = f"{best.trial_id} has the best pooled mean (no between-boot spread measured)"
        return
    tied = [best]
    for other in cands[1:]:
        diff, se = _separation(best, other, rel_sd)
        if diff <= t * se:
            tied.append(other)
    if len(tied) == 1:
        out.reason = (
            f"{best.trial_id} beats every other confirmed configuration by more than the "
            f"between-boot noise (+-{rel_sd:.1%} sd per boot, {len(best.values)} boots each)"
        )
        return
    out.tie = True
    out.tied = tied
    pick = min(tied, key=lambda c: (c.changed_flags, c.failed_neighbours, cands.index(c)))
    out.recommended = pick
    names = ", ".join(c.trial_id for c in tied)
    if pick is best:
        why = "it is also the lowest-risk of them"
    else:
        why = (
            f"it changes {pick.changed_flags} flag(s) from the baseline against "
            f"{best.changed_flags}, with {pick.failed_neighbours} failed configuration(s) one "
            f"step away against {best.failed_neighbours}"
        )
    out.reason = (
        f"tie within noise between {names} (differences within the +-{rel_sd:.1%} between-boot "
        f"sd per boot); recommended {pick.trial_id}: {why}"
    )


def _drift(
    spec: SweepSpec,
    finished: Mapping[str, TrialRecord],
    *,
    rel_sd: float | None,
    df: int,
) -> Drift | None:
    first = finished.get(BASELINE_ID)
    boots = sorted(
        (r for tid, r in finished.items() if is_repeat(tid) and repeated_of(tid) == BASELINE_ID),
        key=lambda r: (r.start_time, int(r.trial_id.rsplit(_SEP, 1)[1])),
    )
    if first is None or not boots:
        return None
    a = objective_value(spec, first.metrics)
    values = [v for v in (objective_value(spec, r.metrics) for r in boots) if v is not None]
    if a is None or a <= 0 or not values:
        return None
    m = len(values)
    if rel_sd is not None and df >= 1:
        # Several re-measures are several comparisons: Bonferroni keeps the false alarm at 5%.
        bound = t_quantile(df, 1 - 0.025 / m) * rel_sd * math.sqrt(2.0)
    else:  # no repeats: only the within-boot intervals say how well each value is known
        halves = [_half_width(spec, r.metrics) for r in (first, boots[-1])]
        bound = 2.0 * math.sqrt(sum(h * h for h in halves))
    changes = [(v - a) / a for v in values]
    worst = max(changes, key=abs)
    return Drift(
        first=a,
        again=values[-1],
        change=changes[-1],
        bound=bound,
        beyond_noise=abs(worst) > bound,
        worst=worst,
        boots=m,
    )


def _half_width(spec: SweepSpec, metrics: Mapping[str, float]) -> float:
    """Relative half width of a trial's within-boot 95% interval of the objective (0 if none)."""
    name = spec.objective.metric
    value, lo, hi = metrics.get(name), metrics.get(name + CI_LOW), metrics.get(name + CI_HIGH)
    if value is None or lo is None or hi is None or value <= 0:
        return 0.0
    return (hi - lo) / 2.0 / value


def workload_warning(spec: SweepSpec, records: Sequence[TrialRecord]) -> str | None:
    """A warning when the workload measures the baseline too loosely to rank close configs.

    The baseline's within-boot 95% interval is compared with the 1% differences a sweep is
    typically asked to rank; wider than +-1% means one boot cannot separate them.
    """
    base = latest_finished(records).get(BASELINE_ID)
    if base is None or base.failure_mode is not FailureMode.NONE:
        return None
    half = _half_width(spec, base.metrics)
    if half <= RESOLUTION:
        return None
    need = math.ceil(spec.workload.num_prompts * (half / RESOLUTION) ** 2)
    return (
        f"workload too small to rank close configurations: the baseline's {spec.objective.metric}"
        f" is known only to +-{half:.1%} within one boot (95%), wider than the 1% differences "
        f"a sweep ranks; raise workload.num_prompts from {spec.workload.num_prompts} to about "
        f"{need}"
    )


def confirm_metrics(out: Verdict) -> dict[str, float]:
    """Parent-run metrics of a verdict (docs/design.md, "MLflow layout")."""
    m: dict[str, float] = {"confirm_trials": float(out.spent)}
    if out.winner is not None:
        w = out.winner
        m |= {
            f"winner_{out.metric}": w.mean,
            f"winner_{out.metric}{CI_LOW}": w.ci_low,
            f"winner_{out.metric}{CI_HIGH}": w.ci_high,
            "winner_boots": float(len(w.values)),
            "confirm_tie": 1.0 if out.tie else 0.0,
        }
    if out.noise_rel_sd is not None:
        m["boot_noise_rel_sd"] = out.noise_rel_sd
    if out.drift is not None:
        m["baseline_drift"] = out.drift.change
        m["baseline_drift_max"] = out.drift.worst
        m["baseline_drift_bound"] = out.drift.bound
    return m
