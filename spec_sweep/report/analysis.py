"""The sweep report's analysis: pure functions over a sweep's trial records.

This module owns the numbers the report shows (docs/design.md, "The report"): one finished
record per trial, the baseline, the speculative-decoding diagnosis (accept length, verify-cycle
time and the break-even accept length a speculative configuration needs to match the baseline:
`baseline decode speed x cycle time`), the Pareto front, GPU-hours, failure excerpts, Optuna's
parameter importances and the formatting of values and units. It draws nothing and writes
nothing: `figures` draws, `html` renders, `build` writes the files.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from spec_sweep.failures import FailureMode
from spec_sweep.search import sampling
from spec_sweep.search.objective import (
    BASELINE_ID,
    best_record,
    constraint_violations,
    finished_in_order,
    meets_constraints,
    objective_value,
)
from spec_sweep.space import (
    Config,
    baseline_config,
    build_command,
    config_key,
    redact,
    secret_values,
)
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import TrialRecord

#: File names inside a report folder.
__all__ = [
    "CSV_NAME",
    "HTML_NAME",
    "MIN_IMPORTANCE_TRIALS",
    "SpecDiagnosis",
    "diagnose_speculative",
    "pareto_front",
]

HTML_NAME = "report.html"
CSV_NAME = "trials.csv"
#: Fewest measured trials for which parameter importances are computed.
MIN_IMPORTANCE_TRIALS = 4

_TAG_EXCERPT = "spec_sweep.log_excerpt"
# A log line's time / rank prefix ("[2025-01-01 10:00:00 TP3] ", "[rank3]: ", "(pid=12) ").
_LOG_PREFIX = re.compile(r"^(?:(?:\[[^\]]*\]|\([^)]*\)):?\s*)+")
_EXCERPT_LINES = 30
_EXCERPT_CHARS = 4000
_UNITS = {
    "output_throughput": "tok/s",
    "request_throughput": "req/s",
    "ttft_p50_ms": "ms",
    "ttft_p99_ms": "ms",
    "itl_p50_ms": "ms",
    "itl_p99_ms": "ms",
    "decode_speed_p50": "tok/s per request",
    "accept_length": "tokens per verify cycle",
    "speedup_vs_baseline": "x",
    "boot_s": "s",
    "gpu_mem_peak_gib": "GiB",
    "usd_per_million_tokens": "$ per million output tokens",
    "goodput_concurrency": "requests in flight within the SLA",
    "goodput_throughput": "tok/s within the SLA",
    "quality_agreement": "fraction of greedy tokens matching the baseline",
}


# ---------------------------------------------------------------------------------------------
# Results


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


def _finished(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """One finished record per trial id (the first, as `objective.best_record` counts them)."""
    return finished_in_order(records)


def _ok(record: TrialRecord) -> bool:
    return record.failure_mode is FailureMode.NONE


def _levels(spec: SweepSpec) -> list[int | None]:
    """The concurrency levels as metric suffixes (None: metrics are unsuffixed)."""
    if spec.workload.multi_level:
        return list(spec.workload.concurrency)
    return [None]


def _metric(name: str, level: int | None) -> str:
    return name if level is None else f"{name}_c{level}"


def _diagnosis_level(spec: SweepSpec) -> int | None:
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


def _algorithm(spec: SweepSpec, record: TrialRecord, level: int | None) -> str | None:
    """The speculative algorithm of a trial (None: not speculative)."""
    value = _setting(spec, record.config, "speculative-algorithm")
    if isinstance(value, str) and value:
        return value
    if _metric("accept_length", level) in record.metrics:
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
    level = concurrency if concurrency is not None else _diagnosis_level(spec)
    if level is not None and not spec.workload.multi_level:
        level = None
    speed_name = _metric("decode_speed_p50", level)
    accept_name = _metric("accept_length", level)
    finished = _finished(records)
    plain = [
        r
        for r in finished
        if _ok(r)
        and _algorithm(spec, r, level) is None
        and _positive(r.metrics, speed_name) is not None
    ]
    best_plain = max(plain, key=lambda r: r.metrics[speed_name], default=None)
    base = _baseline(spec, finished)
    if (
        base is None
        or not _ok(base)
        or _positive(base.metrics, speed_name) is None
        or (best_plain is not None and _algorithm(spec, base, level) is not None)
    ):
        base = best_plain
    if base is None:
        return []
    base_speed = base.metrics[speed_name]
    out: list[SpecDiagnosis] = []
    for record in finished:
        algorithm = _algorithm(spec, record, level)
        if algorithm is None or not _ok(record) or record is base:
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
                algorithm=algorithm,
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


def _gpu_hours(spec: SweepSpec, records: Sequence[TrialRecord]) -> tuple[float, float]:
    """(node-hours, GPU-hours) of every trial attempt, failed and interrupted ones included."""
    seconds = 0.0
    for record in records:
        if record.elapsed_s is not None:
            seconds += record.elapsed_s
        elif record.end_time is not None and record.start_time:
            seconds += max(0.0, (record.end_time - record.start_time) / 1000.0)
    return seconds / 3600.0, seconds * spec.node.gpus / 3600.0


def _feasible(spec: SweepSpec, record: TrialRecord) -> bool:
    return _ok(record) and meets_constraints(spec, record.metrics)


def _excerpt(record: TrialRecord) -> str:
    """A trial's deciding log lines; lines every rank printed alike are shown once, counted."""
    text = record.tags.get(_TAG_EXCERPT, "").strip() or record.reason.strip()
    order: list[str] = []
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        key = _LOG_PREFIX.sub("", line)
        if key not in first:
            first[key] = line
            order.append(key)
        counts[key] += 1
    lines = [first[k] + (f"   [x{counts[k]}]" if counts[k] > 1 else "") for k in order]
    return "\n".join(lines[-_EXCERPT_LINES:])[-_EXCERPT_CHARS:]


