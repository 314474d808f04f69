"""MLflow: the sweep's parent run, one child run per trial, and reading them back.

This module is the store's MLflow client (the store is the only package that imports MLflow). It
writes the layout of docs/design.md, "MLflow layout" through an explicit `MlflowClient` (safe
from Ray worker threads): experiment = sweep name, one parent run per sweep (tag
`spec_sweep.kind=sweep`, the spec as an artifact, `best_<metric>` at the end) and one child run
per trial attempt, with the tags, params and metrics `core.record` shapes and the artifacts
`server.log`, `command.txt`, `bench.json`. A trial's child run is written and closed as FINISHED
*before* the trial is reported done, which makes the store the durable record of finished trials
that resume relies on. Secrets (`core.secrets`) never reach the store
in clear.

It also shapes what the MLflow UI shows: experiments open on the runs table, a trial's node is
sampled by MLflow's system-metrics monitor while it runs, and each sweep publishes the shared
view of its trials (`ui_view`) that `spec-sweep ui` links to (the MLflow internals these rely on
are `mlflow_private`'s).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from spec_sweep.core import names
from spec_sweep.core.adaptive_rules import CONFIG_FILE
from spec_sweep.core.config import config_hash, config_key
from spec_sweep.core.outcome import REUSABLE_MODES, FailureMode, TrialResult
from spec_sweep.core.record import (
    TrialRecord,
    config_params,
    outcome_tags,
    record_from_run,
    trial_tags,
)
from spec_sweep.core.secrets import redact, tracking_secrets
from spec_sweep.core.versions import version_line
from spec_sweep.spec import SweepSpec
from spec_sweep.store.mlflow_private import (
    KIND_MODEL_DEVELOPMENT,
    TAG_EXPERIMENT_KIND,
    TAG_VIEW_PREFIX,
    start_monitor,
    stop_monitor,
)
from spec_sweep.store.ui_view import trials_view, trials_view_path, view_key

__all__ = ["SYSTEM_METRICS_INTERVAL_S", "Tracker"]

#: Seconds between samples of the node's system metrics during a trial (MLflow's
#: `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` overrides it, as it does for MLflow itself).
SYSTEM_METRICS_INTERVAL_S = 5.0

# MLflow prints "View run ... at: <url>" to stdout when a run on a tracking server ends; the
# sweep's own summary says where to look.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
for _name in ("mlflow", "alembic", "sqlalchemy"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def _metrics(values: Mapping[str, float]) -> list[Metric]:
    now = int(time.time() * 1000)
    return [Metric(k, float(v), now, 0) for k, v in values.items()]


class Tracker:
    """One sweep's view of an MLflow store (picklable: holds only the URI and names)."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        *,
        secrets: Iterable[str] = (),
        system_metrics_interval_s: float | None = None,
    ) -> None:
        """Point at a store and an experiment (created on first use).

        Args:
            uri: The tracking URI.
            experiment: The experiment's name.
            secrets: Values to redact from everything logged.
            system_metrics_interval_s: Seconds between samples of a trial's system metrics;
                default `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` as set where the tracker is
                made (it travels with it to the Ray workers), else `SYSTEM_METRICS_INTERVAL_S`.
        """
        self.uri = uri
        self.experiment = experiment
        self.secrets = (*secrets, *tracking_secrets())
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
        # Never pickled (Ray ships the tracker to its workers): what a worker records comes
        # redacted already (the sealed spec's commands, the server log written redacted).
        state["secrets"] = ()
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
                if TAG_EXPERIMENT_KIND not in found.tags:  # made by an older spec_sweep
                    self.client.set_experiment_tag(
                        found.experiment_id, TAG_EXPERIMENT_KIND, KIND_MODEL_DEVELOPMENT
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
                        tags={TAG_EXPERIMENT_KIND: KIND_MODEL_DEVELOPMENT},
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
            filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SWEEP}' and "
            f"tags.`{names.TAG_STATE_ID}` = '{state_id}'",
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
            # a resumed run may have another budget (`--trials`)
            self.client.set_tag(existing, names.TAG_BUDGET_TRIALS, str(spec.budget.trials))
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
                names.TAG_KIND: names.KIND_SWEEP,
                names.TAG_STATE_ID: state_id,
                names.TAG_NOTE: spec.description,
                names.TAG_SIMULATE: str(simulate).lower(),
                names.TAG_BUDGET_TRIALS: str(spec.budget.trials),
            },
        )
        run_id = run.info.run_id
        self.publish_trials_view(
            run_id,
            objective=spec.objective.metric,
            mode=spec.objective.mode,
            params=list(spec.params),
        )
        self.client.set_tag(run_id, names.TAG_NOTE, self._sweep_note(spec.description, run_id))
        self.client.set_tag(run_id, names.TAG_SGLANG_VERSION, version_line(spec.node))
        params = {
            names.PARAM_OBJECTIVE: f"{spec.objective.mode} {spec.objective.metric}",
            names.PARAM_SEARCHER: f"{spec.searcher.kind} seed={spec.searcher.seed}",
            names.PARAM_TRIALS: str(spec.budget.trials),
            names.PARAM_MODEL: spec.node.model,
            names.PARAM_DRAFT_MODEL: str(spec.node.draft_model),
            names.PARAM_GPUS: str(spec.node.gpus),
            names.PARAM_SGLANG_VERSION: spec.node.sglang_version,
            names.PARAM_SGLANG_VERSION_SOURCE: spec.node.sglang_version_source,
            names.PARAM_SIM_PROFILE: str(spec.node.sim_profile) if simulate else "none",
            names.PARAM_SEARCH_SPACE: ", ".join(spec.params),
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
        tag = TAG_VIEW_PREFIX + view_key(parent_run_id)
        self.client.set_experiment_tag(self.experiment_id, tag, json.dumps(view))
        return trials_view_path(self.experiment_id, parent_run_id)

    def finish_sweep(
        self, run_id: str, *, status: str = "FINISHED", metrics: Mapping[str, float] | None = None
    ) -> None:
        """Log the sweep's final metrics and close the parent run."""
        if metrics:
            self.client.log_batch(run_id, metrics=_metrics(metrics))
        self.client.set_terminated(run_id, status=status)

    def log_artifacts(self, run_id: str, local_dir: Path, artifact_path: str | None = None) -> None:
        """Upload a folder (e.g. the report) to a run."""
        self.client.log_artifacts(run_id, str(local_dir), artifact_path)

    # -- trial (child) runs --------------------------------------------------------------------

    def start_trial(
        self,
        parent_run_id: str | None,
        *,
        trial_id: str,
        config: Mapping[str, Any],
        run_name: str | None = None,
        attempt: int | None = 1,
        fingerprint: str | None = None,
        confirms: str | None = None,
        manual: bool = False,
        system_metrics: bool = True,
    ) -> str:
        """Open a RUNNING child run for one trial attempt; returns its run id.

        Args:
            parent_run_id: The sweep's parent run (None: a `spec-sweep trial` run, no parent).
            trial_id: Our trial id.
            config: The configuration (the run's params, secrets redacted).
            run_name: The run's name (`present.names.run_name`; default the trial id).
            attempt: The attempt number (None: not counted, a manual trial).
            fingerprint: The node fingerprint the measurement may be reused on.
            confirms: The trial a confirmation boot repeats.
            manual: A trial run by `spec-sweep trial`.
            system_metrics: With it (a trial that runs here, not one answered from a record),
                MLflow's system-metrics monitor samples this node (CPU, memory, disk, network
                and, through NVML, each GPU's memory, utilisation and power) into the run until
                `finish_trial` or `kill_run`. Without an NVIDIA GPU it logs the rest and no GPU
                metrics.
        """
        tags = trial_tags(
            trial_id=trial_id,
            config=config,
            parent_run_id=parent_run_id,
            attempt=attempt,
            fingerprint=fingerprint,
            confirms=confirms,
            manual=manual,
        )
        run = self.client.create_run(self.experiment_id, run_name=run_name or trial_id, tags=tags)
        params = [Param(k, v) for k, v in config_params(config, self.secrets).items()]
        if params:
            self.client.log_batch(run.info.run_id, params=params)
        if system_metrics:
            self._start_system_metrics(run.info.run_id)
        return str(run.info.run_id)

    def _start_system_metrics(self, run_id: str) -> None:
        self._monitors[run_id] = start_monitor(
            run_id, interval_s=self.system_metrics_interval_s, tracking_uri=self.uri
        )

    def _stop_system_metrics(self, run_id: str) -> None:
        monitor = self._monitors.pop(run_id, None)
        if monitor is not None:
            stop_monitor(monitor, run_id)

    def finish_trial(
        self,
        run_id: str,
        *,
        failure_mode: FailureMode,
        metrics: Mapping[str, float],
        reason: str,
        elapsed_s: float,
        prompt_source: str = "",
        log_excerpt: str = "",
        reused_from: str | None = None,
        command: str | None = None,
        log_path: str | Path | None = None,
        bench_path: str | Path | None = None,
        artifacts: Sequence[Path] = (),
    ) -> bool:
        """Log a trial's outcome and artifacts, then close its child run as FINISHED.

        The outcome's tags are `core.record.outcome_tags`; `command` and the server log are
        uploaded as `command.txt` and `server.log` (secrets redacted), `bench_path` and the
        `artifacts` (goodput.json, quality.json) as they are.

        Returns:
            False (and writes nothing) when the run is no longer RUNNING: a newer driver closed
            it as KILLED and re-queued the trial, so this late result must not count.
        """
        self._stop_system_metrics(run_id)
        if self.client.get_run(run_id).info.status != "RUNNING":
            return False
        tags = outcome_tags(
            failure_mode=failure_mode,
            reason=reason,
            elapsed_s=elapsed_s,
            secrets=self.secrets,
            prompt_source=prompt_source,
            log_excerpt=log_excerpt,
            reused_from=reused_from,
        )
        self.client.log_batch(
            run_id, metrics=_metrics(metrics), tags=[RunTag(k, v) for k, v in tags.items()]
        )
        if command is not None:
            self.client.log_text(run_id, redact(command, self.secrets) + "\n", "command.txt")
        if log_path is not None and Path(log_path).is_file():
            text = Path(log_path).read_text(encoding="utf-8", errors="replace")
            self.client.log_text(run_id, redact(text, self.secrets), "server.log")
        if bench_path is not None and Path(bench_path).is_file():
            self.client.log_artifact(run_id, str(bench_path))
        for path in artifacts:
            if path.is_file():
                self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, status="FINISHED")
        return True

    def record_result(
        self,
        run_id: str,
        result: TrialResult,
        *,
        command: str,
        folder: Path | None,
        metrics: Mapping[str, float] | None = None,
    ) -> bool:
        """Record a trial's outcome (`finish_trial`) with the files of its folder.

        Args:
            run_id: The attempt's run.
            result: How the trial ended (with the server log it names).
            command: The server command line it ran, as one shell line.
            folder: The trial's folder (its `bench.json`, `goodput.json`, `quality.json`, and
                the `adaptive-config.json` an adaptive trial launched with).
            metrics: What to log as its metrics (default the result's own).
        """
        kept = ("goodput.json", "quality.json", CONFIG_FILE)
        files = [folder / name for name in kept] if folder else []
        bench = folder / "bench.json" if folder is not None else None
        return self.finish_trial(
            run_id,
            failure_mode=result.failure_mode,
            reason=result.reason,
            elapsed_s=result.elapsed_s,
            prompt_source=result.prompt_source,
            log_excerpt=result.log_excerpt,
            metrics=result.metrics if metrics is None else metrics,
            command=command,
            log_path=result.log_path,
            bench_path=bench if bench is not None and bench.is_file() else None,
            artifacts=files,
        )

    def log_metrics(self, run_id: str, metrics: Mapping[str, float]) -> None:
        """Add metrics to a (possibly finished) run."""
        self.client.log_batch(run_id, metrics=_metrics(metrics))

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Add tags to a (possibly finished) run."""
        self.client.log_batch(run_id, tags=[RunTag(k, v[:5000]) for k, v in tags.items()])

    def kill_run(self, run_id: str, *, tags: Mapping[str, str] | None = None) -> None:
        """Close a run as KILLED (with tags saying why, if given: `core.record.kill_tags`)."""
        self._stop_system_metrics(run_id)
        if tags:
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.client.set_terminated(run_id, status="KILLED")

    def reopen_run(self, run_id: str) -> None:
        """Mark a closed run RUNNING again (its attempt finished; its record is completed now)."""
        self.client.update_run(run_id, status="RUNNING")

    def last_logged_ms(self, run_id: str) -> int | None:
        """When the run last showed life: the newest timestamp (ms) of any metric logged into it
        (its system metrics are sampled every few seconds while its driver lives); None if
        nothing was logged or the store lacks the run."""
        try:
            keys = list(self.client.get_run(run_id).data.metrics)
            stamps = [
                m.timestamp for key in keys for m in self.client.get_metric_history(run_id, key)
            ]
        except mlflow.exceptions.MlflowException:
            return None
        return max(stamps) if stamps else None

    def run_status(self, run_id: str) -> str | None:
        """A run's status (`RUNNING`, `FINISHED`, `KILLED`, ...), None if the store lacks it."""
        try:
            return str(self.client.get_run(run_id).info.status)
        except mlflow.exceptions.MlflowException:
            return None

    def attempts(self, parent_run_id: str, trial_id: str) -> list[TrialRecord]:
        """Every child run (attempt) of one trial of a sweep, oldest first."""
        return self._oldest_first(parent_run_id, f"tags.`{names.TAG_TRIAL_ID}` = '{trial_id}'")

    def trials(self, parent_run_id: str) -> list[TrialRecord]:
        """Every child run of a sweep, oldest first."""
        return self._oldest_first(parent_run_id, f"tags.`{names.TAG_KIND}` = '{names.KIND_TRIAL}'")

    def _oldest_first(self, parent_run_id: str, condition: str) -> list[TrialRecord]:
        runs = self._search(f"tags.`{names.TAG_PARENT}` = '{parent_run_id}' and {condition}")
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
        return record_from_run(
            run_id=run.info.run_id,
            status=run.info.status,
            tags=run.data.tags,
            metrics=run.data.metrics,
            start_time=run.info.start_time,
            end_time=run.info.end_time,
        )

    def finished_trial_by_config(
        self, parent_run_id: str, config: Mapping[str, Any], *, fidelity: str | None = None
    ) -> TrialRecord | None:
        """A finished trial of this sweep with exactly this configuration, if any; with
        `fidelity`, one booted with those weights only (a record without the tag is `real`):
        a real boot of a configuration booted with dummy weights is not answered by that."""
        runs = self._search(
            f"tags.`{names.TAG_PARENT}` = '{parent_run_id}' and "
            f"tags.`{names.TAG_CONFIG_HASH}` = '{config_hash(config)}' and "
            "attributes.status = 'FINISHED'"
        )
        for run in runs:
            record = self._record(run)
            weights = record.tags.get(names.TAG_FIDELITY, names.FIDELITY_REAL)
            if fidelity is not None and weights != fidelity:
                continue
            if record.finished and config_key(record.config) == config_key(config):
                return record
        return None

    def find_reusable(
        self, fingerprint: str, config: Mapping[str, Any], *, exclude_parent: str
    ) -> TrialRecord | None:
        """The first measurement of `config` on this node fingerprint in any experiment.

        Only outcomes that asking again would not change count (`REUSABLE_MODES`: measured,
        OOM, assertion, unsupported, invalid arguments). Reused records themselves are skipped
        (the original measurement is returned), and so are boots with dummy weights and the
        trials of `exclude_parent`.
        """
        experiments = [e.experiment_id for e in self.client.search_experiments()]
        if not experiments:
            return None
        runs = self.client.search_runs(
            experiments,
            filter_string=f"tags.`{names.TAG_FINGERPRINT}` = '{fingerprint}' and "
            f"tags.`{names.TAG_CONFIG_HASH}` = '{config_hash(config)}' and "
            "attributes.status = 'FINISHED'",
            max_results=200,
            order_by=["attributes.start_time ASC"],
        )
        for run in runs:
            record = self._record(run)
            if (
                record.finished
                and record.failure_mode in REUSABLE_MODES
                and names.TAG_REUSED not in record.tags
                and record.tags.get(names.TAG_FIDELITY) != names.FIDELITY_DUMMY
                and record.tags.get(names.TAG_PARENT) != exclude_parent
                and config_key(record.config) == config_key(config)
            ):
                return record
        return None

    def finished_trial_by_id(self, parent_run_id: str, trial_id: str) -> TrialRecord | None:
        """The finished attempt of trial `trial_id`, if any."""
        runs = self._search(
            f"tags.`{names.TAG_PARENT}` = '{parent_run_id}' and "
            f"tags.`{names.TAG_TRIAL_ID}` = '{trial_id}' and attributes.status = 'FINISHED'"
        )
        records = [self._record(r) for r in runs]
        return next((r for r in records if r.finished), None)
