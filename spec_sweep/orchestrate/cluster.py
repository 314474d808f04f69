"""The Ray cluster of a sweep: start or join it, check it can hold a trial, quiet its logs.

This module owns everything about the cluster itself (docs/design.md, "Running on a cluster").
Every node that can run trials offers its GPUs and one `spec_sweep_node` resource; a trial
reserves `node.gpus` GPUs plus that unit, so one node runs one trial at a time. `start_ray`
joins the cluster at `--address` (or `RAY_ADDRESS`), else starts a local one in its own temp dir
(`/tmp/spec_sweep-ray-<id>`, so a resume can stop what a killed driver left), offering pretend
GPUs when the backend is simulated. `check_cluster` fails fast when no node can hold a trial.
Ray is imported only in `orchestrate`; this is the one module of it that uses Ray's private API
(`ray._private.authentication`, `ray._raylet`, and `ray.init(_temp_dir=...)`), pinned by
`tests/unit/test_private_api_contracts.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import psutil
import ray

from spec_sweep.errors import SpecError, SpecSweepError
from spec_sweep.spec import SweepSpec
from spec_sweep.store.paths import tcp_refusal
from spec_sweep.store.state import SweepState

__all__ = ["NODE_RESOURCE", "RAY_VERSION", "check_cluster", "node_id", "ray_pids", "start_ray"]

#: Custom Ray resource every node that can run trials advertises once; a trial takes it whole.
NODE_RESOURCE = "spec_sweep_node"
#: The Ray version whose private API this module was checked against.
RAY_VERSION = "2.60.0"
_LOOPBACK = frozenset({"localhost", "127.0.0.1"})


def node_id() -> str:
    """The id of the Ray node this code runs on (inside a trial: the trial's node)."""
    return str(ray.get_runtime_context().get_node_id())


def check_cluster(spec: SweepSpec, *, simulated: bool) -> int:
    """Number of nodes that can hold one trial; fails fast when there is none."""
    need_gpus = float(spec.node.gpus)
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    fit = [
        n
        for n in nodes
        if n["Resources"].get("GPU", 0.0) >= need_gpus and n["Resources"].get(NODE_RESOURCE, 0) >= 1
    ]
    if not fit:
        have = ", ".join(
            f"{n['NodeManagerAddress']}: {int(n['Resources'].get('GPU', 0))} GPUs"
            + ("" if n["Resources"].get(NODE_RESOURCE) else f" (no {NODE_RESOURCE})")
            for n in nodes
        )
        hint = (
            "use --simulate to rehearse on the simulated node"
            if not simulated
            else f"start worker nodes with --num-gpus {spec.node.gpus} "
            f"--resources '{{\"{NODE_RESOURCE}\": 1}}'"
        )
        raise SpecSweepError(
            f"no node of the Ray cluster can hold a trial (node.gpus = {spec.node.gpus}); "
            f"nodes: {have or 'none'}: {hint}"
        )
    return len(fit)


def start_ray(spec: SweepSpec, *, address: str | None, simulated: bool, state: SweepState) -> bool:
    """Connect to (or start) Ray; returns whether this call started a local cluster."""
    if ray.is_initialized():
        return False
    given = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    _quiet_logs(state.path / "driver.log")
    quiet: dict[str, Any] = {
        "log_to_driver": False,
        "configure_logging": False,
        "include_dashboard": False,
    }
    if address:
        _probe(address, given=given)
        _token_auth_like_head()
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError) as exc:  # RuntimeError: "Failed to connect to GCS"
            raise SpecSweepError(_join_failure(address, exc)) from exc
        _quiet_logs(state.path / "driver.log")
        return False
    gpus: int | None = None
    if simulated:
        gpus = spec.node.gpus
    state.data["ray_temp_dir"] = state.ray_temp_dir
    state.save_ray_pids([])
    ray.init(
        num_gpus=gpus,
        resources={NODE_RESOURCE: 1},
        _temp_dir=state.ray_temp_dir,
        **quiet,
    )
    _quiet_logs(state.path / "driver.log")
    return True


def _probe(address: str, *, given: str) -> None:
    """Refuse at once a `host:port` (or `ray://host:port`) where nothing answers.

    Ray's own join retries for minutes (20 tries of about 40 s each in Ray 2.60) before it
    fails, printing a warning every few seconds, so a mistyped address or a stale `RAY_ADDRESS`
    looked like a hung sweep. Ray joins a loopback address at this machine's IP, so both are
    tried. `auto`, `local` and anything not `host:port` are left to Ray.

    Raises:
        SpecError: no TCP answer at the address (nothing launched).
    """
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    host = host.strip("[]")
    hosts = [host]
    if host in _LOOPBACK:
        with contextlib.suppress(Exception):
            hosts.append(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    reason = tcp_refusal(hosts, int(port))
    if reason is None:
        return
    raise SpecError(
        f"{given}: {address!r}: nothing answers there ({reason}): check the head's address and "
        "port (`ray start --head` prints them), or leave --address and RAY_ADDRESS unset to run "
        "on a local cluster"
    )


def _token_auth_like_head() -> None:
    """Use token auth to join a cluster when a token is at hand and no mode is set.

    Ray 2.60's `ray start --head` turns token auth on when a token exists and RAY_AUTH_MODE is
    unset, but a driver joining with an address does not, and is then refused ("Authentication
    token is missing or incorrect"). Apply the head's own rule on the driver side.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    with contextlib.suppress(ImportError, AttributeError):
        from ray._private.authentication import authentication_token_setup as auth

        auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _has_token() -> bool:
    """Whether a Ray auth token is at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray)."""
    try:
        # Not in Ray's own `_raylet.pyi` stub; pinned by tests/unit/test_private_api_contracts.py.
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))
    except ray.exceptions.AuthenticationError:  # RAY_AUTH_TOKEN_PATH names no readable token
        return False
    except (ImportError, AttributeError):
        return True  # cannot tell: say nothing about tokens


def _join_failure(address: str, exc: Exception) -> str:
    """The one-line error for a cluster that refused or never answered this driver."""
    if not _has_token():
        return (
            f"could not join the Ray cluster at {address} ({exc}); if it uses token "
            "authentication (Ray's default), this machine has no token: copy the cluster's "
            "token (`ray get-auth-token` on the head) to ~/.ray/auth_token, or set "
            "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN"
        )
    return (
        f"could not join the Ray cluster at {address} ({exc}): check the address, that the "
        "head is up, and that your Ray token is the cluster's (`ray get-auth-token` on the head)"
    )


def _quiet_logs(path: Path) -> None:
    """Send Ray's, MLflow's and Optuna's own logging to a file instead of the terminal."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    # ray.init drops the handlers of the "ray" logger; its auth module's logger keeps ours.
    names = ("ray", "ray._private.authentication", "mlflow", "optuna", "alembic", "spec_sweep")
    for name in names:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
            if isinstance(old, logging.FileHandler):
                old.close()
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET or logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


def ray_pids() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out.append({"pid": proc.pid, "create_time": proc.create_time(), "name": proc.name()})
    return out
