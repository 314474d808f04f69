"""Calibration of family B (`benchmarks/landscapes_specbundle.py`) on published measurements.

This module owns the fits behind family B's constants and the tables its docstring shows:

* `load_specbundle`: SGLang SpecForge's SpecBundle table (sgl-project/SpecForge
  `docs/spec_bundle/public/raw_data/data.json`, commit d9952d16, MIT; a copy in
  `../shared/data/specbundle_h200.json`): per model, dataset and draft head, five EAGLE-3
  trees on H200 at batch 8 (Llama-3.1-8B at 1) with accept length and output throughput, and
  the no-speculation baseline's throughput.
* `fit_acceptance`: per row, the Weibull chain survival (`scale`, `shape`) by grid least
  squares on the three chains, then the tree terms (`catch`, `tree`) on the two trees;
  `write_fits` stores them with the published values in `benchmarks/data/specbundle_fits.csv`.
* `fit_cost`: per model, the cost terms of `landscapes_specbundle.cycle_ms` on the cycle-time
  ratios `accept length / speed-up` (H200, batch 8, context 1k); for Qwen3-235B jointly with
  sgl-project/sglang PR #22246's best step counts (4 at batch 1, 2 at batch 64).
* `check_glm`: the GLM-4.7-FP8 MTP cross-check against PRs #23336 and #22246.

Run: `.venv/bin/python benchmarks/specbundle_fit.py [--data PATH] [--write]` prints every fit
and its errors (about 2 minutes on one core); `--write` rewrites the CSV.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import landscapes_specbundle as fam

DEFAULT_DATA = fam.ROOT.parent / "shared" / "data" / "specbundle_h200.json"
TREES = ((3, 1, 4), (5, 1, 6), (7, 1, 8), (5, 3, 6), (7, 4, 8))
_BASELINE = "Wihtout EAGLE3"  # spelled so in the source

_SCALES = tuple(round(1.0 + 0.1 * i, 1) for i in range(291))  # 1.0 .. 30.0
_SHAPES = tuple(round(0.3 + 0.02 * i, 2) for i in range(111))  # 0.30 .. 2.50
_CATCHES = (0.01, *(round(0.05 * i, 2) for i in range(1, 20)))  # 0.01, 0.05 .. 0.95
_TREE = tuple(round(0.3 + 0.02 * i, 2) for i in range(86))  # 0.30 .. 2.00


@dataclass(frozen=True)
class Row:
    """One (model, dataset, head) of SpecBundle: accept length and speed-up per tree."""

    model: str
    dataset: str
    head: str
    batch: int
    accept: dict[tuple[int, int, int], float]
    speedup: dict[tuple[int, int, int], float]


def _head_name(name: str) -> str:
    # SpecBundle spells one Llama-3.3-70B head two ways ("Spec for ge" on gsm8k).
    return name.replace("Spec for ge", "Specforge")


def load_specbundle(path: Path) -> list[Row]:
    """Every (model, dataset, head) of the SpecBundle table that has all five trees."""
    data = json.loads(path.read_text())
    rows = []
    for model, datasets in data.items():
        for dataset, entry in datasets.items():
            results = entry["results"]
            base = next(
                m["output_throughput"]
                for r in results
                for m in r["metrics"]
                if m["Name"] == _BASELINE
            )
            heads: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = {}
            for r in results:
                tree = (r["steps"], r["topk"], r["num_draft_tokens"])
                for m in r["metrics"]:
                    if m["Name"] == _BASELINE:
                        continue
                    value = (m["accept_length"], m["output_throughput"] / base)
                    heads.setdefault(_head_name(m["Name"]), {})[tree] = value
            for head, trees in heads.items():
                if len(trees) == len(TREES):
                    rows.append(
                        Row(
                            model,
                            dataset,
                            head,
                            results[0]["batch_size"],
                            {t: v[0] for t, v in trees.items()},
                            {t: v[1] for t, v in trees.items()},
                        )
                    )
    return rows


@dataclass(frozen=True)
class AcceptFit:
    """A row's fitted acceptance."""

    row: Row
    head: fam.Head

    def predicted(self, tree: tuple[int, int, int]) -> float:
        return fam.accept_length(self.head, *tree)


def fit_acceptance(row: Row) -> AcceptFit:
    """Chains first (scale, shape), then the trees (catch, tree)."""
    chains = [(t[0], row.accept[t]) for t in TREES if t[1] == 1]
    best = (math.inf, 0.0, 0.0)
    for scale, shape in itertools.product(_SCALES, _SHAPES):
        err = 0.0
        for steps, observed in chains:
            length = 1.0 + sum(fam.survival(d, scale, shape) for d in range(1, steps + 1))
            err += (length - observed) ** 2
        if err < best[0]:
            best = (err, scale, shape)
    _, scale, shape = best
    trees = [t for t in TREES if t[1] > 1]
    best_tree = (math.inf, 0.0, 0.0)
    for catch, tree in itertools.product(_CATCHES, _TREE):
        head = fam.Head("", scale, shape, catch, tree)
        err = sum((fam.accept_length(head, *t) - row.accept[t]) ** 2 for t in trees)
        if err < best_tree[0]:
            best_tree = (err, catch, tree)
    _, catch, tree = best_tree
    return AcceptFit(row, fam.Head(row.head, scale, shape, catch, tree))


