"""The sweep report as one self-contained HTML page, rendered by Jinja2 with autoescaping.

This module owns turning the analysis into the page: it prepares plain values (numbers already
formatted, figures as base64 PNG data URIs) and renders `templates/report.html.j2`, where every
value is escaped by Jinja2's autoescaping (no hand-written escaper, no markup built in Python).
The page has inline CSS, no script and fetches nothing from the network.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from spec_sweep.core.history import is_dummy
from spec_sweep.core.outcome import FailureMode
from spec_sweep.present.adaptive_view import adaptive_section
from spec_sweep.present.names import config_summary
from spec_sweep.present.report.analysis import (
    CSV_NAME,
    Analysis,
    SpecDiagnosis,
    algorithm,
    diagnosis_level,
    gpu_hours,
)
from spec_sweep.present.report.format import at_level, axis_label, excerpt, fmt, unit
from spec_sweep.present.sweep_view import is_lossy

__all__ = ["render_html"]

_TOP = 10
_CAPTIONS = {
    "progress.png": (
        "objective per trial",
        "Objective of each measured trial in the order run, the best so far (within the "
        "constraints) and the baseline; failed trials below, by failure mode.",
    ),
    "effects.png": (
        "objective against each parameter",
        "Objective against each parameter; failed trials sit in the shaded band, marked by "
        "failure mode; the dashed line is the baseline.",
    ),
    "importance.png": (
        "parameter importances",
        "Optuna's importance evaluators on the measured trials (parameters present in "
        "every trial of the group and not constant).",
    ),
    "failures.png": (
        "failure map",
        "Each row is a parameter value (parameters that never failed are left out); each "
        "cell: trials with that value that ended in that failure mode / trials with that "
        "value.",
    ),
    "speculative.png": (
        "measured vs break-even accept length",
        "Left: measured accept length per speculative trial (bar) against the break-even "
        "accept length (black) and the most one cycle can yield with that tree (grey). "
        "Right: every trial at its cycle time; above the black line beats the baseline.",
    ),
    "latency.png": (
        "throughput against tail latency",
        "Output throughput against TTFT p99 and ITL p99 over the measured trials, per "
        "concurrency level; the Pareto front (no trial is both faster and quicker) is "
        "joined up and labelled.",
    ),
}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("spec_sweep.present.report", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def render_html(
    a: Analysis,
    figures: Mapping[str, bytes],
    notes: Sequence[str],
    parent_run_id: str | None,
    *,
    confirmation: Mapping[str, Any] | None = None,
) -> str:
    """The report page.

    Args:
        a: The analysis of the sweep's records.
        figures: PNG bytes by figure file name (only the figures that were drawn).
        notes: Remarks shown under the effects (e.g. why importances are missing).
        parent_run_id: The sweep's MLflow parent run, shown in the headline.
        confirmation: The confirmation section (`build.confirmation_view`), if any.
    """
    spec = a.spec
    shown = {
        name: {
            "data": base64.b64encode(png).decode("ascii"),
            "alt": _CAPTIONS[name][0],
            "caption": _CAPTIONS[name][1],
        }
        for name, png in figures.items()
    }
    return _env.get_template("report.html.j2").render(
        spec=spec,
        when=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        figures=shown,
        notes=list(notes),
        headline=_headline(a, parent_run_id),
        failures=_failures(a),
        speculative=_speculative(a),
        top=_top(a),
        confirmation=confirmation,
        source=Path(spec.source).name or "SWEEP.yaml",
        loads=a.view.loads,
        adaptive=adaptive_section(a.view),
        cost=a.view.cost,
        quality=a.view.quality_lines(),
        hours=_hours(a),
        csv_name=CSV_NAME,
    )


def _hours(a: Analysis) -> dict[str, Any] | None:
    """Where the node-hours went (`core.hours`), as rows of the report's table."""
    hours = a.view.hours
    if hours is None or hours.total <= 0:
        return None
    parts = [
        ("booting (measured search trials, launch to ready)", hours.boot),
        ("measuring (benchmark, goodput, quality)", hours.measure),
        ("failed boots (search trials that failed, whole)", hours.failed),
        (
            "rejected by the quality gate (booted and measured, then wrong_output; whole)",
            hours.rejected,
        ),
        ("confirmation (repeat boots, baseline re-measures)", hours.confirm),
        ("other (GPU waits, teardown, lost attempts)", hours.other),
    ]
    booted = sum(hours.phases.values())
    return {
        "sentence": hours.sentence(),
        "parts": [(name, f"{h:.3g}", f"{hours.share(h):.0%}") for name, h in parts],
        "phases": [
            (k.replace("_", " "), f"{v:.3g}", f"{v / booted:.0%}")
            for k, v in sorted(hours.phases.items(), key=lambda kv: -kv[1])
            if booted > 0
        ],
        "knobs": [(k, f"{s:.1%}") for k, s in hours.knobs],
    }


