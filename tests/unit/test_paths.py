"""The MLflow store a command will use is checked before anything starts: MLflow 3 refuses a
folder store only when it first opens it, after the sweep's state and Ray cluster exist."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spec_sweep.errors import SpecError
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec
from spec_sweep.store.paths import check_tracking_uri, resolve_tracking_uri

_ROOT = Path(__file__).resolve().parents[2]
_SWEEP = _ROOT / "sweeps" / "allreduce.yaml"


@pytest.fixture
def spec(monkeypatch: pytest.MonkeyPatch) -> SweepSpec:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    return load_spec(_SWEEP)


def _with_uri(spec: SweepSpec, uri: str) -> SweepSpec:
    return spec.model_copy(update={"tracking": spec.tracking.model_copy(update={"uri": uri})})


@pytest.mark.parametrize("uri", ["file:///tmp/somewhere/mlruns", "./mlruns", "/tmp/mlruns"])
def test_a_folder_store_is_refused_naming_the_option_the_value_and_the_fix(
    uri: str, spec: SweepSpec
) -> None:
    with pytest.raises(SpecError) as err:
        check_tracking_uri(spec, uri)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"--tracking-uri: {uri!r} is a folder store")
    folder = Path(uri.removeprefix("file://")).resolve()
    assert f"sqlite:///{folder / 'mlflow.db'}" in text
    assert "MLFLOW_ALLOW_FILE_STORE=true" in text


def test_in_the_spec_the_error_names_its_file_and_field(spec: SweepSpec) -> None:
    with pytest.raises(SpecError, match=rf"^{_SWEEP}: tracking.uri: 'file:///tmp/b' is a folder"):
        resolve_tracking_uri(_with_uri(spec, "file:///tmp/b"))


def test_a_database_or_server_store_passes_and_mlflows_switch_allows_a_folder(
    spec: SweepSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check_tracking_uri(spec).startswith("sqlite:///")  # the project's default
    for uri in ("sqlite:////tmp/mlruns/mlflow.db", "http://127.0.0.1:5000", "postgresql://db/x"):
        assert check_tracking_uri(spec, uri) == uri
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert check_tracking_uri(spec, "file:///tmp/x") == "file:///tmp/x"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "spec_sweep", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_run_and_validate_refuse_a_folder_store_with_one_line_and_leave_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    uri = f"file://{tmp_path}/m"
    refused = _cli(
        "run",
        str(_SWEEP),
        "--simulate",
        "--state-dir",
        str(state),
        "--tracking-uri",
        uri,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert f"sqlite:///{tmp_path}/m/mlflow.db" in lines[0]
    assert not (state / "allreduce").exists()
    assert not (tmp_path / "m").exists()

    in_spec = tmp_path / "sweep.yaml"
    in_spec.write_text(_SWEEP.read_text() + f"\ntracking:\n  uri: {uri}\n")
    invalid = _cli("validate", str(in_spec), cwd=tmp_path)
    assert invalid.returncode == 2, invalid.stdout + invalid.stderr
    assert f"{in_spec}: tracking.uri: {uri!r} is a folder store" in invalid.stderr


def test_a_server_where_nothing_answers_is_refused_at_once(spec: SweepSpec) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        live = f"http://127.0.0.1:{server.getsockname()[1]}"
        assert resolve_tracking_uri(spec, live) == live
    # The port is closed now: MLflow's own client retried it for about four minutes.
    with pytest.raises(SpecError) as err:
        resolve_tracking_uri(spec, live)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"--tracking-uri: {live!r}: no server answers there (")
    assert "mlflow server" in text
    with pytest.raises(SpecError, match=rf"^{_SWEEP}: tracking.uri: '{live}': no server answers"):
        resolve_tracking_uri(_with_uri(spec, live))


def test_a_state_folder_that_cannot_be_created_is_refused_naming_the_option(
    spec: SweepSpec,
) -> None:
    from spec_sweep.store.state import open_state

    with pytest.raises(SpecError) as err:
        open_state(spec, state_dir="/proc/spec-sweep-state", fresh=False, simulate=True)
    text = str(err.value)
    assert text.startswith("--state-dir: cannot create /proc/spec-sweep-state/allreduce (")
    assert "use a folder you can write" in text


def test_a_uri_read_back_from_the_state_folder_is_named_as_such(
    spec: SweepSpec, tmp_path: Path
) -> None:
    from spec_sweep.store.sweeps import find_sweep

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    state = tmp_path / "allreduce" / "state.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"tracking_uri": dead}))
    with pytest.raises(SpecError, match=rf"^{state}: tracking_uri: '{dead}': no server answers"):
        find_sweep(spec, tracking_uri=None, state_dir=tmp_path)
    # A folder store saved by a sweep run with MLFLOW_ALLOW_FILE_STORE, read back without it.
    state.write_text(json.dumps({"tracking_uri": "file:///tmp/folder-store"}))
    with pytest.raises(SpecError, match=rf"^{state}: tracking_uri: 'file:///tmp/folder-store' is"):
        find_sweep(spec, tracking_uri=None, state_dir=tmp_path)


def test_report_and_export_where_no_store_exists_say_so_and_create_none(
    spec: SweepSpec, tmp_path: Path
) -> None:
    from spec_sweep.errors import SpecSweepError
    from spec_sweep.store.sweeps import find_sweep

    db = tmp_path / "mlruns" / "mlflow.db"
    with pytest.raises(SpecSweepError, match=rf"^no MLflow store at sqlite:///{db}: run the sweep"):
        find_sweep(spec, tracking_uri=f"sqlite:///{db}", state_dir=tmp_path / "state")
    assert not (tmp_path / "mlruns").exists()  # opening a SQLite store would have created it


# ---------------------------------------------------------------------------------------------
# Who may record: a server's 401/403, an open server elsewhere, credentials in the URI
# (docs/running/security.md)


class _Server:
    """A stand-in tracking server on `host`: every request answers `status`."""

    def __init__(self, host: str, status: int) -> None:
        answer = status

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"You are not authenticated." if answer == 401 else b"{}"
                self.send_response(answer)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.mlflow/credentials


def _outside_address() -> str | None:
    """This machine's address on a network (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))  # no packet is sent
            address = str(sock.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


@pytest.mark.usefixtures("no_credentials")
@pytest.mark.parametrize("status", [401, 403])
def test_a_server_that_refuses_us_is_one_line_naming_the_variables(
    spec: SweepSpec, status: int
) -> None:
    server = _Server("127.0.0.1", status)
    try:
        uri = f"http://127.0.0.1:{server.port}"
        with pytest.raises(SpecError) as err:
            resolve_tracking_uri(spec, uri)
    finally:
        server.close()
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"--tracking-uri: {uri!r}: the tracking server ")
    assert f"(HTTP {status})" in text
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in text
    assert "MLFLOW_TRACKING_TOKEN" in text


