"""spec_sweep: find the fastest safe SGLang serving configuration on a GPU node.

The public API is re-exported here lazily (PEP 562), so that importing a submodule such as the
simulated node (`spec_sweep.sim`) does not pay for pydantic, Ray or MLflow.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "FailureMode",
    "SpecError",
    "SweepSpec",
    "build_command",
    "load_spec",
]

_EXPORTS = {
    "FailureMode": "spec_sweep.core.outcome",
    "SpecError": "spec_sweep.errors",
    "SweepSpec": "spec_sweep.spec",
    "build_command": "spec_sweep.node.command",
    "load_spec": "spec_sweep.spec_load",
}

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spec_sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
