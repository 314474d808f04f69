"""One view of a sweep's results, built once from its history and verdict.

This module owns `SweepView`: what a person is shown about a sweep, computed in one place from
`core.history.History` and the confirmation `Verdict`: the measured search trials in the one
ranking order (each with its objective value and the constraints it breaks), the best trial,
the configuration to launch (the verdict's recommendation, else the best), failures by mode,
the per-load answer, the adaptive configuration for every load (`core.adaptive_judge`) and the
cost. The terminal summary (`terminal`) and the HTML report
(`report`) render this view, and the MLflow trials view sorts on the metric
`History.rank_metrics` logs, so all three agree on rank 1 by construction. It draws nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from spec_sweep.core.adaptive_judge import AdaptiveAnswer, judge_adaptive
from spec_sweep.core.config import Config
from spec_sweep.core.history import History, is_dummy
from spec_sweep.core.hours import NodeHours, node_hours
from spec_sweep.core.ids import BASELINE_ID
from spec_sweep.core.loads import LoadAnswer, SweepCost, per_load_answer, sweep_cost
from spec_sweep.core.names import ROLE_ACCEPTANCE, ROLE_PROMOTED, TAG_FIDELITY_ROLE
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.core.secrets import redact, secret_values
from spec_sweep.core.verdict import Verdict
from spec_sweep.node.command import build_command
from spec_sweep.spec import SweepSpec

__all__ = ["Pick", "Ranked", "SweepView", "launch_command"]


@dataclass(frozen=True)
class Ranked:
    """One measured search trial at its place in the ranking.

    Attributes:
        rank: 1 is the best.
        record: The trial's finished record.
        value: Its objective value.
        broken: The constraints it breaks (empty: it meets them all).
    """

    rank: int
    record: TrialRecord
    value: float
    broken: tuple[str, ...]


@dataclass(frozen=True)
class Pick:
    """The configuration to launch: the verdict's recommendation, else the best trial.

    Attributes:
        trial_id: The trial it was measured as.
        config: The configuration.
        recommended: It is the confirmation's recommendation (not a single measurement).
    """

    trial_id: str
    config: Config
    recommended: bool


def launch_command(spec: SweepSpec, config: Config, *, adaptive_path: str | None = None) -> str:
    """The ready-to-paste launch command of a configuration, secrets redacted (an adaptive
    configuration names its config file: `adaptive_path`, else `adaptive-config.json`)."""
    command = build_command(spec, config, adaptive_path=adaptive_path)
    return redact(command.shell(), secret_values(spec))


@dataclass(frozen=True)
class SweepView:
    """What a person is shown about a sweep (see the module doc)."""

    history: History
    verdict: Verdict | None
    ranked: tuple[Ranked, ...]
    best: TrialRecord | None
    pick: Pick | None
    failures: dict[str, int]
    loads: LoadAnswer | None
    cost: SweepCost
    hours: NodeHours | None = None
    adaptive: AdaptiveAnswer | None = None

    @classmethod
    def of(cls, history: History, verdict: Verdict | None = None) -> SweepView:
        """The view of a sweep's history (and its confirmation verdict, if any)."""
        objective = history.objective
        ranked = tuple(
            Ranked(
                rank=i,
                record=r,
                value=history.value(r) or 0.0,
                broken=tuple(objective.broken(r.metrics)),
            )
            for i, r in enumerate(history.ranked, start=1)
        )
        best = history.best
        pick: Pick | None = None
        if verdict is not None and verdict.recommended is not None:
            c = verdict.recommended
            pick = Pick(trial_id=c.trial_id, config=c.config, recommended=True)
        elif best is not None:
            pick = Pick(trial_id=best.trial_id, config=best.config, recommended=False)
        counts = Counter(r.failure_mode.value for r in history.done if r.failure_mode)
        return cls(
            history=history,
            verdict=verdict,
            ranked=ranked,
            best=best,
            pick=pick,
            failures={k: v for k, v in counts.items() if k != "none"},
            loads=per_load_answer(history),
            cost=sweep_cost(history),
            hours=node_hours(history),
            adaptive=judge_adaptive(history),
        )

    @property
    def spec(self) -> SweepSpec:
        """The sweep."""
        return self.history.spec

    @property
    def picked(self) -> TrialRecord | None:
        """The search trial of `pick`: what the summary and the report name as the configuration
        to launch (the confirmation's recommendation, else the best single measurement)."""
        return self.history.finished.get(self.pick.trial_id) if self.pick is not None else None

    @property
    def finished(self) -> int:
        """Search trials that reached a classified outcome."""
        return len(self.history.done)

    def top(self, count: int) -> tuple[Ranked, ...]:
        """The first `count` of the ranking."""
        return self.ranked[:count]

    def command(self, config: Config, *, adaptive_path: str | None = None) -> str:
        """The launch command of a configuration of this sweep, secrets redacted."""
        return launch_command(self.spec, config, adaptive_path=adaptive_path)

    def load_and_cost_lines(self) -> list[str]:
        """The summary's lines: the winner per level, the crossover, the cost against a grid."""
        lines: list[str] = []
        answer = self.loads
        if answer is not None and answer.winners:
            lines.append(f"winner per concurrency level ({answer.metric}):")
            for w in answer.winners:
                kind = "speculative" if w.speculative else "plain"
                lines.append(f"  c{w.concurrency}: {w.trial_id} {w.value:.4g} ({kind})")
            lines.append(answer.sentence())
        cost = self.cost
        lines.append(cost.sentence())
        if cost.best_usd_per_million_tokens is not None:
            lines.append(
                f"best configuration: ${cost.best_usd_per_million_tokens:.4g} per million "
                "output tokens"
            )
        return lines

    def hours_lines(self) -> list[str]:
        """Where the node-hours went: booting, measuring, failed boots, confirmation; the boot
        by phase; the knobs whose failures cost the most (`core.hours`)."""
        hours = self.hours
        if hours is None or hours.total <= 0:
            return []
        lines = [hours.sentence()]
        lines += [line for line in (hours.phase_sentence(), hours.knob_sentence()) if line]
        return lines

    @property
    def fidelity(self) -> dict[str, int] | None:
        """With `budget.fidelity.mode: two`, how many search trials each fidelity measured:
        `dummy` (of which `dummy_failed` failed) and `real` (of which `acceptance` measured a
        tree's accept length and `promoted` were promoted by predicted value); else None."""
        if not self.spec.budget.fidelity.two:
            return None
        done = self.history.done
        dummies = [r for r in done if is_dummy(r)]
        roles = Counter(r.tags.get(TAG_FIDELITY_ROLE) for r in done if not is_dummy(r))
        return {
            "dummy": len(dummies),
            "dummy_failed": sum(1 for r in dummies if r.failure_mode is not FailureMode.NONE),
            "real": sum(roles.values()),
            "acceptance": roles.get(ROLE_ACCEPTANCE, 0),
            "promoted": roles.get(ROLE_PROMOTED, 0),
        }

    def fidelity_lines(self) -> list[str]:
        """The summary's line on the two fidelities (none with one fidelity)."""
        counts = self.fidelity
        if counts is None:
            return []
        return [
            f"two fidelities: {counts['dummy']} search trial(s) with dummy weights "
            f"({counts['dummy_failed']} failed), {counts['real']} with real weights "
            f"({counts['acceptance']} for a tree's acceptance, {counts['promoted']} promoted by "
            "predicted value); ranked, confirmed and recommended: real-weight boots only"
        ]

    def quality_lines(self) -> list[str]:
        """The summary's line on the output-quality gate (none when the spec has no gate)."""
        return quality_lines(self.spec, self.history.done)

    def lossy_lines(self) -> list[str]:
        """What the configuration to launch costs in output quality, when it is lossy.

        A lossy trial is a candidate only under `quality.allow_lossy`; when it is the one to
        launch, this says so beside the speed it buys over the best lossless trial.
        """
        picked = self.picked
        if picked is None or not is_lossy(picked):
            return []
        metric = self.spec.objective.metric
        text = (
            f"{picked.trial_id} is lossy: its greedy outputs differ from the baseline's beyond "
            f"numerical noise (deficit {picked.metrics.get('quality_deficit', 0.0):.3g} nats per "
            "token; kept by quality.allow_lossy)"
        )
        lossless = next(
            (
                row
                for row in self.ranked
                if not is_lossy(row.record) and not row.broken and row.record is not picked
            ),
            None,
        )
        value = self.history.value(picked)
        if lossless is None or value is None:
            return [text + "; no lossless trial was measured within the constraints"]
        up = self.history.objective.speedup(value, lossless.value)
        buys = f", so the lossy one buys x{up:.3f}" if up is not None else ""
        return [
            text + f"; the best lossless trial is {lossless.record.trial_id} at {metric} = "
            f"{lossless.value:.4g}{buys}"
        ]


