"""The verdict of the confirmation boots, and the baseline's drift (pure).

One boot of a node is not the node (docs/design.md, "Confirmation"): this module judges the
boots `confirm.plan` scheduled. Each candidate's boots are pooled (mean; with two or more
confirmation boots each, only those: the search measurement that put it in the top is biased
upward by selection, the winner's curse); the between-boot spread is pooled over the candidates
(relative sd, `k * (n - 1)` degrees of freedom) and gives each mean a 95% t interval. The best
pooled mean wins outright only if a t test of its difference to every other candidate rejects
equality; otherwise the result is a "tie within noise" and the recommendation is the lower-risk
of the tied configurations shown to be within `RESOLUTION` of the best (the 95% interval of the
difference within +-1%): fewer flags changed from the baseline, then fewer failed
configurations one step away (nearer a failure boundary), then the higher mean; with none shown
within it, the best mean. Drift: every
re-measure of the baseline against its first boot; a change larger than the between-boot noise
allows (the t bound of a difference of two single boots, Bonferroni over the re-measures) is
"the node changed under the sweep". Standard library and the spec only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

from spec_sweep.core.config import Config, baseline_config, changed_keys
from spec_sweep.core.history import History
from spec_sweep.core.ids import BASELINE_ID, is_repeat, repeat_number, repeated_of
from spec_sweep.core.names import (
    BOOT_NOISE,
    CI_HIGH,
    CI_LOW,
    CONFIRM_TIE,
    CONFIRM_TRIALS,
    DRIFT,
    DRIFT_BOUND,
    DRIFT_DECIDABLE,
    DRIFT_MAX,
    WINNER_BOOTS,
    winner_metric,
)
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord

__all__ = [
    "DRIFT_USEFUL",
    "RESOLUTION",
    "Candidate",
    "Drift",
    "Verdict",
    "confirm_metrics",
    "separation",
    "t_quantile",
    "verdict",
    "workload_warning",
]

#: Differences smaller than this (relative) are not worth more boots to resolve.
RESOLUTION = 0.01
#: Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(df: int, p: float = 0.975) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (df >= 1).

    The 97.5% quantile (a two-sided 95% interval) is tabulated; other levels are exact for one
    and two degrees of freedom (`tan(pi (p - 1/2))`, `(2p - 1) / sqrt(2p (1 - p))`) and use the
    Cornish-Fisher expansion around the normal quantile above (within 3% of the exact value
    for df >= 3 at the levels a Bonferroni correction over a few comparisons asks for: 4.75
    against 4.86 for df 3 at 99.17%; within 0.1% at 97.5% for df >= 10).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if p == 0.975:
        if df <= len(_T975):
            return _T975[df - 1]
        return 1.96 + 2.4 / df  # within 0.002 of the exact value above 30
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


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
    decidable: bool = True  # the bound is narrow enough to tell a drift worth knowing about
    evidence: str = ""  # what the bound was computed from

    def describe(self) -> str:
        """One line for the summary and the report."""
        text = f"{self.change:+.1%} at the end ({self.first:.4g} -> {self.again:.4g})"
        if self.boots > 1:
            text += f"; largest of {self.boots} re-measures {self.worst:+.1%}"
        text += f"; noise allows +-{self.bound:.1%}"
        if self.evidence:
            text += f" ({self.evidence})"
        if not self.decidable:
            text += (
                "; the sweep cannot tell a smaller drift from boot-to-boot noise (boot the "
                "baseline more often, budget.remeasure_every, to narrow it)"
            )
        return text


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


def separation(a: Candidate, b: Candidate, rel_sd: float) -> tuple[float, float]:
    """The relative difference of two pooled means and its standard error."""
    se = rel_sd * math.sqrt(1 / len(a.values) + 1 / len(b.values))
    return abs(a.mean - b.mean) / ((a.mean + b.mean) / 2), se


def _failed_neighbours(config: Config, failed: list[Config]) -> int:
    return sum(1 for f in failed if len(changed_keys(config, f)) == 1)


def _pools(history: History, top: set[str]) -> dict[str, list[float]]:
    """Each candidate's boots: its fresh boots (and the search boot when they are too few)."""
    finished = history.finished
    origins = {repeated_of(tid) for tid in finished if is_repeat(tid)}
    # A candidate is in the top because its search measurement was high, partly by luck; pooling
    # that measurement biases every candidate up by its luck. With two or more fresh boots each,
    # only the fresh boots are pooled.
    fresh_only = history.spec.budget.confirm_repeats >= 2
    pools: dict[str, list[float]] = {}
    for record in sorted(finished.values(), key=lambda r: (r.start_time, r.trial_id)):
        origin = repeated_of(record.trial_id)
        if origin not in top or origin not in origins:
            continue
        if record.trial_id == origin and fresh_only:
            continue  # selected for being high: biased upward (the winner's curse)
        if history.is_feasible(record):
            pools.setdefault(origin, []).append(history.value(record) or 0.0)
    return pools


