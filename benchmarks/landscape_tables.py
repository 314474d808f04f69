"""What the landscape families share: a whole finite search space as a replay table.

This module owns the part of a generated node that does not depend on its physics: every
configuration of a finite define-by-run space (`configurations`), a node's spec and outcome
table together (`Landscape`), and writing that table in the replay-table format that
`spec-sweep run SPEC --replay TABLE` and `spec-sweep export` use (`write_table`). The families
(`benchmarks/landscapes.py`, family A; `benchmarks/landscapes_specbundle.py`, family B) each
own their physics and only share this.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spec_sweep.core.config import Config, is_active, ordered_keys  # noqa: E402
from spec_sweep.spec import SweepSpec  # noqa: E402
from spec_sweep.store.replay import ReplayTable, export_columns, write_csv  # noqa: E402

__all__ = ["Landscape", "configurations", "parse_seeds", "write_table"]


def configurations(spec: SweepSpec) -> Iterator[Config]:
    """Every configuration of a finite space (define-by-run: inactive parameters left out)."""
    keys = ordered_keys(spec.params)

    def walk(i: int, config: Config) -> Iterator[Config]:
        if i == len(keys):
            yield dict(config)
            return
        param = spec.params[keys[i]]
        if not is_active(param, config):
            yield from walk(i + 1, config)
            return
        for value in param.values():
            config[keys[i]] = value
            yield from walk(i + 1, config)
            del config[keys[i]]

    yield from walk(0, {})


@dataclass
class Landscape:
    """A node, its spec and the outcome of every configuration (a replay table)."""

    name: str
    spec: SweepSpec
    table: ReplayTable
    node: Any = None


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_table(landscape: Landscape, path: Path) -> int:
    """Write the landscape as a replay table (`spec-sweep export`'s layout); returns its rows."""
    spec = landscape.spec
    columns = export_columns(spec)
    params = set(spec.params)

    def rows() -> Iterator[dict[str, str]]:
        for row in landscape.table.rows.values():
            out: dict[str, str] = {}
            for column in columns:
                if column in params:
                    out[column] = _cell(row.config[column]) if column in row.config else ""
                elif column == "failure_mode":
                    out[column] = row.failure_mode.value
                else:
                    value = row.metrics.get(column)
                    out[column] = repr(value) if value is not None else ""
            yield out

    return write_csv(path, columns, rows())


def parse_seeds(text: str) -> list[int]:
    """Seeds from `0-19`, `100-139` or `3,7,10-12`."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out
