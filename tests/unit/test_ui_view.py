"""The MLflow UI's view of a sweep (store.ui_view) and the contract with the MLflow 3.17 UI it
relies on.

The UI contract reads MLflow's own built JavaScript (shipped in the wheel under
`mlflow/server/js/build`): the experiment-kind tag and value, the shared-view tag prefix and URL
parameter, which keys a shared view may carry, and the grid's column-id format. If an MLflow
upgrade changes any of them, these tests fail before a user sees a wrong page.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import mlflow

from spec_sweep.store import mlflow_private
from spec_sweep.store.ui_view import WORKFLOW_PARAM, trials_view


def test_trials_view_filters_sorts_and_picks_columns() -> None:
    view = trials_view(
        parent_run_id="abc",
        objective="output_throughput",
        mode="max",
        params=["cuda-graph-max-bs", "env.NCCL_ALGO"],
    )
    assert view["searchFilter"] == "tags.`mlflow.parentRunId` = 'abc'"
    # Sorted on the ranking metric: the measured search trials meeting the constraints.
    assert view["orderByKey"] == "metrics.`feasible_output_throughput`"
    assert view["orderByAsc"] is False
    assert view["selectedColumns"][:4] == [
        "metrics.`output_throughput`",
        "metrics.`speedup_vs_baseline`",
        "tags.`failure_mode`",
        "metrics.`accept_length`",
    ]
    assert "metrics.`feasible_output_throughput`" in view["selectedColumns"]
    assert view["selectedColumns"][-2:] == [
        "params.`cuda-graph-max-bs`",
        "params.`env.NCCL_ALGO`",
    ]
    assert view["columnOrder"][0] == "attributes.`Run Name`"
    assert view["columnOrder"][1:-2] == view["selectedColumns"]
    low = trials_view(parent_run_id="abc", objective="ttft_p99_ms_c8", mode="min", params=[])
    assert low["orderByAsc"] is True
    assert low["orderByKey"] == "metrics.`feasible_ttft_p99_ms_c8`"
    assert "metrics.`accept_length_c8`" in low["selectedColumns"]
    assert len(json.dumps(view)) < 20_000  # MLflow's limit on an experiment tag's value


@cache
def _ui_js() -> str:
    build = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(build.glob("*.js")))


def test_pinned_mlflow_version() -> None:
    assert mlflow.__version__.startswith("3.17."), (
        "spec_sweep's UI contract was checked against MLflow 3.17: re-check the tests of this "
        "module against the new version's UI before changing the pin"
    )


def test_ui_reads_the_experiment_kind_tag() -> None:
    js = _ui_js()
    assert f'"{mlflow_private.TAG_EXPERIMENT_KIND}"' in js
    assert f'CUSTOM_MODEL_DEVELOPMENT="{mlflow_private.KIND_MODEL_DEVELOPMENT}"' in js


def test_ui_takes_the_workflow_from_the_url_first() -> None:
    """3.17's workflow-based navigation (flag hard-wired on) reads the URL's `workflowType`,
    else the browser's remembered choice, and derives the experiment kind from it."""
    js = _ui_js()
    assert 'GENAI="genai",e.MACHINE_LEARNING="machine_learning"' in js
    assert 'key:"mlflow.workflowType"' in js
    assert 'e.get("workflowType")' in js
    assert WORKFLOW_PARAM == "workflowType=machine_learning"


def test_ui_opens_shared_views_from_an_experiment_tag() -> None:
    js = _ui_js()
    assert '="viewStateShareKey"' in js
    assert f'="{mlflow_private.TAG_VIEW_PREFIX}"' in js
    # The search facets a shared view (or the URL) may set ...
    facets = re.search(r'\["searchFilter","orderByKey","orderByAsc",[^\]]*\]', js)
    assert facets is not None
    assert json.loads(facets.group(0)) == [
        "searchFilter",
        "orderByKey",
        "orderByAsc",
        "startTime",
        "lifecycleFilter",
        "modelVersionFilter",
        "datasetsFilter",
    ]
    # ... and the UI state it may carry; the runs' expansion is not restored from a shared
    # view, which is why the view filters on the parent instead of expanding it.
    ui_state = re.search(r'\["selectedColumns","columnOrder","columnWidths",[^\]]*\]', js)
    assert ui_state is not None
    keys = json.loads(ui_state.group(0))
    assert {"selectedColumns", "columnOrder", "columnWidths", "runsHiddenMode"} <= set(keys)
    assert '["runsExpanded","runsPinned","runsHidden","runsVisibilityMap"' in js
    view = trials_view(parent_run_id="p", objective="output_throughput", mode="max", params=[])
    assert set(view) <= set(json.loads(facets.group(0))) | set(keys)


def test_ui_column_ids_and_routes() -> None:
    js = _ui_js()
    assert 'I=(e,t)=>e+".`"+t+"`"' in js  # canonical column key: type.`name`
    assert 'ATTRIBUTES:"attributes",PARAMS:"params",METRICS:"metrics",TAGS:"tags"' in js
    assert 'RUN_NAME:"Run Name"' in js
    assert '"/experiments/:experimentId/runs"' in js
    assert '"/experiments/:experimentId/runs/:runUuid/artifactPath/*"' in js
