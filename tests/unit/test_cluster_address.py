"""A cluster address where nothing answers is refused at once: Ray's own join retries for
minutes, printing a warning every few seconds, so a mistyped `--address` or a stale
`RAY_ADDRESS` looked like a hung sweep."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spec_sweep.errors import SpecError
from spec_sweep.orchestrate.cluster import _probe

_ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_address_that_answers_passes_and_one_that_does_not_is_refused() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        _probe(f"127.0.0.1:{port}", given="--address")
        _probe(f"ray://127.0.0.1:{port}", given="--address")
    closed = _closed_port()
    with pytest.raises(SpecError) as err:
        _probe(f"127.0.0.1:{closed}", given="RAY_ADDRESS")
    text = str(err.value)
    assert text.startswith(f"RAY_ADDRESS: '127.0.0.1:{closed}': nothing answers there")
    assert "\n" not in text
    assert "ray start --head" in text
    for left_to_ray in ("auto", "local", "not-an-address"):
        _probe(left_to_ray, given="--address")


def test_run_with_a_dead_address_exits_2_at_once_with_one_line_and_leaves_no_sweep(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    address = f"127.0.0.1:{_closed_port()}"
    argv = [str(_ROOT / "sweeps" / "allreduce.yaml"), "--simulate", "--state-dir", str(state)]
    # Ray's own join was still retrying after 5 minutes: a hang fails this by the timeout.
    refused = subprocess.run(
        [sys.executable, "-m", "spec_sweep", "run", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "RAY_ADDRESS": address},
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert f"RAY_ADDRESS: '{address}': nothing answers there" in lines[0]
    assert not (state / "allreduce").exists()