@pytest.mark.usefixtures("no_credentials")
def test_an_open_plain_http_server_elsewhere_is_refused_unless_allowed(
    spec: SweepSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = _outside_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    server = _Server("0.0.0.0", 404)
    try:
        uri = f"http://{address}:{server.port}"
        with pytest.raises(SpecError) as err:
            resolve_tracking_uri(spec, uri)
        text = str(err.value)
        assert "\n" not in text
        assert text.startswith(f"--tracking-uri: {uri!r} is a plain-HTTP tracking server")
        assert "--app-name basic-auth" in text
        assert "--allow-insecure-tracking" in text
        assert resolve_tracking_uri(spec, uri, allow_insecure=True) == uri
        loopback = f"http://127.0.0.1:{server.port}"
        assert resolve_tracking_uri(spec, loopback) == loopback  # this machine's own
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "pw")
        assert resolve_tracking_uri(spec, uri) == uri  # with credentials
    finally:
        server.close()


@pytest.mark.usefixtures("no_credentials")
def test_credentials_in_the_uri_become_mlflows_and_leave_the_uri(
    spec: SweepSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _Server("127.0.0.1", 404)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "")  # restored after the test
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "")
    try:
        bare = f"http://127.0.0.1:{server.port}"
        uri = bare.replace("//", "//bob:s3cr%40t@")
        assert resolve_tracking_uri(spec, uri) == bare
    finally:
        server.close()
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "bob"
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cr@t"
