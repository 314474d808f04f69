"""Node-hours in a whole sweep: real Ray, MLflow and the simulated node.

Every booted trial carries its boot phases and measuring time; the parent run carries the
node-hours split; configurations SGLang's memory rule says cannot boot are recorded as
predicted failures without a boot, and each of them does fail when it is booted for real on
the simulated node (whose memory follows SGLang's rule).
"""

from __future__ import annotations

from pathlib import Path

import harness
import pytest
from mlflow.tracking import MlflowClient

from spec_sweep.core.names import (
    AVAIL_METRIC,
    MEASURE_METRIC,
    TAG_PREDICTED,
    WEIGHTS_METRIC,
    boot_metric,
)
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.backends import SimBackend
from spec_sweep.orchestrate.driver import sweep

pytestmark = pytest.mark.usefixtures("ray_cluster")

MEMS = [0.4, 0.5, 0.85, 0.88]


def test_boot_phases_predicted_ooms_and_the_hours_split(project_dir: Path) -> None:
    spec = harness.make_spec(
        project_dir / "sweeps",
        name="hours",
        node={"sim_profile": "h200-nvlink-x8"},
        search_space={
            "include": [],
            "params": {"mem-fraction-static": {"choices": MEMS, "default": 0.88}},
        },
        baseline=harness.DROP,
        workload={"output_len": 16, "num_prompts": 2},
        budget={"trials": 4, "confirm": 0, "remeasure_baseline": False},
        searcher={"kind": "grid", "seed": 0},
    )
    uri = f"sqlite:///{project_dir / 'mlruns' / 'hours.db'}"
    backend = SimBackend(spec, grace_s=2.0)
    outcome = sweep(spec, backend=backend, state_dir=project_dir / ".spec_sweep", tracking_uri=uri)
    by_mem = {r.config["mem-fraction-static"]: r for r in outcome.records}
    assert sorted(by_mem) == MEMS
    # H200 profile: 139.5 GB free before 80.25 GB of weights per GPU (the baseline's log)
    for mem in (0.4, 0.5):
        predicted = by_mem[mem]
        assert predicted.failure_mode is FailureMode.OOM
        assert predicted.tags[TAG_PREDICTED] == "sglang memory rule"
        assert predicted.reason.startswith("predicted oom without a boot")
        assert "t0000" in predicted.reason
        assert predicted.elapsed_s == 0.0
        folder = outcome.state.trials_dir / predicted.trial_id / "attempt1"
        assert not (folder / "server.log").exists()  # nothing was launched
    for mem in (0.85, 0.88):
        booted = by_mem[mem]
        assert booted.failure_mode is FailureMode.NONE
        assert TAG_PREDICTED not in booted.tags
        assert booted.metrics[boot_metric("load_weight")] == 150.0  # the profile's seconds
        assert booted.metrics[MEASURE_METRIC] > 0
        assert booted.metrics[AVAIL_METRIC] == pytest.approx(139.5)
        assert booted.metrics[WEIGHTS_METRIC] == pytest.approx(80.25)

    parent = MlflowClient(uri).get_run(outcome.parent_run_id).data.metrics
    assert parent["boots_avoided"] == 2
    assert parent["node_hours"] > 0
    parts = ("boot", "measure", "failed", "rejected", "confirm", "other")
    assert sum(parent[f"node_hours_{p}"] for p in parts) == pytest.approx(parent["node_hours"])
    assert outcome.report is not None
    html = outcome.report.read_text()
    assert "Where the node-hours went" in html
    assert "2 boot(s) avoided by SGLang&#39;s memory rule" in html

    # Checked against the node: booted for real, every predicted configuration fails so.
    for mem in (0.4, 0.5):
        real = backend.run(
            {"mem-fraction-static": mem}, trial_dir=project_dir / f"real-{mem}", trial_id="x"
        )
        assert real.failure_mode is FailureMode.OOM, real.reason


