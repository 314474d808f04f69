"""Helpers of the real-SGLang matrix: run one trial through the CLI and keep its traces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "tests" / "real" / "matrix.yaml"
MODEL = ROOT / ".models" / "llama-1b"


def run_trial_cli(
    name: str,
    sets: Mapping[str, Any],
    out_dir: Path,
    *,
    spec: Path = MATRIX,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900.0,
) -> dict[str, Any]:
    """Run one configuration through `spec-sweep trial --json`; save its result and log."""
    argv = [sys.executable, "-m", "spec_sweep", "trial", str(spec), "--json"]
    for key, value in sets.items():
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        argv += ["--set", f"{key}={text}"]
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["name"] = name
    result["set"] = dict(sets)
    trial_dir = Path(result["trial_dir"])
    bench = trial_dir / "bench.json"
    if bench.exists():
        result["bench"] = json.loads(bench.read_text())
    log = trial_dir / "server.log"
    if log.exists():
        shutil.copy(log, out_dir / "logs" / f"{name}.log")
        result["server_log"] = log.read_text(errors="replace")
    (out_dir / "results" / f"{name}.json").write_text(
        json.dumps({k: v for k, v in result.items() if k != "server_log"}, indent=1)
    )
    return result
