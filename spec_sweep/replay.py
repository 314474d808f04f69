"""The replay table: its format, writing it (`spec-sweep export`) and reading it (`--replay`).

This module owns the replay table, both ways: `export_columns` / `export_rows` / `write_csv`
write it from finished trials, `load_replay` reads it back, the same format (docs/design.md,
"Replay table"): one CSV row per trial, one column per parameter key, then `output_throughput`,
`accept_length` and the other metrics named as in the MLflow layout, and `failure_mode`.
`replay_result` answers a trial from a table (the replay backend), so a replayed sweep flows
through the same search, tracking and report code as a live one. A configuration missing from
the table ends as a clear `invalid_args` failure naming it; `--replay-noise` multiplies
recorded metrics by seeded noise.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spec_sweep.errors import SpecError
from spec_sweep.failures import FailureMode
from spec_sweep.space import (
    Config,
    build_command,
    config_key,
    is_active,
    normalize_config,
    ordered_keys,
    redact,
    secret_values,
)
from spec_sweep.spec import SweepSpec, parse_value, spec_metric_names

__all__ = [
    "ReplayRow",
    "ReplayTable",
    "TableRecord",
    "export_columns",
    "export_rows",
    "load_replay",
    "replay_result",
    "write_csv",
]

#: Metrics whose value does not scale with the node's speed (no noise is applied to them).
_NO_NOISE = ("accept_length", "speedup_vs_baseline")


class TableRecord(Protocol):
    """What a replay-table row is written from (a finished `tracking.TrialRecord`)."""

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


def replay_result(
    spec: SweepSpec,
    config: Mapping[str, Any],
    table: ReplayTable,
    *,
    trial_dir: Path,
    noise: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Answer one trial from the table; returns the fields of a `TrialResult`.

    The trial folder gets the same files a launched trial leaves (`command.txt` with the command
    that would have run, `server.log` saying where the answer came from, and `bench.json` when
    the recorded trial got as far as its benchmark).
    """
    started_at = time.time()
    t0 = time.monotonic()
    config = normalize_config(spec, config)
    command = build_command(spec, config)
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "command.txt").write_text(redact(command.shell(), secret_values(spec)) + "\n")
    row = table.lookup(config)
    if row is None:
        mode = FailureMode.INVALID_ARGS
        shown = json.dumps(config)
        reason = f"invalid args: replay table {table.path} has no row for configuration {shown}"
        log = f"[replay] {reason}\n"
        metrics: dict[str, float] = {}
    else:
        mode = row.failure_mode
        metrics = _with_noise(row.metrics, config, noise=noise, seed=seed)
        reason = f"{mode.value}: replayed from {table.path} line {row.line}"
        log = f"[replay] answered from {table.path} line {row.line}: failure_mode={mode.value}\n"
    (trial_dir / "server.log").write_text(log)
    if mode in (FailureMode.NONE, FailureMode.HANG, FailureMode.BENCH_ERROR):
        # A live trial leaves bench.json when its benchmark ran; so does a replayed one.
        bench = {"replayed_from": table.path, "line": row.line if row else None, "noise": noise}
        (trial_dir / "bench.json").write_text(json.dumps(bench))
    return {
        "config": dict(config),
        "failure_mode": mode,
        "reason": reason,
        "metrics": metrics,
        "command": command.argv,
        "env": dict(command.env),
        "log_path": str(trial_dir / "server.log"),
        "log_excerpt": log.strip() if mode is not FailureMode.NONE else "",
        "elapsed_s": round(time.monotonic() - t0, 4),
        "prompt_source": f"replay table {Path(table.path).name}",
        "started_at": started_at,
    }


def _with_noise(
    metrics: Mapping[str, float], config: Mapping[str, Any], *, noise: float, seed: int
) -> dict[str, float]:
    if noise <= 0:
        return dict(metrics)
    digest = hashlib.sha256(f"{seed}:{config_key(config)}".encode()).hexdigest()
    rng = random.Random(int(digest[:16], 16))
    out: dict[str, float] = {}
    for name, value in metrics.items():
        base = name.rsplit("_c", 1)[0] if "_c" in name else name
        out[name] = value if base in _NO_NOISE else value * max(0.0, rng.gauss(1.0, noise))
    return out


def export_columns(spec: SweepSpec) -> list[str]:
    """The replay-table header: parameter keys (spec order), metrics, `failure_mode`.

    Metrics come as `output_throughput`, then `accept_length`, then the other metrics of the MLflow
    layout in `spec.metric_names` order; with several concurrency levels each metric has one column
    per level, suffixed `_c<N>` exactly as the MLflow runs name them.
    """
    names = spec_metric_names(spec)
    first = [n for n in names if n.startswith("output_throughput") and "_ci_" not in n]
    second = [n for n in names if n.startswith("accept_length")]
    rest = [n for n in names if n not in first and n not in second]
    return [*spec.params, *first, *second, *rest, "failure_mode"]


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
        records: One finished record per trial (e.g. `objective.latest_finished(...)`).

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
