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
    parts = ("boot", "measure", "failed", "confirm", "other")
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
