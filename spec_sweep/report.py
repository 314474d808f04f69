"""The sweep report: what won, by how much, why the losers lost and what failed where.

This module owns the end-of-sweep analysis (DESIGN 2, step 6) and the replay table (DESIGN 4.6).
`build_report` turns a sweep's trial records (the MLflow child runs read back by
`Tracker.trials`) into one self-contained HTML file (inline CSS, figures embedded as base64 PNG
data URIs, no script, nothing fetched from the network) plus the same figures as PNG files and
the replay table `trials.csv`: the headline (best configuration, its metrics, speed-up over the
baseline, the exact launch command, trials, GPU-hours, failures by mode), the objective per
trial with best-so-far, the objective against each parameter with Optuna's parameter
importances, the failure map with one log excerpt per failure mode, the speculative-decoding
diagnosis (accept length, verify-cycle time and the break-even accept length a speculative
configuration needs to match the baseline: `baseline decode speed x cycle time`), throughput
against tail latency with the Pareto front, and the top ten with their launch commands.
`spec-sweep report` and `spec-sweep export` find the sweep's MLflow parent run from its state
folder. This is the only module that imports matplotlib (object-oriented API on the Agg canvas,
no pyplot state).
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import math
import re
import shutil
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import optuna
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from spec_sweep import sampling
from spec_sweep.errors import SpecSweepError
from spec_sweep.failures import FailureMode
from spec_sweep.paths import sweep_state_dir
from spec_sweep.progress import config_summary
from spec_sweep.search import best_record, constraint_violations, objective_value, speedup
from spec_sweep.space import (
    Config,
    baseline_config,
    build_command,
    config_key,
    redact,
    secret_values,
)
from spec_sweep.spec import SweepSpec, metric_names
from spec_sweep.tracking import KIND_SWEEP, Tracker, TrialRecord, resolve_tracking_uri

__all__ = [
    "ReportResult",
    "SpecDiagnosis",
    "build_report",
    "diagnose_speculative",
    "export_columns",
    "export_command",
    "export_rows",
    "locate_sweep",
    "pareto_front",
    "publish_report",
    "report_command",
    "write_csv",
]

#: The id of the baseline trial (evaluated first by every sweep).
BASELINE_TRIAL_ID = "t0000"
#: File names inside a report folder.
HTML_NAME = "report.html"
CSV_NAME = "trials.csv"
#: Fewest measured trials for which parameter importances are computed.
MIN_IMPORTANCE_TRIALS = 4

_FIGURE_NAMES = (
    "progress.png",
    "effects.png",
    "importance.png",
    "failures.png",
    "speculative.png",
    "latency.png",
)
_TAG_EXCERPT = "spec_sweep.log_excerpt"
# A log line's time / rank prefix ("[2025-01-01 10:00:00 TP3] ", "[rank3]: ", "(pid=12) ").
_LOG_PREFIX = re.compile(r"^(?:(?:\[[^\]]*\]|\([^)]*\)):?\s*)+")
_EXCERPT_LINES = 30
_EXCERPT_CHARS = 4000
_TOP = 10
_OK_COLOUR = "#2a7ab0"
_BEST_COLOUR = "#e8a200"
_BASE_COLOUR = "#444444"
_WIN_COLOUR = "#2ca02c"
_LOSE_COLOUR = "#d62728"
#: Marker and colour of each failure mode, the same in every figure.
_MODE_STYLE: dict[FailureMode, tuple[str, str]] = {
    FailureMode.OOM: ("v", "#d62728"),
    FailureMode.ASSERTION: ("X", "#9467bd"),
    FailureMode.UNSUPPORTED: ("s", "#8c564b"),
    FailureMode.NCCL: ("D", "#e377c2"),
    FailureMode.INVALID_ARGS: ("P", "#7f7f7f"),
    FailureMode.STARTUP_TIMEOUT: ("<", "#bcbd22"),
    FailureMode.CRASH: ("x", "#17becf"),
    FailureMode.HANG: ("^", "#ff7f0e"),
    FailureMode.BENCH_ERROR: ("*", "#1f3a93"),
    FailureMode.NODE_LOST: ("h", "#aaaaaa"),
}
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
    baseline_trial_id: str = BASELINE_TRIAL_ID
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


@dataclass(frozen=True)
class ReportResult:
    """What `build_report` wrote.

    Attributes:
        html: The self-contained HTML report.
        figures: The PNG figures (also embedded in the HTML).
        best_trial_id: The best trial that met the constraints (None: none did).
        diagnosis: The speculative-decoding diagnosis of every measured speculative trial.
        csv: The replay table of every trial (DESIGN 4.6).
    """

    html: Path
    figures: tuple[Path, ...]
    best_trial_id: str | None
    diagnosis: tuple[SpecDiagnosis, ...]
    csv: Path | None = None


# ---------------------------------------------------------------------------------------------
# Pure analysis


def _finished(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """One finished record per trial id (the first, as `search.best_record` counts them)."""
    out: dict[str, TrialRecord] = {}
    for record in records:
        if record.finished and record.trial_id not in out:
            out[record.trial_id] = record
    return sorted(out.values(), key=lambda r: (r.start_time, r.trial_id))


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
        if record.trial_id == BASELINE_TRIAL_ID:
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


def export_columns(spec: SweepSpec) -> list[str]:
    """The replay-table header: parameter keys (spec order), metrics, `failure_mode`.

    Metrics come as `output_throughput`, then `accept_length`, then the other metrics of
    DESIGN 4.4 in `spec.metric_names` order; with several concurrency levels each metric has one
    column per level, suffixed `_c<N>` exactly as the MLflow runs name them.
    """
    names = metric_names(spec.workload)
    first = [n for n in names if n.startswith("output_throughput")]
    second = [n for n in names if n.startswith("accept_length")]
    rest = [n for n in names if n not in first and n not in second]
    return [*spec.params, *first, *second, *rest, "failure_mode"]


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def export_rows(spec: SweepSpec, records: Sequence[TrialRecord]) -> list[dict[str, str]]:
    """Every finished trial as one replay-table row (DESIGN 4.6), in the order the trials ran.

    Cells are text that `spec.parse_value` (YAML scalars) reads back: booleans are `true` /
    `false`; a parameter whose value is null (flag omitted) is `null`; a parameter that is
    inactive in the trial (its `when:` does not hold) is an empty cell; a metric that was not
    measured is an empty cell; floats are written in full (shortest round-trip form);
    `failure_mode` is `none` for a measured trial.

    Args:
        spec: The sweep.
        records: The sweep's trial records.

    Returns:
        One dict per trial, keys in `export_columns(spec)` order.
    """
    columns = export_columns(spec)
    params = set(spec.params)
    rows = []
    for record in _finished(records):
        row: dict[str, str] = {}
        for column in columns:
            if column in params:
                row[column] = _cell(record.config[column]) if column in record.config else ""
            elif column == "failure_mode":
                mode = record.failure_mode or FailureMode.CRASH
                row[column] = mode.value
            else:
                value = record.metrics.get(column)
                row[column] = _cell(float(value)) if value is not None else ""
        rows.append(row)
    return rows


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
    return _ok(record) and all(v <= 0 for v in constraint_violations(spec, record.metrics).values())


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
# Figures


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _mode_handles(modes: Iterable[FailureMode]) -> list[Line2D]:
    handles = []
    for mode in modes:
        marker, colour = _MODE_STYLE.get(mode, ("x", "#000000"))
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker=marker,
                color=colour,
                markersize=8,
                label=f"failed: {mode.value}",
            )
        )
    return handles


def _fig_progress(a: _Analysis) -> Figure:
    spec = a.spec
    metric = spec.objective.metric
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=[4, 1.1])
    ax: Axes = fig.add_subplot(grid[0])
    strip: Axes = fig.add_subplot(grid[1], sharex=ax)
    xs = list(range(len(a.finished)))
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    best_so_far: list[float | None] = []
    current: float | None = None
    for record in a.finished:
        value = objective_value(spec, record.metrics)
        if (
            value is not None
            and _feasible(spec, record)
            and (current is None or sign * value > sign * current)
        ):
            current = value
        best_so_far.append(current)
    points: list[tuple[int, float, bool]] = [
        (x, v, _feasible(spec, r))
        for x, r in zip(xs, a.finished, strict=True)
        if (v := a.value(r)) is not None
    ]
    for feasible, label, face in (
        (True, "measured trial", _OK_COLOUR),
        (False, "measured, violates a constraint", "none"),
    ):
        chosen = [(x, v) for x, v, f in points if f is feasible]
        if chosen:
            ax.scatter(
                [x for x, _ in chosen],
                [v for _, v in chosen],
                facecolors=face,
                edgecolors=_OK_COLOUR,
                zorder=3,
                label=label,
            )
    bx = [x for x, b in zip(xs, best_so_far, strict=True) if b is not None]
    by = [b for b in best_so_far if b is not None]
    if bx:
        ax.step(bx, by, where="post", color=_BEST_COLOUR, linewidth=2, label="best so far")
    if a.baseline_value is not None:
        ax.axhline(
            a.baseline_value,
            color=_BASE_COLOUR,
            linestyle="--",
            linewidth=1.2,
            label=f"baseline ({_fmt(a.baseline_value)})",
        )
    if a.best is not None:
        x_best = a.finished.index(a.best)
        ax.scatter(
            [x_best],
            [a.value(a.best) or 0.0],
            marker="*",
            s=260,
            color=_BEST_COLOUR,
            edgecolors="black",
            zorder=4,
            label=f"best ({a.best.trial_id})",
        )
    ax.set_title(f"Objective per trial, in the order run ({spec.objective.mode} {metric})")
    ax.tick_params(labelbottom=False)
    ax.set_ylabel(_axis_label(metric))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    modes = a.failure_modes
    for row, mode in enumerate(modes):
        marker, colour = _MODE_STYLE.get(mode, ("x", "#000000"))
        mx = [x for x, r in zip(xs, a.finished, strict=True) if r.failure_mode is mode]
        strip.scatter(mx, [row] * len(mx), marker=marker, color=colour, s=60)
    strip.set_yticks(range(len(modes)), [m.value for m in modes] or [])
    strip.set_ylim(-0.7, max(len(modes), 1) - 0.3)
    strip.set_ylabel("failed")
    strip.grid(alpha=0.3, axis="x")
    strip.set_xlabel("trial (in the order run)")
    if len(xs) <= 30:
        strip.set_xticks(xs, [r.trial_id for r in a.finished], rotation=60, fontsize=7)
    if not modes:
        strip.text(0.5, 0.5, "no trial failed", transform=strip.transAxes, ha="center")
        strip.set_yticks([])
    return fig


def _categories(
    key: str, choices: Sequence[Any] | None, records: Sequence[TrialRecord]
) -> list[str] | None:
    """The x categories of a categorical parameter (None for a range)."""
    if choices is None:
        return None
    cats = [_label(c) for c in choices]
    for record in records:
        if key in record.config and _label(record.config[key]) not in cats:
            cats.append(_label(record.config[key]))
    return cats


def _effect_x(key: str, cats: list[str] | None, record: TrialRecord, nth: int) -> float | None:
    """A trial's x in the effect panel of `key`: its category (jittered), value, or None."""
    jitter = ((nth % 5) - 2) * 0.06
    if key not in record.config:
        return None if cats is None else len(cats) + jitter
    value = record.config[key]
    if cats is not None:
        return cats.index(_label(value)) + jitter
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _fig_effects(a: _Analysis) -> Figure | None:
    spec = a.spec
    keys = list(spec.params)
    if not keys or not a.finished:
        return None
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.4 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    values = [v for r in a.finished if (v := a.value(r)) is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    span = (hi - lo) or max(abs(hi), 1.0) * 0.1
    band = lo - 0.18 * span
    for index, key in enumerate(keys):
        ax: Axes = axes[index // ncols][index % ncols]
        param = spec.params[key]
        cats = _categories(key, param.choices, a.finished)
        inactive = cats is not None and any(key not in r.config for r in a.finished)
        for nth, record in enumerate(a.finished):
            x = _effect_x(key, cats, record, nth)
            if x is None:
                continue
            value = a.value(record)
            if value is not None:
                is_best = record is a.best
                ax.scatter(
                    [x],
                    [value],
                    color=_BEST_COLOUR if is_best else _OK_COLOUR,
                    marker="*" if is_best else "o",
                    s=180 if is_best else 30,
                    edgecolors="black" if is_best else "none",
                    zorder=3,
                )
            elif record.failure_mode is not None and not _ok(record):
                marker, colour = _MODE_STYLE.get(record.failure_mode, ("x", "#000000"))
                ax.scatter([x], [band], marker=marker, color=colour, s=50, zorder=3)
        if cats is not None:
            labels = [*cats, "(inactive)"] if inactive else cats
            ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 3 else 0)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        if a.baseline_value is not None:
            ax.axhline(a.baseline_value, color=_BASE_COLOUR, linestyle="--", linewidth=1)
        ax.axhspan(band - 0.1 * span, lo - 0.08 * span, color="#f3e0e0", zorder=0)
        ax.set_ylim(band - 0.12 * span, hi + 0.12 * span)
        ax.set_xlabel(key)
        ax.set_ylabel(_axis_label(spec.objective.metric), fontsize=8)
        if param.description:
            ax.set_title(param.description[:60], fontsize=9)
        ax.grid(alpha=0.3)
    for index in range(len(keys), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    handles: list[Any] = [
        Line2D([], [], linestyle="none", marker="o", color=_OK_COLOUR, label="measured"),
        Line2D(
            [], [], linestyle="none", marker="*", color=_BEST_COLOUR, markersize=12, label="best"
        ),
        Line2D([], [], color=_BASE_COLOUR, linestyle="--", label="baseline"),
        *_mode_handles(a.failure_modes),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8)
    fig.suptitle(
        "Objective against each parameter (failed trials in the shaded band, by failure mode)"
    )
    return fig


def _fig_importance(groups: Sequence[_Importances]) -> Figure:
    fig = Figure(figsize=(5.6 * len(groups), 3.8), layout="constrained")
    axes = fig.subplots(1, len(groups), squeeze=False)
    for ax, group in zip(axes[0], groups, strict=True):
        params: list[str] = []
        for values in group.by_evaluator.values():
            params += [p for p in values if p not in params]
        n = len(group.by_evaluator)
        height = 0.8 / max(n, 1)
        for k, (name, values) in enumerate(group.by_evaluator.items()):
            ys = [i + (k - (n - 1) / 2) * height for i in range(len(params))]
            ax.barh(ys, [values.get(p, 0.0) for p in params], height=height, label=name)
        ax.set_yticks(range(len(params)), params, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("importance (normalised to sum 1 per evaluator)")
        ax.set_title(f"{group.title} ({group.trials} measured trials)", fontsize=10)
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=8)
    fig.suptitle("Parameter importances (Optuna)")
    return fig


def _buckets(
    spec: SweepSpec, key: str, records: Sequence[TrialRecord]
) -> list[tuple[str, list[TrialRecord]]]:
    """Trials grouped by their value of one parameter (ranges with many values are binned)."""
    param = spec.params[key]
    active = [r for r in records if key in r.config]
    groups: list[tuple[str, list[TrialRecord]]] = []
    if param.choices is None:
        nums = sorted({float(v) for r in active if _is_number(v := r.config[key])})
        if len(nums) > 6:
            width = (nums[-1] - nums[0]) / 5
            for i in range(5):
                lo_b, hi_b = nums[0] + i * width, nums[0] + (i + 1) * width
                inside = [
                    r
                    for r in active
                    if _is_number(v := r.config[key])
                    and (lo_b <= float(v) < hi_b or (i == 4 and float(v) == nums[-1]))
                ]
                if inside:
                    groups.append((f"{lo_b:.3g}..{hi_b:.3g}", inside))
        else:
            for num in nums:
                members = [r for r in active if _is_number(v := r.config[key]) and float(v) == num]
                groups.append((_label(members[0].config[key]), members))
    else:
        order: list[Any] = list(param.choices)
        for record in active:
            if not any(_same_value(record.config[key], v) for v in order):
                order.append(record.config[key])
        for value in order:
            members = [r for r in active if _same_value(r.config[key], value)]
            if members:
                groups.append((_label(value), members))
    inactive = [r for r in records if key not in r.config]
    if inactive and len(inactive) < len(records):
        groups.append(("(inactive)", inactive))
    return groups


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_value(a: Any, b: Any) -> bool:
    return json.dumps(a) == json.dumps(b)


def _failure_rows(a: _Analysis) -> list[tuple[str, int, dict[FailureMode, int]]]:
    """(param = value, trials, failures by mode) for each parameter that had a failure."""
    rows = []
    for key in a.spec.params:
        groups = _buckets(a.spec, key, a.finished)
        counted = [
            (label, members, Counter(r.failure_mode for r in members)) for label, members in groups
        ]
        if not any(any(m is not FailureMode.NONE for m in c) for _, _, c in counted):
            continue
        for label, members, counts in counted:
            by_mode = {m: counts.get(m, 0) for m in a.failure_modes}
            rows.append((f"{key} = {label}", len(members), by_mode))
    return rows


def _fig_failures(a: _Analysis) -> Figure | None:
    rows = _failure_rows(a)
    modes = a.failure_modes
    if not rows or not modes:
        return None
    fig = Figure(
        figsize=(2.2 + 1.25 * len(modes) + 3.0, 1.2 + 0.32 * len(rows)), layout="constrained"
    )
    ax: Axes = fig.add_subplot()
    shares = [[by_mode[m] / total if total else 0.0 for m in modes] for _, total, by_mode in rows]
    image = ax.imshow(shares, cmap="Reds", vmin=0.0, vmax=1.0, aspect="auto")
    for i, (_, total, by_mode) in enumerate(rows):
        for j, mode in enumerate(modes):
            count = by_mode[mode]
            if count:
                colour = "white" if count / total > 0.6 else "black"
                ax.text(
                    j, i, f"{count}/{total}", ha="center", va="center", fontsize=8, color=colour
                )
    ax.set_xticks(range(len(modes)), [m.value for m in modes])
    ax.xaxis.tick_top()
    ax.set_yticks(
        range(len(rows)), [f"{label} (n={total})" for label, total, _ in rows], fontsize=8
    )
    ax.set_xlabel("failure mode")
    fig.colorbar(image, ax=ax, label="share of the trials with this value that failed so")
    fig.suptitle("Failure map: which parameter values led to which failures")
    return fig


def _fig_speculative(a: _Analysis) -> Figure | None:
    diags = a.diagnosis
    if not diags:
        return None
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.5, 1])
    xs = list(range(len(diags)))
    colours = [_WIN_COLOUR if d.wins else _LOSE_COLOUR for d in diags]
    left.bar(xs, [d.accept_length for d in diags], color=colours, width=0.6)
    left.scatter(
        xs,
        [d.break_even_accept_length for d in diags],
        marker="_",
        s=900,
        linewidths=3,
        color="black",
        zorder=3,
    )
    maxes = [(x, d.max_accept_length) for x, d in zip(xs, diags, strict=True)]
    left.scatter(
        [x for x, m in maxes if m is not None],
        [m for _, m in maxes if m is not None],
        marker="_",
        s=900,
        linewidths=1.5,
        color="#777777",
        linestyle="--",
        zorder=2,
    )
    if len(diags) <= 16:
        for x, d in zip(xs, diags, strict=True):
            left.annotate(
                f"{d.accept_length:.2f}",
                (x, d.accept_length),
                ha="center",
                va="top",
                fontsize=7,
                xytext=(0, -3),
                textcoords="offset points",
                color="white",
            )
            left.annotate(
                f"{d.break_even_accept_length:.2f}",
                (x, d.break_even_accept_length),
                ha="left",
                va="bottom",
                fontsize=7,
                xytext=(8, 2),
                textcoords="offset points",
            )
    left.set_xticks(xs, [d.trial_id for d in diags], rotation=60 if len(diags) > 8 else 0)
    left.set_xlabel("speculative trial")
    left.set_ylabel("accept length (tokens per verify cycle)")
    left.set_title("Measured vs break-even accept length")
    left.grid(alpha=0.3, axis="y")
    left.legend(
        handles=[
            Line2D([], [], color=_WIN_COLOUR, linewidth=8, label="measured (beats baseline)"),
            Line2D([], [], color=_LOSE_COLOUR, linewidth=8, label="measured (loses)"),
            Line2D([], [], color="black", linewidth=3, label="break-even (matches baseline)"),
            Line2D(
                [],
                [],
                color="#777777",
                linewidth=1.5,
                linestyle="--",
                label="most a cycle can yield",
            ),
        ],
        fontsize=8,
        loc="upper left",
        ncols=2,
    )
    tallest = max(
        [d.accept_length for d in diags]
        + [d.break_even_accept_length for d in diags]
        + [m for _, m in maxes if m is not None]
    )
    left.set_ylim(0, tallest * 1.35)
    cycles = [d.cycle_ms for d in diags]
    right.scatter(cycles, [d.accept_length for d in diags], color=colours, zorder=3)
    by_cycle = sorted(diags, key=lambda d: d.cycle_ms)
    for i, d in enumerate(by_cycle):  # alternate label heights so neighbours do not collide
        right.annotate(
            d.trial_id,
            (d.cycle_ms, d.accept_length),
            fontsize=7,
            xytext=(3, (4, -11, 14)[i % 3]),
            textcoords="offset points",
        )
    top = max(
        max(cycles) * 1.15,
        1.0,
    )
    base_speed = diags[0].baseline_decode_speed
    right.plot(
        [0, top],
        [0, base_speed * top / 1000.0],
        color="black",
        linewidth=1.5,
        label=f"break-even: baseline {base_speed:.4g} tok/s x cycle",
    )
    right.fill_between(
        [0, top],
        [0, base_speed * top / 1000.0],
        [1e6, 1e6],
        color=_WIN_COLOUR,
        alpha=0.07,
        label="beats the baseline",
    )
    plain = diags[0].best_plain_decode_speed
    if plain is not None and abs(plain - base_speed) > 1e-9:
        right.plot(
            [0, top],
            [0, plain * top / 1000.0],
            color="black",
            linestyle=":",
            linewidth=1.2,
            label=f"fastest non-speculative ({plain:.4g} tok/s)",
        )
    ymax = max(
        [d.accept_length for d in diags]
        + [d.break_even_accept_length for d in diags]
        + [m for _, m in maxes if m is not None]
    )
    right.set_xlim(0, top)
    right.set_ylim(0, ymax * 1.2)
    right.set_xlabel("verify cycle time (ms) = accept length / decode speed")
    right.set_ylabel("accept length (tokens per verify cycle)")
    right.set_title("Above the line wins: accept length needed at each cycle time")
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="upper left")
    level = diags[0].concurrency
    where = f", concurrency {level}" if level is not None else ""
    fig.suptitle(f"Speculative decoding diagnosis (per-request decode speed{where})")
    return fig


