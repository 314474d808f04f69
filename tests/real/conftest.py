"""The real-SGLang matrix: real `sglang.launch_server` processes on real GPUs, through our CLI.

Skipped unless SGLang imports and NVML sees a GPU (the `real_sglang` marker). Every trial runs as a
user would run it, `python -m spec_sweep trial tests/real/matrix.yaml --set ... --json`, from the
repository root, with a dummy-weight Llama made by `scripts/make_dummy_model.py` (made on first
use). Each test writes what it saw under `$SPEC_SWEEP_REAL_OUT` (default: a temp folder):
`results/<name>.json` (the trial's JSON plus extras) and `logs/<name>.log` (the server log), which
is where the README's "Real GPUs" figures and `tests/fixtures/sglang/` come from.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from real_harness import MODEL, ROOT


def _gpu_count() -> int:
    try:
        from spec_sweep.node.gpu import list_gpus

        return len(list_gpus())
    except Exception:
        return 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [item for item in items if here in Path(str(item.fspath)).parents]
    if not mine:
        return
    reason = None
    if importlib.util.find_spec("sglang") is None:
        reason = "SGLang is not installed (pip install -e '.[sglang]' or the offline bundle)"
    elif _gpu_count() == 0:
        reason = "no NVIDIA GPU visible (NVML)"
    for item in mine:
        item.add_marker(pytest.mark.real_sglang)
        item.add_marker(pytest.mark.timeout(3600))  # real boots take minutes
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where results and server logs go ($SPEC_SWEEP_REAL_OUT or a temp folder)."""
    path = Path(os.environ.get("SPEC_SWEEP_REAL_OUT") or tmp_path_factory.mktemp("real"))
    (path / "results").mkdir(parents=True, exist_ok=True)
    (path / "logs").mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def model() -> Path:
    """The dummy-weight model folder (and its EAGLE-3 draft), made once."""
    if not (MODEL / "config.json").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_dummy_model.py"), str(MODEL), "--eagle3"],
            check=True,
        )
    return MODEL


@pytest.fixture(scope="session")
def gpus() -> int:
    return _gpu_count()
