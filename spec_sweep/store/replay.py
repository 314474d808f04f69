"""The replay table: its format, writing it (`spec-sweep export`) and reading it (`--replay`).

This module owns the replay table, both ways: `export_columns` / `export_rows` / `write_csv`
write it from finished trials, `load_replay` reads it back, the same format (docs/design.md,
"Replay table"): one CSV row per trial, one column per parameter key, then `output_throughput`,
`accept_length` and the other metrics named as in the MLflow layout, and `failure_mode`.
Answering a trial from a table is the replay backend's (`node.backends.ReplayBackend`), so a
replayed sweep flows through the same search, tracking and report code as a live one.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spec_sweep.core.config import Config, config_key, is_active, normalize_config, ordered_keys
from spec_sweep.core.names import BOOT_METRICS
from spec_sweep.core.outcome import FailureMode
from spec_sweep.errors import SpecError
from spec_sweep.spec import SweepSpec, parse_value, spec_metric_names

__all__ = [
    "ReplayRow",
    "ReplayTable",
    "TableRecord",
    "export_columns",
    "export_rows",
    "load_replay",
    "write_csv",
]


class TableRecord(Protocol):
    """What a replay-table row is written from (a finished `core.record.TrialRecord`)."""

    @property
    def config(self) -> Config: ...
    @property
    def metrics(self) -> dict[str, float]: ...
    @property
    def failure_mode(self) -> FailureMode | None: ...


@dataclass(frozen=True, slots=True)
class ReplayRow:
    """One recorded configuration and its outcome."""

    line: int
    config: Config
    failure_mode: FailureMode
    metrics: dict[str, float]


@dataclass(frozen=True)
class ReplayTable:
    """A replay table indexed by configuration."""

    path: str
    rows: dict[str, ReplayRow] = field(default_factory=dict)
    duplicates: int = 0

    def lookup(self, config: Mapping[str, Any]) -> ReplayRow | None:
        """The row recorded for exactly this configuration, if any."""
        return self.rows.get(config_key(config))

    def __len__(self) -> int:
        return len(self.rows)


def load_replay(path: str | Path, spec: SweepSpec) -> ReplayTable:
    """Read a replay table for `spec`.

    Raises:
        SpecError: the file is missing or unreadable, a parameter of the spec has no column,
            `failure_mode` is missing, or a cell cannot be read (one line, naming the cell).
    """
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(
            f"--replay {path}: cannot read it ({exc.strerror}): check the path"
        ) from exc
    with handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        missing = [key for key in spec.params if key not in columns]
        if missing:
            raise SpecError(
                f"--replay {path}: no column for parameter {missing[0]!r} of the search space: "
                "replay a table exported from a sweep over the same parameters"
            )
        if "failure_mode" not in columns:
            raise SpecError(
                f"--replay {path}: no 'failure_mode' column: write it as spec-sweep export "
                "does (docs/design.md, Replay table)"
            )
        metric_columns = [c for c in columns if c not in spec.params and c != "failure_mode"]
        rows: dict[str, ReplayRow] = {}
        duplicates = 0
        for line, raw in enumerate(reader, start=2):
            config = _row_config(spec, raw)
            mode_text = (raw.get("failure_mode") or "").strip() or "none"
            try:
                mode = FailureMode(mode_text)
            except ValueError as exc:
                raise SpecError(
                    f"--replay {path}: line {line}: failure_mode {mode_text!r} is not one of "
                    f"{', '.join(m.value for m in FailureMode)}"
                ) from exc
            metrics: dict[str, float] = {}
            for column in metric_columns:
                text = (raw.get(column) or "").strip()
                if not text:
                    continue
                try:
                    metrics[column] = float(text)
                except ValueError as exc:
                    raise SpecError(
                        f"--replay {path}: line {line}: {column} = {text!r} is not a number"
                    ) from exc
            key = config_key(config)
            if key in rows:
                duplicates += 1  # the first measurement of a configuration is the one replayed
                continue
            rows[key] = ReplayRow(line=line, config=config, failure_mode=mode, metrics=metrics)
    return ReplayTable(path=str(path.resolve()), rows=rows, duplicates=duplicates)


def _row_config(spec: SweepSpec, raw: Mapping[str, str | None]) -> Config:
    """A row's configuration, in dependency order.

    A blank cell of an active parameter whose choices include null means null (flag omitted),
    as a table written by hand or converted from another tool leaves it; a blank cell of an
    inactive parameter (its `when:` does not hold) is left out, so the row matches.
    """
    values: dict[str, Any] = {}
    for key in ordered_keys(spec.params):
        param = spec.params[key]
        text = (raw.get(key) or "").strip()
        if text:
            values[key] = parse_value(text)
        elif param.choices is not None and None in param.choices and is_active(param, values):
            values[key] = None
    return normalize_config(spec, values)


def export_columns(spec: SweepSpec) -> list[str]:
    """The replay-table header: parameter keys (spec order), metrics, `failure_mode`.

    Metrics come as `output_throughput`, then `accept_length`, then the other metrics of the MLflow
    layout in `spec.metric_names` order; with several concurrency levels each metric has one column
    per level, suffixed `_c<N>` exactly as the MLflow runs name them; then where each boot went
    (`core.names.BOOT_METRICS`: phases, measuring time, weight-load memory), so that a replayed
    sweep has the node-hours split of the one it replays.
    """
    names = spec_metric_names(spec)
    first = [n for n in names if n.startswith("output_throughput") and "_ci_" not in n]
    second = [n for n in names if n.startswith("accept_length")]
    rest = [n for n in names if n not in first and n not in second]
    boot = [n for n in BOOT_METRICS if n not in names]
    return [*spec.params, *first, *second, *rest, *boot, "failure_mode"]


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def export_rows(spec: SweepSpec, records: Iterable[TableRecord]) -> list[dict[str, str]]:
    """Finished trials as replay-table rows, in the order given (one record per trial).

    Cells are text that `spec.parse_value` (YAML scalars) reads back: booleans are `true` /
    `false`; a parameter whose value is null (flag omitted) is `null`; a parameter that is
    inactive in the trial (its `when:` does not hold) is an empty cell; a metric that was not
    measured is an empty cell; floats are written in full (shortest round-trip form);
    `failure_mode` is `none` for a measured trial.

    Args:
        spec: The sweep.
        records: One finished record per trial (e.g. `History.done`).

    Returns:
        One dict per trial, keys in `export_columns(spec)` order.
    """
    columns = export_columns(spec)
    params = set(spec.params)
    rows = []
    for record in records:
        row: dict[str, str] = {}
        for column in columns:
            if column in params:
                row[column] = _cell(record.config[column]) if column in record.config else ""
            elif column == "failure_mode":
                mode = record.failure_mode or FailureMode.CRASH
                row[column] = mode.value
            else:
                value = record.metrics.get(column)
                row[column] = _cell(float(value)) if value is not None else ""
        rows.append(row)
    return rows


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, str]]) -> int:
    """Write a replay table; returns the number of rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    return count
