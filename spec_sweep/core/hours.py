"""Where a sweep's node-hours went: booting, measuring, failed boots, rejected, confirmation.

A trial holds a whole node from its start to its end, so a sweep's cost is the sum of its
attempts' wall times (`loads.attempt_seconds`). This module owns splitting that sum
(docs/design.md, "Node-hours"):

- **booting** and **measuring**: the search trials that were measured, split at readiness
  (`boot_s`, then `measure_s`: the benchmark with its goodput search and quality check);
- **failed boots**: the whole time of every search trial that failed (most never came up);
- **rejected by the quality gate**: the whole time of every search trial that booted and was
  measured, then failed the output-quality gate (`wrong_output`): not a failed boot;
- **confirmation**: the whole time of every confirmation boot and baseline re-measure;
- **other**: what is left (waiting for free GPUs, teardown, attempts lost with their node).

The boot time of every booted trial is split further by phase (`names.BOOT_PHASES`) in
proportion to the seconds SGLang timed, what it did not time being `other`. Each knob's share
of the failures: a failed search trial's hours are divided equally among the parameters it
changes from the baseline. Trials that SGLang's memory rule said could not boot
(`names.TAG_PREDICTED`, `core.memory`) cost no boot; they are counted with an estimate of the
time they would have taken (the sweep's own failed boots of that mode, else its mean trial).
Pure: the standard library and the spec only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from spec_sweep.core.config import baseline_config, changed_keys
from spec_sweep.core.history import History
from spec_sweep.core.ids import is_repeat
from spec_sweep.core.loads import attempt_seconds
from spec_sweep.core.names import (
    BOOT_PHASES,
    BOOTS_AVOIDED,
    HOURS_PARTS,
    MEASURE_METRIC,
    NODE_HOURS,
    NODE_HOURS_SAVED,
    TAG_PREDICTED,
    boot_metric,
    hours_metric,
)
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord

__all__ = ["NodeHours", "hours_metrics", "node_hours"]

_HOUR = 3600.0
#: What a failed trial that changes nothing from the baseline is charged to.
BASELINE_KNOB = "(baseline)"


@dataclass(frozen=True)
class NodeHours:
    """A sweep's node-hours, split (see the module doc).

    Attributes:
        total: Every attempt's wall time.
        boot: Measured search trials, launch to ready.
        measure: Measured search trials, ready to the end of the benchmark.
        failed: Failed search trials, whole (those rejected by the quality gate excepted).
        rejected: Search trials that booted and were measured, then failed the quality gate
            (`wrong_output`), whole.
        confirm: Confirmation boots and baseline re-measures, whole.
        other: The rest (GPU waits, teardown, lost attempts).
        phases: Boot hours of every booted trial by phase (they add up to their boot time).
        knobs: (parameter, share of all node-hours its failures cost), largest first.
        predicted: Trials not booted because SGLang's memory rule says they cannot boot.
        saved: About the hours those would have taken (None without a trial to judge by).
        gpus: GPUs per node (GPU-hours = node-hours x gpus).
    """

    total: float = 0.0
    boot: float = 0.0
    measure: float = 0.0
    failed: float = 0.0
    rejected: float = 0.0
    confirm: float = 0.0
    other: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    knobs: list[tuple[str, float]] = field(default_factory=list)
    predicted: int = 0
    saved: float | None = None
    gpus: int = 0

    def share(self, part: float) -> float:
        """`part` as a share of the total (0 when nothing was spent)."""
        return part / self.total if self.total > 0 else 0.0

    def sentence(self) -> str:
        """One line for the summary and the report."""
        if self.total <= 0:
            return "node-hours: none spent yet"
        parts = [
            ("booting", self.boot),
            ("measuring", self.measure),
            ("failed boots", self.failed),
            ("rejected by the quality gate", self.rejected),
            ("confirmation", self.confirm),
            ("other", self.other),
        ]
        shown = ", ".join(f"{name} {self.share(h):.0%}" for name, h in parts if h > 0)
        text = f"node-hours: {self.total:.3g} ({shown})"
        if self.predicted:
            saved = f", about {self.saved:.3g} node-hours" if self.saved else ""
            text += f"; {self.predicted} boot(s) avoided by SGLang's memory rule{saved}"
        return text

    def phase_sentence(self) -> str | None:
        """Where the boots went, by phase (None without timed phases)."""
        booted = sum(self.phases.values())
        if booted <= 0 or set(self.phases) <= {"other"}:
            return None
        parts = sorted(self.phases.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{k.replace('_', ' ')} {v / booted:.0%}" for k, v in parts if v > 0)
        return f"boot time by phase: {shown}"

    def knob_sentence(self, limit: int = 4) -> str | None:
        """Which knobs' failures cost the most (None when nothing failed)."""
        if not self.knobs:
            return None
        shown = ", ".join(f"{k} {_share(s)}" for k, s in self.knobs[:limit])
        return f"failed boots cost, by knob changed: {shown} of all node-hours"


