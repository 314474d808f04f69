"""The undocumented parts of MLflow the store relies on (store.mlflow_private): the monitor."""

from __future__ import annotations

from spec_sweep.store import mlflow_private


def test_system_metrics_monitor_api() -> None:
    """The parts of MLflow's monitor the tracker calls (its class is not typed or documented
    beyond `mlflow.start_run(log_system_metrics=True)`)."""
    monitor_cls = mlflow_private.SystemMetricsMonitor
    for method in ("start", "finish", "collect_metrics", "aggregate_metrics", "publish_metrics"):
        assert callable(getattr(monitor_cls, method))
    from mlflow.environment_variables import (
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION,
        MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL,
    )

    assert MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL.name == "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"
    assert MLFLOW_SERVER_ENABLE_JOB_EXECUTION.name == "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
