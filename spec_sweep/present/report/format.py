"""How the report writes values: units, numbers, parameter values and log excerpts.

Pure formatting shared by the report's page (`html`) and figures (`figures`,
`diagnosis_figures`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from spec_sweep.core.names import TAG_LOG_EXCERPT
from spec_sweep.core.record import TrialRecord

__all__ = ["at_level", "axis_label", "excerpt", "fmt", "label", "unit"]

# A log line's time / rank prefix ("[2025-01-01 10:00:00 TP3] ", "[rank3]: ", "(pid=12) ").
_LOG_PREFIX = re.compile(r"^(?:(?:\[[^\]]*\]|\([^)]*\)):?\s*)+")
_EXCERPT_LINES = 30
_EXCERPT_CHARS = 4000
_UNITS = {
    "output_throughput": "tok/s",
    "request_throughput": "req/s",
    "ttft_p50_ms": "ms",
    "ttft_p99_ms": "ms",
    "itl_p50_ms": "ms",
    "itl_p99_ms": "ms",
    "decode_speed_p50": "tok/s per request",
    "accept_length": "tokens per verify cycle",
    "decode_cycle_ms": "ms per decode cycle, first token out",
    "speedup_vs_baseline": "x",
    "boot_s": "s",
    "gpu_mem_peak_gib": "GiB",
    "usd_per_million_tokens": "$ per million output tokens",
    "goodput_concurrency": "requests in flight within the SLA",
    "goodput_throughput": "tok/s within the SLA",
    "quality_deficit": "nats per token the baseline loses on the trial's first different tokens",
    "quality_lossy": "1: outputs judged lossy (a candidate only with quality.allow_lossy)",
    "quality_agreement": "mean common prefix of greedy tokens with the baseline's / N",
    "quality_confident_share": "share of prompts diverging where the baseline was confident",
    "quality_near_tie_flips": "prompts whose first difference is a near-tie flip",
    "quality_first_divergence": "earliest first different greedy token (N: none)",
}


def at_level(name: str, level: int | None) -> str:
    """A level metric's name at one concurrency level (`ttft_p99_ms_c8`; unsuffixed for None)."""
    return name if level is None else f"{name}_c{level}"


def excerpt(record: TrialRecord) -> str:
    """A trial's deciding log lines; lines every rank printed alike are shown once, counted."""
    text = record.tags.get(TAG_LOG_EXCERPT, "").strip() or record.reason.strip()
    order: list[str] = []
    first: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        key = _LOG_PREFIX.sub("", line)
        if key not in first:
            first[key] = line
            order.append(key)
        counts[key] += 1
    lines = [first[k] + (f"   [x{counts[k]}]" if counts[k] > 1 else "") for k in order]
    return "\n".join(lines[-_EXCERPT_LINES:])[-_EXCERPT_CHARS:]


def label(value: Any) -> str:
    """A parameter value as the report shows it (`null`, `true`, `0.88`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def unit(metric: str) -> str:
    """The unit of a metric (level suffix `_c<N>` ignored), or ''."""
    base = metric
    head, sep, tail = metric.rpartition("_c")
    if sep and tail.isdigit():
        base = head
    return _UNITS.get(base, "")


def axis_label(metric: str) -> str:
    """`metric (unit)`, for an axis or a column."""
    shown = unit(metric)
    return f"{metric} ({shown})" if shown else metric


def fmt(value: float | None, digits: int = 4) -> str:
    """A number to `digits` significant digits, `-` when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"