def is_lossy(record: TrialRecord) -> bool:
    """Whether the quality gate judged a trial's outputs lossy (`quality_lossy`)."""
    return bool(record.metrics.get("quality_lossy"))


def quality_lines(spec: SweepSpec, done: list[TrialRecord]) -> list[str]:
    """The quality gate's classes over a sweep's trials (docs/concepts/quality-gate.md).

    Judged trials carry `quality_deficit` (with `quality_first_divergence`, the tokens judged when
    every prompt was identical, and `quality_lossy`); `wrong_output` ones failed the gate, as
    lossy (without `quality.allow_lossy`) or as wrong. The baseline is named as the reference and
    left out of the counts. The first `wrong_output` trial's reason (where its outputs went wrong)
    follows on a line of its own, whole: the terminal wraps it at word boundaries, the report
    shows it as a paragraph.
    """
    q = spec.quality
    if q is None:
        return []
    trials = [r for r in done if r.trial_id != BASELINE_ID]
    wrong = [r for r in trials if r.failure_mode is FailureMode.WRONG_OUTPUT]
    judged = [r for r in trials if "quality_deficit" in r.metrics and r not in wrong]
    identical = [r for r in judged if r.metrics.get("quality_first_divergence", 0) >= q.tokens]
    lossy = [r for r in judged if r.metrics.get("quality_lossy")]
    equivalent = len(judged) - len(identical) - len(lossy)
    parts = [f"{len(identical)} identical to the baseline"]
    parts.append(f"{equivalent} numerically equivalent")
    if q.allow_lossy:
        parts.append(f"{len(lossy)} lossy, kept as candidates")
    unjudged = sum(1 for r in trials if r.measured and r not in judged and r not in wrong)
    if unjudged:
        parts.append(f"{unjudged} not judged")
    rejected_lossy = sum(1 for r in wrong if r.metrics.get("quality_lossy"))
    parts.append(
        f"{len(wrong)} wrong_output ({rejected_lossy} lossy, {len(wrong) - rejected_lossy} wrong)"
        if rejected_lossy
        else f"{len(wrong)} wrong_output"
    )
    text = (
        f"quality gate ({q.num_prompts} prompts x {q.tokens} tokens; equivalent up to a deficit "
        f"of {q.max_equivalent_deficit:g} nats/token, lossy "
        f"{'kept' if q.allow_lossy else 'rejected'}): reference {BASELINE_ID} (the baseline); "
        + ", ".join(parts)
    )
    if not wrong:
        return [text]
    why = wrong[0].reason.removeprefix("wrong output: ")
    return [text, f"  first wrong_output, {wrong[0].trial_id}: {why}"]