def _spread(pools: Mapping[str, list[float]]) -> tuple[float | None, int]:
    """The between-boot sd pooled over the candidates on a relative scale, and its df."""
    ss, df = 0.0, 0
    for values in pools.values():
        if len(values) >= 2:
            m = sum(values) / len(values)
            ss += sum((v / m - 1.0) ** 2 for v in values)
            df += len(values) - 1
    return (math.sqrt(ss / df) if df else None), df


def verdict(history: History) -> Verdict | None:
    """Judge the confirmation boots recorded for a sweep (None when none were run)."""
    spec = history.spec
    finished = history.finished
    spent = sum(1 for tid in finished if is_repeat(tid))
    if not spent:
        return None
    base_cfg = baseline_config(spec)
    failed = [r.config for r in history.done if r.failure_mode is not FailureMode.NONE]
    top = {r.trial_id for r in history.feasible[: spec.budget.confirm]}
    pools = _pools(history, top)
    rel_sd, df = _spread(pools)
    t = t_quantile(df) if df else None
    candidates: list[Candidate] = []
    for origin, values in pools.items():
        mean = sum(values) / len(values)
        half = (t or 0.0) * (rel_sd or 0.0) / math.sqrt(len(values)) * mean
        config = finished[origin].config
        candidates.append(
            Candidate(
                trial_id=origin,
                config=config,
                values=tuple(values),
                mean=mean,
                ci_low=mean - half,
                ci_high=mean + half,
                changed_flags=len(changed_keys(config, base_cfg)),
                failed_neighbours=_failed_neighbours(config, failed),
            )
        )
    candidates.sort(key=lambda c: (history.objective.key(c.mean), c.trial_id))
    out = Verdict(
        metric=spec.objective.metric,
        candidates=candidates,
        winner=candidates[0] if candidates else None,
        recommended=candidates[0] if candidates else None,
        tie=False,
        reason="",
        spent=spent,
        noise_rel_sd=rel_sd,
        t=t,
    )
    if candidates:
        _decide(out, candidates, t=t, rel_sd=rel_sd)
    out.drift = _drift(history, rel_sd=rel_sd, df=df)
    if not candidates and out.drift is None:
        return None  # e.g. only the adaptive phase's boots (core.adaptive_judge): nothing to judge
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
        diff, se = separation(best, other, rel_sd)
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
    # The lower-risk pick is made only among the tied configurations shown to be as good as the
    # best (the 95% interval of the difference within +-RESOLUTION): a tie that few boots
    # cannot resolve may still hide a configuration several percent slower.
    equivalent = [best] + [c for c in tied[1:] if _upper(best, c, t, rel_sd) <= RESOLUTION]
    pick = min(equivalent, key=lambda c: (c.changed_flags, c.failed_neighbours, cands.index(c)))
    out.recommended = pick
    names = ", ".join(c.trial_id for c in tied)
    if pick is best and len(equivalent) == 1:
        why = (
            f"the best pooled mean; no other is shown to be within {RESOLUTION:.0%} of it (more "
            "boots, budget.confirm_max_repeats, would tell)"
        )
    elif pick is best:
        why = "it is also the lowest-risk of those within 1% of the best"
    else:
        why = (
            f"within {RESOLUTION:.0%} of the best, it changes {pick.changed_flags} flag(s) from "
            f"the baseline against {best.changed_flags}, with {pick.failed_neighbours} failed "
            f"configuration(s) one step away against {best.failed_neighbours}"
        )
    out.reason = (
        f"tie within noise between {names} (differences within the +-{rel_sd:.1%} between-boot "
        f"sd per boot); recommended {pick.trial_id}: {why}"
    )


