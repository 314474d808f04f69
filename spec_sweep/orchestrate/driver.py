"""The sweep driver: Ray Tune schedules the trials, the searcher proposes, MLflow records.

This module owns `sweep()`, the programmatic core of `spec-sweep run`: it opens the sweep's
state folder (locked), stops what a killed driver left behind (`leftovers`), starts or joins the
Ray cluster (`cluster`), asks every node which SGLang it launches (`versions`), refuses a
tracking store the trial nodes cannot reach, and hands over to `phases.SweepRun` (resume,
search, confirm, finish). Which backend answers the trials is the caller's choice
(`node.backends.make_backend`): the driver only asks it whether its GPUs are pretend.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import ray

from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.node.backends import TrialBackend
from spec_sweep.orchestrate.cluster import check_cluster, ray_pids, start_ray
from spec_sweep.orchestrate.leftovers import clean_leftovers
from spec_sweep.orchestrate.phases import RunOptions, SweepRun
from spec_sweep.orchestrate.sweep_outcome import SweepOutcome
from spec_sweep.orchestrate.versions import check_node_versions
from spec_sweep.present.live import SweepProgress
from spec_sweep.spec import SweepSpec
from spec_sweep.store.paths import resolve_tracking_uri
from spec_sweep.store.state import SweepState, open_state

__all__ = ["SweepOutcome", "sweep"]


def sweep(
    spec: SweepSpec,
    *,
    backend: TrialBackend,
    fresh: bool = False,
    state_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    allow_insecure_tracking: bool = False,
    address: str | None = None,
    progress: SweepProgress | None = None,
    failure_aware: bool = True,
    report: bool = True,
) -> SweepOutcome:
    """Run (or resume) a sweep to its budget; the programmatic core of `spec-sweep run`.

    Args:
        spec: The sweep.
        backend: Who answers the trials (`backends.make_backend`).
        fresh: Move old state aside and start over.
        state_dir: Root of the sweep state folders.
        tracking_uri: MLflow store.
        allow_insecure_tracking: A plain-HTTP tracking server on another machine without
            credentials is intended (`--allow-insecure-tracking`).
        address: Ray cluster to join (else a local one is started, or the one already
            initialised in this process is used).
        progress: Live display (None: silent).
        failure_aware: Let failures teach the sampler (off only for measurements).
        report: Build the report at the end and log it to the parent run.
    """
    if spec.budget.fidelity.two and not backend.launches:
        raise SpecError(
            "budget.fidelity.mode: 'two' with --replay: a replayed trial boots nothing, so no "
            "boot loads dummy weights and no acceptance is measured: set budget.fidelity.mode: "
            "real, or run on the node (or --simulate)"
        )
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    options = RunOptions(
        backend=backend, progress=progress, failure_aware=failure_aware, report=report
    )
    state = open_state(spec, state_dir=state_dir, fresh=fresh, simulate=backend.simulated)
    try:
        return _sweep_locked(
            spec,
            state,
            options,
            tracking_uri=tracking_uri,
            allow_insecure=allow_insecure_tracking,
            address=address,
            state_root=state_dir,
        )
    except SpecSweepError:
        state.discard_if_unused()  # refused before it started (cluster, store): leave no trace
        raise
    finally:
        state.close()


def _sweep_locked(
    spec: SweepSpec,
    state: SweepState,
    options: RunOptions,
    *,
    tracking_uri: str | None,
    allow_insecure: bool,
    address: str | None,
    state_root: str | Path | None,
) -> SweepOutcome:
    clean_leftovers(state)
    uri = resolve_tracking_uri(spec, tracking_uri, allow_insecure=allow_insecure)
    simulated = options.backend.simulated
    started_ray = start_ray(spec, address=address, simulated=simulated, state=state)
    if started_ray:
        state.save_ray_pids(ray_pids())
    try:
        n_nodes = check_cluster(spec, simulated=simulated)
        if not simulated:  # the SGLang every node launches decides the spec's version
            resolved, notes = check_node_versions(spec, state_dir=state.path, state_root=state_root)
            if resolved is not spec:  # the backend launches (and reads) with the same spec
                spec = resolved
                backend = dataclasses.replace(options.backend, spec=spec)  # type: ignore[type-var]
                options = dataclasses.replace(options, backend=backend)
            for note in notes:
                if options.progress is not None:
                    options.progress.note(note)
        _check_tracking_reachable(uri, n_nodes=n_nodes)
        return SweepRun(spec, state, options, uri=uri, n_nodes=n_nodes).run()
    finally:
        if started_ray:
            ray.shutdown()
            state.save_ray_pids([])
            shutil.rmtree(state.ray_temp_dir, ignore_errors=True)


def _check_tracking_reachable(uri: str, *, n_nodes: int) -> None:
    """Refuse a store on the driver's disk when trials run on several nodes."""
    local = uri.startswith(("sqlite:", "file:", "/", "./")) or "://" not in uri
    if n_nodes > 1 and local:
        raise SpecError(
            f"tracking URI {uri!r} is a file on this machine, which the {n_nodes} nodes that "
            "run trials cannot all reach: run an MLflow server on the "
            "head node (mlflow server --backend-store-uri sqlite:///mlruns/mlflow.db "
            "--artifacts-destination ./mlruns/artifacts --host 0.0.0.0 --port 5000) and pass "
            "--tracking-uri http://<head>:5000 (or set tracking.uri)"
        )