def _share(value: float) -> str:
    """A share as a percentage, with a decimal below 1% (so small costs do not read as 0%)."""
    return f"{value:.1%}" if value < 0.01 else f"{value:.0%}"


def _phase_split(record: TrialRecord, boot_s: float) -> dict[str, float]:
    """A trial's boot seconds split by phase in proportion to what SGLang timed."""
    timed = {p: record.metrics.get(boot_metric(p), 0.0) for p in BOOT_PHASES if p != "other"}
    timed = {p: max(0.0, v) for p, v in timed.items() if v > 0}
    other = max(0.0, record.metrics.get(boot_metric("other"), 0.0))
    whole = sum(timed.values()) + other
    if whole <= 0:
        return {"other": boot_s}
    return {p: boot_s * v / whole for p, v in {**timed, "other": other}.items() if v > 0}


def _knob_shares(history: History, failed: Iterable[tuple[TrialRecord, float]]) -> dict[str, float]:
    base = baseline_config(history.spec)
    out: dict[str, float] = defaultdict(float)
    for record, seconds in failed:
        keys = changed_keys(record.config, base) or [BASELINE_KNOB]
        for key in keys:
            out[key] += seconds / len(keys)
    return out


def _predicted(record: TrialRecord) -> bool:
    return TAG_PREDICTED in record.tags


def node_hours(history: History) -> NodeHours:
    """Split the sweep's node-hours (see the module doc)."""
    parts: dict[str, float] = defaultdict(float)
    phases: dict[str, float] = defaultdict(float)
    failed: list[tuple[TrialRecord, float]] = []
    predicted = [r for r in history.records if r.finished and _predicted(r)]
    for record in history.records:
        seconds = attempt_seconds(record)
        if seconds is None or _predicted(record):
            continue
        parts["total"] += seconds
        boot_s = record.metrics.get("boot_s")
        if boot_s is not None:
            for phase, s in _phase_split(record, boot_s).items():
                phases[phase] += s
        if not record.finished:
            parts["other"] += seconds
        elif is_repeat(record.trial_id):
            parts["confirm"] += seconds
        elif record.failure_mode is FailureMode.WRONG_OUTPUT:  # booted fine, then rejected
            parts["rejected"] += seconds
        elif record.failure_mode is not FailureMode.NONE:
            parts["failed"] += seconds
            failed.append((record, seconds))
        else:
            boot = min(seconds, boot_s or 0.0)
            measure = min(seconds - boot, record.metrics.get(MEASURE_METRIC, 0.0))
            parts["boot"] += boot
            parts["measure"] += measure
            parts["other"] += seconds - boot - measure
    total = parts["total"]
    knobs = sorted(
        ((k, s / total) for k, s in _knob_shares(history, failed).items() if total > 0),
        key=lambda kv: (-kv[1], kv[0]),
    )
    return NodeHours(
        total=total / _HOUR,
        boot=parts["boot"] / _HOUR,
        measure=parts["measure"] / _HOUR,
        failed=parts["failed"] / _HOUR,
        rejected=parts["rejected"] / _HOUR,
        confirm=parts["confirm"] / _HOUR,
        other=parts["other"] / _HOUR,
        phases={k: v / _HOUR for k, v in phases.items()},
        knobs=knobs,
        predicted=len(predicted),
        saved=_saved(history, predicted, failed),
        gpus=history.spec.node.gpus,
    )


def _saved(
    history: History, predicted: list[TrialRecord], failed: list[tuple[TrialRecord, float]]
) -> float | None:
    """About the node-hours the predicted failures would have cost, had they been booted."""
    if not predicted:
        return None
    mode = {r.failure_mode for r in predicted}
    same = [s for r, s in failed if r.failure_mode in mode]
    if not same:
        same = [s for r in history.done if (s := attempt_seconds(r)) and not _predicted(r)]
    if not same:
        return None
    return len(predicted) * sum(same) / len(same) / _HOUR


def hours_metrics(hours: NodeHours) -> dict[str, float]:
    """The parent run's metrics (docs/design.md, "MLflow layout"): `node_hours`, its parts
    `node_hours_<part>`, and `boots_avoided` (with `node_hours_saved` when it can be judged)."""
    out = {NODE_HOURS: hours.total}
    out |= {hours_metric(part): getattr(hours, part) for part in HOURS_PARTS}
    out[BOOTS_AVOIDED] = float(hours.predicted)
    if hours.saved is not None:
        out[NODE_HOURS_SAVED] = hours.saved
    return out
