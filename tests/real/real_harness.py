"""Helpers of the real-SGLang matrix: which SGLang and model, the specs for them, one trial run.

The matrix runs on either SGLang version and either model, chosen by environment variables:

- `SPEC_SWEEP_REAL_SGLANG`: the SGLang version the specs name (`node.sglang_version`, so flags
  are checked against its manifest). Default: the version of the `sglang` that imports here (the
  offline bundle on `PYTHONPATH` decides which one runs; `scripts/real_session.sh` sets both).
- `SPEC_SWEEP_REAL_MODEL`: `smollm2` (default) is the real checkpoint, SmolLM2-135M-Instruct made
  by `scripts/make_real_model.py` in `.models/smollm2-135m`, with a one-layer EAGLE-3 draft config
  beside it served with dummy weights; `dummy` is the random-weight Llama of
  `scripts/make_dummy_model.py` (`.models/llama-1b`, `--load-format dummy`).

`matrix.yaml` and the sweeps in `sweeps/` are written for SGLang 0.5.13; `render_spec` writes the
spec a test runs: the chosen version, absolute model paths, and the flags that changed:
`--cuda-graph-max-bs` is a deprecated alias from SGLang 0.5.14 on (spec_sweep refuses deprecated
flags), so the key becomes `cuda-graph-max-bs-decode`. On the real checkpoint the prefill CUDA
graphs (piecewise, torch.compile) are off, to save device time on every boot: 0.5.13's
`--disable-piecewise-cuda-graph`, 0.5.14+'s `--cuda-graph-backend-prefill disabled`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "tests" / "real" / "matrix.yaml"
MODELS = {
    "smollm2": ROOT / ".models" / "smollm2-135m",
    "dummy": ROOT / ".models" / "llama-1b",
}
#: The first SGLang release whose `--cuda-graph-max-bs` is a deprecated alias.
SPLIT_GRAPH_FLAGS = (0, 5, 14)


def version_tuple(version: str) -> tuple[int, ...]:
    """`"0.5.17"` -> `(0, 5, 17)` (a suffix such as `.post1` or `rc1` is ignored)."""
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def sglang_version() -> str:
    """The SGLang version the matrix runs (see the module docstring)."""
    chosen = os.environ.get("SPEC_SWEEP_REAL_SGLANG")
    if chosen:
        return chosen
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "0.5.13"


def model_kind() -> str:
    kind = os.environ.get("SPEC_SWEEP_REAL_MODEL", "smollm2")
    if kind not in MODELS:
        raise ValueError(f"SPEC_SWEEP_REAL_MODEL={kind!r}: use one of {sorted(MODELS)}")
    return kind


def model_path() -> Path:
    return MODELS[model_kind()]


def draft_path() -> Path:
    model = model_path()
    return model.with_name(model.name + "-eagle3")


def cgbs_key(version: str | None = None) -> str:
    """The CUDA-graph batch flag of this SGLang version (without dashes)."""
    split = version_tuple(version or sglang_version()) >= SPLIT_GRAPH_FLAGS
    return "cuda-graph-max-bs-decode" if split else "cuda-graph-max-bs"


def prefill_graphs_off(version: str | None = None) -> dict[str, Any]:
    """The server flag that turns the prefill (piecewise) CUDA graphs off in this version."""
    if version_tuple(version or sglang_version()) >= SPLIT_GRAPH_FLAGS:
        return {"cuda-graph-backend-prefill": "disabled"}
    return {"disable-piecewise-cuda-graph": True}


def oom_high_fraction() -> float:
    """A static memory fraction that leaves too little for CUDA-graph capture.

    0.995 did it for the 1.1B dummy model (piecewise capture ran out); the 135M checkpoint's
    graphs fit in 0.5% of an H200, so it needs 0.9999 (14 MiB left).
    """
    return 0.9999 if model_kind() == "smollm2" else 0.995


def _rename(mapping: dict[str, Any], old: str, new: str) -> None:
    if old in mapping and old != new:
        mapping[new] = mapping.pop(old)


def render_spec(
    template: Path,
    out: Path,
    *,
    version: str | None = None,
    kind: str | None = None,
    budget: Mapping[str, Any] | None = None,
) -> Path:
    """Write `template` for the chosen SGLang version and model to `out`; returns `out`.

    Args:
        template: A spec written for SGLang 0.5.13 (`matrix.yaml`, `sweeps/real_h200*.yaml`).
        out: Where to write the rendered spec.
        version: SGLang version (default `sglang_version()`).
        kind: `smollm2` or `dummy` (default `model_kind()`).
        budget: Keys merged into `budget` (e.g. fewer trials, no confirmation).
    """
    version = version or sglang_version()
    kind = kind or model_kind()
    spec = yaml.safe_load(template.read_text())
    node = spec["node"]
    node["sglang_version"] = version
    node["model"] = str(MODELS[kind])
    node["draft_model"] = str(MODELS[kind].with_name(MODELS[kind].name + "-eagle3"))
    args = dict(node.get("server_args") or {})
    args.pop("cuda-graph-backend-prefill", None)
    args.pop("disable-piecewise-cuda-graph", None)
    if kind == "smollm2":
        args.pop("load-format", None)
        args.update(prefill_graphs_off(version))
    else:
        args["load-format"] = "dummy"
    key = cgbs_key(version)
    params = spec.get("search_space", {}).get("params", {})
    for mapping in (args, params, spec.get("baseline") or {}):
        for old in ("cuda-graph-max-bs", "cuda-graph-max-bs-decode"):
            _rename(mapping, old, key)
    node["server_args"] = args
    if "mem-fraction-static" in params and "float" in params["mem-fraction-static"]:
        low, high = params["mem-fraction-static"]["float"]
        params["mem-fraction-static"]["float"] = [low, max(high, oom_high_fraction())]
    if budget:
        spec["budget"] = {**(spec.get("budget") or {}), **budget}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def ensure_model(kind: str | None = None) -> Path:
    """The chosen model folder (and its EAGLE-3 draft config), made once."""
    kind = kind or model_kind()
    model = MODELS[kind]
    if not (model / "config.json").exists():
        script = "make_real_model.py" if kind == "smollm2" else "make_dummy_model.py"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / script), str(model), "--eagle3"], check=True
        )
    return model


def run_trial_cli(
    name: str,
    sets: Mapping[str, Any],
    out_dir: Path,
    *,
    spec: Path,
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
    result["sglang_version"] = sglang_version()
    result["model"] = model_kind()
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
