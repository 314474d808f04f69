"""The sweep report's analysis: the numbers it shows, over a sweep's view (pure).

This module owns the numbers the report shows (docs/design.md, "The report") beyond the
`SweepView` every renderer shares: the report's baseline (the baseline trial, else the trial
with the baseline's configuration), the speculative-decoding diagnosis (accept length,
verify-cycle time and the break-even accept length a speculative configuration needs to match
the baseline: `baseline decode speed x cycle time`), the Pareto front and GPU-hours. It draws
nothing and writes nothing: `figures` draws, `html` renders, `build` writes the files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.core.config import Config, baseline_config, config_key
from spec_sweep.core.history import History, is_dummy
from spec_sweep.core.ids import BASELINE_ID
from spec_sweep.core.loads import attempt_seconds
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.report.format import at_level
from spec_sweep.present.sweep_view import SweepView
from spec_sweep.spec import SweepSpec

__all__ = [
    "CSV_NAME",
    "HTML_NAME",
    "Analysis",
    "SpecDiagnosis",
    "algorithm",
    "diagnose_speculative",
    "diagnosis_level",
    "gpu_hours",
    "levels",
    "pareto_front",
]

#: File names inside a report folder.
HTML_NAME = "report.html"
CSV_NAME = "trials.csv"


@dataclass(frozen=True)
class SpecDiagnosis:
    """Why a speculative configuration won or lost against the baseline, in numbers.

    A speculative server emits `accept_length` tokens per verify cycle, so one cycle (draft steps
    plus the verify forward pass with its all-reduces) takes `cycle_ms = accept_length /
    decode_speed`. To match the baseline's per-request decode speed, each cycle would have to
    yield `break_even_accept_length = baseline_decode_speed x cycle time` tokens; measured accept
    length below it means the configuration loses, whatever the draft model.

    Attributes:
        trial_id: The speculative trial.
        accept_length: Measured tokens per verify cycle.
        cycle_ms: Time of one verify cycle (draft + verify), ms.
        break_even_accept_length: Accept length needed to match the baseline's decode speed.
        decode_speed: The trial's per-request decode speed (median), tok/s.
        baseline_decode_speed: The baseline's per-request decode speed (median), tok/s.
        baseline_trial_id: The trial used as the baseline (the sweep's baseline trial; the
            fastest measured non-speculative trial if the baseline was not measured).
        algorithm: The speculative algorithm (e.g. `EAGLE3`).
        concurrency: The concurrency level the figures come from (None: single level).
        max_accept_length: The most tokens one cycle can yield with this draft tree
            (`num-steps + 1`, at most `num-draft-tokens`), when known.
        best_plain_trial_id: The fastest measured non-speculative trial, if any.
        best_plain_decode_speed: Its per-request decode speed, tok/s.
        config: The trial's configuration.
    """

    trial_id: str
    accept_length: float
    cycle_ms: float
    break_even_accept_length: float
    decode_speed: float
    baseline_decode_speed: float
    baseline_trial_id: str = BASELINE_ID
    algorithm: str = ""
    concurrency: int | None = None
    max_accept_length: float | None = None
    best_plain_trial_id: str | None = None
    best_plain_decode_speed: float | None = None
    config: Config = field(default_factory=dict)

    @property
    def wins(self) -> bool:
        """Whether the measured accept length reaches the break-even one."""
        return self.accept_length >= self.break_even_accept_length

    @property
    def speedup(self) -> float:
        """Decode speed relative to the baseline (> 1: faster)."""
        return self.decode_speed / self.baseline_decode_speed

    @property
    def ceiling_decode_speed(self) -> float | None:
        """Decode speed of a perfect draft (every drafted token accepted) at this cycle time."""
        if self.max_accept_length is None:
            return None
        return self.max_accept_length / (self.cycle_ms / 1000.0)

    @property
    def break_even_vs_best_plain(self) -> float | None:
        """Accept length needed to match the fastest non-speculative trial."""
        if self.best_plain_decode_speed is None:
            return None
        return self.best_plain_decode_speed * self.cycle_ms / 1000.0


# ---------------------------------------------------------------------------------------------
# Pure analysis


def levels(spec: SweepSpec) -> list[int | None]:
    """The concurrency levels as metric suffixes (None: metrics are unsuffixed)."""
    if spec.workload.multi_level:
        return list(spec.workload.concurrency)
    return [None]


def diagnosis_level(spec: SweepSpec) -> int | None:
    """The level the diagnosis reads: the objective's level, else the lowest concurrency."""
    if not spec.workload.multi_level:
        return None
    metric = spec.objective.metric
    for level in spec.workload.concurrency:
        if metric.endswith(f"_c{level}"):
            return level
    return min(spec.workload.concurrency)