def write_fits(fits: Sequence[AcceptFit], path: Path) -> None:
    """The fitted rows with the published values they were fitted to."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        handle.write(
            "# Family B's acceptance, fitted by benchmarks/specbundle_fit.py to SGLang\n"
            "# SpecForge's SpecBundle (sgl-project/SpecForge\n"
            "# docs/spec_bundle/public/raw_data/data.json,\n"
            "# commit d9952d16, MIT): accept length (al_) and speed-up over no speculation (x_)\n"
            "# per tree steps_topk_drafttokens, H200, batch 8 (Llama-3.1-8B: 1).\n"
        )
        writer = csv.writer(handle)
        names = ["_".join(map(str, t)) for t in TREES]
        writer.writerow(
            ["model", "dataset", "head", "batch", "scale", "shape", "catch", "tree"]
            + [f"al_{n}" for n in names]
            + [f"x_{n}" for n in names]
        )
        for fit in fits:
            r, h = fit.row, fit.head
            writer.writerow(
                [r.model, r.dataset, r.head, r.batch, h.scale, h.shape, h.catch, h.tree]
                + [round(r.accept[t], 4) for t in TREES]
                + [round(r.speedup[t], 4) for t in TREES]
            )


def acceptance_errors(fits: Sequence[AcceptFit]) -> tuple[list[float], list[float]]:
    """Relative errors of the fitted accept lengths: chains, trees."""
    chains, trees = [], []
    for fit in fits:
        for t in TREES:
            err = abs(fit.predicted(t) / fit.row.accept[t] - 1.0)
            (chains if t[1] == 1 else trees).append(err)
    return chains, trees


# ---------------------------------------------------------------------------------------------
# Cost


_CONTEXT = 1024
_LOCALITY = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
_DRAFT_MS = tuple(round(0.1 * i, 1) for i in range(2, 16))
_SPEC_MS = tuple(0.25 * i for i in range(21))
_TREE_ATTN = (0.0, 0.1, 0.2, 0.3, 0.5, 0.8)
_TREE_STEP = (0.0, 0.1, 0.2, 0.4)
_MOE_EFF = (0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3)
#: PR #22246: Qwen3-235B-A22B performs best with 4 steps at batch 1 and 2 at batch 64.
PR22246_QWEN = {1: 4, 64: 2}


def physics(model: fam.Archetype) -> fam.Physics:
    """The model on SpecBundle's H200 node, at its first listed precision (SpecBundle's)."""
    return fam.Physics(fam.HARDWARE["H200"], model, model.precisions[0], _CONTEXT)


def speedup(
    phys: fam.Physics, head: fam.Head, length: float, requests: int, tree: tuple[int, int, int]
) -> float:
    """Output throughput over the plain step's, for a tree that accepts `length` per cycle."""
    knobs = fam.Knobs()
    base = fam.step_ms(phys, knobs, requests)
    return length * base / fam.cycle_ms(phys, knobs, head, requests, *tree)


def best_chain(phys: fam.Physics, head: fam.Head, requests: int, *, longest: int = 8) -> int:
    """The chain length with the highest throughput."""

    def value(steps: int) -> float:
        tree = (steps, 1, steps + 1)
        return speedup(phys, head, fam.accept_length(head, *tree), requests, tree)

    return max(range(1, longest + 1), key=value)


def _log_error(
    phys: fam.Physics, rows: Sequence[Row], trees: Sequence[tuple[int, int, int]]
) -> float:
    unit = fam.Head("", 1.0, 1.0, 0.1, 1.0)
    return sum(
        math.log(speedup(phys, unit, r.accept[t], r.batch, t) / r.speedup[t]) ** 2
        for r in rows
        for t in trees
    )