def _headline(a: Analysis, parent_run_id: str | None) -> dict[str, Any]:
    spec = a.spec
    metric = spec.objective.metric
    node_h, gpu_h = gpu_hours(spec, a.records)
    counts = Counter(r.failure_mode.value for r in a.finished if r.failure_mode is not None)
    failed = sum(n for mode, n in counts.items() if mode != FailureMode.NONE.value)
    best: dict[str, Any] | None = None
    if a.best is not None:
        value = a.value(a.best)
        best = {
            "trial_id": a.best.trial_id,
            "recommended": a.recommended,
            "value": fmt(value),
            "unit": unit(metric),
            "is_baseline": a.best is a.baseline,
            "speedup": a.view.history.objective.speedup(value, a.baseline_value),
            "baseline_value": fmt(a.baseline_value),
            "config": json.dumps(a.best.config),
            "command": a.command(a.best),
            "metrics": [(k, fmt(v, 6), unit(k)) for k, v in sorted(a.best.metrics.items())],
            "lossy": a.view.lossy_lines(),
        }
    return {
        "metric": metric,
        "best": best,
        "finished": len(a.finished),
        "measured": len(a.measured),
        "failed": failed,
        "attempts": len(a.records),
        "node_hours": f"{node_h:.3g}",
        "gpu_hours": f"{gpu_h:.3g}",
        "failures": [
            (mode, n)
            for mode, n in sorted(counts.items(), key=lambda kv: -kv[1])
            if mode != FailureMode.NONE.value
        ],
        "verdict": _verdict(a.diagnosis) if a.diagnosis else None,
        "constraints": [
            (k, "<=" if b.max is not None else ">=", fmt(b.max if b.max is not None else b.min))
            for k, b in spec.objective.constraints.items()
        ],
        "parent_run_id": parent_run_id,
        "fidelity": a.view.fidelity,
    }


def _verdict(diags: Sequence[SpecDiagnosis]) -> dict[str, Any]:
    wins = [d for d in diags if d.wins]
    best = max(diags, key=lambda d: d.accept_length - d.break_even_accept_length)
    extra = ""
    if best.max_accept_length is not None and not best.wins:
        ceiling = best.ceiling_decode_speed
        if best.break_even_accept_length > best.max_accept_length:
            extra = (
                f" Even a perfect draft could not win with this tree: a cycle yields at most "
                f"{best.max_accept_length:.3g} tokens."
            )
        elif ceiling is not None:
            extra = (
                f" A perfect draft ({best.max_accept_length:.3g} tokens per cycle) would reach "
                f"{ceiling:.4g} tok/s at this cycle time."
            )
    return {
        "wins": len(wins),
        "count": len(diags),
        "base": f"{best.baseline_decode_speed:.4g} tok/s ({best.baseline_trial_id})",
        "detail": (
            f" {'Widest margin' if best.wins else 'Closest to break-even'}: {best.trial_id} "
            f"accepts {best.accept_length:.3g} tokens "
            f"per {best.cycle_ms:.3g} ms verify cycle; matching the baseline needs "
            f"{best.break_even_accept_length:.3g}." + extra
        ),
    }


def _failures(a: Analysis) -> list[dict[str, Any]]:
    out = []
    for mode in a.failure_modes:
        members = [r for r in a.finished if r.failure_mode is mode]
        first = members[0]
        out.append(
            {
                "mode": mode.value,
                "count": len(members),
                "ids": ", ".join(
                    r.trial_id + (" (dummy weights)" if is_dummy(r) else "") for r in members
                ),
                "first": first.trial_id,
                "summary": config_summary(first.config, width=110),
                "reason": first.reason,
                "excerpt": excerpt(first),
            }
        )
    return out


def _speculative(a: Analysis) -> dict[str, Any]:
    spec_trials = [r for r in a.finished if algorithm(a.spec, r, diagnosis_level(a.spec))]
    out: dict[str, Any] = {"trials": len(spec_trials), "rows": []}
    if not a.diagnosis:
        return out
    out["verdict"] = _verdict(a.diagnosis)
    out["rows"] = [
        {
            "trial_id": d.trial_id,
            "summary": config_summary(d.config, width=70),
            "cells": [
                f"{d.accept_length:.3f}",
                f"{d.decode_speed:.4g}",
                f"{d.cycle_ms:.2f}",
            ],
            "break_even": f"{d.break_even_accept_length:.3f}",
            "more": [
                fmt(d.break_even_vs_best_plain, 4),
                fmt(d.max_accept_length, 3),
                fmt(d.ceiling_decode_speed, 4),
            ],
            "speedup": f"x{d.speedup:.3f}",
            "wins": d.wins,
        }
        for d in a.diagnosis
    ]
    d0 = a.diagnosis[0]
    out["baseline"] = {
        "trial_id": d0.baseline_trial_id,
        "speed": f"{d0.baseline_decode_speed:.4g}",
        "plain_id": d0.best_plain_trial_id,
        "plain_speed": fmt(d0.best_plain_decode_speed),
        "concurrency": d0.concurrency,
    }
    out["unmeasured"] = [
        (r.trial_id, r.failure_mode.value if r.failure_mode else "?")
        for r in spec_trials
        if r.failure_mode is not FailureMode.NONE
    ]
    return out


def _top(a: Analysis) -> dict[str, Any]:
    spec = a.spec
    metric = spec.objective.metric
    level = diagnosis_level(spec)
    rows = []
    for row in a.view.top(_TOP):
        record = row.record
        up = a.view.history.objective.speedup(row.value, a.baseline_value)
        rows.append(
            {
                "cells": [
                    str(row.rank),
                    record.trial_id + (" (lossy)" if is_lossy(record) else ""),
                    fmt(row.value),
                    f"x{up:.3f}" if up is not None else "-",
                    fmt(record.metrics.get(at_level("accept_length", level))),
                    fmt(record.metrics.get(at_level("ttft_p99_ms", level))),
                    fmt(record.metrics.get(at_level("itl_p99_ms", level))),
                    ", ".join(row.broken) or "ok",
                ],
                "command": a.command(record),
            }
        )
    return {
        "count": _TOP,
        "metric": metric,
        "axis": axis_label(metric),
        "level": level,
        "rows": rows,
    }
