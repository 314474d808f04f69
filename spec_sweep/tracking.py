"""MLflow: the sweep's parent run, one child run per trial, and reading them back.

This is the only module that imports mlflow. It writes the layout of docs/design.md, "MLflow layout"
through an explicit `MlflowClient` (safe from Ray worker threads): experiment = sweep name, one
parent run per sweep (tag `spec_sweep.kind=sweep`, the spec as an artifact, `best_<metric>` at the
end) and one child run per trial (tags `spec_sweep.kind=trial`, `spec_sweep.trial_id`,
`failure_mode`; params by parameter key; the metrics measured; artifacts `server.log`,
`command.txt`, `bench.json`). A trial's child run is written and closed as FINISHED *before* the
trial is reported done, which makes the store the durable record of finished trials that resume
relies on. Secrets (names with TOKEN, KEY, SECRET or PASSWORD) never reach the store in clear.

It also shapes what the MLflow UI shows: experiments are tagged as model-development experiments
(so the UI opens them on the runs table, not on the GenAI overview), trials get short names that
say how they differ from the baseline, a trial's node is sampled by MLflow's own system-metrics
monitor while it runs (CPU, memory, and GPU memory, utilisation and power through NVML), and each
sweep publishes a shared view of its trials (columns, sort, filter) that `spec-sweep ui` links to.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor as _Monitor
from mlflow.tracking import MlflowClient

from spec_sweep.failures import FailureMode
from spec_sweep.paths import default_tracking_uri
from spec_sweep.space import Config, config_key, redact, render_value, secret_values
from spec_sweep.spec import SweepSpec

__all__ = [
    "KIND_SWEEP",
    "KIND_TRIAL",
    "REUSABLE_MODES",
    "Tracker",
    "TrialRecord",
    "config_hash",
    "resolve_tracking_uri",
    "run_name",
    "trials_view",
]

#: Outcomes that asking again would not change (a hang or a crash may be transient).
REUSABLE_MODES = frozenset(
    {
        FailureMode.NONE,
        FailureMode.OOM,
        FailureMode.ASSERTION,
        FailureMode.UNSUPPORTED,
        FailureMode.INVALID_ARGS,
    }
)
KIND_SWEEP = "sweep"
KIND_TRIAL = "trial"
_TAG_KIND = "spec_sweep.kind"
_TAG_TRIAL_ID = "spec_sweep.trial_id"
_TAG_CONFIG = "spec_sweep.config"
_TAG_CONFIG_HASH = "spec_sweep.config_hash"
_TAG_STATE_ID = "spec_sweep.state_id"
_TAG_REASON = "spec_sweep.reason"
_TAG_ELAPSED = "spec_sweep.elapsed_s"
_TAG_PROMPTS = "spec_sweep.prompt_source"
_TAG_ATTEMPT = "spec_sweep.attempt"
_TAG_REUSED = "spec_sweep.reused_from"
_TAG_FINGERPRINT = "spec_sweep.node_fingerprint"
_TAG_FAILURE = "failure_mode"
_TAG_PARENT = "mlflow.parentRunId"
_TAG_NOTE = "mlflow.note.content"
# The MLflow 3.17 UI opens an experiment on its runs table when this tag says "custom model
# development" (without it, a new experiment opens on the GenAI overview of traces).
_TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
_KIND_MODEL_DEVELOPMENT = "custom_model_development"
# ... but the 3.17 UI's workflow-based navigation (always on in 3.17) takes the kind from its
# "GenAI | Model training" switch instead: the URL's `workflowType`, else the choice remembered in
# the browser (default GenAI). The links spec_sweep prints carry the URL parameter.
_WORKFLOW_PARAM = "workflowType=machine_learning"
# The UI's "share view" feature: an experiment tag holding the runs page's state as JSON, opened
# by `#/experiments/<id>/runs?viewStateShareKey=<key>`. MLflow's UI writes and reads it; it is
# not a documented API (the contract test in tests/unit/test_tracking.py pins it).
_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
_VIEW_KEY_PREFIX = "spec-sweep-"
#: Seconds between samples of the node's system metrics during a trial (MLflow's
#: `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` overrides it, as it does for MLflow itself).
SYSTEM_METRICS_INTERVAL_S = 5.0
# MLflow's monitor class is untyped: held as Any (its methods are pinned by the contract test).
SystemMetricsMonitor: Any = _Monitor

# MLflow prints "View run ... at: <url>" to stdout when a run on a tracking server ends; the
# sweep's own summary says where to look.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
for _name in ("mlflow", "alembic", "sqlalchemy"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def resolve_tracking_uri(spec: SweepSpec, override: str | None = None) -> str:
    """`--tracking-uri`, else `tracking.uri`, else the project's `mlruns/` SQLite store."""
    uri = override or spec.tracking.uri or default_tracking_uri()
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return uri


