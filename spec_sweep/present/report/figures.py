"""The sweep report's figures (matplotlib, object-oriented API on the Agg canvas, no pyplot).

This module owns the figures of the search: the objective per trial with best-so-far, the
objective against each parameter, parameter importances and the failure map, plus what every
figure shares (colours, failure-mode markers, `png`); `diagnosis_figures` draws the speculative
decoding diagnosis and throughput against tail latency. Each function
takes the pure analysis (`analysis.Analysis`) and returns a `Figure` (or None when there is
nothing to draw); `png` renders one. It is the only module that imports matplotlib.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from spec_sweep.core.config import same_value
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.present.report.analysis import Analysis
from spec_sweep.present.report.format import axis_label, fmt, label
from spec_sweep.search.importance import Importances
from spec_sweep.spec import SweepSpec

__all__ = [
    "BASE_COLOUR",
    "BEST_COLOUR",
    "FIGURE_NAMES",
    "LOSE_COLOUR",
    "OK_COLOUR",
    "WIN_COLOUR",
    "fig_effects",
    "fig_failures",
    "fig_importance",
    "fig_progress",
    "png",
]

#: The figures of a report, in page order (file names).
FIGURE_NAMES = (
    "progress.png",
    "effects.png",
    "importance.png",
    "failures.png",
    "speculative.png",
    "latency.png",
)

OK_COLOUR = "#2a7ab0"
BEST_COLOUR = "#e8a200"
BASE_COLOUR = "#444444"
WIN_COLOUR = "#2ca02c"
LOSE_COLOUR = "#d62728"
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
    FailureMode.WRONG_OUTPUT: ("p", "#000000"),
    FailureMode.NODE_LOST: ("h", "#aaaaaa"),
    FailureMode.ENVIRONMENT: ("8", "#555555"),
}


# ---------------------------------------------------------------------------------------------
# Figures


def png(fig: Figure) -> bytes:
    """A figure as PNG bytes (no timestamp in its metadata, so reports are reproducible)."""
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


def fig_progress(a: Analysis) -> Figure:
    spec = a.spec
    metric = spec.objective.metric
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    grid = fig.add_gridspec(2, 1, height_ratios=[4, 1.1])
    ax: Axes = fig.add_subplot(grid[0])
    strip: Axes = fig.add_subplot(grid[1], sharex=ax)
    xs = list(range(len(a.finished)))
    objective = a.view.history.objective
    best_so_far: list[float | None] = []
    current: float | None = None
    for record in a.finished:
        value = a.value(record)
        if value is not None and a.feasible(record) and objective.better(value, current):
            current = value
        best_so_far.append(current)
    points: list[tuple[int, float, bool]] = [
        (x, v, a.feasible(r))
        for x, r in zip(xs, a.finished, strict=True)
        if (v := a.value(r)) is not None
    ]
    for feasible, legend, face in (
        (True, "measured trial", OK_COLOUR),
        (False, "measured, violates a constraint", "none"),
    ):
        chosen = [(x, v) for x, v, f in points if f is feasible]
        if chosen:
            ax.scatter(
                [x for x, _ in chosen],
                [v for _, v in chosen],
                facecolors=face,
                edgecolors=OK_COLOUR,
                zorder=3,
                label=legend,
            )
    bx = [x for x, b in zip(xs, best_so_far, strict=True) if b is not None]
    by = [b for b in best_so_far if b is not None]
    if bx:
        ax.step(bx, by, where="post", color=BEST_COLOUR, linewidth=2, label="best so far")
    if a.baseline_value is not None:
        ax.axhline(
            a.baseline_value,
            color=BASE_COLOUR,
            linestyle="--",
            linewidth=1.2,
            label=f"baseline ({fmt(a.baseline_value)})",
        )
    if a.best is not None:
        x_best = a.finished.index(a.best)
        ax.scatter(
            [x_best],
            [a.value(a.best) or 0.0],
            marker="*",
            s=260,
            color=BEST_COLOUR,
            edgecolors="black",
            zorder=4,
            label=f"best ({a.best.trial_id})",
        )
    ax.set_title(f"Objective per trial, in the order run ({spec.objective.mode} {metric})")
    ax.tick_params(labelbottom=False)
    ax.set_ylabel(axis_label(metric))
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
    cats = [label(c) for c in choices]
    for record in records:
        if key in record.config and label(record.config[key]) not in cats:
            cats.append(label(record.config[key]))
    return cats


def _effect_x(key: str, cats: list[str] | None, record: TrialRecord, nth: int) -> float | None:
    """A trial's x in the effect panel of `key`: its category (jittered), value, or None."""
    jitter = ((nth % 5) - 2) * 0.06
    if key not in record.config:
        return None if cats is None else len(cats) + jitter
    value = record.config[key]
    if cats is not None:
        return cats.index(label(value)) + jitter
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def fig_effects(a: Analysis) -> Figure | None:
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
                    color=BEST_COLOUR if is_best else OK_COLOUR,
                    marker="*" if is_best else "o",
                    s=180 if is_best else 30,
                    edgecolors="black" if is_best else "none",
                    zorder=3,
                )
            elif record.failure_mode is not None and record.failure_mode is not FailureMode.NONE:
                marker, colour = _MODE_STYLE.get(record.failure_mode, ("x", "#000000"))
                ax.scatter([x], [band], marker=marker, color=colour, s=50, zorder=3)
        if cats is not None:
            labels = [*cats, "(inactive)"] if inactive else cats
            ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 3 else 0)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        if a.baseline_value is not None:
            ax.axhline(a.baseline_value, color=BASE_COLOUR, linestyle="--", linewidth=1)
        ax.axhspan(band - 0.1 * span, lo - 0.08 * span, color="#f3e0e0", zorder=0)
        ax.set_ylim(band - 0.12 * span, hi + 0.12 * span)
        ax.set_xlabel(key)
        ax.set_ylabel(axis_label(spec.objective.metric), fontsize=8)
        if param.description:
            ax.set_title(param.description[:60], fontsize=9)
        ax.grid(alpha=0.3)
    for index in range(len(keys), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    handles: list[Any] = [
        Line2D([], [], linestyle="none", marker="o", color=OK_COLOUR, label="measured"),
        Line2D(
            [], [], linestyle="none", marker="*", color=BEST_COLOUR, markersize=12, label="best"
        ),
        Line2D([], [], color=BASE_COLOUR, linestyle="--", label="baseline"),
        *_mode_handles(a.failure_modes),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=8)
    fig.suptitle(
        "Objective against each parameter (failed trials in the shaded band, by failure mode)"
    )
    return fig


def fig_importance(groups: Sequence[Importances]) -> Figure:
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
                groups.append((label(members[0].config[key]), members))
    else:
        order: list[Any] = list(param.choices)
        for record in active:
            if not any(same_value(record.config[key], v) for v in order):
                order.append(record.config[key])
        for value in order:
            members = [r for r in active if same_value(r.config[key], value)]
            if members:
                groups.append((label(value), members))
    inactive = [r for r in records if key not in r.config]
    if inactive and len(inactive) < len(records):
        groups.append(("(inactive)", inactive))
    return groups


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _failure_rows(a: Analysis) -> list[tuple[str, int, dict[FailureMode, int]]]:
    """(param = value, trials, failures by mode) for each parameter that had a failure."""
    rows = []
    for key in a.spec.params:
        groups = _buckets(a.spec, key, a.finished)
        counted = [
            (text, members, Counter(r.failure_mode for r in members)) for text, members in groups
        ]
        if not any(any(m is not FailureMode.NONE for m in c) for _, _, c in counted):
            continue
        for text, members, counts in counted:
            by_mode = {m: counts.get(m, 0) for m in a.failure_modes}
            rows.append((f"{key} = {text}", len(members), by_mode))
    return rows


def fig_failures(a: Analysis) -> Figure | None:
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
    ax.set_yticks(range(len(rows)), [f"{text} (n={total})" for text, total, _ in rows], fontsize=8)
    ax.set_xlabel("failure mode")
    fig.colorbar(image, ax=ax, label="share of the trials with this value that failed so")
    fig.suptitle("Failure map: which parameter values led to which failures")
    return fig
