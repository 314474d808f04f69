"""The sweep report: what won, by how much, why the losers lost and what failed where.

- `analysis`: the numbers (pure): best trial, speculative-decoding diagnosis, Pareto front,
  importances, GPU-hours;
- `figures`: the figures (matplotlib);
- `html`: the self-contained HTML page (Jinja2 template, autoescaped);
- `build`: writing the report's files and logging them to the sweep's parent run.

The replay table `trials.csv` written beside the report has its own module, `spec_sweep.replay`,
which also reads it back. Nothing here imports Ray.
"""

from __future__ import annotations

from spec_sweep.report.analysis import SpecDiagnosis, diagnose_speculative, pareto_front
from spec_sweep.report.build import ReportResult, build_report, locate_sweep, publish_report

__all__ = [
    "ReportResult",
    "SpecDiagnosis",
    "build_report",
    "diagnose_speculative",
    "locate_sweep",
    "pareto_front",
    "publish_report",
]
