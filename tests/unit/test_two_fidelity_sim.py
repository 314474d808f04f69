"""`scripts/real_fidelity.py` end to end against the simulated node (real processes, no GPU).

A stand-in for `python -m sglang.launch_server` runs `python -m spec_sweep.sim` with the same
flags (its built-in 8-GPU profile, hence `--tp-size 8`): the script boots the plain configuration
at both fidelities, benchmarks each at concurrency 1 and 8 with the sweep's own client, records
the mode, boot phases, throughput and cycle cost, and summarizes. The simulated node models
`--load-format dummy` as the H100 check measured it (weights allocated, not read; decode steps
cost the same), so the dummy boot's weight load is the shorter one and plain decoding agrees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_plain_at_both_fidelities_on_the_simulated_node(tmp_path: Path) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text(
        f'#!/bin/sh\nshift 2\nexec {sys.executable} -m spec_sweep.sim "$@" --tp-size 8\n'
    )
    fake.chmod(0o755)
    out = tmp_path / "out"
    argv = [sys.executable, str(ROOT / "scripts" / "real_fidelity.py"), "--out", str(out)]
    argv += ["--only", "plain", "--python", str(fake), "--prompts", "4", "--output-len", "16"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {}
    for fidelity in ("dummy", "real"):
        record = records[fidelity] = json.loads((out / f"plain.{fidelity}.json").read_text())
        assert record["failure_mode"] == "none", record["reason"]
        assert ("--load-format" in record["command"]) == (fidelity == "dummy")
        assert record["boot_s"] > 0
        assert record["boot_phases"]  # SGLang's timed phases, from /server_info
        for level in (1, 8):
            tput = record["metrics"][f"output_throughput_c{level}"]
            # plain decoding accepts one token a cycle: the cycle is the per-request step time
            assert record["cycle_s"][f"c{level}"] == pytest.approx(level / tput)
    # 73 GiB per GPU allocated at 3 GiB/s against the profile's 252 s read
    dummy_load = records["dummy"]["boot_phases"]["load_weight"]
    assert dummy_load < records["real"]["boot_phases"]["load_weight"] / 5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["configurations"] == 1
    assert summary["failure_modes"] == {"none": {"configurations": 1, "agree": 1}}
    assert summary["cycle"]["c1"]["n"] == 1
    assert summary["predicted"]["c8"]["acceptance_from"] == {"plain": "plain"}
    assert "1 configurations booted at both fidelities" in done.stdout
