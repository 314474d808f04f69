"""Where spec_sweep keeps things on disk: sweep state, trial folders and the MLflow store.

This module owns the default locations (docs/design.md, "MLflow layout"): everything lives under the
directory the command runs from (the project root), as absolute paths, because Ray workers run in
other working directories. Sweep state goes to `.spec_sweep/<sweep name>/`, the MLflow store to
`mlruns/` (SQLite database `mlruns/mlflow.db`, artifacts in `mlruns/artifacts/`).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from spec_sweep.core.secrets import take_credentials
from spec_sweep.errors import SpecError
from spec_sweep.spec import SweepSpec

__all__ = [
    "ALLOW_INSECURE_OPTION",
    "check_tracking_uri",
    "default_state_root",
    "default_tracking_uri",
    "manual_trial_dir",
    "mlruns_dir",
    "resolve_tracking_uri",
    "sweep_state_dir",
    "sweep_trials_dir",
    "tcp_refusal",
]


#: Seconds to wait for a TCP answer (a tracking server, a Ray cluster) before refusing it.
_PROBE_TIMEOUT_S = 5.0


def _project_dir() -> Path:
    return Path(os.environ.get("SPEC_SWEEP_PROJECT_DIR") or Path.cwd()).resolve()


def default_state_root() -> Path:
    """`.spec_sweep/` in the project root."""
    return _project_dir() / ".spec_sweep"


def mlruns_dir() -> Path:
    """`mlruns/` in the project root."""
    return _project_dir() / "mlruns"


def default_tracking_uri() -> str:
    """The default MLflow store: an absolute SQLite URI under `mlruns/`."""
    return f"sqlite:///{mlruns_dir() / 'mlflow.db'}"


def sweep_state_dir(spec: SweepSpec, state_dir: str | Path | None = None) -> Path:
    """The state folder of one sweep."""
    root = Path(state_dir).resolve() if state_dir else default_state_root()
    return root / spec.name


def sweep_trials_dir(state_path: Path) -> Path:
    """`trials/` of a sweep's state folder: one folder per trial and attempt
    (`trials/<id>/attempt<N>/`)."""
    return state_path / "trials"


def manual_trial_dir(spec: SweepSpec, state_dir: str | Path | None = None) -> Path:
    """A new folder for a trial run by `spec-sweep trial`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = sweep_state_dir(spec, state_dir) / "manual" / f"{stamp}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_tracking_uri(
    spec: SweepSpec, override: str | None = None, *, source: str | None = None
) -> str:
    """The store `resolve_tracking_uri` picks, refused first if MLflow would refuse it.

    MLflow 3 refuses a tracking store kept as plain files (a path, or a `file:` URI) unless
    `MLFLOW_ALLOW_FILE_STORE` is true; it says so only when the store is first opened, after
    the sweep's state folder exists and its Ray cluster started, and without naming our option.
    Creates nothing. `source`: where `override` came from, when not `--tracking-uri`.

    Raises:
        SpecError: a folder store while `MLFLOW_ALLOW_FILE_STORE` is not true (one line naming
            `source`, `--tracking-uri` or the spec's file and `tracking.uri`, the value and the
            fix).
    """
    uri = override or spec.tracking.uri or default_tracking_uri()
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return uri
    from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE  # heavy: only for a folder

    if MLFLOW_ALLOW_FILE_STORE.get():  # type: ignore[no-untyped-call]
        return uri
    field = source or _field(spec, override)
    folder = Path(parsed.path if parsed.scheme else uri).expanduser().resolve()
    raise SpecError(
        f"{field}: {uri!r} is a folder store, which MLflow refuses: use "
        f"sqlite:///{folder / 'mlflow.db'} (a database in that folder), or set "
        "MLFLOW_ALLOW_FILE_STORE=true to keep the folder store"
    )


def tcp_refusal(hosts: Sequence[str], port: int) -> str | None:
    """None when one of `hosts` accepts a TCP connection on `port` within `_PROBE_TIMEOUT_S`,
    else why the last one did not (for a one-line error)."""
    reason = "no host to try"
    for host in dict.fromkeys(hosts):
        try:
            with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
                return None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
    return reason