def config_hash(config: Mapping[str, Any]) -> str:
    """A short stable hash of a configuration."""
    return hashlib.sha1(config_key(config).encode()).hexdigest()[:16]


def _param_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return render_value(value)


# Short names of the parameters the shipped search spaces use: "" puts the value alone
# (`EAGLE3`), a name ending in a letter glues the value to it (`s3`), one ending in "=" reads
# `cgbs=64`. A boolean flag reads as its name when on and `no-<name>` when off.
_SHORT = {
    "speculative-algorithm": "",
    "speculative-num-steps": "s",
    "speculative-eagle-topk": "k",
    "speculative-num-draft-tokens": "d",
    "cuda-graph-max-bs": "cgbs=",
    "cuda-graph-max-bs-decode": "cgbs=",
    "cuda-graph-max-bs-prefill": "cgbs-prefill=",
    "mem-fraction-static": "mem=",
    "ep-size": "ep=",
    "tp-size": "tp=",
    "dp-size": "dp=",
    "moe-a2a-backend": "a2a=",
    "env.NCCL_ALGO": "nccl=",
    "env.NCCL_PROTO": "nccl-proto=",
    "disable-custom-all-reduce": "custom-ar",
    "enable-flashinfer-allreduce-fusion": "fi-ar-fusion",
    "enable-torch-symm-mem": "symm-mem",
}
_NULL_SHORT = {"speculative-algorithm": "no-spec"}


def _short_key(key: str) -> str:
    if key in _SHORT:
        return _SHORT[key]
    name = key.removeprefix("env.").lower().replace("_", "-")
    for prefix in ("enable-", "disable-"):
        name = name.removeprefix(prefix)
    name = name.replace("speculative-", "spec-")
    if len(name) > 14 and name.count("-") >= 2:
        name = "".join(part[0] for part in name.split("-") if part)
    return name if isinstance(_default_bool(key), bool) else f"{name}="


def _default_bool(key: str) -> bool | None:
    """For `enable-x`/`disable-x` flags: the value that turns the feature on."""
    if key.startswith("enable-"):
        return True
    if key.startswith("disable-"):
        return False
    return None


def _short_item(key: str, value: Any) -> str:
    short = _short_key(key)
    if value is None:
        return _NULL_SHORT.get(key, f"{short.rstrip('=')}=default")
    if isinstance(value, bool):
        on_value = _default_bool(key)
        on = value if on_value is None else value is on_value
        name = short.rstrip("=")
        return name if on else f"no-{name}"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{short}{text}"


def run_name(
    trial_id: str,
    config: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    *,
    attempt: int = 1,
) -> str:
    """A trial's run name: its id and what differs from the baseline, in short.

    `t0010 cgbs=64 mem=0.88`, `t0008 EAGLE3 s3 k1 d4`, `t0000 baseline`. A parameter the baseline
    does not set (the speculative knobs of a non-speculative baseline) counts as different. The
    name depends only on the trial id, its configuration and the baseline, so a resumed sweep
    names a trial as before; a second attempt of a trial adds `#2`.
    """
    if baseline is None:
        parts = [_short_item(k, v) for k, v in config.items()]
    else:
        parts = [
            _short_item(k, v)
            for k, v in config.items()
            if k not in baseline or config_key({k: baseline[k]}) != config_key({k: v})
        ]
    body = " ".join(parts) if parts else "baseline"
    suffix = f" #{attempt}" if attempt > 1 else ""
    return f"{trial_id} {body}"[: 250 - len(suffix)] + suffix


