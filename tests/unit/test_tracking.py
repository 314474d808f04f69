"""Pure parts of spec_sweep.tracking (trial names, the trials view) and the contract with the
MLflow 3.17 UI and system-metrics monitor they rely on.

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
from typing import Any

import mlflow

from spec_sweep import tracking
from spec_sweep.tracking import run_name, trials_view

BASELINE: dict[str, Any] = {
    "speculative-algorithm": None,
    "cuda-graph-max-bs": 512,
    "mem-fraction-static": 0.88,
    "env.NCCL_ALGO": None,
    "disable-custom-all-reduce": False,
    "enable-flashinfer-allreduce-fusion": False,
    "enable-torch-symm-mem": False,
    "ep-size": 1,
}


def test_run_name_shows_what_differs_from_the_baseline() -> None:
    config = {**BASELINE, "cuda-graph-max-bs": 64, "mem-fraction-static": 0.9}
    assert run_name("t0010", config, BASELINE) == "t0010 cgbs=64 mem=0.9"
    assert run_name("t0000", BASELINE, BASELINE) == "t0000 baseline"


def test_run_name_of_an_eagle3_trial() -> None:
    config = {
        **BASELINE,
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
    }
    assert run_name("t0008", config, BASELINE) == "t0008 EAGLE3 s3 k1 d4"


def test_run_name_spells_flags_and_nulls() -> None:
    config = {
        **BASELINE,
        "disable-custom-all-reduce": True,
        "enable-torch-symm-mem": True,
        "env.NCCL_ALGO": "Ring",
        "ep-size": 8,
        "moe-a2a-backend": "flashinfer",
    }
    name = run_name("t0003", config, BASELINE)
    assert name == "t0003 nccl=Ring no-custom-ar symm-mem ep=8 a2a=flashinfer"
    back = {**config, "env.NCCL_ALGO": None, "ep-size": 1}
    assert run_name("t0004", back, config) == "t0004 nccl=default ep=1"
    assert run_name("t0005", BASELINE, {**BASELINE, "speculative-algorithm": "EAGLE3"}) == (
        "t0005 no-spec"
    )


def test_run_name_of_unknown_parameters_is_short_and_readable() -> None:
    config = {
        **BASELINE,
        "chunked-prefill-size": 8192,
        "enable-mixed-chunk": True,
        "env.SGLANG_MY_KNOB": "x",
        "schedule-policy": "lpm",
    }
    assert run_name("t0001", config, BASELINE) == (
        "t0001 cps=8192 mixed-chunk sglang-my-knob=x schedule-policy=lpm"
    )


def test_run_name_is_stable_and_unique_per_attempt() -> None:
    config = {**BASELINE, "cuda-graph-max-bs": 128}
    first = run_name("t0002", config, BASELINE)
    assert run_name("t0002", config, dict(BASELINE)) == first
    assert run_name("t0002", config, BASELINE, attempt=2) == f"{first} #2"
    assert run_name("t0003", config, BASELINE) != first
    # No baseline known (a manual trial of an old caller): every parameter, still short.
    assert run_name("t0002", {"cuda-graph-max-bs": 128}, None) == "t0002 cgbs=128"
    assert len(run_name("t0002", {f"p{i}": "x" * 40 for i in range(20)}, None)) <= 250


def test_trials_view_filters_sorts_and_picks_columns() -> None:
    view = trials_view(
        parent_run_id="abc",
        objective="output_throughput",
        mode="max",
        params=["cuda-graph-max-bs", "env.NCCL_ALGO"],
    )
    assert view["searchFilter"] == "tags.`mlflow.parentRunId` = 'abc'"
    assert view["orderByKey"] == "metrics.`output_throughput`"
    assert view["orderByAsc"] is False
    assert view["selectedColumns"][:4] == [
        "metrics.`output_throughput`",
        "metrics.`speedup_vs_baseline`",
        "tags.`failure_mode`",
        "metrics.`accept_length`",
    ]
    assert view["selectedColumns"][-2:] == [
        "params.`cuda-graph-max-bs`",
        "params.`env.NCCL_ALGO`",
    ]
    assert view["columnOrder"][0] == "attributes.`Run Name`"
    assert view["columnOrder"][1:-2] == view["selectedColumns"]
    low = trials_view(parent_run_id="abc", objective="ttft_p99_ms_c8", mode="min", params=[])
    assert low["orderByAsc"] is True
    assert "metrics.`accept_length_c8`" in low["selectedColumns"]
    assert len(json.dumps(view)) < 20_000  # MLflow's limit on an experiment tag's value


# -- the contract with MLflow 3.17 ------------------------------------------------------------


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
    assert f'"{tracking._TAG_EXPERIMENT_KIND}"' in js
    assert f'CUSTOM_MODEL_DEVELOPMENT="{tracking._KIND_MODEL_DEVELOPMENT}"' in js


def test_ui_takes_the_workflow_from_the_url_first() -> None:
    """3.17's workflow-based navigation (flag hard-wired on) reads the URL's `workflowType`,
    else the browser's remembered choice, and derives the experiment kind from it."""
    js = _ui_js()
    assert 'GENAI="genai",e.MACHINE_LEARNING="machine_learning"' in js
    assert 'key:"mlflow.workflowType"' in js
    assert 'e.get("workflowType")' in js
    assert tracking._WORKFLOW_PARAM == "workflowType=machine_learning"


def test_ui_opens_shared_views_from_an_experiment_tag() -> None:
    js = _ui_js()
    assert '="viewStateShareKey"' in js
    assert f'="{tracking._VIEW_TAG_PREFIX}"' in js
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


def test_system_metrics_monitor_api() -> None:
    """The parts of MLflow's monitor the tracker calls (its class is not typed or documented
    beyond `mlflow.start_run(log_system_metrics=True)`)."""
    monitor_cls = tracking.SystemMetricsMonitor
    for method in ("start", "finish", "collect_metrics", "aggregate_metrics", "publish_metrics"):
        assert callable(getattr(monitor_cls, method))
    from mlflow.environment_variables import (
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION,
        MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL,
    )

    assert MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL.name == "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"
    assert MLFLOW_SERVER_ENABLE_JOB_EXECUTION.name == "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
