"""`spec-sweep ui`: a lean MLflow UI server that opens on the latest sweep's trials.

MLflow's own `mlflow ui` starts four uvicorn workers plus its job runner and seven huey consumers
(about 2.5 GB and half a minute on two cores, measured by `benchmarks/ui_server.py`). The UI
needs none of the jobs: this module runs `mlflow server` with one worker and job execution off
(`MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`), waits until it answers, and prints (with `--open`,
opens) the URL of the sweep's trials view. Meanwhile a short-lived child process finds the latest
sweep in the store and publishes that view (`spec_sweep.store.sweeps.locate_sweep`), so this process
never imports MLflow itself and stays small while the server runs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import webbrowser
from dataclasses import dataclass
from pathlib import Path

from spec_sweep.errors import SpecSweepError
from spec_sweep.node.procs import stop_process_group
from spec_sweep.store.paths import default_tracking_uri

__all__ = ["UiServer", "server_command", "start_ui_server", "ui_command"]

HOST = "127.0.0.1"


def server_command(uri: str, *, port: int, artifact_root: str | None) -> list[str]:
    """The `mlflow server` command line of the lean UI server (one worker, no jobs)."""
    argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri]
    if artifact_root is not None:
        argv += ["--default-artifact-root", artifact_root]
    return [*argv, "--host", HOST, "--port", str(port), "--workers", "1"]


def server_env() -> dict[str, str]:
    """The server's environment: MLflow's job runner and its huey consumers off."""
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


_PR_SET_PDEATHSIG = 1


def _term_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """preexec_fn: SIGTERM the server when `spec-sweep ui` dies, even by SIGKILL (Linux only).

    SIGTERM, not SIGKILL: `mlflow server` forwards it to its uvicorn worker and exits with it.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _artifact_root(uri: str) -> str | None:
    """`mlruns/artifacts` beside a SQLite store in `mlruns/` (where the sweeps put artifacts)."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///") :])
    db.parent.mkdir(parents=True, exist_ok=True)
    return (db.parent / "artifacts").as_uri()


@dataclass
class UiServer:
    """A running lean MLflow server and where its sweep view is."""

    proc: subprocess.Popen[bytes]
    base_url: str
    url: str
    experiment: str | None
    ready_s: float

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server's process group (SIGTERM, SIGKILL after `timeout`) and reap it.

        The UI server holds nothing a graceful stop would save (the store's writes are
        transactions), so Ctrl-C does not wait long for uvicorn to drain its connections.
        """
        stop_process_group(self.proc.pid, grace_s=timeout, leader=self.proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _exit_message(code: int, port: int, log_path: Path | None) -> str:
    text = ""
    if log_path is not None and log_path.is_file():
        text = log_path.read_text(encoding="utf-8", errors="replace")
    if "address already in use" in text.lower():
        return f"the MLflow server could not listen on port {port}: it is in use (use --port)"
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
    where = f" (log: {log_path})" if log_path is not None else ""
    return f"the MLflow server exited with code {code}: {last.strip()}{where}"


def _locate(uri: str, experiment: str | None) -> subprocess.Popen[str]:
    """A child process that finds the sweep and publishes its view (prints JSON or nothing)."""
    code = (
        "import json, sys; from spec_sweep.store.sweeps import locate_sweep; "
        "ref = locate_sweep(sys.argv[1], sys.argv[2] or None); "
        "print(json.dumps(None if ref is None else "
        "{'experiment': ref.experiment, 'path': ref.view_path}))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, uri, experiment or ""],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_ui_server(
    uri: str,
    *,
    port: int,
    experiment: str | None = None,
    log_path: Path | None = None,
    timeout_s: float = 120.0,
) -> UiServer:
    """Start the lean server, publish the latest sweep's view, and wait until both are done.

    Raises:
        SpecSweepError: when the server exits or does not answer in `timeout_s` (its log is
            named), or the store cannot be read.
    """
    t0 = time.monotonic()
    locator = _locate(uri, experiment)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
        # A new store: let the locator create its tables before the server migrates it too.
        locator.wait()
    log = log_path.open("wb") if log_path is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        server_command(uri, port=port, artifact_root=_artifact_root(uri)),
        env=server_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_term_with_parent,
    )
    base = f"http://{HOST}:{port}"
    server = UiServer(proc, base, f"{base}/", None, 0.0)
    where = f" (log: {log_path})" if log_path is not None else ""
    try:
        deadline = t0 + timeout_s
        while not _answers(f"{base}/health"):
            if proc.poll() is not None:
                raise SpecSweepError(_exit_message(proc.returncode, port, log_path))
            if time.monotonic() > deadline:
                raise SpecSweepError(
                    f"the MLflow server did not answer in {timeout_s:.0f} s{where}"
                )
            time.sleep(0.1)
        out, err = locator.communicate(timeout=max(1.0, deadline - time.monotonic()))
        if locator.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            raise SpecSweepError(f"could not read the store {uri}: {last}")
        found = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    except BaseException:
        locator.kill()
        server.stop()
        raise
    finally:
        if log_path is not None and not isinstance(log, int):
            log.close()
    if found is not None:
        server.url = f"{base}/#{found['path']}"
        server.experiment = found["experiment"]
    server.ready_s = time.monotonic() - t0
    return server


def ui_command(args: argparse.Namespace) -> int:
    """`spec-sweep ui`: serve the store's UI until Ctrl-C; print (and open) the trials view."""
    uri = args.tracking_uri or default_tracking_uri()
    experiment = getattr(args, "experiment", None)
    # Stopped by SIGTERM or a closed terminal: still stop the server (see `finally` below).
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
    log = Path(tempfile.gettempdir()) / f"spec-sweep-ui-{args.port}.log"
    server = start_ui_server(uri, port=args.port, experiment=experiment, log_path=log)
    if server.experiment is None:
        which = f"experiment {experiment!r}" if experiment else uri
        print(f"MLflow UI at {server.url} (no sweep in {which} yet)", flush=True)
    else:
        print(
            f"MLflow UI: trials of the latest sweep of {server.experiment!r}, best first "
            f"(ready in {server.ready_s:.1f} s; Ctrl-C to stop):\n  {server.url}",
            flush=True,
        )
    if getattr(args, "open", False):
        webbrowser.open(server.url)
    try:
        return server.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
