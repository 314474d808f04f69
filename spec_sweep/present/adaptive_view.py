"""The adaptive configuration for every load, as a person reads it: summary lines, report rows.

This module renders a sweep view's `adaptive` answer (`core.adaptive_judge.AdaptiveAnswer`,
docs/concepts/adaptive.md) once, as plain values (`adaptive_section`, which
the report's template shows), and as the end-of-run summary's lines (`adaptive_lines`): each
level's slot and where it came from, per level the best static configuration against the
adaptive one with the difference and its noise, the scores over the mix, the verdict with the
level that loses and why, and the configuration recommended for every load with its launch
command and, when it is the adaptive one, its config file (path and contents).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from spec_sweep.core.adaptive_judge import AdaptiveAnswer
from spec_sweep.core.adaptive_rules import CONFIG_FILE
from spec_sweep.present.sweep_view import SweepView

__all__ = ["adaptive_lines", "adaptive_section"]


def _pct(value: float | None) -> str:
    return f"{value:+.1%}" if value is not None else ""


def adaptive_section(view: SweepView, *, config_path: str | None = None) -> dict[str, Any] | None:
    """The adaptive answer as plain values (None: the sweep has no adaptive phase).

    Args:
        view: The sweep's view.
        config_path: Where the adaptive config file is (the launch command names it); default
            `adaptive-config.json`.
    """
    answer = view.adaptive
    if answer is None:
        return None
    build = answer.build
    path = config_path or CONFIG_FILE
    out: dict[str, Any] = {
        "built": build.ok,
        "label": answer.label if build.ok else "not built",
        "how": build.reason,
        "reason": answer.reason or build.reason,
        "version": view.spec.node.sglang_version,
        "weights": ", ".join(
            f"c{c}: {w:.2g}" for c, w in view.spec.workload.mix_weights.items() if w
        ),
        "slots": [
            {
                "level": f"c{p.concurrency}",
                "key": p.key,
                "candidates": list(p.candidates),
                "settles": p.settles,
                "chains": ", ".join(
                    f"{c.steps or 'plain'}: {c.trial_id} {c.value:.4g}" for c in p.chains[:4]
                ),
                "notes": "; ".join(p.notes),
            }
            for p in build.levels
        ],
        "levels": [_level_row(j) for j in answer.levels],
        "mix": [
            (row.trial_id, f"{row.mean:.3f}", ", ".join(f"{v:.3f}" for v in row.values))
            for row in answer.mix
        ],
        "mix_bound": f"+-{answer.mix_bound:.1%}" if answer.mix_bound is not None else "n/a",
        "file": path,
        "contents": build.text,
        "recommended": answer.recommended,
        "adaptive_recommended": answer.passes,
        "command": _command(view, answer, path),
    }
    return out


def _level_row(j: Any) -> dict[str, Any]:
    return {
        "level": f"c{j.concurrency}",
        "weight": f"{j.weight:.2g}",
        "best": j.best_id,
        "best_mean": f"{j.best_mean:.4g}",
        "adaptive": f"{j.adaptive_mean:.4g}" if j.adaptive_mean is not None else "",
        "diff": _pct(j.diff),
        "noise": f"+-{j.bound:.1%}" if j.bound is not None else "n/a",
        "verdict": j.verdict,
        "why": j.why,
    }


def _command(view: SweepView, answer: AdaptiveAnswer, path: str) -> str | None:
    config = answer.recommended_config
    if config is None:
        return None
    return view.command(config, adaptive_path=path)


def adaptive_lines(view: SweepView, *, config_path: str | None = None) -> list[Any]:
    """The end-of-run summary's lines about one configuration for every load."""
    section = adaptive_section(view, config_path=config_path)
    if section is None:
        return []
    if not section["built"]:
        return [Text(f"one configuration for every load: none built ({section['reason']})")]
    lines: list[Any] = [
        Text(
            f"one configuration for every load (adaptive speculative decoding, SGLang "
            f"{section['version']} format; {section['how']}):"
        )
    ]
    for slot in section["slots"]:
        settles = f", settles at {slot['settles']}" if slot["settles"] is not None else ""
        notes = f" ({slot['notes']})" if slot["notes"] else ""
        lines.append(
            Text(
                f"  {slot['level']} (batches from {slot['key']}): candidate steps "
                f"{slot['candidates']}{settles}{notes}"
            )
        )
    if section["levels"]:
        table = Table(title="per level: the best static configuration against the adaptive one")
        for column in ("level", "weight", "best static", "pooled", "adaptive", "difference",
                       "95% noise", "verdict"):  # fmt: skip
            table.add_column(column)
        for row in section["levels"]:
            table.add_row(
                row["level"], row["weight"], row["best"], row["best_mean"], row["adaptive"],
                row["diff"], row["noise"], row["verdict"],
            )  # fmt: skip
        lines.append(table)
        mix = "; ".join(f"{tid} {mean}" for tid, mean, _ in section["mix"])
        lines.append(Text(f"over the mix ({section['weights']}): {mix}"))
    lines.append(Text(section["reason"]))
    if section["command"] is not None:
        who = section["recommended"]
        lines.append(Text(f"\nrecommended for every load: {who}; launch it with:"))
        lines.append(Text("  " + section["command"]))
        if section["adaptive_recommended"]:
            lines.append(Text(f"  {section['file']}: {section['contents']}"))
    return lines
