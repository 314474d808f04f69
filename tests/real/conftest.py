"""The real-SGLang matrix: real `sglang.launch_server` processes on real GPUs, through our CLI.

Skipped unless SGLang imports and NVML sees a GPU (the `real_sglang` marker). Every trial runs as a
user would run it, `python -m spec_sweep trial <spec> --set ... --json`, from the repository root,
where `<spec>` is `tests/real/matrix.yaml` rendered for the SGLang version and model chosen by
`SPEC_SWEEP_REAL_SGLANG` and `SPEC_SWEEP_REAL_MODEL` (real_harness.py: the real SmolLM2-135M
checkpoint of `scripts/make_real_model.py` by default, or the dummy-weight Llama of
`scripts/make_dummy_model.py`; made on first use). Each test writes what it saw under
`$SPEC_SWEEP_REAL_OUT` (default: a temp folder): `results/<name>.json` (the trial's JSON plus
extras), `logs/<name>.log` (the server log) and `specs/` (the rendered specs), which is where the
figures of docs/evidence/real-gpus.md and `tests/fixtures/sglang/` come from.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_harness import MATRIX, ensure_model, model_kind, render_spec, sglang_version


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


#: The README's test command runs two pytest-xdist workers (pyproject.toml), and whole test files
#: go to one worker: real SGLang servers must not share the GPUs, so one real file runs at a time
#: across the workers, and the model is made by one of them (`scripts/real_session.sh` and
#: `real_matrix.sh` run these tests in one process anyway).
_GPU_LOCK = Path(tempfile.gettempdir()) / "spec_sweep-real-gpu.lock"


@contextlib.contextmanager
def _gpus_alone() -> Iterator[None]:
    with _GPU_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="module", autouse=True)
def _one_real_file_at_a_time() -> Iterator[None]:
    # module scope: set up after the session fixtures below, so the lock is never taken twice
    with _gpus_alone():
        yield


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where results and server logs go ($SPEC_SWEEP_REAL_OUT or a temp folder)."""
    path = Path(os.environ.get("SPEC_SWEEP_REAL_OUT") or tmp_path_factory.mktemp("real"))
    (path / "results").mkdir(parents=True, exist_ok=True)
    (path / "logs").mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def model() -> Path:
    """The chosen model folder (and its EAGLE-3 draft config), made once."""
    with _gpus_alone():
        return ensure_model()


@pytest.fixture(scope="session")
def matrix(out_dir: Path, model: Path) -> Path:
    """`matrix.yaml` rendered for the chosen SGLang version and model."""
    del model  # made first
    name = f"matrix-{sglang_version()}-{model_kind()}.yaml"
    with _gpus_alone():
        return render_spec(MATRIX, out_dir / "specs" / name)


@pytest.fixture(scope="session")
def gpus() -> int:
    return _gpu_count()
