"""The MLflow store a command will use is checked before anything starts: MLflow 3 refuses a
folder store only when it first opens it, after the sweep's state and Ray cluster exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_sweep.errors import SpecError
from spec_sweep.spec_load import load_spec
from spec_sweep.store.paths import check_tracking_uri, resolve_tracking_uri

_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("uri", ["file:///tmp/somewhere/mlruns", "./mlruns", "/tmp/mlruns"])
def test_a_folder_store_is_refused_naming_the_option_the_value_and_the_fix(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(SpecError) as err:
        check_tracking_uri(uri, field="--tracking-uri")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"--tracking-uri: {uri!r} is a folder store")
    folder = Path(uri.removeprefix("file://")).resolve()
    assert f"sqlite:///{folder / 'mlflow.db'}" in text
    assert "MLFLOW_ALLOW_FILE_STORE=true" in text


def test_a_database_or_server_store_passes_and_mlflows_switch_allows_a_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    for uri in ("sqlite:////tmp/mlruns/mlflow.db", "http://127.0.0.1:5000", "postgresql://db/x"):
        check_tracking_uri(uri, field="--tracking-uri")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_tracking_uri("file:///tmp/somewhere/mlruns", field="--tracking-uri")


def test_the_error_names_where_the_uri_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    spec = load_spec(_ROOT / "sweeps" / "allreduce.yaml")
    with pytest.raises(SpecError, match=r"^--tracking-uri: '/tmp/a'"):
        resolve_tracking_uri(spec, "/tmp/a")
    in_spec = spec.model_copy(
        update={"tracking": spec.tracking.model_copy(update={"uri": "file:///tmp/b"})}
    )
    with pytest.raises(SpecError, match=r"^tracking.uri: 'file:///tmp/b'"):
        resolve_tracking_uri(in_spec)


def test_run_with_a_folder_store_exits_2_with_one_line_and_leaves_no_sweep(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    argv = ["sweeps/allreduce.yaml", "--simulate", "--state-dir", str(state)]
    refused = subprocess.run(
        [sys.executable, "-m", "spec_sweep.run", *argv, "--tracking-uri", f"file://{tmp_path}/m"],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert f"sqlite:///{tmp_path}/m/mlflow.db" in lines[0]
    assert not (state / "allreduce").exists()
    assert not (tmp_path / "m").exists()
