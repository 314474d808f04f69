"""Server ports: every port SGLang derives from `--port` must be valid and free."""

from __future__ import annotations

import random
import socket

import pytest

from spec_sweep.errors import TrialError
from spec_sweep.node.ports import (
    GRPC_PORT_OFFSET,
    PortUnavailableError,
    choose_server_port,
    derived_ports,
    port_is_free,
)


def test_derived_ports_follow_sglang() -> None:
    derived = derived_ports(20000)
    assert derived[0] == 20000 + GRPC_PORT_OFFSET  # 0.5.13 `_handle_deprecated_args`
    assert derived[1] == 20001  # gRPC sidecar
    assert derived[2:] == tuple(range(20233, 20240))  # dp-attention ZMQ block


def test_chosen_ports_leave_room_for_every_derived_port() -> None:
    rng = random.Random(7)
    for _ in range(200):
        port = choose_server_port(rng=rng)
        assert all(1 <= p <= 65535 for p in (port, *derived_ports(port)))
        # The bug this replaces: ports from the ephemeral range, where port + 10000 > 65535.
        assert port + GRPC_PORT_OFFSET <= 65535


def test_a_port_whose_derived_port_is_taken_is_skipped() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        taken = holder.getsockname()[1]
        assert not port_is_free(taken)
        blocked = taken - GRPC_PORT_OFFSET  # a base whose gRPC port is held
        if blocked < 2:
            pytest.skip("the kernel's port is too low to be a derived gRPC port")
        with pytest.raises(PortUnavailableError, match="no free server port"):
            choose_server_port(port_range=(blocked, blocked + 1))
        # With a free neighbour in range, the held block is never chosen.
        free_base = blocked - 1
        if not all(port_is_free(p) for p in (free_base, *derived_ports(free_base))):
            pytest.skip("the neighbouring block is in use on this machine")
        for seed in range(20):
            rng = random.Random(seed)
            assert choose_server_port(rng=rng, port_range=(free_base, blocked + 1)) == free_base


def test_out_of_range_ports_are_never_free() -> None:
    assert not port_is_free(0)
    assert not port_is_free(65536 + 1)


def test_no_free_port_is_the_machinerys_failure_not_the_configurations() -> None:
    # A `TrialError`: the attempt ends KILLED and is retried, never recorded against the config.
    assert issubclass(PortUnavailableError, TrialError)
