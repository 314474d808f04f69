"""Secrets against a real authenticated tracking server (issue 55; docs/running/security.md).

MLflow runs as the cluster recipe runs it: `mlflow server --app-name basic-auth`, its admin
password from `MLFLOW_AUTH_ADMIN_PASSWORD` (`harness.AuthMlflowServer`). A spec plants an env
token (`node.env.HF_TOKEN`) and SGLang's `--api-key` (`node.server_args.api-key`); the tracking
password is the third planted secret. Sweeps run as a user runs them, `python -m spec_sweep` in
a subprocess that starts its own local Ray cluster (which inherits the driver's credentials),
on the simulated node. The multi-node case is tests/integration/test_cluster.py's.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import DROP, MLFLOW_ADMIN, AuthMlflowServer, files_holding, write_spec
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PASSWORD = f"trk-pw-{secrets.token_hex(8)}"
HF = f"hf_{secrets.token_hex(10)}"
API_KEY = f"sk-{secrets.token_hex(10)}"
#: Only in the environment: the spec writes its placeholder (`HUB_TOKEN: <secret: HUB_TOKEN>`).
HUB = f"hub-{secrets.token_hex(10)}"
PLANTED = (PASSWORD, HF, API_KEY, HUB)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthMlflowServer]:
    """One basic-auth MLflow server for the module (its admin's password is `PASSWORD`)."""
    found = AuthMlflowServer(tmp_path_factory.mktemp("mlflow-auth"), PASSWORD)
    try:
        yield found
    finally:
        found.stop()


def secret_spec(project: Path, *, name: str, trials: int) -> Path:
    """A small simulated sweep whose node holds the planted env token and API key."""
    project.mkdir(parents=True, exist_ok=True)
    return write_spec(
        project,
        name=name,
        node={
            "draft_model": DROP,
            "sglang_version": "0.5.17",  # a version with --api-key
            "env": {"HF_TOKEN": HF, "HUB_TOKEN": "<secret: HUB_TOKEN>"},
            "server_args": {"tp-size": 8, "api-key": API_KEY},
        },
        search_space={
            "include": DROP,
            "params": {"mem-fraction-static": {"float": [0.80, 0.90], "default": 0.88}},
        },
        baseline={"speculative-algorithm": DROP},
        budget={"trials": trials},
        searcher={"kind": "random"},
    )


def cli(project: Path, *args: str, credentials: bool) -> subprocess.CompletedProcess[str]:
    """`python -m spec_sweep ARGS` in `project`, with the tracking credentials or without."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    env.pop("RAY_ADDRESS", None)
    env["SPEC_SWEEP_PROJECT_DIR"] = str(project)
    env["HUB_TOKEN"] = HUB  # a local Ray cluster's workers inherit it
    if credentials:
        env.update(MLFLOW_TRACKING_USERNAME=MLFLOW_ADMIN, MLFLOW_TRACKING_PASSWORD=PASSWORD)
    return subprocess.run(
        [sys.executable, "-m", "spec_sweep", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        env=env,
    )


def test_without_credentials_nothing_starts_and_one_line_names_the_variables(
    server: AuthMlflowServer, tmp_path: Path
) -> None:
    spec = secret_spec(tmp_path, name="nocreds", trials=3)
    for args in (["run", "--simulate"], ["trial", "--simulate", "--json"]):
        done = cli(tmp_path, *args, str(spec), "--tracking-uri", server.uri, credentials=False)
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"spec-sweep: error: --tracking-uri: '{server.uri}': ")
        assert "HTTP 401" in lines[0]
        assert "MLFLOW_TRACKING_USERNAME" in lines[0]
        assert "MLFLOW_TRACKING_PASSWORD" in lines[0]
        assert "MlflowException" not in done.stderr
        assert done.stdout == ""
    # Nothing started: no state of the sweep (not even a manual trial's folder).
    assert not (tmp_path / ".spec_sweep" / "nocreds").exists()


def test_a_sweep_and_a_manual_trial_record_everything_and_write_no_secret(
    server: AuthMlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = secret_spec(tmp_path, name="withcreds", trials=3)
    uri = server.uri
    swept = cli(tmp_path, "run", "--simulate", str(spec), "--tracking-uri", uri, credentials=True)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    trial = cli(
        tmp_path,
        *("trial", "--simulate", "--json", str(spec), "--tracking-uri", uri),
        credentials=True,
    )
    assert trial.returncode == 0, trial.stdout[-3000:] + trial.stderr[-3000:]
    export = tmp_path / "export" / "trials.csv"
    exported = cli(
        tmp_path, *("export", str(spec), "-o", str(export), "--tracking-uri", uri), credentials=True
    )
    assert exported.returncode == 0, exported.stdout[-3000:] + exported.stderr[-3000:]
    assert len(export.read_text().splitlines()) == 1 + 3  # a header and the three trials

    # Every trial is recorded, in the authenticated server.
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", MLFLOW_ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("withcreds")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    trials = [r for r in runs if r.data.tags.get("spec_sweep.kind") == "trial"]
    searched = sorted(
        r.data.tags["spec_sweep.trial_id"] for r in trials if "mlflow.parentRunId" in r.data.tags
    )
    assert searched == ["t0000", "t0001", "t0002"], searched
    assert all(r.info.status == "FINISHED" for r in trials)
    assert len(trials) == 4  # and the manual trial
    # measured: the simulated node, as SGLang, answers 401 to a request without the API key,
    # and a trial whose node lacked HUB_TOKEN would have ended as `environment`
    assert all(r.data.tags.get("failure_mode") == "none" for r in trials)

    # The server got the real key (it printed it, redacted in our copy of its log), and the
    # command we show names the placeholder.
    state = tmp_path / ".spec_sweep" / "withcreds"
    log = (state / "trials" / "t0001" / "attempt1" / "server.log").read_text()
    assert '"api_key": "***"' in log
    shown = json.loads(trial.stdout)
    assert "<secret: api-key>" in shown["command"]
    assert "--api-key '<secret: api-key>'" in swept.stdout  # the launch command recommended
    assert (state / "tune").is_dir()  # Ray Tune's snapshot is among what is searched

    # No planted secret anywhere: the state folder (results, logs, state.json, Tune's
    # snapshot, the report), the MLflow stores and artifacts, and everything printed.
    spec_file = spec.resolve()
    roots = [p for p in tmp_path.iterdir() if p.resolve() != spec_file]  # the spec is the user's
    leaks = files_holding([*roots, server.root], PLANTED)
    printed = (swept, trial, exported)
    leaks += [f"output: {s}" for s in PLANTED for out in printed if s in out.stdout + out.stderr]
    assert not leaks, leaks
    assert HF in spec_file.read_text()  # the values were planted where a user writes them
