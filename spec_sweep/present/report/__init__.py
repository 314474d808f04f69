"""The sweep report: what won, by how much, why the losers lost and what failed where.

- `analysis`: the numbers (pure): the speculative-decoding diagnosis, Pareto front, GPU-hours;
- `format`: units, numbers and log excerpts as the report writes them;
- `figures` and `diagnosis_figures`: the figures (matplotlib);
- `html`: the self-contained HTML page (Jinja2 template, autoescaped);
- `build`: writing the report's files and logging them to the sweep's parent run.

The ranking, the best trial and the configuration to launch come from `present.sweep_view`, as
they do for the terminal summary. The replay table `trials.csv` written beside the report is
`store.replay`'s. Nothing here imports Ray.
"""

from __future__ import annotations

from spec_sweep.present.report.analysis import SpecDiagnosis, diagnose_speculative, pareto_front
from spec_sweep.present.report.build import ReportResult, build_report, publish_report

__all__ = [
    "ReportResult",
    "SpecDiagnosis",
    "build_report",
    "diagnose_speculative",
    "pareto_front",
    "publish_report",
]
