"""The MLflow UI's view of a sweep: its trials, best first, and the URL route that opens it.

This module owns the shape of what the MLflow 3.17 UI shows for a sweep, as data: the runs
page's state that `spec-sweep ui` links to (`trials_view`: the sweep's trials only, sorted on
`names.ranked_metric` so the UI's rank 1 is the sweep's best trial by the one ranking rule of
`core.history.History`, with the objective, speed-up, failure mode, accept length and the
searched parameters as columns), the share key it is stored under and the route that opens it.
The format is the UI's own and not a documented API (the contract test in
tests/unit/test_ui_view.py pins it against MLflow's built UI). No MLflow import: the store's
tracker writes what this module shapes, under the UI's tag (`mlflow_private.TAG_VIEW_PREFIX`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spec_sweep.core import names

__all__ = ["WORKFLOW_PARAM", "trials_view", "trials_view_path", "view_key"]

# The 3.17 UI's workflow-based navigation (always on in 3.17) takes the experiment's kind from its
# "GenAI | Model training" switch: the URL's `workflowType`, else the choice remembered in the
# browser (default GenAI). The links spec_sweep prints carry the URL parameter.
WORKFLOW_PARAM = "workflowType=machine_learning"
_VIEW_KEY_PREFIX = "spec-sweep-"


def trials_view(
    *,
    parent_run_id: str,
    objective: str,
    mode: str,
    params: Iterable[str],
) -> dict[str, Any]:
    """The MLflow runs page's state that shows one sweep's trials, best first.

    The trials of the sweep only (a filter on their parent), sorted on the ranking metric
    (`feasible_<objective>`: the objective of the measured search trials that meet the
    constraints, so failed trials, trials that break a constraint and confirmation boots come
    after the ranked ones), with the objective, speed-up, failure mode, accept length, peak GPU
    memory, boot time, the ranking metric and every searched parameter as columns. The shape
    is the MLflow 3.17 UI's own (search facets plus its UI state, as its "share" button writes
    it).
    """
    metrics = [objective]
    level = names.level_of(objective)
    suffix = f"_c{level}" if level is not None else ""
    ranked = names.ranked_metric(objective)
    for name in (names.SPEEDUP_METRIC, f"accept_length{suffix}", "gpu_mem_peak_gib", "boot_s"):
        if name not in metrics:
            metrics.append(name)
    metrics.append(ranked)
    columns = [f"metrics.`{m}`" for m in metrics]
    columns.insert(2, f"tags.`{names.TAG_FAILURE}`")
    columns += [f"params.`{p}`" for p in params]
    name = "attributes.`Run Name`"
    return {
        "searchFilter": f"tags.`{names.TAG_PARENT}` = '{parent_run_id}'",
        "orderByKey": f"metrics.`{ranked}`",
        "orderByAsc": mode == "min",
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": columns,
        # The grid's column ids: name first, our columns in our order (MLflow would group them
        # by kind, sorted by name), then the creation time and duration.
        "columnOrder": [name, *columns, "runDateAndNestInfo", "duration"],
        "columnWidths": {name: 240, **{c: 130 for c in columns[:3]}},
        "runsHiddenMode": "SHOW_ALL",
    }


def view_key(parent_run_id: str) -> str:
    """The share key of a sweep's trials view."""
    return f"{_VIEW_KEY_PREFIX}{parent_run_id}"


def trials_view_path(experiment_id: str, parent_run_id: str) -> str:
    """The UI route (after `#`) of a sweep's trials view."""
    return (
        f"/experiments/{experiment_id}/runs?{WORKFLOW_PARAM}&"
        f"viewStateShareKey={view_key(parent_run_id)}"
    )
