"""Choosing a server port that every port SGLang derives from it can also use.

SGLang does not listen on `--port` alone. Read in the sources of the versions we support:

- 0.5.13 `ServerArgs._handle_deprecated_args` sets `grpc_port = port + 10000` for every launch and
  raises `ValueError: SGLANG_GRPC_PORT (N) must be between 1 and 65535` past 65535; 0.5.23 keeps
  the same `port + 10000` default for its legacy gRPC mode (`arg_groups/serving_hook.py`).
- With dp-attention on one node, `PortArgs.init_new` (both versions) puts the ZMQ dist-init port at
  `port + 233` and needs the ports after it free: 5 on 0.5.13, 6 on 0.5.23 (`port_base + 0..5`).
- The gRPC sidecar defaults to `port + 1` (gRPC mode only); the NCCL port is SGLang's own pick
  from a freshly bound socket, so it is never ours to choose.

A port from binding 0 lands in the kernel's ephemeral range (32768-60999 on Linux), where about
one port in three has `port + 10000 > 65535`: the boot dies before touching a GPU and the trial
looks like a bad configuration. So the base port is drawn from a range whose every derived port
is valid (20000-29999: above Ray's default worker ports 10002-19999, and `+ 10000` stays below
40000), and the base and each derived port are checked free before the launch. This module is
the one place that knows those rules; the simulated node applies the same validity rule.
"""

from __future__ import annotations

import random
import socket

from spec_sweep.errors import TrialError

__all__ = [
    "GRPC_PORT_OFFSET",
    "PORT_RANGE",
    "PortUnavailableError",
    "choose_server_port",
    "derived_ports",
    "port_is_free",
]

#: SGLang's default gRPC port is `--port + 10000` (validated at argument time).
GRPC_PORT_OFFSET = 10000
#: dp-attention's ZMQ dist-init port is `--port + 233` on one node.
_ZMQ_TCP_PORT_DELTA = 233
#: Consecutive ports after the dist-init port used by dp-attention (6 on 0.5.23, 5 on 0.5.13).
_ZMQ_DERIVED = 6
#: Base ports are drawn from here: every derived port of each is a valid port.
PORT_RANGE = (20000, 30000)
_MAX_PORT = 65535
_ATTEMPTS = 200


class PortUnavailableError(TrialError):
    """No base port with all its derived ports free could be found (the machine's fault)."""


def derived_ports(port: int) -> tuple[int, ...]:
    """The ports SGLang may derive from `--port`, in the order SGLang derives them.

    Args:
        port: The server's `--port`.

    Returns:
        The gRPC port, the gRPC sidecar port and the dp-attention ZMQ block.
    """
    zmq_base = port + _ZMQ_TCP_PORT_DELTA
    return (
        port + GRPC_PORT_OFFSET,
        port + 1,
        *range(zmq_base, zmq_base + _ZMQ_DERIVED + 1),
    )


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` can be bound on `host` right now.

    Args:
        port: The port.
        host: The address to bind.
    """
    if not 1 <= port <= _MAX_PORT:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_server_port(
    host: str = "127.0.0.1",
    *,
    rng: random.Random | None = None,
    port_range: tuple[int, int] = PORT_RANGE,
) -> int:
    """A `--port` whose own and derived ports are all valid and free now.

    Args:
        host: The address the server will bind.
        rng: Random source (tests pass a seeded one).
        port_range: Half-open range of base ports to draw from.

    Returns:
        The port.

    Raises:
        PortUnavailableError: After many draws found no free port block.
    """
    draw = rng or random.SystemRandom()
    lo, hi = port_range
    for _ in range(_ATTEMPTS):
        port = draw.randrange(lo, hi)
        if all(p <= _MAX_PORT for p in derived_ports(port)) and all(
            port_is_free(p, host) for p in (port, *derived_ports(port))
        ):
            return port
    raise PortUnavailableError(
        f"no free server port with its derived ports in {lo}-{hi - 1} on {host} after "
        f"{_ATTEMPTS} draws; free some ports in that range or stop leftover servers"
    )