def _fig_latency(a: _Analysis) -> Figure | None:
    spec = a.spec
    panels: list[tuple[int | None, str]] = []
    for level in _levels(spec):
        for lat in ("ttft_p99_ms", "itl_p99_ms"):
            name = _metric(lat, level)
            thr = _metric("output_throughput", level)
            if any(name in r.metrics and thr in r.metrics for r in a.measured):
                panels.append((level, lat))
    if not panels:
        return None
    levels = list(dict.fromkeys(level for level, _ in panels))
    fig = Figure(figsize=(11, 4.2 * len(levels)), layout="constrained")
    axes = fig.subplots(len(levels), 2, squeeze=False)
    for row, level in enumerate(levels):
        for col, lat in enumerate(("ttft_p99_ms", "itl_p99_ms")):
            ax: Axes = axes[row][col]
            if (level, lat) not in panels:
                ax.set_visible(False)
                continue
            lat_name = _metric(lat, level)
            thr_name = _metric("output_throughput", level)
            pts = [r for r in a.measured if lat_name in r.metrics and thr_name in r.metrics]
            xy = [(r.metrics[lat_name], r.metrics[thr_name]) for r in pts]
            front = pareto_front(xy)
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], color="#9bb7cc", label="measured")
            fx = [xy[i][0] for i in front]
            fy = [xy[i][1] for i in front]
            ax.step(fx, fy, where="post", color=_OK_COLOUR, linewidth=1.5)
            ax.scatter(fx, fy, color=_OK_COLOUR, edgecolors="black", zorder=3, label="Pareto front")
            for i in front:
                ax.annotate(
                    pts[i].trial_id, xy[i], fontsize=7, xytext=(4, 4), textcoords="offset points"
                )
            for r, (x, y) in zip(pts, xy, strict=True):
                if r is a.best:
                    ax.scatter(
                        [x],
                        [y],
                        marker="*",
                        s=260,
                        color=_BEST_COLOUR,
                        edgecolors="black",
                        zorder=4,
                        label=f"best ({r.trial_id})",
                    )
                if r is a.baseline:
                    ax.scatter(
                        [x],
                        [y],
                        marker="D",
                        s=70,
                        color=_BASE_COLOUR,
                        zorder=4,
                        label=f"baseline ({r.trial_id})",
                    )
            where = f" at concurrency {level}" if level is not None else ""
            ax.set_title(f"Throughput vs {lat.split('_')[0].upper()} p99{where}", fontsize=10)
            ax.set_xlabel(_axis_label(lat_name))
            ax.set_ylabel(_axis_label(thr_name))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("Throughput against tail latency (up and left is better)")
    return fig


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


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1180px;padding:1.2em 2em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;
margin-top:2em}.sub{color:#666}.headline{background:#f5f8fb;border:1px solid #cfe0ee;
border-radius:8px;padding:1em 1.4em}.big{font-size:1.35em;font-weight:600}
.win{color:#1d7a1d;font-weight:600}.lose{color:#b01f1f;font-weight:600}
table{border-collapse:collapse;margin:.6em 0;font-size:.88em}th,td{border:1px solid #ddd;
padding:.25em .55em;text-align:left;vertical-align:top}th{background:#f0f0f0}
td.n{text-align:right;font-variant-numeric:tabular-nums}
pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em}
pre{background:#f6f6f6;border:1px solid #e2e2e2;padding:.6em;overflow-x:auto;
white-space:pre-wrap;word-break:break-all}figure{margin:1em 0}
figure img{max-width:100%;height:auto;border:1px solid #eee}figcaption{color:#555;
font-size:.9em}.note{color:#7a5b00;background:#fff8e0;padding:.3em .6em;border-radius:4px}
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(
    header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = ()
) -> str:
    """An HTML table; cells are already-escaped HTML."""
    nums = set(numeric)
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{c}</td>' if i in nums else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure_html(png: bytes, alt: str, caption: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{_esc(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _headline(a: _Analysis, parent_run_id: str | None) -> str:
    spec = a.spec
    metric = spec.objective.metric
    node_h, gpu_h = _gpu_hours(spec, a.records)
    counts = Counter(r.failure_mode.value for r in a.finished if r.failure_mode is not None)
    failed = sum(n for mode, n in counts.items() if mode != FailureMode.NONE.value)
    parts = ['<div class="headline">']
    if a.best is not None:
        value = objective_value(spec, a.best.metrics)
        up = speedup(spec, value, a.baseline_value)
        if a.best is a.baseline:
            up_text = " — the baseline itself: no other configuration beat it"
        elif up is not None:
            up_text = (
                f' — <span class="{"win" if up >= 1 else "lose"}">x{up:.3f}</span> over the '
                f"baseline ({_fmt(a.baseline_value)})"
            )
        else:
            up_text = " (the baseline was not measured: no speed-up)"
        parts.append(
            f'<p class="big">Best: {_esc(a.best.trial_id)}, {_esc(metric)} = '
            f"{_fmt(value)} {_esc(_unit(metric))}{up_text}</p>"
        )
        parts.append(f"<p>Configuration: <code>{_esc(json.dumps(a.best.config))}</code></p>")
        parts.append("<p>Launch it with:</p>")
        parts.append(f'<pre id="best-command">{_esc(a.command(a.best))}</pre>')
        metrics_rows = [
            (_esc(k), _fmt(v, 6), _esc(_unit(k))) for k, v in sorted(a.best.metrics.items())
        ]
        parts.append(_table(["metric", "value", "unit"], metrics_rows, numeric=[1]))
    else:
        parts.append('<p class="big lose">No trial was measured within the constraints.</p>')
    parts.append(
        f"<p>{len(a.finished)} trials finished of a budget of {spec.budget.trials} "
        f"({len(a.measured)} measured, {failed} failed); "
        f"{len(a.records)} trial attempts took {node_h:.3g} node-hours = "
        f"<b>{gpu_h:.3g} GPU-hours</b> ({spec.node.gpus} GPUs per trial).</p>"
    )
    if failed:
        rows = [
            (_esc(mode), str(n))
            for mode, n in sorted(counts.items(), key=lambda kv: -kv[1])
            if mode != FailureMode.NONE.value
        ]
        parts.append("<p>Failures by mode:</p>" + _table(["failure mode", "trials"], rows, [1]))
    if a.diagnosis:
        parts.append(f"<p>{_verdict(a.diagnosis)}</p>")
    parts.append(
        f'<p class="sub">Objective: {_esc(spec.objective.mode)} {_esc(metric)}'
        + (
            "; constraints: "
            + ", ".join(
                f"{_esc(k)} {'<=' if b.max is not None else '>='} "
                f"{_fmt(b.max if b.max is not None else b.min)}"
                for k, b in spec.objective.constraints.items()
            )
            if spec.objective.constraints
            else ""
        )
        + f". MLflow experiment <code>{_esc(spec.experiment)}</code>"
        + (f", parent run <code>{_esc(parent_run_id)}</code>" if parent_run_id else "")
        + ".</p></div>"
    )
    return "".join(parts)


def _verdict(diags: Sequence[SpecDiagnosis]) -> str:
    wins = [d for d in diags if d.wins]
    best = max(diags, key=lambda d: d.accept_length - d.break_even_accept_length)
    base = f"{best.baseline_decode_speed:.4g} tok/s ({_esc(best.baseline_trial_id)})"
    head = (
        f'<span class="win">Speculative decoding wins on this node</span>: {len(wins)} of '
        f"{len(diags)} measured speculative trials beat the baseline's {base}."
        if wins
        else f'<span class="lose">Speculative decoding loses on this node</span>: none of the '
        f"{len(diags)} measured speculative trials reached the baseline's {base}."
    )
    detail = (
        f" {'Widest margin' if best.wins else 'Closest to break-even'}: {_esc(best.trial_id)} "
        f"accepts {best.accept_length:.3g} tokens "
        f"per {best.cycle_ms:.3g} ms verify cycle; matching the baseline needs "
        f"{best.break_even_accept_length:.3g}."
    )
    if best.max_accept_length is not None and not best.wins:
        ceiling = best.ceiling_decode_speed
        if best.break_even_accept_length > best.max_accept_length:
            detail += (
                f" Even a perfect draft could not win with this tree: a cycle yields at most "
                f"{best.max_accept_length:.3g} tokens."
            )
        elif ceiling is not None:
            detail += (
                f" A perfect draft ({best.max_accept_length:.3g} tokens per cycle) would reach "
                f"{ceiling:.4g} tok/s at this cycle time."
            )
    return head + detail


def _section_failures(a: _Analysis, figures: dict[str, bytes]) -> str:
    parts = ["<h2>Failure map</h2>"]
    if not a.failure_modes:
        return "".join(parts) + "<p>No trial failed.</p>"
    if "failures.png" in figures:
        parts.append(
            _figure_html(
                figures["failures.png"],
                "failure map",
                "Each row is a parameter value (parameters that never failed are left out); each "
                "cell: trials with that value that ended in that failure mode / trials with that "
                "value.",
            )
        )
    for mode in a.failure_modes:
        members = [r for r in a.finished if r.failure_mode is mode]
        first = members[0]
        ids = ", ".join(r.trial_id for r in members)
        parts.append(
            f'<h3 id="mode-{_esc(mode.value)}">{_esc(mode.value)}: {len(members)} trial(s)</h3>'
            f"<p>Trials: {_esc(ids)}. Representative: {_esc(first.trial_id)} "
            f"(<code>{_esc(config_summary(first.config, width=110))}</code>): "
            f"{_esc(first.reason)}</p><pre>{_esc(_excerpt(first))}</pre>"
        )
    return "".join(parts)


def _section_speculative(a: _Analysis, figures: dict[str, bytes]) -> str:
    parts = ["<h2>Speculative decoding diagnosis</h2>"]
    spec_trials = [r for r in a.finished if _algorithm(a.spec, r, _diagnosis_level(a.spec))]
    if not a.diagnosis:
        if spec_trials:
            return "".join(parts) + (
                f"<p>{len(spec_trials)} speculative trial(s), none measured against a measured "
                "baseline: nothing to diagnose.</p>"
            )
        return "".join(parts) + "<p>No speculative trial in this sweep.</p>"
    parts.append(
        "<p>A speculative server yields <i>accept length</i> tokens per verify cycle (draft steps "
        "plus one verify pass with its all-reduces), so one cycle takes <i>accept length / decode "
        "speed</i>. To match the baseline, each cycle must yield <i>baseline decode speed x cycle "
        "time</i> tokens: the <b>break-even accept length</b>. Below it a configuration loses "
        "however good the draft; a cycle time that does not shrink with the draft tree (fixed "
        "all-reduce cost) shows in the right-hand panel as points that stay far right.</p>"
    )
    parts.append(f"<p>{_verdict(a.diagnosis)}</p>")
    if "speculative.png" in figures:
        parts.append(
            _figure_html(
                figures["speculative.png"],
                "measured vs break-even accept length",
                "Left: measured accept length per speculative trial (bar) against the break-even "
                "accept length (black) and the most one cycle can yield with that tree (grey). "
                "Right: every trial at its cycle time; above the black line beats the baseline.",
            )
        )
    unmeasured = [r for r in spec_trials if not _ok(r)]
    rows = []
    for d in a.diagnosis:
        verdict = '<span class="win">wins</span>' if d.wins else '<span class="lose">loses</span>'
        rows.append(
            (
                _esc(d.trial_id),
                f"<code>{_esc(config_summary(d.config, width=70))}</code>",
                f"{d.accept_length:.3f}",
                f"{d.decode_speed:.4g}",
                f"{d.cycle_ms:.2f}",
                f'<span class="be">{d.break_even_accept_length:.3f}</span>',
                _fmt(d.break_even_vs_best_plain, 4),
                _fmt(d.max_accept_length, 3),
                _fmt(d.ceiling_decode_speed, 4),
                f"x{d.speedup:.3f} {verdict}",
            )
        )
    d0 = a.diagnosis[0]
    plain = (
        f"fastest non-speculative trial {_esc(d0.best_plain_trial_id)}: "
        f"{_fmt(d0.best_plain_decode_speed)} tok/s"
        if d0.best_plain_trial_id
        else "no measured non-speculative trial"
    )
    parts.append(
        f"<p>Baseline: {_esc(d0.baseline_trial_id)} at {d0.baseline_decode_speed:.4g} tok/s per "
        f"request; {plain}"
        + (f"; concurrency {d0.concurrency}" if d0.concurrency is not None else "")
        + ".</p>"
    )
    parts.append(
        _table(
            [
                "trial",
                "configuration",
                "accept length (tok/cycle)",
                "decode speed (tok/s)",
                "cycle (ms)",
                "break-even accept length",
                "break-even vs fastest plain",
                "max per cycle",
                "perfect-draft speed (tok/s)",
                "vs baseline",
            ],
            rows,
            numeric=[2, 3, 4, 5, 6, 7, 8],
        )
    )
    if unmeasured:
        parts.append(
            "<p>Speculative trials that failed (not diagnosed): "
            + ", ".join(
                f"{_esc(r.trial_id)} ({_esc(r.failure_mode.value if r.failure_mode else '?')})"
                for r in unmeasured
            )
            + ".</p>"
        )
    return "".join(parts)


def _section_top(a: _Analysis) -> str:
    spec = a.spec
    metric = spec.objective.metric
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    ranked = sorted(
        a.measured,
        key=lambda r: (not _feasible(spec, r), -sign * (objective_value(spec, r.metrics) or 0.0)),
    )[:_TOP]
    level = _diagnosis_level(spec)
    rows = []
    for rank, record in enumerate(ranked, start=1):
        value = objective_value(spec, record.metrics)
        up = speedup(spec, value, a.baseline_value)
        violated = [k for k, v in constraint_violations(spec, record.metrics).items() if v > 0]
        rows.append(
            (
                str(rank),
                _esc(record.trial_id),
                _fmt(value),
                f"x{up:.3f}" if up is not None else "-",
                _fmt(record.metrics.get(_metric("accept_length", level))),
                _fmt(record.metrics.get(_metric("ttft_p99_ms", level))),
                _fmt(record.metrics.get(_metric("itl_p99_ms", level))),
                _esc(", ".join(violated)) or "ok",
                f"<code>{_esc(a.command(record))}</code>",
            )
        )
    where = f" (latencies at concurrency {level})" if level is not None else ""
    return (
        f"<h2>Top {_TOP}</h2><p>Measured trials by {_esc(metric)}{where}; trials that violate a "
        "constraint come last.</p>"
        + _table(
            [
                "rank",
                "trial",
                _axis_label(metric),
                "speed-up",
                "accept length",
                "TTFT p99 (ms)",
                "ITL p99 (ms)",
                "constraints",
                "launch command",
            ],
            rows,
            numeric=[2, 3, 4, 5, 6],
        )
    )


def _render_html(
    a: _Analysis,
    figures: dict[str, bytes],
    notes: Sequence[str],
    parent_run_id: str | None,
) -> str:
    spec = a.spec
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    body = [
        f"<h1>spec_sweep report: {_esc(spec.name)}</h1>",
        f'<p class="sub">{_esc(spec.description)}<br>Generated {_esc(when)}; model '
        f"<code>{_esc(spec.node.model)}</code>, {spec.node.gpus} GPUs per trial, "
        f"{_esc(spec.searcher.kind)} search (seed {spec.searcher.seed}).</p>",
        "<h2>Headline</h2>",
        _headline(a, parent_run_id),
        "<h2>Progress</h2>",
    ]
    if "progress.png" in figures:
        body.append(
            _figure_html(
                figures["progress.png"],
                "objective per trial",
                "Objective of each measured trial in the order run, the best so far (within the "
                "constraints) and the baseline; failed trials below, by failure mode.",
            )
        )
    body.append("<h2>Effects</h2>")
    if "effects.png" in figures:
        body.append(
            _figure_html(
                figures["effects.png"],
                "objective against each parameter",
                "Objective against each parameter; failed trials sit in the shaded band, marked by "
                "failure mode; the dashed line is the baseline.",
            )
        )
    if "importance.png" in figures:
        body.append(
            _figure_html(
                figures["importance.png"],
                "parameter importances",
                "Optuna's importance evaluators on the measured trials (parameters present in "
                "every trial of the group and not constant).",
            )
        )
    body += [f'<p class="note">{_esc(n)}</p>' for n in notes]
    body.append(_section_failures(a, figures))
    body.append(_section_speculative(a, figures))
    body.append("<h2>Throughput against latency</h2>")
    if "latency.png" in figures:
        body.append(
            _figure_html(
                figures["latency.png"],
                "throughput against tail latency",
                "Output throughput against TTFT p99 and ITL p99 over the measured trials, per "
                "concurrency level; the Pareto front (no trial is both faster and quicker) is "
                "joined up and labelled.",
            )
        )
    else:
        body.append("<p>No trial measured throughput and latency.</p>")
    body.append(_section_top(a))
    body.append(
        '<p class="sub">Rebuild: <code>spec-sweep report '
        f"{_esc(Path(spec.source).name or 'SWEEP.yaml')}</code>; every trial as a replay table: "
        f"<code>{CSV_NAME}</code> beside this file.</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>spec_sweep report: {_esc(spec.name)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def build_report(
    spec: SweepSpec,
    records: Sequence[TrialRecord],
    *,
    out_dir: Path,
    parent_run_id: str | None = None,
) -> ReportResult:
    """Write the sweep report: `report.html` (self-contained), the PNG figures and `trials.csv`.

    Args:
        spec: The sweep.
        records: The sweep's trial records (`Tracker.trials(parent_run_id)`).
        out_dir: The report folder (created; files of an earlier report are replaced).
        parent_run_id: The sweep's MLflow parent run, shown in the headline.

    Returns:
        What was written, the best trial and the speculative diagnosis.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    a = _Analysis(spec, records)
    notes: list[str] = []
    made: dict[str, Figure | None] = {
        "progress.png": _fig_progress(a) if a.finished else None,
        "effects.png": _fig_effects(a),
    }
    groups: list[_Importances] = []
    for title, subset in (
        ("all measured trials", a.finished),
        (
            "speculative trials",
            [r for r in a.finished if _algorithm(spec, r, _diagnosis_level(spec))],
        ),
    ):
        if title == "speculative trials" and len(subset) in (0, len(a.finished)):
            continue
        group, note = _importances(spec, subset, title=title)
        if group is not None:
            groups.append(group)
        if note:
            notes.append(f"Importances: {note}")
    made["importance.png"] = _fig_importance(groups) if groups else None
    made["failures.png"] = _fig_failures(a)
    made["speculative.png"] = _fig_speculative(a)
    made["latency.png"] = _fig_latency(a)
    figures: dict[str, bytes] = {}
    for name in _FIGURE_NAMES:
        fig = made.get(name)
        path = out_dir / name
        if fig is None:
            path.unlink(missing_ok=True)
            continue
        figures[name] = _png(fig)
        path.write_bytes(figures[name])
    html_path = out_dir / HTML_NAME
    html_path.write_text(_render_html(a, figures, notes, parent_run_id), encoding="utf-8")
    csv_path = out_dir / CSV_NAME
    write_csv(csv_path, export_columns(spec), export_rows(spec, records))
    return ReportResult(
        html=html_path,
        figures=tuple(out_dir / name for name in figures),
        best_trial_id=a.best.trial_id if a.best is not None else None,
        diagnosis=tuple(a.diagnosis),
        csv=csv_path,
    )


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, str]]) -> int:
    """Write a replay table; returns the number of rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    return count


# ---------------------------------------------------------------------------------------------
# Commands


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def locate_sweep(spec: SweepSpec, args: argparse.Namespace) -> tuple[Tracker, str, Path]:
    """The sweep's store, parent run and state folder, for `report` and `export`.

    The tracking URI is `--tracking-uri`, else the one the sweep recorded in its state folder,
    else the spec's / the project's default. The parent run is the one of the state folder,
    else the newest sweep run of the experiment.

    Raises:
        SpecSweepError: the store holds no run of this sweep.
    """
    state_path = sweep_state_dir(spec, getattr(args, "state_dir", None))
    state = _read_state(state_path)
    uri = resolve_tracking_uri(
        spec, getattr(args, "tracking_uri", None) or state.get("tracking_uri")
    )
    tracker = Tracker(uri, spec.experiment, secrets=secret_values(spec))
    if tracker.client.get_experiment_by_name(spec.experiment) is None:
        raise SpecSweepError(
            f"no MLflow experiment {spec.experiment!r} in {uri}: run the sweep first "
            f"(spec-sweep run {spec.source or 'SWEEP.yaml'}), or pass --tracking-uri"
        )
    parent: str | None = None
    if state.get("state_id"):
        parent = tracker.find_sweep_run(str(state["state_id"]))
    if parent is None:
        runs = tracker.client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.`spec_sweep.kind` = '{KIND_SWEEP}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        parent = runs[0].info.run_id if runs else None
    if parent is None:
        raise SpecSweepError(
            f"experiment {spec.experiment!r} in {uri} holds no sweep run: run the sweep first"
        )
    return tracker, str(parent), state_path


def publish_report(
    spec: SweepSpec, tracker: Tracker, parent_run_id: str, *, out_dir: Path
) -> ReportResult:
    """Build the report from the store and log it to the sweep's parent run (artifacts `report/`).

    Only the report's own files are uploaded, whatever else `out_dir` holds.
    """
    result = build_report(
        spec, tracker.trials(parent_run_id), out_dir=out_dir, parent_run_id=parent_run_id
    )
    with tempfile.TemporaryDirectory(prefix="spec-sweep-report-") as tmp:
        for path in (result.html, *result.figures, *([result.csv] if result.csv else [])):
            shutil.copy2(path, Path(tmp) / path.name)
        tracker.log_artifacts(parent_run_id, Path(tmp), "report")
    return result


def report_command(spec: SweepSpec, args: argparse.Namespace) -> int:
    """`spec-sweep report SWEEP.yaml`: rebuild the report and log it to the sweep's parent run.

    Args:
        spec: The sweep.
        args: `tracking_uri` (or None) and `output` (the report folder; None: `<state>/report`).

    Returns:
        0.
    """
    tracker, parent, state_path = locate_sweep(spec, args)
    out_dir = Path(args.output) if getattr(args, "output", None) else state_path / "report"
    result = publish_report(spec, tracker, parent, out_dir=out_dir)
    best = result.best_trial_id or "none"
    print(
        f"report of {spec.name}: {result.html.resolve()} ({len(result.figures)} figures, best "
        f"trial {best}); logged to MLflow run {parent} under 'report/'"
    )
    return 0


def export_command(spec: SweepSpec, args: argparse.Namespace) -> int:
    """`spec-sweep export SWEEP.yaml -o results.csv`: every trial as a replay-table row.

    Args:
        spec: The sweep.
        args: `output` (the CSV path) and `tracking_uri` (or None).

    Returns:
        0.
    """
    tracker, parent, _ = locate_sweep(spec, args)
    rows = export_rows(spec, tracker.trials(parent))
    path = Path(args.output)
    count = write_csv(path, export_columns(spec), rows)
    print(f"wrote {count} trials of {spec.name} to {path} (replay with --replay {path})")
    return 0