def fit_cost(
    model: fam.Archetype, rows: Sequence[Row], *, reference: fam.Head | None = None
) -> fam.Archetype:
    """The model's cost terms on its SpecBundle rows (chains, then trees)."""
    chains = [t for t in TREES if t[1] == 1]
    localities = _LOCALITY if model.experts else (1.0,)
    effs = _MOE_EFF if (model.experts and reference is not None) else (model.gemm_eff,)
    best = (math.inf, model)
    for loc, draft_ms, spec_ms, eff in itertools.product(localities, _DRAFT_MS, _SPEC_MS, effs):
        trial = replace(model, locality=loc, draft_ms=draft_ms, spec_ms=spec_ms, gemm_eff=eff)
        trial = replace(trial, tree_attn=0.0, tree_step_ms=0.0)
        err = _log_error(physics(trial), rows, chains)
        if reference is not None:
            for requests, steps in PR22246_QWEN.items():
                err += 0.3 * (best_chain(physics(trial), reference, requests) - steps) ** 2
        if err < best[0]:
            best = (err, trial)
    fitted = best[1]
    best = (math.inf, fitted)
    trees = [t for t in TREES if t[1] > 1]
    for attn, step in itertools.product(_TREE_ATTN, _TREE_STEP):
        trial = replace(fitted, tree_attn=attn, tree_step_ms=step)
        err = _log_error(physics(trial), rows, trees)
        if err < best[0]:
            best = (err, trial)
    return best[1]


def cost_errors(model: fam.Archetype, rows: Sequence[Row]) -> list[float]:
    """Relative speed-up errors of the cost law with the measured accept lengths."""
    unit = fam.Head("", 1.0, 1.0, 0.1, 1.0)
    phys = physics(model)
    return [
        abs(speedup(phys, unit, r.accept[t], r.batch, t) / r.speedup[t] - 1.0)
        for r in rows
        for t in TREES
    ]


def cycle_ratios(model: fam.Archetype, rows: Sequence[Row]) -> list[tuple[float, float]]:
    """Per tree: the published median cycle time in plain steps, and the model's."""
    phys = physics(model)
    knobs = fam.Knobs()
    unit = fam.Head("", 1.0, 1.0, 0.1, 1.0)
    out = []
    for t in TREES:
        published = statistics.median(r.accept[t] / r.speedup[t] for r in rows)
        batch = rows[0].batch
        ratio = fam.cycle_ms(phys, knobs, unit, batch, *t) / fam.step_ms(phys, knobs, batch)
        out.append((published, ratio))
    return out


