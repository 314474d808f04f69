"""How far apart the quality gate puts lossless and lossy configurations, on real GPUs.

Reads the real servers' greedy outputs kept under `tests/fixtures/quality/` (recorded by
`scripts/real_quality.py` on a GPU, trimmed by `--trim`), judges every configuration against the
baseline's first boot exactly as a sweep does (`node.divergence.judge_outputs` at the spec's
defaults, one prompt format at a time: raw and chat-templated), and prints one row per
configuration: its group (lossless in exact arithmetic, or lossy on purpose), the class the gate
gives it, the deficit (nats per token), identical prompts and the first divergence. The last lines
are the separation: the smallest deficit of a lossy configuration over the largest of a lossless one
(the acceptance asks for >= 2), per fixture and over all of them. Usage::

    python benchmarks/quality_separation.py                      # every fixture
    python benchmarks/quality_separation.py --trim OUT/quality-0.5.17 --gpu "H100 80GB HBM3" \\
        --recorded "2026-12-06" --out tests/fixtures/quality/real-h100-0.5.17.json

`--trim` turns a `real_quality.py` output folder into a fixture: the baseline's (`base-1`) output
ids and top-5 log-probabilities at every position (the rule reads every position up to each
prompt's first difference), and every other configuration's output ids.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from spec_sweep.node.divergence import QualityClass, judge_outputs, parse_top_logprobs
from spec_sweep.spec import QualitySpec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "quality"
REFERENCE = "base-1"
#: Configurations changed on purpose in a way that changes outputs; every other is lossless.
LOSSY_PREFIXES = ("kv-fp8", "quant-fp8")


def group_of(name: str) -> str:
    """`lossy` for the configurations that change the arithmetic on purpose, else `lossless`."""
    return "lossy" if name.startswith(LOSSY_PREFIXES) else "lossless"


def trim(raw: Path, *, gpu: str, recorded: str) -> dict[str, Any]:
    """A fixture from a `scripts/real_quality.py` output folder (see the module doc)."""
    base = json.loads((raw / f"{REFERENCE}.json").read_text())
    fixture: dict[str, Any] = {
        "recorded": f"{recorded} on one {gpu}: scripts/real_quality.py, SmolLM2-135M-Instruct in "
        "bf16, 16 builtin prompts x 64 greedy tokens, raw and chat-templated; the baseline's "
        "top-5 [logprob, token id] at every position (rounded to 1e-6), every other "
        "configuration's output ids",
        "gpu": gpu,
        "sglang": base["sglang_version"],
        "tokens": base["tokens"],
        "reference": REFERENCE,
        "baseline_command": _relative(base["command"]),
        "formats": {
            fmt: {
                "baseline_ids": [r["output_ids"] for r in rows],
                "baseline_top": [
                    [
                        [[round(lp, 6), t] for lp, t in pos] if pos else None
                        for pos in r["output_top_logprobs"]
                    ]
                    for r in rows
                ],
            }
            for fmt, rows in base["formats"].items()
        },
        "trials": {},
    }
    for path in sorted(raw.glob("*.json")):
        name = path.stem
        if name in (REFERENCE, "summary"):
            continue
        result = json.loads(path.read_text())
        entry: dict[str, Any] = {"group": group_of(name), "command": _relative(result["command"])}
        if "formats" in result:
            entry["formats"] = {
                fmt: {"ids": [r["output_ids"] for r in rows]}
                for fmt, rows in result["formats"].items()
            }
        else:
            entry["error"] = result.get("error")
        fixture["trials"][name] = entry
    return fixture


def _relative(command: list[str]) -> list[str]:
    """The command from `-m` on, the model folder relative to the repository."""
    start = command.index("-m") if "-m" in command else 0
    out = []
    for arg in command[start:]:
        marker = "/.models/"
        out.append("." + arg[arg.index(marker) :] if marker in arg else arg)
    return out


def judge_fixture(fixture: dict[str, Any], quality: QualitySpec) -> list[dict[str, Any]]:
    """One row per configuration and prompt format: group, class, deficit, identical, first."""
    rows = []
    for name, trial in fixture["trials"].items():
        for fmt, outputs in (trial.get("formats") or {}).items():
            ref = fixture["formats"][fmt]
            top = [parse_top_logprobs({"output_top_logprobs": p}) for p in ref["baseline_top"]]
            check = judge_outputs(ref["baseline_ids"], top, outputs["ids"], quality=quality)
            firsts = [v.position for v in check.verdicts if v.position is not None]
            rows.append(
                {
                    "config": name,
                    "format": fmt,
                    "group": trial["group"],
                    "class": check.quality_class,
                    "deficit": check.deficit or 0.0,
                    "identical": len(check.verdicts) - len(firsts),
                    "prompts": len(check.verdicts),
                    "first": min(firsts) if firsts else None,
                    "passed": check.passed,
                }
            )
    return rows


def fixtures() -> list[tuple[Path, dict[str, Any]]]:
    """Every fixture of the new layout (with `trials`), by name."""
    found = []
    for path in sorted(FIXTURES.glob("real-*.json")):
        data = json.loads(path.read_text())
        if "trials" in data:
            found.append((path, data))
    return found


def separation(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(largest lossless deficit, smallest lossy deficit, their ratio)."""
    lossless = max((r["deficit"] for r in rows if r["group"] == "lossless"), default=0.0)
    lossy = min((r["deficit"] for r in rows if r["group"] == "lossy"), default=float("inf"))
    return lossless, lossy, (lossy / lossless if lossless > 0 else float("inf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trim", type=Path, help="a real_quality.py output folder")
    parser.add_argument("--gpu", help="the GPU it was recorded on (with --trim)")
    parser.add_argument("--recorded", help="when (with --trim)")
    parser.add_argument("--out", type=Path, help="the fixture to write (with --trim)")
    args = parser.parse_args(argv)
    if args.trim:
        if not (args.gpu and args.recorded and args.out):
            parser.error("--trim needs --gpu, --recorded and --out")
        data = trim(args.trim, gpu=args.gpu, recorded=args.recorded)
        args.out.write_text(json.dumps(data, separators=(",", ":")))
        print(f"wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")
        return 0
    quality = QualitySpec()
    console = Console(width=140)
    every: list[dict[str, Any]] = []
    for path, data in fixtures():
        rows = judge_fixture(data, quality)
        every += rows
        table = Table(title=f"{path.name}: {data['gpu']}, SGLang {data['sglang']}")
        for col in (
            "config",
            "format",
            "group",
            "class",
            "deficit (nats/token)",
            "identical",
            "first",
        ):
            table.add_column(col)
        for r in sorted(rows, key=lambda r: (r["group"], r["deficit"])):
            cls: QualityClass | None = r["class"]
            table.add_row(
                r["config"],
                r["format"],
                r["group"],
                cls.value if cls else "-",
                f"{r['deficit']:.5f}",
                f"{r['identical']}/{r['prompts']}",
                "-" if r["first"] is None else str(r["first"]),
            )
        console.print(table)
        hi, lo, ratio = separation(rows)
        console.print(
            f"{path.name}: largest lossless deficit {hi:.5f}, smallest lossy {lo:.5f}: "
            f"ratio {ratio:.2f}"
        )
    if not every:
        print("no fixture with trials under tests/fixtures/quality/", file=sys.stderr)
        return 1
    hi, lo, ratio = separation(every)
    console.print(
        f"all fixtures: largest lossless deficit {hi:.5f}, smallest lossy {lo:.5f}: ratio "
        f"{ratio:.2f}; defaults max_equivalent_deficit {quality.max_equivalent_deficit:g}, "
        f"min_wrong_deficit {quality.min_wrong_deficit:g}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
