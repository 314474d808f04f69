"""Build and publish the sweep report: files on disk, then the parent run's `report/`.

This module owns `build_report` (from a sweep's trial records: the self-contained
`report.html`, the PNG figures and the replay table `trials.csv`), `publish_report` (build it
from the MLflow store and log it to the sweep's parent run) and `locate_sweep` (find a sweep's
store and parent run from its state folder, for `spec-sweep report` and `export`). It imports
neither Ray nor the search driver, so those commands start quickly.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from spec_sweep.errors import SpecSweepError
from spec_sweep.paths import sweep_state_dir
from spec_sweep.replay import export_columns, export_rows, write_csv
from spec_sweep.report.analysis import (
    CSV_NAME,
    HTML_NAME,
    SpecDiagnosis,
    _algorithm,
    _Analysis,
    _diagnosis_level,
    _Importances,
    _importances,
)
from spec_sweep.report.diagnosis_figures import fig_latency, fig_speculative
from spec_sweep.report.figures import (
    FIGURE_NAMES,
    fig_effects,
    fig_failures,
    fig_importance,
    fig_progress,
    png,
)
from spec_sweep.report.html import render_html
from spec_sweep.search.confirm import search_records, verdict, workload_warning
from spec_sweep.search.objective import (
    finished_in_order,
)
from spec_sweep.space import (
    secret_values,
)
from spec_sweep.spec import SweepSpec
from spec_sweep.tracking import KIND_SWEEP, Tracker, TrialRecord, resolve_tracking_uri

__all__ = ["ReportResult", "build_report", "locate_sweep", "publish_report"]


@dataclass(frozen=True)
class ReportResult:
    """What `build_report` wrote.

    Attributes:
        html: The self-contained HTML report.
        figures: The PNG figures (also embedded in the HTML).
        best_trial_id: The best trial that met the constraints (None: none did).
        diagnosis: The speculative-decoding diagnosis of every measured speculative trial.
        csv: The replay table of every trial (docs/design.md, "Replay table").
    """

    html: Path
    figures: tuple[Path, ...]
    best_trial_id: str | None
    diagnosis: tuple[SpecDiagnosis, ...]
    csv: Path | None = None


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
    everything, records = records, search_records(records)  # confirmation boots: own section
    a = _Analysis(spec, records)
    confirmation = confirmation_view(spec, everything)
    notes: list[str] = []
    made: dict[str, Figure | None] = {
        "progress.png": fig_progress(a) if a.finished else None,
        "effects.png": fig_effects(a),
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
    write_csv(csv_path, export_columns(spec), export_rows(spec, finished_in_order(records)))
    return ReportResult(
        html=html_path,
        figures=tuple(out_dir / name for name in figures),
        best_trial_id=a.best.trial_id if a.best is not None else None,
        diagnosis=tuple(a.diagnosis),
        csv=csv_path,
    )


# ---------------------------------------------------------------------------------------------
# Commands


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def locate_sweep(
    spec: SweepSpec, *, tracking_uri: str | None = None, state_dir: str | Path | None = None
) -> tuple[Tracker, str, Path]:
    """The sweep's store, parent run and state folder, for `report` and `export`.

    The tracking URI is `--tracking-uri`, else the one the sweep recorded in its state folder,
    else the spec's / the project's default. The parent run is the one of the state folder,
    else the newest sweep run of the experiment.

    Raises:
        SpecSweepError: the store holds no run of this sweep.
    """
    state_path = sweep_state_dir(spec, state_dir)
    state = _read_state(state_path)
    uri = resolve_tracking_uri(spec, tracking_uri or state.get("tracking_uri"))
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


def confirmation_view(spec: SweepSpec, records: Sequence[TrialRecord]) -> dict[str, Any] | None:
    """The report's confirmation section: verdict, pooled boots, drift and warnings (or None)."""
    v = verdict(spec, records)
    warning = workload_warning(spec, records)
    if v is None and warning is None:
        return None
    out: dict[str, Any] = {"warnings": [warning] if warning else []}
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