def _upper(best: Candidate, other: Candidate, t: float, rel_sd: float) -> float:
    """The 95% upper bound of how much `other` may trail `best`, relative."""
    diff, se = separation(best, other, rel_sd)
    return diff + t * se


#: A drift bound wider than this tells nothing worth knowing: the sweep says it cannot tell.
DRIFT_USEFUL = 0.10


def _drift(history: History, *, rel_sd: float | None, df: int) -> Drift | None:
    finished = history.finished
    first = finished.get(BASELINE_ID)
    boots = sorted(
        (r for tid, r in finished.items() if is_repeat(tid) and repeated_of(tid) == BASELINE_ID),
        key=lambda r: (r.start_time, repeat_number(r.trial_id)),
    )
    if first is None or not boots:
        return None
    objective = history.objective
    a = objective.value(first.metrics)
    values = [v for v in (objective.value(r.metrics) for r in boots) if v is not None]
    if a is None or a <= 0 or not values:
        return None
    m = len(values)
    # The evidence of boot-to-boot noise is the confirmation's pooled spread (the baseline's
    # own re-measures are left out of it: a drift among them would hide itself).
    between = rel_sd is not None and df >= 1
    if between:
        assert rel_sd is not None
        # Several re-measures are several comparisons: Bonferroni keeps the false alarm at 5%.
        bound = t_quantile(df, 1 - 0.025 / m) * rel_sd * math.sqrt(2.0)
        evidence = f"between-boot sd {rel_sd:.1%} from {df} degree(s) of freedom"
    else:  # no configuration booted twice: only the within-boot intervals say anything
        halves = [_half_width(history, r) for r in (first, boots[-1])]
        bound = 2.0 * math.sqrt(sum(h * h for h in halves))
        evidence = "within-boot intervals only: no configuration was booted twice"
    changes = [(v - a) / a for v in values]
    worst = max(changes, key=abs)
    return Drift(
        first=a,
        again=values[-1],
        change=changes[-1],
        bound=bound,
        # The within-boot intervals miss the boot-to-boot spread (3-9 times wider on the real
        # H200): a change beyond them is no evidence of drift.
        beyond_noise=between and abs(worst) > bound,
        worst=worst,
        boots=m,
        decidable=between and bound <= DRIFT_USEFUL,
        evidence=evidence,
    )


def _half_width(history: History, record: TrialRecord) -> float:
    """Relative half width of a trial's within-boot 95% interval of the objective (0 if none)."""
    name = history.objective.metric
    metrics = record.metrics
    value, lo, hi = metrics.get(name), metrics.get(name + CI_LOW), metrics.get(name + CI_HIGH)
    if value is None or lo is None or hi is None or value <= 0:
        return 0.0
    return (hi - lo) / 2.0 / value


def workload_warning(history: History) -> str | None:
    """A warning when the workload measures the baseline too loosely to rank close configs.

    The baseline's within-boot 95% interval is compared with the 1% differences a sweep is
    typically asked to rank; wider than +-1% means one boot cannot separate them.
    """
    spec = history.spec
    base = history.baseline
    if base is None or base.failure_mode is not FailureMode.NONE:
        return None
    half = _half_width(history, base)
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
    m: dict[str, float] = {CONFIRM_TRIALS: float(out.spent)}
    if out.winner is not None:
        w, winner = out.winner, winner_metric(out.metric)
        m |= {
            winner: w.mean,
            f"{winner}{CI_LOW}": w.ci_low,
            f"{winner}{CI_HIGH}": w.ci_high,
            WINNER_BOOTS: float(len(w.values)),
            CONFIRM_TIE: 1.0 if out.tie else 0.0,
        }
    if out.noise_rel_sd is not None:
        m[BOOT_NOISE] = out.noise_rel_sd
    if out.drift is not None:
        m[DRIFT] = out.drift.change
        m[DRIFT_MAX] = out.drift.worst
        m[DRIFT_BOUND] = out.drift.bound
        m[DRIFT_DECIDABLE] = 1.0 if out.drift.decidable else 0.0
    return m
