"""The parts of MLflow spec_sweep relies on that MLflow does not document, in one module.

- The MLflow 3.17 UI's experiment-kind tag: an experiment tagged "custom model development"
  opens on its runs table (without it, a new experiment opens on the GenAI overview of traces).
- The UI's "share view" feature: an experiment tag holding the runs page's state as JSON, opened
  by `#/experiments/<id>/runs?viewStateShareKey=<key>`; the UI writes and reads it (the view's
  shape is `ui_view`'s).
- MLflow's system-metrics monitor, started and stopped per trial run (CPU, memory and, through
  NVML, each GPU's memory, utilisation and power), whose class is neither typed nor documented
  beyond `mlflow.start_run(log_system_metrics=True)`.
- MLflow's REST helpers (`mlflow.utils.credentials`, `mlflow.utils.rest_utils`), for one quick
  request with the credentials MLflow itself would send (`access_status`, `has_credentials`):
  its client retries a server that does not answer for minutes.

Each is pinned against the installed MLflow: tests/unit/test_ui_view.py reads the UI's built
JavaScript, tests/unit/test_mlflow_private.py the monitor's methods, and
tests/unit/test_private_api_contracts.py keeps every private use here.
"""

from __future__ import annotations

import logging
from typing import Any

from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor as _Monitor
from mlflow.utils.credentials import get_default_host_creds as _host_creds
from mlflow.utils.credentials import read_mlflow_creds
from mlflow.utils.rest_utils import http_request as _http_request

__all__ = [
    "KIND_MODEL_DEVELOPMENT",
    "TAG_EXPERIMENT_KIND",
    "TAG_VIEW_PREFIX",
    "SystemMetricsMonitor",
    "access_status",
    "has_credentials",
    "start_monitor",
    "stop_monitor",
]

TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
KIND_MODEL_DEVELOPMENT = "custom_model_development"
TAG_VIEW_PREFIX = "mlflow.sharedViewState."
# MLflow's monitor class is untyped: held as Any (its methods are pinned by the contract test).
SystemMetricsMonitor: Any = _Monitor
# Untyped too: held as Any.
get_default_host_creds: Any = _host_creds
http_request: Any = _http_request


def start_monitor(run_id: str, *, interval_s: float, tracking_uri: str) -> Any:
    """Start sampling this node's system metrics into a run, every `interval_s` seconds."""
    monitor = SystemMetricsMonitor(
        run_id,
        sampling_interval=interval_s,
        samples_before_logging=1,
        tracking_uri=tracking_uri,
    )
    monitor.start()
    return monitor


def stop_monitor(monitor: Any, run_id: str) -> None:
    """Stop a run's monitor and log one last sample (a trial shorter than one interval still
    shows where it ended). Telemetry never fails a trial."""
    try:
        monitor.finish()
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()
    except Exception as exc:
        logging.getLogger(__name__).warning("system metrics of run %s: %s", run_id, exc)


def has_credentials(uri: str) -> bool:
    """Whether MLflow would send credentials to `uri`: `MLFLOW_TRACKING_TOKEN`, or a user name
    and password (`MLFLOW_TRACKING_USERNAME` / `_PASSWORD`, or MLflow's credentials file)."""
    creds = read_mlflow_creds()
    host = get_default_host_creds(uri)
    return bool(host.token or (creds.username and creds.password))


def access_status(uri: str, experiment: str, *, timeout_s: float = 10.0) -> int | None:
    """The HTTP status of one read of `experiment` on the tracking server at `uri`, with the
    credentials MLflow would send, without retries (None: no answer in `timeout_s`)."""
    try:
        response = http_request(
            get_default_host_creds(uri),
            "/api/2.0/mlflow/experiments/get-by-name",
            "GET",
            max_retries=0,
            timeout=timeout_s,
            raise_on_status=False,
            params={"experiment_name": experiment},
        )
    except Exception:  # no answer: left to MLflow's client, which says why
        return None
    return int(response.status_code)
