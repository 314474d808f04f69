"""Build and publish the sweep report: files on disk, then the parent run's `report/`.

This module owns `build_report` (from a sweep's history: the self-contained `report.html`, the
PNG figures and the replay table `trials.csv`) and `publish_report` (build it from the MLflow
store, or from the history the driver already holds, and log it to the sweep's parent run).
It imports neither Ray nor the sweep driver, so `spec-sweep report` starts quickly.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from spec_sweep.core.adaptive_rules import CONFIG_FILE
from spec_sweep.core.history import History, is_dummy
from spec_sweep.core.verdict import Verdict, verdict, workload_warning
from spec_sweep.present.report.analysis import (
    CSV_NAME,
    HTML_NAME,
    Analysis,
    SpecDiagnosis,
    algorithm,
    diagnosis_level,
)
from spec_sweep.present.report.diagnosis_figures import fig_latency, fig_speculative
from spec_sweep.present.report.figures import (
    FIGURE_NAMES,
    fig_effects,
    fig_failures,
    fig_importance,
    fig_progress,
    png,
)
from spec_sweep.present.report.html import render_html
from spec_sweep.present.sweep_view import SweepView
from spec_sweep.search.importance import Importances, importances
from spec_sweep.spec import SweepSpec
from spec_sweep.store.replay import export_columns, export_rows, write_csv
from spec_sweep.store.tracker import Tracker

__all__ = ["ReportResult", "build_report", "confirmation_view", "publish_report"]


@dataclass(frozen=True)
class ReportResult:
    """What `build_report` wrote.

    Attributes:
        html: The self-contained HTML report.
        figures: The PNG figures (also embedded in the HTML).
        best_trial_id: The configuration to launch, as the sweep's summary names it
            (`SweepView.pick`): the confirmation's recommendation, else the best trial that
            met the constraints (None: none did).
        recommended: `best_trial_id` is the confirmation's recommendation.
        diagnosis: The speculative-decoding diagnosis of every measured speculative trial.
        csv: The replay table of every trial (docs/design.md, "Replay table").
        adaptive_config: The adaptive configuration's config file, when one was built.
    """

    html: Path
    figures: tuple[Path, ...]
    best_trial_id: str | None
    diagnosis: tuple[SpecDiagnosis, ...]
    recommended: bool = False
    csv: Path | None = None
    adaptive_config: Path | None = None


def build_report(
    history: History,
    *,
    out_dir: Path,
    parent_run_id: str | None = None,
    judged: Verdict | None = None,
) -> ReportResult:
    """Write the sweep report: `report.html` (self-contained), the PNG figures and `trials.csv`.

    Args:
        history: The sweep's records (`Tracker.trials(parent_run_id)`); confirmation boots
            have their own section.
        out_dir: The report folder (created; files of an earlier report are replaced).
        parent_run_id: The sweep's MLflow parent run, shown in the headline.
        judged: The confirmation verdict, when the caller has it already.

    Returns:
        What was written, the best trial and the speculative diagnosis.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = history.spec
    if judged is None:
        judged = verdict(history)
    a = Analysis(SweepView.of(history, judged))
    confirmation = confirmation_view(history, judged)
    notes: list[str] = []
    made: dict[str, Figure | None] = {
        "progress.png": fig_progress(a) if a.finished else None,
        "effects.png": fig_effects(a),
    }
    groups: list[Importances] = []
    for title, subset in (
        ("all measured trials", a.finished),
        (
            "speculative trials",
            [r for r in a.finished if algorithm(spec, r, diagnosis_level(spec))],
        ),
    ):
        if title == "speculative trials" and len(subset) in (0, len(a.finished)):
            continue
        group, note = importances(spec, subset, title=title)
        if group is not None:
            groups.append(group)
        if note:
            notes.append(f"Importances: {note}")
    made["importance.png"] = fig_importance(groups) if groups else None
    made["failures.png"] = fig_failures(a)
    made["speculative.png"] = fig_speculative(a)
    made["latency.png"] = fig_latency(a)
    figures: dict[str, bytes] = {}
    for name in FIGURE_NAMES:
        fig = made.get(name)
        path = out_dir / name
        if fig is None:
            path.unlink(missing_ok=True)
            continue
        figures[name] = png(fig)
        path.write_bytes(figures[name])
    html_path = out_dir / HTML_NAME
    html_path.write_text(
        render_html(a, figures, notes, parent_run_id, confirmation=confirmation), encoding="utf-8"
    )
    csv_path = out_dir / CSV_NAME
    real = [r for r in history.done if not is_dummy(r)]  # a dummy boot is never a table row
    write_csv(csv_path, export_columns(spec), export_rows(spec, real))
    adaptive = a.view.adaptive
    config_path = out_dir / CONFIG_FILE
    config_path.unlink(missing_ok=True)
    if adaptive is not None and adaptive.build.text is not None:
        config_path.write_text(adaptive.build.text + "\n")  # the file the report's command names
    return ReportResult(
        html=html_path,
        figures=tuple(out_dir / name for name in figures),
        best_trial_id=a.best.trial_id if a.best is not None else None,
        diagnosis=tuple(a.diagnosis),
        recommended=a.recommended,
        csv=csv_path,
        adaptive_config=config_path if config_path.is_file() else None,
    )


def publish_report(
    spec: SweepSpec,
    tracker: Tracker,
    parent_run_id: str,
    *,
    out_dir: Path,
    history: History | None = None,
    judged: Verdict | None = None,
) -> ReportResult:
    """Build the report and log it to the sweep's parent run (artifacts `report/`).

    Built from `history` when the caller holds it (the driver, at the end of a run), else read
    from the store. Only the report's own files are uploaded, whatever else `out_dir` holds.
    """
    if history is None:
        history = History(spec, tracker.trials(parent_run_id))
    result = build_report(history, out_dir=out_dir, parent_run_id=parent_run_id, judged=judged)
    with tempfile.TemporaryDirectory(prefix="spec-sweep-report-") as tmp:
        extra = [p for p in (result.csv, result.adaptive_config) if p is not None]
        for path in (result.html, *result.figures, *extra):
            shutil.copy2(path, Path(tmp) / path.name)
        tracker.log_artifacts(parent_run_id, Path(tmp), "report")
    return result


def confirmation_view(history: History, v: Verdict | None) -> dict[str, Any] | None:
    """The report's confirmation section: verdict, pooled boots, drift and warnings (or None)."""
    warning = workload_warning(history)
    if v is None and warning is None:
        return None
    # every key the template reads, also when only the workload warning is there (no verdict)
    out: dict[str, Any] = {
        "warnings": [warning] if warning else [],
        "label": None,
        "reason": None,
        "spent": 0,
        "recommended": None,
        "noise": "n/a",
        "rows": [],
        "drift": None,
    }
    if v is not None:
        out["warnings"] += v.warnings
        out |= {
            "label": v.label,
            "reason": v.reason,
            "spent": v.spent,
            "recommended": v.recommended.trial_id if v.recommended else None,
            "noise": f"{v.noise_rel_sd:.1%}" if v.noise_rel_sd is not None else "n/a",
            "rows": [
                (
                    c.trial_id,
                    f"{c.mean:.4g}",
                    f"{c.ci_low:.4g} - {c.ci_high:.4g}",
                    ", ".join(f"{x:.4g}" for x in c.values),
                    c.changed_flags,
                )
                for c in v.candidates
            ],
            "drift": v.drift.describe() if v.drift is not None else None,
        }
    return out
