"""The report's serving figures: the speculative-decoding diagnosis and throughput vs latency.

`fig_speculative` draws, for every measured speculative trial, the measured accept length
against the break-even accept length (and the most one verify cycle can yield with its draft
tree), and every trial at its cycle time; `fig_latency` draws output throughput against TTFT
p99 and ITL p99 per concurrency level with the Pareto front. Same conventions as `figures`.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from spec_sweep.present.report.analysis import Analysis, levels, pareto_front
from spec_sweep.present.report.figures import (
    BASE_COLOUR,
    BEST_COLOUR,
    LOSE_COLOUR,
    OK_COLOUR,
    WIN_COLOUR,
)
from spec_sweep.present.report.format import at_level, axis_label

__all__ = ["fig_latency", "fig_speculative"]


def fig_speculative(a: Analysis) -> Figure | None:
    diags = a.diagnosis
    if not diags:
        return None
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.5, 1])
    xs = list(range(len(diags)))
    colours = [WIN_COLOUR if d.wins else LOSE_COLOUR for d in diags]
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
            Line2D([], [], color=WIN_COLOUR, linewidth=8, label="measured (beats baseline)"),
            Line2D([], [], color=LOSE_COLOUR, linewidth=8, label="measured (loses)"),
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
        color=WIN_COLOUR,
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


def fig_latency(a: Analysis) -> Figure | None:
    spec = a.spec
    panels: list[tuple[int | None, str]] = []
    for level in levels(spec):
        for lat in ("ttft_p99_ms", "itl_p99_ms"):
            name = at_level(lat, level)
            thr = at_level("output_throughput", level)
            if any(name in r.metrics and thr in r.metrics for r in a.measured):
                panels.append((level, lat))
    if not panels:
        return None
    rows = list(dict.fromkeys(level for level, _ in panels))
    fig = Figure(figsize=(11, 4.2 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False)
    for row, level in enumerate(rows):
        for col, lat in enumerate(("ttft_p99_ms", "itl_p99_ms")):
            ax: Axes = axes[row][col]
            if (level, lat) not in panels:
                ax.set_visible(False)
                continue
            lat_name = at_level(lat, level)
            thr_name = at_level("output_throughput", level)
            pts = [r for r in a.measured if lat_name in r.metrics and thr_name in r.metrics]
            xy = [(r.metrics[lat_name], r.metrics[thr_name]) for r in pts]
            front = pareto_front(xy)
            ax.scatter([p[0] for p in xy], [p[1] for p in xy], color="#9bb7cc", label="measured")
            fx = [xy[i][0] for i in front]
            fy = [xy[i][1] for i in front]
            ax.step(fx, fy, where="post", color=OK_COLOUR, linewidth=1.5)
            ax.scatter(fx, fy, color=OK_COLOUR, edgecolors="black", zorder=3, label="Pareto front")
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
                        color=BEST_COLOUR,
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
                        color=BASE_COLOUR,
                        zorder=4,
                        label=f"baseline ({r.trial_id})",
                    )
            where = f" at concurrency {level}" if level is not None else ""
            ax.set_title(f"Throughput vs {lat.split('_')[0].upper()} p99{where}", fontsize=10)
            ax.set_xlabel(axis_label(lat_name))
            ax.set_ylabel(axis_label(thr_name))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("Throughput against tail latency (up and left is better)")
    return fig