def trials_view(
    *,
    parent_run_id: str,
    objective: str,
    mode: str,
    params: Iterable[str],
) -> dict[str, Any]:
    """The MLflow runs page's state that shows one sweep's trials, best first.

    The trials of the sweep only (a filter on their parent), sorted by the objective, with the
    objective, speed-up, failure mode, accept length, peak GPU memory and every searched parameter
    as columns. The shape is the MLflow 3.17 UI's own (search facets plus its UI state, as its
    "share" button writes it).
    """
    metrics = [objective]
    base = objective.rsplit("_c", 1)
    suffix = f"_c{base[1]}" if len(base) == 2 and base[1].isdigit() else ""
    for name in ("speedup_vs_baseline", f"accept_length{suffix}", "gpu_mem_peak_gib", "boot_s"):
        if name not in metrics:
            metrics.append(name)
    columns = [f"metrics.`{m}`" for m in metrics]
    columns.insert(2, f"tags.`{_TAG_FAILURE}`")
    columns += [f"params.`{p}`" for p in params]
    name = "attributes.`Run Name`"
    return {
        "searchFilter": f"tags.`{_TAG_PARENT}` = '{parent_run_id}'",
        "orderByKey": f"metrics.`{objective}`",
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
        f"/experiments/{experiment_id}/runs?{_WORKFLOW_PARAM}&"
        f"viewStateShareKey={view_key(parent_run_id)}"
    )


@dataclass(frozen=True)
class SweepRef:
    """Where a sweep is in the store, and the URL route of its trials view."""

    experiment_id: str
    experiment: str
    parent_run_id: str
    view_path: str


