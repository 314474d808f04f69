"""The domain core (spec_sweep.core) stands on the standard library and the spec alone.

Every module of the core is imported in a fresh Python whose import system refuses Ray, Optuna,
MLflow, rich, httpx, matplotlib, Jinja2, numpy and psutil (a meta-path finder that raises
ImportError for them, as a Python without them installed would), and the core's own answers
are asked there once: a record, its history, the ranking, the verdict.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap

import spec_sweep.core

BLOCKED = (
    "ray",
    "optuna",
    "mlflow",
    "rich",
    "httpx",
    "matplotlib",
    "jinja2",
    "numpy",
    "psutil",
    "aiohttp",
)
MODULES = sorted(
    f"spec_sweep.core.{m.name}" for m in pkgutil.iter_modules(spec_sweep.core.__path__)
)

_SCRIPT = """
import importlib.abc
import sys

BLOCKED = {blocked!r}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed here")
        return None


sys.meta_path.insert(0, Refuse())
import spec_sweep.core
for module in {modules!r}:
    importlib.import_module(module)

from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.core.verdict import verdict
from spec_sweep.spec import SweepSpec

spec = SweepSpec.model_validate({spec!r})
records = [
    TrialRecord("r0", "t0000", "FINISHED", {{}}, FailureMode.NONE, {{"output_throughput": 80.0}}),
    TrialRecord("r1", "t0001", "FINISHED", {{}}, FailureMode.OOM),
    TrialRecord("r2", "t0002", "FINISHED", {{}}, FailureMode.NONE, {{"output_throughput": 90.0}}),
]
history = History(spec, records)
assert [r.trial_id for r in history.ranked] == ["t0002", "t0000"]
assert verdict(history) is None
loaded = sorted(name.split(".")[0] for name in sys.modules)
print(" ".join(sorted(set(loaded) & BLOCKED)) or "none")
"""


def test_every_core_module_imports_without_the_heavy_libraries() -> None:
    assert "spec_sweep.core.history" in MODULES
    spec = {
        "name": "core",
        "node": {"model": "m", "sglang_version": "0.5.13"},
        "search_space": {"params": {}},
        "workload": {"dataset": "builtin"},
        "objective": {"metric": "output_throughput"},
    }
    script = _SCRIPT.format(blocked=set(BLOCKED), modules=MODULES, spec=spec)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"
