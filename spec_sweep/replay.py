"""The replay backend: trials answered from a recorded results table (DESIGN 4.6).

This module owns reading a replay table — one CSV row per measured configuration, one column
per parameter key, then `output_throughput`, optional `accept_length` and other metric columns
named as in DESIGN 4.4, and `failure_mode` — as `spec-sweep export` writes it, and answering a
trial from it (`replay_trial`), so a replayed sweep flows through the same search, tracking and
report code as a live one. A configuration missing from the table ends as a clear
`invalid_args` failure naming it; `--replay-noise` multiplies recorded metrics by seeded noise.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from spec_sweep.spec import SpecError, SweepSpec, parse_value

__all__ = ["ReplayRow", "ReplayTable", "load_replay", "replay_result"]

#: Metrics whose value does not scale with the node's speed (no noise is applied to them).
_NO_NOISE = ("accept_length", "speedup_vs_baseline")


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
            raise SpecError(f"--replay {path}: no 'failure_mode' column (DESIGN 4.6 layout)")
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