@dataclass(frozen=True)
class TrialRecord:
    """A trial as the store holds it."""

    run_id: str
    trial_id: str
    status: str
    config: Config
    failure_mode: FailureMode | None
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    elapsed_s: float | None = None
    start_time: int = 0
    end_time: int | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether the trial ran to a classified outcome."""
        return self.status == "FINISHED" and self.failure_mode is not None


class Tracker:
    """One sweep's view of an MLflow store (picklable: holds only the URI and names)."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        *,
        secrets: Iterable[str] = (),
        baseline: Mapping[str, Any] | None = None,
        system_metrics_interval_s: float | None = None,
    ) -> None:
        """Point at a store and an experiment (created on first use).

        Args:
            uri: The tracking URI.
            experiment: The experiment's name.
            secrets: Values to redact from everything logged.
            baseline: The sweep's baseline configuration (trial names say what differs from it).
            system_metrics_interval_s: Seconds between samples of a trial's system metrics;
                default `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` as set where the tracker is
                made (it travels with it to the Ray workers), else `SYSTEM_METRICS_INTERVAL_S`.
        """
        self.uri = uri
        self.experiment = experiment
        self.secrets = tuple(secrets)
        self.baseline = dict(baseline) if baseline is not None else None
        if system_metrics_interval_s is None:
            env = os.environ.get("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "")
            system_metrics_interval_s = float(env) if env else SYSTEM_METRICS_INTERVAL_S
        self.system_metrics_interval_s = system_metrics_interval_s
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._monitors: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_monitors"] = {}
        return state

    @property
    def client(self) -> MlflowClient:
        """The MLflow client (created lazily, per process)."""
        if self._client is None:
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    @property
    def experiment_id(self) -> str:
        """The experiment's id, creating the experiment if needed."""
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    self.client.restore_experiment(found.experiment_id)
                if _TAG_EXPERIMENT_KIND not in found.tags:  # made by an older spec_sweep
                    self.client.set_experiment_tag(
                        found.experiment_id, _TAG_EXPERIMENT_KIND, _KIND_MODEL_DEVELOPMENT
                    )
                self._experiment_id = found.experiment_id
            else:
                location = None
                if self.uri.startswith("sqlite:///") and self.uri.endswith("mlruns/mlflow.db"):
                    artifacts = Path(self.uri[len("sqlite:///") :]).parent / "artifacts"
                    location = (artifacts / self.experiment).as_uri()
                try:
                    self._experiment_id = self.client.create_experiment(
                        self.experiment,
                        artifact_location=location,
                        tags={_TAG_EXPERIMENT_KIND: _KIND_MODEL_DEVELOPMENT},
                    )
                except mlflow.exceptions.MlflowException:
                    found = self.client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
                    self._experiment_id = found.experiment_id
        return self._experiment_id

    # -- sweep (parent) runs -------------------------------------------------------------------

    def find_sweep_run(self, state_id: str) -> str | None:
        """The parent run of the sweep state `state_id`, if any."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{_TAG_KIND}` = '{KIND_SWEEP}' and "
            f"tags.`{_TAG_STATE_ID}` = '{state_id}'",
            max_results=1,
        )
        return runs[0].info.run_id if runs else None

    def start_sweep(self, spec: SweepSpec, *, state_id: str, simulate: bool) -> tuple[str, bool]:
        """Create the parent run, or re-attach to this state's one.

        Returns:
            The parent run id and whether it already existed.
        """
        existing = self.find_sweep_run(state_id)
        if existing is not None:
            self.client.update_run(existing, status="RUNNING")
            self.publish_trials_view(
                existing,
                objective=spec.objective.metric,
                mode=spec.objective.mode,
                params=list(spec.params),
            )
            return existing, True
        run = self.client.create_run(
            self.experiment_id,
            run_name=spec.name,
            tags={
                _TAG_KIND: KIND_SWEEP,
                _TAG_STATE_ID: state_id,
                _TAG_NOTE: spec.description,
                "spec_sweep.simulate": str(simulate).lower(),
            },
        )
        run_id = run.info.run_id
        self.publish_trials_view(
            run_id,
            objective=spec.objective.metric,
            mode=spec.objective.mode,
            params=list(spec.params),
        )
        self.client.set_tag(run_id, _TAG_NOTE, self._sweep_note(spec.description, run_id))
        params = {
            "objective": f"{spec.objective.mode} {spec.objective.metric}",
            "searcher": f"{spec.searcher.kind} seed={spec.searcher.seed}",
            "budget.trials": str(spec.budget.trials),
            "node.model": spec.node.model,
            "node.draft_model": str(spec.node.draft_model),
            "node.gpus": str(spec.node.gpus),
            "node.sglang_version": spec.node.sglang_version,
            "node.sim_profile": str(spec.node.sim_profile) if simulate else "none",
            "search_space": ", ".join(spec.params),
        }
        self.client.log_batch(
            run_id, params=[Param(k, redact(v, self.secrets)[:6000]) for k, v in params.items()]
        )
        dump = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.client.log_text(run_id, redact(json.dumps(dump, indent=2), self.secrets), "spec.json")
        if spec.source and Path(spec.source).is_file():
            text = Path(spec.source).read_text(encoding="utf-8")
            self.client.log_text(run_id, redact(text, self.secrets), Path(spec.source).name)
        return run_id, False

    def _sweep_note(self, description: str, run_id: str) -> str:
        """The parent run's description: the spec's, then links to the trials and the report."""
        eid = self.experiment_id
        links = (
            f"**Trials**, best first, with objective, speed-up, failure mode, accept length and "
            f"the searched parameters: [open the trials view](#{trials_view_path(eid, run_id)})"
            f"\n\n**Report** (written when the sweep ends): "
            f"[report/report.html](#/experiments/{eid}/runs/{run_id}/artifactPath/report/"
            "report.html)"
        )
        return f"{description.strip()}\n\n{links}" if description.strip() else links

    def publish_trials_view(
        self, parent_run_id: str, *, objective: str, mode: str, params: Iterable[str]
    ) -> str:
        """Store the sweep's trials view on its experiment; returns the view's UI route."""
        view = trials_view(
            parent_run_id=parent_run_id, objective=objective, mode=mode, params=params
        )
        self.client.set_experiment_tag(
            self.experiment_id, _VIEW_TAG_PREFIX + view_key(parent_run_id), json.dumps(view)
        )
        return trials_view_path(self.experiment_id, parent_run_id)

    def finish_sweep(
        self, run_id: str, *, status: str = "FINISHED", metrics: Mapping[str, float] | None = None
    ) -> None:
        """Log the sweep's final metrics and close the parent run."""
        if metrics:
            now = int(time.time() * 1000)
            self.client.log_batch(
                run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()]
            )
        self.client.set_terminated(run_id, status=status)

    def log_artifacts(self, run_id: str, local_dir: Path, artifact_path: str | None = None) -> None:
        """Upload a folder (e.g. the report) to a run."""
        self.client.log_artifacts(run_id, str(local_dir), artifact_path)

    # -- trial (child) runs --------------------------------------------------------------------

    def start_trial(
        self,
        parent_run_id: str,
        *,
        trial_id: str,
        config: Mapping[str, Any],
        attempt: int = 1,
        fingerprint: str | None = None,
        tags: Mapping[str, str] | None = None,
        system_metrics: bool = True,
    ) -> str:
        """Open a RUNNING child run for one trial attempt (with extra `tags`); returns its run id.

        With `system_metrics` (a trial that runs here, not one answered from a record), MLflow's
        system-metrics monitor samples this node (CPU, memory, disk, network and, through NVML,
        each GPU's memory, utilisation and power) into the run until `finish_trial` or
        `kill_run`. Without an NVIDIA GPU it logs the rest and no GPU metrics.
        """
        run = self.client.create_run(
            self.experiment_id,
            run_name=run_name(trial_id, config, self.baseline, attempt=attempt),
            tags={
                _TAG_PARENT: parent_run_id,
                _TAG_KIND: KIND_TRIAL,
                _TAG_TRIAL_ID: trial_id,
                _TAG_CONFIG: json.dumps(dict(config)),
                _TAG_CONFIG_HASH: config_hash(config),
                _TAG_ATTEMPT: str(attempt),
                **({_TAG_FINGERPRINT: fingerprint} if fingerprint else {}),
                **(tags or {}),
            },
        )
        params = [Param(k, redact(_param_value(v), self.secrets)[:6000]) for k, v in config.items()]
        if params:
            self.client.log_batch(run.info.run_id, params=params)
        if system_metrics:
            self._start_system_metrics(run.info.run_id)
        return str(run.info.run_id)

    def _start_system_metrics(self, run_id: str) -> None:
        monitor = SystemMetricsMonitor(
            run_id,
            sampling_interval=self.system_metrics_interval_s,
            samples_before_logging=1,
            tracking_uri=self.uri,
        )
        monitor.start()
        self._monitors[run_id] = monitor

    def _stop_system_metrics(self, run_id: str) -> None:
        """Stop a run's monitor and log one last sample (a trial shorter than one interval
        still shows where it ended). Telemetry never fails a trial."""
        monitor = self._monitors.pop(run_id, None)
        if monitor is None:
            return
        try:
            monitor.finish()
            monitor.collect_metrics()
            monitor.publish_metrics(monitor.aggregate_metrics())
            monitor.mlflow_logger.flush()
        except Exception as exc:
            logging.getLogger(__name__).warning("system metrics of run %s: %s", run_id, exc)

    def finish_trial(
        self,
        run_id: str,
        *,
        failure_mode: FailureMode,
        metrics: Mapping[str, float],
        reason: str,
        elapsed_s: float,
        prompt_source: str = "",
        command: str | None = None,
        log_path: str | Path | None = None,
        bench_path: str | Path | None = None,
        extra_tags: Mapping[str, str] | None = None,
        artifacts: Sequence[Path] = (),
    ) -> bool:
        """Log a trial's outcome and artifacts, then close its child run as FINISHED.

        Returns:
            False (and writes nothing) when the run is no longer RUNNING: a newer driver closed
            it as KILLED and re-queued the trial, so this late result must not count.
        """
        self._stop_system_metrics(run_id)
        if self.client.get_run(run_id).info.status != "RUNNING":
            return False
        now = int(time.time() * 1000)
        tags = {
            _TAG_FAILURE: failure_mode.value,
            _TAG_REASON: redact(reason, self.secrets)[:4000],
            _TAG_ELAPSED: f"{elapsed_s:.3f}",
        }
        if prompt_source:
            tags[_TAG_PROMPTS] = prompt_source
        tags.update(extra_tags or {})
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        if command is not None:
            self.client.log_text(run_id, redact(command, self.secrets) + "\n", "command.txt")
        if log_path is not None and Path(log_path).is_file():
            text = Path(log_path).read_text(encoding="utf-8", errors="replace")
            self.client.log_text(run_id, redact(text, self.secrets), "server.log")
        if bench_path is not None and Path(bench_path).is_file():
            self.client.log_artifact(run_id, str(bench_path))
        for path in artifacts:  # goodput.json, quality.json
            if path.is_file():
                self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, status="FINISHED")
        return True

    def log_metrics(self, run_id: str, metrics: Mapping[str, float]) -> None:
        """Add metrics to a (possibly finished) run."""
        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()]
        )

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Add tags to a (possibly finished) run."""
        self.client.log_batch(run_id, tags=[RunTag(k, v[:5000]) for k, v in tags.items()])

    def kill_run(self, run_id: str, *, tags: Mapping[str, str] | None = None) -> None:
        """Close a run as KILLED (with tags saying why, if given)."""
        self._stop_system_metrics(run_id)
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.client.set_terminated(run_id, status="KILLED")

    def reopen_run(self, run_id: str) -> None:
        """Mark a closed run RUNNING again (its attempt finished; its record is completed now)."""
        self.client.update_run(run_id, status="RUNNING")

    def run_status(self, run_id: str) -> str | None:
        """A run's status (`RUNNING`, `FINISHED`, `KILLED`, ...), None if the store lacks it."""
        try:
            return str(self.client.get_run(run_id).info.status)
        except mlflow.exceptions.MlflowException:
            return None

    def attempts(self, parent_run_id: str, trial_id: str) -> list[TrialRecord]:
        """Every child run (attempt) of one trial of a sweep, oldest first."""
        runs = self._search(
            f"tags.`mlflow.parentRunId` = '{parent_run_id}' and "
            f"tags.`{_TAG_TRIAL_ID}` = '{trial_id}'"
        )
        return sorted((self._record(r) for r in runs), key=lambda r: r.start_time)

    def trials(self, parent_run_id: str) -> list[TrialRecord]:
        """Every child run of a sweep, oldest first."""
        runs = self._search(
            f"tags.`mlflow.parentRunId` = '{parent_run_id}' and tags.`{_TAG_KIND}` = '{KIND_TRIAL}'"
        )
        return sorted((self._record(r) for r in runs), key=lambda r: r.start_time)

    def _search(self, filter_string: str) -> list[Any]:
        out: list[Any] = []
        token: str | None = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=filter_string,
                max_results=1000,
                page_token=token,
            )
            out.extend(page)
            token = page.token
            if not token:
                return out

    @staticmethod
    def _record(run: Any) -> TrialRecord:
        tags: dict[str, str] = dict(run.data.tags)
        try:
            config = json.loads(tags.get(_TAG_CONFIG, "{}"))
        except ValueError:
            config = {}
        mode = tags.get(_TAG_FAILURE)
        elapsed = tags.get(_TAG_ELAPSED)
        return TrialRecord(
            run_id=run.info.run_id,
            trial_id=tags.get(_TAG_TRIAL_ID, ""),
            status=run.info.status,
            config=config,
            failure_mode=FailureMode(mode)
            if mode and mode in FailureMode._value2member_map_
            else None,
            # The node's telemetry (`system/...`) is not a result of the configuration.
            metrics={k: v for k, v in run.data.metrics.items() if not k.startswith("system/")},
            reason=tags.get(_TAG_REASON, ""),
            elapsed_s=float(elapsed) if elapsed else None,
            start_time=int(run.info.start_time or 0),
            end_time=int(run.info.end_time) if run.info.end_time else None,
            tags=tags,
        )

    def finished_trial_by_config(
        self, parent_run_id: str, config: Mapping[str, Any]
    ) -> TrialRecord | None:
        """A finished trial of this sweep with exactly this configuration, if any."""
        runs = self._search(
            f"tags.`mlflow.parentRunId` = '{parent_run_id}' and "
            f"tags.`{_TAG_CONFIG_HASH}` = '{config_hash(config)}' and "
            "attributes.status = 'FINISHED'"
        )
        for run in runs:
            record = self._record(run)
            if record.finished and config_key(record.config) == config_key(config):
                return record
        return None

    def find_reusable(
        self, fingerprint: str, config: Mapping[str, Any], *, exclude_parent: str
    ) -> TrialRecord | None:
        """The first measurement of `config` on this node fingerprint in any experiment.

        Only outcomes that asking again would not change count (`REUSABLE_MODES`: measured,
        OOM, assertion, unsupported, invalid arguments). Reused records themselves are skipped
        (the original measurement is returned), and so are the trials of `exclude_parent`.
        """
        experiments = [e.experiment_id for e in self.client.search_experiments()]
        if not experiments:
            return None
        runs = self.client.search_runs(
            experiments,
            filter_string=f"tags.`{_TAG_FINGERPRINT}` = '{fingerprint}' and "
            f"tags.`{_TAG_CONFIG_HASH}` = '{config_hash(config)}' and "
            "attributes.status = 'FINISHED'",
            max_results=200,
            order_by=["attributes.start_time ASC"],
        )
        for run in runs:
            record = self._record(run)
            if (
                record.finished
                and record.failure_mode in REUSABLE_MODES
                and _TAG_REUSED not in record.tags
                and record.tags.get("mlflow.parentRunId") != exclude_parent
                and config_key(record.config) == config_key(config)
            ):
                return record
        return None

    def finished_trial_by_id(self, parent_run_id: str, trial_id: str) -> TrialRecord | None:
        """The finished attempt of trial `trial_id`, if any."""
        runs = self._search(
            f"tags.`mlflow.parentRunId` = '{parent_run_id}' and "
            f"tags.`{_TAG_TRIAL_ID}` = '{trial_id}' and attributes.status = 'FINISHED'"
        )
        records = [self._record(r) for r in runs]
        return next((r for r in records if r.finished), None)