def _field(spec: SweepSpec, override: str | None) -> str:
    """Where the tracking URI came from, as an error names it."""
    if override:
        return "--tracking-uri"
    return f"{spec.source}: tracking.uri" if spec.source else "tracking.uri"


def _probe_server(uri: str, *, field: str) -> None:
    """Refuse at once an http(s) store where nothing answers.

    MLflow's client retries a refused connection with backoff: a sweep pointed at a server that
    is down (or a mistyped port) failed after about four minutes, with its Ray cluster started,
    in MLflow's words. A TCP connection is all this asks: any answer is left to MLflow.

    Raises:
        SpecError: no TCP answer within `_PROBE_TIMEOUT_S` (nothing launched).
    """
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    reason = tcp_refusal([parsed.hostname], port)
    if reason is None:
        return
    raise SpecError(
        f"{field}: {uri!r}: no server answers there ({reason}): start the MLflow server "
        "(mlflow server --host 0.0.0.0 --port 5000) or check its address, or leave the "
        "tracking URI unset to use the project's mlruns/ store"
    )


#: The option that lets a sweep record to a plain-HTTP server without credentials.
ALLOW_INSECURE_OPTION = "--allow-insecure-tracking"
_CREDENTIALS = (
    "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_access(uri: str, spec: SweepSpec, *, field: str, allow_insecure: bool) -> None:
    """Refuse a tracking server that refuses our credentials, and a plain-HTTP server on
    another machine used without any (docs/running/security.md).

    Raises:
        SpecError: HTTP 401 or 403 from the server, or `http://` to a non-loopback host without
            credentials and without `ALLOW_INSECURE_OPTION` (one line saying what to set).
    """
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    from spec_sweep.store.mlflow_private import access_status, has_credentials  # heavy: MLflow

    status = access_status(uri, spec.experiment, timeout_s=_PROBE_TIMEOUT_S)
    if status == 401:
        given = "were refused" if has_credentials(uri) else "are not set"
        raise SpecError(
            f"{field}: {uri!r}: the tracking server asks for credentials (HTTP 401) and they "
            f"{given}: {_CREDENTIALS} to an account of that server"
        )
    if status == 403:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME") or "this account"
        raise SpecError(
            f"{field}: {uri!r}: the tracking server denies {user} access to experiment "
            f"{spec.experiment!r} (HTTP 403): give it EDIT permission there, or {_CREDENTIALS} "
            "to an account that has it"
        )
    if parsed.scheme == "http" and not _loopback(parsed.hostname) and not has_credentials(uri):
        if allow_insecure:
            return
        raise SpecError(
            f"{field}: {uri!r} is a plain-HTTP tracking server on another machine, used "
            "without credentials: anyone who reaches it can read, change or delete every "
            "sweep; run it with authentication (mlflow server --app-name basic-auth) and "
            f"{_CREDENTIALS}, or pass {ALLOW_INSECURE_OPTION} if an open server is intended "
            "(docs/running/security.md)"
        )


def resolve_tracking_uri(
    spec: SweepSpec,
    override: str | None = None,
    *,
    source: str | None = None,
    allow_insecure: bool = False,
) -> str:
    """`--tracking-uri`, else `tracking.uri`, else the project's `mlruns/` SQLite store.

    A user and password in the URI's userinfo move to this process's MLflow credentials
    (`MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD`); the URI returned has none.

    Args:
        spec: The sweep.
        override: The URI given for this command, if any.
        source: Where `override` came from, when not `--tracking-uri` (for the errors).
        allow_insecure: `ALLOW_INSECURE_OPTION`: a plain-HTTP server on another machine
            without credentials is intended.

    Raises:
        SpecError: a folder store MLflow would refuse (`check_tracking_uri`), a server where
            nothing answers, or one that refuses our credentials or has none to ask for them
            (`_check_access`).
    """
    uri = take_credentials(check_tracking_uri(spec, override, source=source))
    field = source or _field(spec, override)
    _probe_server(uri, field=field)
    _check_access(uri, spec, field=field, allow_insecure=allow_insecure)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return uri
