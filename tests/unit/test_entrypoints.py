"""Every documented way of starting the CLI runs it (a module without a `__main__` guard exits 0
and does nothing, which a user cannot tell from success)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["spec_sweep", "spec_sweep.cli"])
def test_module_entry_points_run_the_cli(module: str) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", module, "validate", "sweeps/allreduce.yaml"],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "allreduce" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", module, "validate", "sweeps/no-such-sweep.yaml"],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert "no-such-sweep.yaml" in bad.stderr + bad.stdout