def _setting(spec: SweepSpec, config: Mapping[str, Any], key: str) -> Any:
    """A flag's value in a trial: searched, else fixed in `node.server_args`."""
    if key in config:
        return config[key]
    return spec.node.server_args.get(key)


def algorithm(spec: SweepSpec, record: TrialRecord, level: int | None) -> str | None:
    """The speculative algorithm of a trial (None: not speculative)."""
    value = _setting(spec, record.config, "speculative-algorithm")
    if isinstance(value, str) and value:
        return value
    if at_level("accept_length", level) in record.metrics:
        return "speculative"
    return None


def _max_accept(spec: SweepSpec, config: Mapping[str, Any]) -> float | None:
    steps = _setting(spec, config, "speculative-num-steps")
    tokens = _setting(spec, config, "speculative-num-draft-tokens")
    bound: float | None = None
    if isinstance(steps, int) and not isinstance(steps, bool):
        bound = float(steps + 1)
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        bound = float(tokens) if bound is None else min(bound, float(tokens))
    return bound


def _positive(metrics: Mapping[str, float], name: str) -> float | None:
    value = metrics.get(name)
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _baseline(spec: SweepSpec, finished: Sequence[TrialRecord]) -> TrialRecord | None:
    """The sweep's baseline trial (by id, else by configuration), measured or not."""
    for record in finished:
        if record.trial_id == BASELINE_ID:
            return record
    try:
        key = config_key(baseline_config(spec))
    except ValueError:
        return None
    return next((r for r in finished if config_key(r.config) == key), None)


