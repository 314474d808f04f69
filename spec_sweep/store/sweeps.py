"""Finding a sweep in a store: for `spec-sweep ui`, `report` and `export`, and `spec-sweep trial`.

This module owns the questions asked of a store from outside a running sweep: the latest sweep
in it, with its trials view (re)published (`locate_sweep`, run by `spec-sweep ui` in a child
process); a spec's sweep, from its state folder or the experiment's newest sweep run
(`find_sweep`, for `report` and `export`); and recording a trial run by `spec-sweep trial` as a
run of the sweep's experiment (`log_manual_trial`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from spec_sweep.core import names
from spec_sweep.core.outcome import TrialResult
from spec_sweep.core.secrets import secret_values
from spec_sweep.errors import SpecSweepError
from spec_sweep.spec import SweepSpec
from spec_sweep.store.paths import check_tracking_uri, resolve_tracking_uri, sweep_state_dir
from spec_sweep.store.tracker import Tracker

__all__ = ["SweepRef", "budget_in_force", "find_sweep", "locate_sweep", "log_manual_trial"]


@dataclass(frozen=True)
class SweepRef:
    """Where a sweep is in the store, and the URL route of its trials view."""

    experiment_id: str
    experiment: str
    parent_run_id: str
    view_path: str


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
        filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SWEEP}'",
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


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def budget_in_force(spec: SweepSpec, tracker: Tracker, parent_run_id: str) -> SweepSpec:
    """`spec` with the trial budget its sweep last ran with (`names.TAG_BUDGET_TRIALS`: a
    `--trials` override, which the spec's file does not hold); unchanged when the sweep's run
    does not say."""
    text = tracker.client.get_run(parent_run_id).data.tags.get(names.TAG_BUDGET_TRIALS, "")
    if not text.isdigit() or int(text) <= 0 or int(text) == spec.budget.trials:
        return spec
    budget = spec.budget.model_copy(update={"trials": int(text)})
    return spec.model_copy(update={"budget": budget})


def find_sweep(
    spec: SweepSpec,
    *,
    tracking_uri: str | None = None,
    state_dir: str | Path | None = None,
    allow_insecure_tracking: bool = False,
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
    saved = state.get("tracking_uri")
    # A URI read back from the state folder is named as such in the errors, not as an option.
    source = None if tracking_uri or not saved else f"{state_path / 'state.json'}: tracking_uri"
    wanted = check_tracking_uri(spec, tracking_uri or saved, source=source)
    if wanted.startswith("sqlite:///") and not Path(wanted[len("sqlite:///") :]).is_file():
        # Opening a SQLite store creates it: say there is none instead of leaving an empty one.
        raise SpecSweepError(
            f"no MLflow store at {wanted}: run the sweep first "
            f"(spec-sweep run {spec.source or 'SWEEP.yaml'}), or pass --tracking-uri"
        )
    uri = resolve_tracking_uri(
        spec, tracking_uri or saved, source=source, allow_insecure=allow_insecure_tracking
    )
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
            filter_string=f"tags.`{names.TAG_KIND}` = '{names.KIND_SWEEP}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        parent = runs[0].info.run_id if runs else None
    if parent is None:
        raise SpecSweepError(
            f"experiment {spec.experiment!r} in {uri} holds no sweep run: run the sweep first"
        )
    return tracker, str(parent), state_path


def log_manual_trial(
    spec: SweepSpec,
    result: TrialResult,
    *,
    tracking_uri: str | None,
    run_name: str,
    command: str,
    allow_insecure_tracking: bool = False,
    tags: Mapping[str, str] | None = None,
) -> str:
    """Record a trial run by `spec-sweep trial` as a run of the sweep's experiment (no parent).

    Args:
        spec: The sweep.
        result: How the trial ended.
        tracking_uri: `--tracking-uri` (None: the spec's, else the default store).
        run_name: The run's name.
        command: The server command line, as one shell line.
        allow_insecure_tracking: Record to a plain-HTTP server on another machine.
        tags: More tags for the run (e.g. `TAG_FIDELITY`, the weights it booted with).

    Returns:
        The run id.
    """
    uri = resolve_tracking_uri(spec, tracking_uri, allow_insecure=allow_insecure_tracking)
    tracker = Tracker(uri, spec.experiment, secrets=secret_values(spec))
    run_id = tracker.start_trial(
        None,
        trial_id=result.trial_id,
        config=result.config,
        run_name=run_name,
        attempt=None,
        manual=True,
        system_metrics=False,
    )
    if tags:
        tracker.set_tags(run_id, tags)
    folder = Path(result.log_path).parent if result.log_path else None
    tracker.record_result(run_id, result, command=command, folder=folder)
    return run_id