def test_weight_cache_clients_boot_faster_and_the_daemon_goes_with_the_sweep(
    project_dir: Path,
) -> None:
    spec = harness.make_spec(
        project_dir / "sweeps",
        name="wcache",
        node={"sim_profile": "h200-nvlink-x8", "sglang_version": "0.5.17", "weight_cache": True},
        search_space={
            "include": [],
            "params": {"cuda-graph-max-bs-decode": {"choices": [64, 128, 512], "default": 512}},
        },
        baseline=harness.DROP,
        workload={"output_len": 16, "num_prompts": 2},
        budget={"trials": 3, "confirm": 0, "remeasure_baseline": False},
        searcher={"kind": "grid", "seed": 0},
    )
    uri = f"sqlite:///{project_dir / 'mlruns' / 'wcache.db'}"
    state_dir = project_dir / ".spec_sweep"
    outcome = sweep(
        spec,
        backend=SimBackend(spec, grace_s=2.0),
        state_dir=state_dir,
        tracking_uri=uri,
        report=False,  # not read here (the first test reads the hours in the report)
    )
    by_id = {r.trial_id: r for r in outcome.records}
    assert all(r.failure_mode is FailureMode.NONE for r in by_id.values())
    # the baseline loads from disk (its log gives the memory facts), the others map the daemon's
    base = by_id["t0000"]
    assert "weight_cache_client" not in base.metrics
    assert base.metrics[boot_metric("load_weight")] == 150.0
    for trial_id in ("t0001", "t0002"):
        client = by_id[trial_id]
        assert client.metrics["weight_cache_client"] == 1.0
        assert client.metrics[boot_metric("load_weight")] == 5.0
        assert AVAIL_METRIC not in client.metrics  # a client's log is no memory fact
        assert "booted as a weight-cache client" in client.reason
        command = (outcome.state.trials_dir / trial_id / "attempt1" / "command.txt").read_text()
        assert "--weight-cache-mode client" in command
    (daemon_log,) = (outcome.state.trials_dir / "_weight_cache").glob("*/daemon.log")  # one node
    assert "[WeightCacheDaemon gpu=0] Listening on " in daemon_log.read_text()
    # torn down with the sweep
    assert not (daemon_log.parent / "daemon.json").exists()
    import psutil

    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "spec_sweep.sim.weight_cache" in " ".join(p.info["cmdline"] or [])
    ]
    assert left == []


def test_attempts_lost_with_their_driver_count_until_their_last_sign_of_life(
    project_dir: Path,
) -> None:
    # A real store holding what a driver killed hours ago leaves: an attempt still RUNNING, one
    # an earlier resume closed at its own time (before this rule), and one closed in time. The
    # resume's rule times the first two to their last logged metric; the third keeps its own.
    import time

    from mlflow.entities import Metric

    from spec_sweep.core.config import baseline_config
    from spec_sweep.core.history import History
    from spec_sweep.core.hours import node_hours
    from spec_sweep.core.loads import attempt_seconds
    from spec_sweep.core.record import trial_tags
    from spec_sweep.orchestrate.phases import close_lost_attempts
    from spec_sweep.store.tracker import Tracker

    spec = harness.make_spec(project_dir / "sweeps", name="lost", budget={"trials": 3})
    tracker = Tracker(f"sqlite:///{project_dir / 'mlruns' / 'lost.db'}", spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="lost", simulate=True)
    client, now, hour = tracker.client, int(time.time() * 1000), 3_600_000

    def attempt(trial_id: str, start: int, seen_after_s: float) -> str:
        tags = trial_tags(trial_id=trial_id, config=baseline_config(spec), parent_run_id=parent)
        run_id = client.create_run(tracker.experiment_id, start_time=start, tags=tags).info.run_id
        sample = Metric(
            "system/cpu_utilization_percentage", 5.0, start + int(seen_after_s * 1e3), 0
        )
        client.log_batch(run_id, metrics=[sample])
        return str(run_id)

    attempt("t0001", now - 3 * hour, 20.0)  # its driver and machine went three hours ago
    closed_late = attempt("t0002", now - 5 * hour, 30.0)
    client.set_terminated(closed_late, status="KILLED", end_time=now - 3 * hour)
    in_time = attempt("t0003", now - 600_000, 50.0)
    client.set_terminated(in_time, status="KILLED", end_time=now - 540_000)

    close_lost_attempts(tracker, spec, History(spec, tracker.trials(parent)))
    close_lost_attempts(tracker, spec, History(spec, tracker.trials(parent)))  # changes nothing
    after = {r.trial_id: r for r in tracker.trials(parent)}
    assert {r.status for r in after.values()} == {"KILLED"}
    assert after["t0001"].elapsed_s == pytest.approx(20.0)
    assert after["t0002"].elapsed_s == pytest.approx(30.0)
    assert after["t0003"].elapsed_s is None
    assert attempt_seconds(after["t0003"]) == pytest.approx(60.0)
    assert "last sign of life" in after["t0001"].reason
    hours = node_hours(History(spec, list(after.values())))
    assert hours.total * 3600 == pytest.approx(20 + 30 + 60, abs=0.5)  # not 5 hours