def locate_sweep(uri: str, experiment: str | None = None) -> SweepRef | None:
    """The latest sweep in a store (of one experiment, if named), with its trials view published.

    The view is (re)written from the parent run's own params (`objective`, `search_space`), so
    sweeps recorded before views existed get one too; their experiment is marked as a
    model-development experiment on the way.
    """
    client = MlflowClient(tracking_uri=uri)
    if experiment is not None:
        found = client.get_experiment_by_name(experiment)
        experiments = [found] if found is not None and found.lifecycle_stage == "active" else []
    else:
        experiments = list(client.search_experiments())
    if not experiments:
        return None
    runs = client.search_runs(
        [e.experiment_id for e in experiments],
        filter_string=f"tags.`{_TAG_KIND}` = '{KIND_SWEEP}'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        return None
    parent = runs[0]
    name = next(e.name for e in experiments if e.experiment_id == parent.info.experiment_id)
    tracker = Tracker(uri, name)
    mode, _, objective = parent.data.params.get("objective", "max output_throughput").partition(" ")
    params = [p.strip() for p in parent.data.params.get("search_space", "").split(",") if p.strip()]
    path = tracker.publish_trials_view(
        parent.info.run_id, objective=objective, mode=mode, params=params
    )
    return SweepRef(
        experiment_id=tracker.experiment_id,
        experiment=name,
        parent_run_id=parent.info.run_id,
        view_path=path,
    )


def log_single_trial(spec: SweepSpec, result: Any, *, tracking_uri: str | None) -> str:
    """Record a trial run by `spec-sweep trial` as a run of the sweep's experiment (no parent).

    Returns:
        The run id.
    """
    from spec_sweep.space import ServerCommand

    uri = resolve_tracking_uri(spec, tracking_uri)
    tracker = Tracker(uri, spec.experiment, secrets=secret_values(spec))
    from spec_sweep.space import baseline_config

    run = tracker.client.create_run(
        tracker.experiment_id,
        run_name=f"manual {run_name(result.trial_id, result.config, baseline_config(spec))}",
        tags={
            _TAG_KIND: KIND_TRIAL,
            _TAG_TRIAL_ID: result.trial_id,
            _TAG_CONFIG: json.dumps(dict(result.config)),
            _TAG_CONFIG_HASH: config_hash(result.config),
            "spec_sweep.manual": "true",
        },
    )
    run_id = str(run.info.run_id)
    params = [Param(k, redact(_param_value(v), tracker.secrets)) for k, v in result.config.items()]
    if params:
        tracker.client.log_batch(run_id, params=params)
    bench = Path(result.log_path).parent / "bench.json" if result.log_path else None
    tracker.finish_trial(
        run_id,
        failure_mode=result.failure_mode,
        metrics=result.metrics,
        reason=result.reason,
        elapsed_s=result.elapsed_s,
        prompt_source=result.prompt_source,
        command=ServerCommand(result.command, result.env).shell(),
        log_path=result.log_path,
        bench_path=bench if bench is not None and bench.is_file() else None,
    )
    return run_id