def load_rows_from_fits(path: Path = fam.FITS) -> list[Row]:
    """The published values stored beside the fit (no copy of SpecBundle needed)."""
    with path.open(encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    rows = []
    for raw in csv.DictReader(lines):
        names = {t: "_".join(map(str, t)) for t in TREES}
        rows.append(
            Row(
                raw["model"],
                raw["dataset"],
                raw["head"],
                int(raw["batch"]),
                {t: float(raw[f"al_{n}"]) for t, n in names.items()},
                {t: float(raw[f"x_{n}"]) for t, n in names.items()},
            )
        )
    return rows


def reference_head() -> fam.Head:
    """Qwen3-235B's SpecForge head at its median fitted chain over SpecBundle's datasets.

    PR #22246 does not say (in what could be read) which head or data set it measured.
    """
    fitted = fam.load_fits()
    heads = [
        h
        for (model, _, path), h in fitted.items()
        if model == "Qwen3-235B-A22B-Instruct-2507" and "SpecForge" in path
    ]
    return fam.Head(
        "reference",
        statistics.median(h.scale for h in heads),
        statistics.median(h.shape for h in heads),
        0.05,
        1.0,
    )


#: PR #23336 (GLM-4.7-FP8, its MTP layer as draft, concurrency 2): baseline 447.2 tok/s;
#: steps -> (accept length, tok/s).
PR23336_GLM = {1: (1.85, 594.7), 3: (3.04, 767.8), 7: (4.52, 732.3)}
PR23336_BASELINE = 447.2
#: PR #22246: GLM-4.7-FP8 performs best with 7 steps at batch 1 and 3 at batch 64.
PR22246_GLM = {1: 7, 64: 3}


def check_glm() -> list[str]:
    """The GLM-4.7-FP8 cross-check (not a fit of the cost terms)."""
    best = (math.inf, 0.0, 0.0)
    for scale, shape in itertools.product(_SCALES, _SHAPES):
        err = sum(
            (1.0 + sum(fam.survival(d, scale, shape) for d in range(1, n + 1)) - al) ** 2
            for n, (al, _) in PR23336_GLM.items()
        )
        if err < best[0]:
            best = (err, scale, shape)
    head = fam.GLM_MTP
    lines = [
        f"GLM MTP chain fit: scale {best[1]}, shape {best[2]} (module: {head.scale}, {head.shape})"
    ]
    phys = physics(fam.archetypes()["GLM-4.7-FP8"])
    for steps, (al, tput) in PR23336_GLM.items():
        tree = (steps, 1, steps + 1)
        model_al = fam.accept_length(head, *tree)
        model_x = speedup(phys, head, model_al, 2, tree)
        lines.append(
            f"  {steps} steps at concurrency 2: accept length {al} / {model_al:.2f}, "
            f"speed-up {tput / PR23336_BASELINE:.2f} / {model_x:.2f} (published / model)"
        )
    found = {b: best_chain(phys, head, b) for b in PR22246_GLM}
    lines.append(f"  best chain by batch, published {PR22246_GLM}, model {found}")
    return lines


def docstring_examples(fits: Sequence[AcceptFit], picks: Sequence[tuple[str, str, str]]) -> None:
    """The docstring's example rows: fitted values, published and model accept lengths."""
    for model, dataset, head in picks:
        fit = next(
            f
            for f in fits
            if (f.row.model, f.row.dataset) == (model, dataset) and head in f.row.head
        )
        h = fit.head
        label = f"{model.split('-Instruct')[0][:16]} {dataset} {head}"[:32]
        print(
            f"  {label:<32} {h.scale:4.1f} {h.shape:4.2f} {h.catch:4.2f} {h.tree:4.2f}   "
            + " ".join(f"{fit.row.accept[t]:.2f}" for t in TREES)
        )
        print(f"  {'':<32} {'':<19}   " + " ".join(f"{fit.predicted(t):.2f}" for t in TREES))


_EXAMPLES = (
    ("Qwen3-235B-A22B-Instruct-2507", "gsm8k", "SpecForge"),
    ("Qwen3-235B-A22B-Instruct-2507", "gsm8k", "lmsys/Qwen3-235B-A22B-EAGLE3"),
    ("Qwen3-Next-80B-A3B-Instruct-FP8", "math500", "SpecForge"),
    ("Kimi-K2-Instruct", "financeqa", "eagle3"),
    ("Llama-4-Scout-17B-16E-Instruct", "gpqa", "v1"),
)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main(argv: Sequence[str] | None = None) -> int:
    """Fit, print, and with `--write` store the acceptance table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--write", action="store_true", help=f"rewrite {fam.FITS}")
    parser.add_argument("--skip-acceptance", action="store_true")
    args = parser.parse_args(argv)
    rows = load_specbundle(args.data)
    print(f"{len(rows)} SpecBundle rows with all five trees")
    if not args.skip_acceptance:
        fits = [fit_acceptance(r) for r in rows]
        for f in fits:
            h = f.head
            shown = " ".join(f"{f.row.accept[t]:.2f}/{f.predicted(t):.2f}" for t in TREES)
            print(
                f"{f.row.model[:22]:22} {f.row.dataset[:10]:10} {f.row.head[-28:]:28} "
                f"{h.scale:5.1f} {h.shape:4.2f} {h.catch:4.2f} {h.tree:4.2f}  {shown}"
            )
        chains, trees = acceptance_errors(fits)
        for what, errs in (("chains", chains), ("trees", trees)):
            print(
                f"accept length, {what}: median {statistics.median(errs):.1%}, "
                f"90th percentile {_quantile(errs, 0.9):.1%}, worst {max(errs):.1%} "
                f"({len(errs)} points)"
            )
        docstring_examples(fits, _EXAMPLES)
        if args.write:
            write_fits(fits, fam.FITS)
            print(f"wrote {fam.FITS}")
    models = fam.archetypes()
    qwen = "Qwen3-235B-A22B-Instruct-2507"
    reference = reference_head()
    moe_eff = None
    status = 0
    for name in [qwen, *[m for m in models if m != qwen]]:
        model = models[name]
        mine = [r for r in rows if r.model == name]
        if not mine or name not in fam.COST_FITTED:
            continue
        if model.experts and moe_eff is not None:
            model = replace(model, gemm_eff=moe_eff)
        model = fit_cost(model, mine, reference=reference if name == qwen else None)
        if name == qwen:
            moe_eff = model.gemm_eff
        errs = cost_errors(model, mine)
        ratios = " ".join(f"{p:.2f}/{m:.2f}" for p, m in cycle_ratios(model, mine))
        print(
            f"{name[:30]:30} locality {model.locality} draft_ms {model.draft_ms} spec_ms "
            f"{model.spec_ms} tree_attn {model.tree_attn} tree_step_ms {model.tree_step_ms} "
            f"gemm_eff {model.gemm_eff}: speed-up error median {statistics.median(errs):.1%}, "
            f"90th {_quantile(errs, 0.9):.1%}; cycle/step published/model {ratios}"
        )
        if name == qwen:
            best = {b: best_chain(physics(model), reference, b) for b in PR22246_QWEN}
            print(f"  PR #22246 best chain (published {PR22246_QWEN}): {best}")
        kept = models[name]
        fields = ("locality", "draft_ms", "spec_ms", "tree_attn", "tree_step_ms", "gemm_eff")
        differs = [f for f in fields if getattr(kept, f) != getattr(model, f)]
        if differs:
            print(f"  landscapes_specbundle.py has other values for {', '.join(differs)}")
            status = 1
    for line in check_glm():
        print(line)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