def diagnose_speculative(
    spec: SweepSpec, records: Sequence[TrialRecord], *, concurrency: int | None = None
) -> list[SpecDiagnosis]:
    """The speculative-decoding diagnosis of every measured speculative trial.

    For each speculative trial that was measured (failure mode `none`, with `accept_length` and
    `decode_speed_p50`): cycle time = accept length / decode speed, break-even accept length =
    baseline decode speed x cycle time. The baseline is the sweep's baseline trial; when it was
    not measured (or is itself speculative), the fastest measured non-speculative trial.

    Args:
        spec: The sweep.
        records: The sweep's trial records (any order; unfinished attempts are ignored).
        concurrency: The level to read when the workload has several (default: the objective's
            level, else the lowest concurrency).

    Returns:
        One diagnosis per measured speculative trial, in the order the trials ran; empty when
        no baseline speed is known.
    """
    level = concurrency if concurrency is not None else diagnosis_level(spec)
    if level is not None and not spec.workload.multi_level:
        level = None
    speed_name = at_level("decode_speed_p50", level)
    accept_name = at_level("accept_length", level)
    finished = History(spec, records).done
    plain = [
        r
        for r in finished
        if r.failure_mode is FailureMode.NONE
        and algorithm(spec, r, level) is None
        and _positive(r.metrics, speed_name) is not None
    ]
    best_plain = max(plain, key=lambda r: r.metrics[speed_name], default=None)
    base = _baseline(spec, finished)
    if (
        base is None
        or base.failure_mode is not FailureMode.NONE
        or _positive(base.metrics, speed_name) is None
        or (best_plain is not None and algorithm(spec, base, level) is not None)
    ):
        base = best_plain
    if base is None:
        return []
    base_speed = base.metrics[speed_name]
    out: list[SpecDiagnosis] = []
    for record in finished:
        kind = algorithm(spec, record, level)
        if kind is None or record.failure_mode is not FailureMode.NONE or record is base:
            continue
        accept = _positive(record.metrics, accept_name)
        speed = _positive(record.metrics, speed_name)
        if accept is None or speed is None:
            continue
        cycle_s = accept / speed
        out.append(
            SpecDiagnosis(
                trial_id=record.trial_id,
                accept_length=accept,
                cycle_ms=cycle_s * 1000.0,
                break_even_accept_length=base_speed * cycle_s,
                decode_speed=speed,
                baseline_decode_speed=base_speed,
                baseline_trial_id=base.trial_id,
                algorithm=kind,
                concurrency=level,
                max_accept_length=_max_accept(spec, record.config),
                best_plain_trial_id=best_plain.trial_id if best_plain is not None else None,
                best_plain_decode_speed=best_plain.metrics[speed_name]
                if best_plain is not None
                else None,
                config=dict(record.config),
            )
        )
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """The points no other point beats on both latency and throughput.

    Args:
        points: `(latency, throughput)` pairs; lower latency and higher throughput are better.

    Returns:
        Indices of the non-dominated points, by increasing latency (then decreasing
        throughput). Equal points are all kept.
    """
    front = []
    for i, (lat_i, thr_i) in enumerate(points):
        dominated = any(
            lat_j <= lat_i and thr_j >= thr_i and (lat_j < lat_i or thr_j > thr_i)
            for j, (lat_j, thr_j) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def gpu_hours(spec: SweepSpec, records: Sequence[TrialRecord]) -> tuple[float, float]:
    """(node-hours, GPU-hours) of every trial attempt, failed and interrupted ones included."""
    seconds = sum(s for r in records if (s := attempt_seconds(r)) is not None)
    return seconds / 3600.0, seconds * spec.node.gpus / 3600.0


# ---------------------------------------------------------------------------------------------
# The analysis


@dataclass
class Analysis:
    """The report's numbers for one sweep, from its view (search trials only)."""

    view: SweepView
    spec: SweepSpec = field(init=False)
    records: Sequence[TrialRecord] = field(init=False)
    finished: list[TrialRecord] = field(init=False)
    measured: list[TrialRecord] = field(init=False)
    best: TrialRecord | None = field(init=False)
    recommended: bool = field(init=False)
    baseline: TrialRecord | None = field(init=False)
    baseline_value: float | None = field(init=False)
    diagnosis: list[SpecDiagnosis] = field(init=False)
    failure_modes: list[FailureMode] = field(init=False)

    def __post_init__(self) -> None:
        history = self.view.history
        self.spec = history.spec
        self.records = history.search
        self.finished = history.done
        self.measured = [
            r for r in self.finished if r.failure_mode is FailureMode.NONE and not is_dummy(r)
        ]
        # the configuration the sweep recommends, as the summary names it (`SweepView.pick`)
        self.best = self.view.picked
        self.recommended = self.view.pick is not None and self.view.pick.recommended
        self.baseline = _baseline(self.spec, self.finished)
        self.baseline_value = history.value(self.baseline) if self.baseline is not None else None
        self.diagnosis = diagnose_speculative(self.spec, self.records)
        present = {r.failure_mode for r in self.finished if r.failure_mode is not None}
        self.failure_modes = [m for m in FailureMode if m in present and m is not FailureMode.NONE]

    def value(self, record: TrialRecord) -> float | None:
        """The objective value of a measured trial."""
        return self.view.history.value(record)

    def feasible(self, record: TrialRecord) -> bool:
        """Whether a trial was measured and meets the constraints."""
        return self.view.history.is_feasible(record)

    def command(self, record: TrialRecord) -> str:
        """The ready-to-paste launch command of a trial, secrets redacted."""
        return self.view.command(record.config)