def _label(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _unit(metric: str) -> str:
    base = metric
    head, sep, tail = metric.rpartition("_c")
    if sep and tail.isdigit():
        base = head
    return _UNITS.get(base, "")


def _axis_label(metric: str) -> str:
    unit = _unit(metric)
    return f"{metric} ({unit})" if unit else metric


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


# ---------------------------------------------------------------------------------------------
# Importances


@dataclass(frozen=True)
class _Importances:
    title: str
    by_evaluator: dict[str, dict[str, float]]
    trials: int


def _importances(
    spec: SweepSpec, records: Sequence[TrialRecord], *, title: str
) -> tuple[_Importances | None, str]:
    """Optuna's parameter importances over measured trials (or a note saying why not)."""
    measured = [
        (r, v) for r in records if _ok(r) and (v := objective_value(spec, r.metrics)) is not None
    ]
    if len(measured) < MIN_IMPORTANCE_TRIALS:
        return None, (
            f"{title}: {len(measured)} measured trials, importances need at least "
            f"{MIN_IMPORTANCE_TRIALS}"
        )
    common = set(spec.params)
    for record, _ in measured:
        common &= set(record.config)
    varied = [
        k
        for k in spec.params
        if k in common and len({json.dumps(r.config[k]) for r, _ in measured}) > 1
    ]
    if not varied:
        return None, f"{title}: no parameter took more than one value in every measured trial"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize" if spec.objective.mode == "max" else "minimize"
    )
    for record, value in measured:
        sampling.add_finished(
            study,
            spec,
            record.config,
            value=value,
            failed=False,
            constraints=constraint_violations(spec, record.metrics),
            trial_id=record.trial_id,
        )
    evaluators: list[tuple[str, Callable[[], Any]]] = [
        ("fANOVA", lambda: optuna.importance.FanovaImportanceEvaluator(seed=0)),
        ("PED-ANOVA", lambda: optuna.importance.PedAnovaImportanceEvaluator()),
    ]
    found: dict[str, dict[str, float]] = {}
    errors: list[str] = []
    for name, make in evaluators:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = optuna.importance.get_param_importances(
                    study, evaluator=make(), params=varied
                )
        except Exception as exc:  # an evaluator's own limits must not stop the report
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        cleaned = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
        if cleaned:
            found[name] = cleaned
    note = "; ".join(errors)
    if not found:
        return None, f"{title}: no importance evaluator succeeded ({note})"
    return _Importances(title=title, by_evaluator=found, trials=len(measured)), note


# ---------------------------------------------------------------------------------------------
# The analysis and the HTML


@dataclass
class _Analysis:
    spec: SweepSpec
    records: Sequence[TrialRecord]
    finished: list[TrialRecord] = field(init=False)
    measured: list[TrialRecord] = field(init=False)
    best: TrialRecord | None = field(init=False)
    baseline: TrialRecord | None = field(init=False)
    baseline_value: float | None = field(init=False)
    diagnosis: list[SpecDiagnosis] = field(init=False)
    failure_modes: list[FailureMode] = field(init=False)

    def __post_init__(self) -> None:
        self.finished = _finished(self.records)
        self.measured = [r for r in self.finished if _ok(r)]
        self.best = best_record(self.spec, self.records)
        self.baseline = _baseline(self.spec, self.finished)
        self.baseline_value = (
            objective_value(self.spec, self.baseline.metrics)
            if self.baseline is not None and _ok(self.baseline)
            else None
        )
        self.diagnosis = diagnose_speculative(self.spec, self.records)
        present = {r.failure_mode for r in self.finished if r.failure_mode is not None}
        self.failure_modes = [m for m in FailureMode if m in present and m is not FailureMode.NONE]

    def value(self, record: TrialRecord) -> float | None:
        """The objective value of a measured trial."""
        return objective_value(self.spec, record.metrics) if _ok(record) else None

    def command(self, record: TrialRecord) -> str:
        """The ready-to-paste launch command of a trial, secrets redacted."""
        return redact(build_command(self.spec, record.config).shell(), secret_values(self.spec))
