"""The real replay table, read: its noise, how far each search gets on it, and how well the
speculative model predicts it.

The real table (`sweeps/real_table_smollm2.yaml`, measured on a lent H200 with SGLang 0.5.17,
the real SmolLM2-135M checkpoint and its trained EAGLE-3 head; `spec-sweep export` writes it) is
one node whose answers nobody here modelled. This script reads it three ways:

1. **The table**: rows, configurations, failures by mode, and the boot-to-boot spread of the
   configurations booted more than once, per concurrency level (the table's noise), and for
   each two-valued knob the pairs of boots that differ in it alone: how far apart they read and
   which way (a knob with no effect shows the boots' own spread, even before any repeat). A grid
   search skips the trees SGLang rejects or rewrites into one that ran (`tree_rules`), so the
   table lacks them; they are filled in by SGLang's rules: a rejected tree as the `crash` the
   real (1, 4, 8) boot was, a rewritten one as the row of what runs. Configurations of the grid
   still missing are listed, and nothing else is read until there are none.
2. **Search efficiency** at `--budgets` (10 20 40) for each objective level (`--levels`, default
   every level of the table): ours (the sweep's searcher), random search, plain Optuna TPE and
   the auto_benchmark tier-2 plan (the strategies of `search_efficiency.py`), `--seeds` runs
   each (the plan is deterministic); the median and worst decile of best/optimum, and in how
   many of ours' runs the best ended below random search's median. A replayed trial returns
   the configuration's first measurement (what a search there would have seen), and the
   optimum is over first measurements too.
3. **The speculative model against reality** (`search.spec_model`, the physics the search ranks
   trees with): fitted on the first `--first-k` EAGLE-3 trials our searcher ran (seed 0) at the
   objective's level, its predicted accept length and throughput for every other measured tree
   at the same CUDA-graph size and memory fraction as the fitted trials' majority, against the
   measurement: mean absolute error by tree shape (chains, top-k 2, top-k 4). Then the report's
   break-even diagnosis (`present.report.analysis`, per-request decode speed) against the
   measured throughput verdict (output tok/s vs the plain configuration at the same knobs): how
   often they agree on whether speculation pays.

4. **The simulator's acceptance law against reality** (`spec_sweep.sim.perf.tree_acceptance`,
   what the simulated node accepts per tree): its per-depth chain rates and its gain per extra
   candidate fitted to every measured tree's accept length at the lowest level, the fit's error
   per tree, each tree predicted by a fit on the others (leave one out), and the fitted gain and
   chain decay beside the simulated H200 profile's (`--profile`).

Run: `.venv/bin/python benchmarks/real_table.py benchmarks/real/<date>/table-0.5.17.csv`
(`--spec` names the sweep it was measured with; default sweeps/real_table_smollm2.yaml).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_efficiency as se  # noqa: E402
import sim_grid  # noqa: E402

from spec_sweep.core.config import (  # noqa: E402
    Config,
    baseline_config,
    config_key,
    normalize_config,
)
from spec_sweep.core.outcome import FailureMode  # noqa: E402
from spec_sweep.present.report.format import at_level  # noqa: E402
from spec_sweep.search.searcher import SweepSearcher  # noqa: E402
from spec_sweep.search.spec_model import SpecModel, TreeObservation  # noqa: E402
from spec_sweep.search.tree_rules import (  # noqa: E402
    ALGORITHM,
    DRAFT_TOKENS,
    STEPS,
    TOPK,
    check_tree,
)
from spec_sweep.sim.perf import accept_length, tree_acceptance  # noqa: E402
from spec_sweep.sim.profiles import load_profile  # noqa: E402
from spec_sweep.spec import SweepSpec  # noqa: E402
from spec_sweep.spec_load import load_spec  # noqa: E402
from spec_sweep.store.replay import ReplayRow, ReplayTable, load_replay  # noqa: E402

DEFAULT_SPEC = ROOT / "sweeps" / "real_table_smollm2.yaml"
_GRAPH = "cuda-graph-max-bs-decode"
_MEM = "mem-fraction-static"


# ---------------------------------------------------------------------------------------------
# 1. The table


@dataclass
class Coverage:
    """What the table holds of the spec's grid."""

    measured: int  # configurations of the grid with a row
    rejected: int  # filled in as SGLang's rejection (crash)
    rewritten: int  # filled in with the row of what SGLang runs
    missing: list[Config] = field(default_factory=list)


def complete(spec: SweepSpec, replay: ReplayTable) -> tuple[ReplayTable, Coverage]:
    """The table over the whole grid: rejected and rewritten trees filled in by SGLang's rules."""
    rows = dict(replay.rows)
    coverage = Coverage(measured=0, rejected=0, rewritten=0)
    # what SGLang ran for each row: (s, 1, 8) and (s, 1, 4) both run (s, 1, s + 1), which the
    # grid may not hold itself; the grid booted the first of them it met
    runs: dict[str, ReplayRow] = {}
    for row in replay.rows.values():
        check = check_tree(
            row.config, server_args=spec.node.server_args, version=spec.node.sglang_version
        )
        runs.setdefault(config_key(normalize_config(spec, check.config)), row)
    for config in sim_grid.grid_configs(spec):
        key = config_key(config)
        if key in replay.rows:
            coverage.measured += 1
            continue
        check = check_tree(
            config, server_args=spec.node.server_args, version=spec.node.sglang_version
        )
        if not check.runs:
            rows[key] = ReplayRow(0, config, FailureMode.CRASH, {})
            coverage.rejected += 1
            continue
        row = runs.get(config_key(normalize_config(spec, check.config)))
        if row is None:
            coverage.missing.append(config)
            continue
        rows[key] = ReplayRow(row.line, config, row.failure_mode, row.metrics)
        coverage.rewritten += 1
    return ReplayTable(replay.path, rows, replay.duplicates), coverage


#: The measured boots of each configuration (its parameter cells), the first boot first.
Boots = dict[tuple[str, ...], list[dict[str, str]]]


def read_boots(path: Path, spec: SweepSpec) -> Boots:
    """The table's measured rows grouped by configuration, in table order (the search's row of
    a configuration, then its repeat boots, as `spec-sweep export --repeats` writes them)."""
    groups: Boots = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as handle:
        for raw in csv.DictReader(handle):
            if (raw.get("failure_mode") or "none") == "none":
                groups[tuple(raw.get(k) or "" for k in spec.params)].append(raw)
    return dict(groups)


def repeat_spread(boots: Boots, metrics: Sequence[str]) -> dict[str, list[float]]:
    """Per metric: (max - min) / mean over the boots of each configuration booted twice or more."""
    out: dict[str, list[float]] = {m: [] for m in metrics}
    for rows in boots.values():
        if len(rows) < 2:
            continue
        for metric in metrics:
            values = [float(b[metric]) for b in rows if b.get(metric)]
            if len(values) >= 2 and statistics.mean(values) > 0:
                out[metric].append((max(values) - min(values)) / statistics.mean(values))
    return out


@dataclass
class KnobPairs:
    """Boots that differ in one knob only: how far apart they read, and which way."""

    knob: str
    low: str
    high: str
    ratios: list[float]  # per pair: the high value's reading over the low one's

    def line(self, metric: str) -> str:
        apart = statistics.median(max(r, 1 / r) for r in self.ratios)
        higher = sum(r > 1 for r in self.ratios)
        return (
            f"  {metric}: {len(self.ratios)} pairs differing only in {self.knob} "
            f"({self.low} vs {self.high}): median {apart:.2f}x apart, {self.high} the higher "
            f"in {higher}"
        )


def knob_pairs(boots: Boots, spec: SweepSpec, metric: str) -> list[KnobPairs]:
    """Per two-valued knob: the pairs of first boots that differ in it alone. A knob whose pairs
    are far apart in both directions about equally often has no effect the table can see: their
    spread is then the boots' own (a reading of the noise without repeat boots)."""
    first = {key: float(rows[0][metric]) for key, rows in boots.items() if rows[0].get(metric)}
    names = list(spec.params)
    out = []
    for i, knob in enumerate(names):
        choices = spec.params[knob].choices
        if choices is None or len(choices) != 2:
            continue
        low, high = (str(c) for c in choices)
        ratios = [
            first[hi] / value
            for key, value in first.items()
            if key[i] == low and (hi := (*key[:i], high, *key[i + 1 :])) in first and value > 0
        ]
        if ratios:
            out.append(KnobPairs(knob, low, high, ratios))
    return out


def describe(
    path: Path, spec: SweepSpec, replay: ReplayTable, coverage: Coverage, boots: Boots
) -> list[str]:
    lines = [f"table {path}: {len(replay.rows)} configurations, {replay.duplicates} repeat boots"]
    modes = Counter(r.failure_mode.value for r in replay.rows.values())
    lines.append("  outcomes: " + ", ".join(f"{m} {n}" for m, n in modes.most_common()))
    lines.append(
        f"  grid of {sim_grid.grid_size(spec)}: {coverage.measured} measured, "
        f"{coverage.rejected} rejected and {coverage.rewritten} rewritten by SGLang's tree "
        f"rules, {len(coverage.missing)} missing"
    )
    throughput = [at_level("output_throughput", c) for c in spec.workload.concurrency]
    for metric, spreads in repeat_spread(boots, throughput).items():
        if spreads:
            lines.append(
                f"  {metric}: boot-to-boot spread (max-min)/mean over {len(spreads)} "
                f"configurations: median {statistics.median(spreads):.1%}, "
                f"max {max(spreads):.1%}"
            )
    for metric in throughput:
        lines.extend(pairs.line(metric) for pairs in knob_pairs(boots, spec, metric))
    return lines


# ---------------------------------------------------------------------------------------------
# 2. Search efficiency


@dataclass
class Reading:
    """One strategy at one budget: best/optimum over its runs."""

    label: str
    budget: int
    ratios: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def worst(self) -> float:
        ordered = sorted(self.ratios)
        return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def within_noise(spec: SweepSpec, replay: ReplayTable, best: float, spread: float) -> str:
    """How many measured configurations (rows of `replay`, at `spec`'s objective) one boot
    cannot tell from the optimum `best`: their first reading within the table's median
    boot-to-boot `spread` of it. A search that reaches any of them has found the optimum as
    far as single boots can say."""
    values = [
        v
        for row in replay.rows.values()
        if (v := se._value(spec, row.failure_mode, row.metrics)) is not None
    ]
    near = sum(1 for v in values if v * (1.0 + spread) >= best)
    return (
        f"within the median boot spread ({spread:.1%}) of the optimum: {near} of the "
        f"{len(values)} measured configurations"
    )


def with_objective(spec: SweepSpec, metric: str) -> SweepSpec:
    return spec.model_copy(
        update={"objective": spec.objective.model_copy(update={"metric": metric})}
    )


def efficiency(
    spec: SweepSpec, table: ReplayTable, *, budgets: Sequence[int], seeds: int
) -> tuple[list[Reading], se.Table, list[bool]]:
    """Every strategy's best/optimum at each budget over `seeds` runs, and for each of ours'
    runs at the largest budget whether it ended below random search's median."""
    tab = se.table_from("real", spec, table)
    readings: list[Reading] = []
    per_label: dict[str, dict[int, list[float]]] = {}
    top = max(budgets)
    for label, reads_budget, run in se._family_strategies():
        ratios: dict[int, list[float]] = {b: [] for b in budgets}
        for seed in range(seeds):
            for budget in budgets if reads_budget else [top]:
                result = run(tab, seed, budget)
                for b in budgets if not reads_budget else [budget]:
                    ratios[b].append((result.best_after(b) or 0.0) / tab.best)
            if label.startswith("auto_benchmark"):
                break  # the plan has nothing random
        per_label[label] = ratios
        readings += [Reading(label, b, ratios[b]) for b in budgets]
    ours = next(iter(per_label.values()))[top]
    random_median = statistics.median(per_label[se.RANDOM_LABEL][top])
    return readings, tab, [r < random_median for r in ours]


# ---------------------------------------------------------------------------------------------
# 3. The speculative model


def _tree(spec: SweepSpec, config: Mapping[str, Any]) -> tuple[int, int, int] | None:
    if config.get(ALGORITHM) not in ("EAGLE", "EAGLE3"):
        return None
    effective = check_tree(
        config, server_args=spec.node.server_args, version=spec.node.sglang_version
    ).config
    return int(effective[STEPS]), int(effective[TOPK]), int(effective[DRAFT_TOKENS])


def _shape(tree: tuple[int, int, int]) -> str:
    return "chain" if tree[1] == 1 else f"top-k {tree[1]}"


@dataclass
class Prediction:
    tree: tuple[int, int, int]
    knobs: tuple[Any, Any]
    accept: tuple[float, float]  # (predicted, measured)
    throughput: tuple[float, float]


def model_check(
    spec: SweepSpec,
    table: ReplayTable,
    *,
    level: int,
    first_k: int,
    budget: int,
    order: Sequence[Config] | None = None,
) -> tuple[list[tuple[int, int, int]], list[Prediction]]:
    """Fit the model on ours' first `first_k` measured EAGLE trials (seed 0) at `level`, or on
    the first `first_k` distinct trees of `order` (a partial table's rows in the order they were
    measured); predict every other measured tree at the fitted trials' most common (graph size,
    fraction)."""
    metric = at_level("output_throughput", level)
    accept_metric = at_level("accept_length", level)
    distinct = order is not None  # measured rows: one per tree (the knobs repeat each tree)
    if order is None:
        order = _proposals(se.table_from("real", with_objective(spec, metric), table), budget)
    fitted: list[tuple[Config, ReplayRow]] = []
    for config in order:
        row = table.lookup(normalize_config(spec, config))
        if row is None or row.failure_mode is not FailureMode.NONE or _tree(spec, config) is None:
            continue
        if distinct and any(_tree(spec, c) == _tree(spec, config) for c, _ in fitted):
            continue
        fitted.append((config, row))
        if len(fitted) == first_k:
            break
    if not fitted:
        return [], []
    knobs = Counter((c.get(_GRAPH), c.get(_MEM)) for c, _ in fitted).most_common(1)[0][0]
    observations = []
    for config, row in fitted:
        steps, topk, draft = _tree(spec, config) or (0, 0, 0)
        observations.append(
            TreeObservation(steps, topk, draft, row.metrics[metric], row.metrics.get(accept_metric))
        )
    model = SpecModel(observations)
    seen = {_tree(spec, c) for c, _ in fitted}
    predictions = []
    for row in table.rows.values():
        tree = _tree(spec, row.config)
        if (
            tree is None
            or tree in seen
            or row.failure_mode is not FailureMode.NONE
            or (row.config.get(_GRAPH), row.config.get(_MEM)) != knobs
            or metric not in row.metrics
        ):
            continue
        seen.add(tree)
        predictions.append(
            Prediction(
                tree,
                knobs,
                (model.length(*tree), row.metrics.get(accept_metric, math.nan)),
                (model.throughput(*tree), row.metrics[metric]),
            )
        )
    return [_tree(spec, c) or (0, 0, 0) for c, _ in fitted], predictions


def _proposals(tab: se.Table, budget: int) -> list[Config]:
    """What ours proposes on the table, in order (seed 0)."""
    out: list[Config] = []
    spec = tab.spec.model_copy(
        update={"budget": tab.spec.budget.model_copy(update={"trials": budget})}
    )
    searcher = SweepSearcher(
        spec, history=[], requeue=[("t0000", baseline_config(spec), 1)], next_index=1
    )
    for i in range(budget):
        proposal = searcher.suggest(f"k{i}")
        if proposal is None:
            break
        row = tab.replay.lookup(normalize_config(spec, proposal.params))
        mode, metrics = (row.failure_mode, row.metrics) if row else (FailureMode.CRASH, {})
        searcher.complete(f"k{i}", {"failure_mode": mode.value, **metrics})
        out.append(dict(proposal.params))
    return out


def diagnosis_agreement(
    spec: SweepSpec, table: ReplayTable, *, level: int
) -> tuple[int, int, list[str]]:
    """(agree, total, disagreements): the break-even verdict (per-request decode speed vs the
    plain configuration at the same knobs) against the measured output throughput's verdict."""
    speed = at_level("decode_speed_p50", level)
    accept = at_level("accept_length", level)
    metric = at_level("output_throughput", level)
    plain = {
        (r.config.get(_GRAPH), r.config.get(_MEM)): r
        for r in table.rows.values()
        if r.config.get(ALGORITHM) is None and r.failure_mode is FailureMode.NONE
    }
    agree = total = 0
    notes = []
    for row in table.rows.values():
        base = plain.get((row.config.get(_GRAPH), row.config.get(_MEM)))
        if (
            row.config.get(ALGORITHM) is None
            or row.failure_mode is not FailureMode.NONE
            or base is None
            or not all(m in row.metrics for m in (speed, accept, metric))
            or not all(m in base.metrics for m in (speed, metric))
        ):
            continue
        cycle_s = row.metrics[accept] / row.metrics[speed]
        break_even = base.metrics[speed] * cycle_s
        says_pays = row.metrics[accept] > break_even
        pays = row.metrics[metric] > base.metrics[metric]
        total += 1
        if says_pays == pays:
            agree += 1
        else:
            notes.append(
                f"{row.config.get(ALGORITHM)} {_tree(spec, row.config) or ''}: accept "
                f"{row.metrics[accept]:.2f} vs break-even {break_even:.2f}, throughput "
                f"x{row.metrics[metric] / base.metrics[metric]:.2f}"
            )
    return agree, total, notes


# ---------------------------------------------------------------------------------------------
# 4. The simulator's acceptance law

_DEPTHS = 5  # the deepest chain rate the law keeps (the last one repeats below it)


@dataclass
class LawFit:
    """The simulator's acceptance law fitted to measured accept lengths."""

    rates: list[float]
    gain: float
    fitted: dict[tuple[int, int, int], tuple[float, float]]  # tree -> (law, measured)
    left_out: dict[tuple[int, int, int], float]  # tree -> law fitted on the other trees


def measured_accept(
    spec: SweepSpec, replay: ReplayTable, level: int
) -> dict[tuple[int, int, int], float]:
    """Mean accept length per EAGLE tree that ran (as SGLang runs it), at one level."""
    metric = at_level("accept_length", level)
    seen: dict[tuple[int, int, int], list[float]] = defaultdict(list)
    for row in replay.rows.values():
        tree = _tree(spec, row.config)
        value = row.metrics.get(metric) if row.failure_mode == FailureMode.NONE else None
        if tree is not None and value is not None and math.isfinite(value):
            seen[tree].append(value)
    return {tree: statistics.mean(values) for tree, values in sorted(seen.items())}


def _law(params: Sequence[float], tree: tuple[int, int, int]) -> float:
    steps, topk, draft = tree
    rates = list(params[:_DEPTHS])
    return accept_length(
        tree_acceptance(rates, params[_DEPTHS], steps=steps, topk=topk, draft_tokens=draft)
    )


def _fit_params(trees: Mapping[tuple[int, int, int], float]) -> list[float]:
    """Least squares by coordinate descent with shrinking steps (deterministic, no SciPy)."""
    params = [0.5] * _DEPTHS + [0.2]

    def loss(ps: Sequence[float]) -> float:
        return sum((_law(ps, tree) - value) ** 2 for tree, value in trees.items())

    best, step = loss(params), 0.2
    while step > 1e-5:
        improved = False
        for i in range(len(params)):
            for delta in (step, -step):
                trial = list(params)
                trial[i] = min(0.999, max(0.0, trial[i] + delta))
                value = loss(trial)
                if value < best - 1e-15:
                    params, best, improved = trial, value, True
        if not improved:
            step /= 2
    return params


def law_fit(trees: Mapping[tuple[int, int, int], float]) -> LawFit:
    """Fit the law on every tree, and each tree again on the others."""
    params = _fit_params(trees)
    fitted = {tree: (_law(params, tree), value) for tree, value in trees.items()}
    left_out = {}
    for tree in trees:
        others = {t: v for t, v in trees.items() if t != tree}
        left_out[tree] = _law(_fit_params(others), tree)
    return LawFit(list(params[:_DEPTHS]), params[_DEPTHS], fitted, left_out)


def print_law_fit(spec: SweepSpec, replay: ReplayTable, profile_name: str) -> None:
    level = min(spec.workload.concurrency)
    trees = measured_accept(spec, replay, level)
    if len(trees) < _DEPTHS + 2:
        print(f"\nsimulator's acceptance law: {len(trees)} measured trees, too few to fit")
        return
    fit = law_fit(trees)
    profile = load_profile(profile_name).perf
    print(
        f"\nsimulator's acceptance law fitted to {len(trees)} measured trees "
        f"(accept length at c{level}):"
    )
    print(
        "  chain rates by depth "
        + " ".join(f"{r:.3f}" for r in fit.rates)
        + f"; gain per extra candidate {fit.gain:.3f}"
    )
    print(f"  {'tree':<12} {'measured':>8} {'fit':>7} {'left out':>9}")
    for tree, (law, value) in fit.fitted.items():
        print(f"  {tree!s:<12} {value:>8.3f} {law:>7.3f} {fit.left_out[tree]:>9.3f}")
    fit_err = statistics.mean(abs(law - value) for law, value in fit.fitted.values())
    loo_err = statistics.mean(abs(fit.left_out[t] - v) for t, (_, v) in fit.fitted.items())
    print(f"  mean abs. error: fit {fit_err:.3f}, left out {loo_err:.3f}")
    rates = list(profile.acceptance.get("EAGLE3", ()))[:_DEPTHS]
    decay = [b / a for a, b in itertools.pairwise(rates) if a > 0]
    real_decay = [b / a for a, b in itertools.pairwise(fit.rates) if a > 0]
    print(
        f"  profile {profile_name}: gain {profile.extra_candidate_gain:.3f}, chain rates "
        + " ".join(f"{r:.3f}" for r in rates)
        + " (decay "
        + " ".join(f"{d:.2f}" for d in decay)
        + "; the real head's "
        + " ".join(f"{d:.2f}" for d in real_decay)
        + ")"
    )


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("table", type=Path, help="the real table (spec-sweep export)")
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument("--levels", type=int, nargs="+", help="concurrency levels (default all)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--seeds", type=int, default=20, help="runs per seeded strategy")
    parser.add_argument("--first-k", type=int, default=4, help="EAGLE trials the model fits on")
    parser.add_argument(
        "--profile", default="h200-nvlink-x8", help="simulated profile to compare the law with"
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="read an unfinished table: its noise, the model's error and the break-even "
        "diagnosis on the measured rows (no search efficiency)",
    )
    args = parser.parse_args(argv)

    spec = load_spec(args.spec)
    replay = load_replay(args.table, spec)
    table, coverage = complete(spec, replay)
    boots = read_boots(args.table, spec)
    for line in describe(args.table, spec, replay, coverage, boots):
        print(line)
    partial = bool(coverage.missing)
    if partial:
        print(f"{len(coverage.missing)} configurations of the grid have no row yet, e.g.:")
        for config in coverage.missing[:5]:
            print(f"  {config}")
        if not args.partial:
            print("finish the table (the same sweep resumes) before reading it further")
            print_law_fit(spec, replay, args.profile)
            return 1
        print(
            "--partial: no search efficiency (a search needs every configuration); the model "
            "fitted on the first measured EAGLE-3 rows in the order they were measured"
        )
    levels = args.levels or list(spec.workload.concurrency)
    for level in levels:
        metric = at_level("output_throughput", level)
        if partial:
            print(f"\nobjective {metric}")
            _model_and_diagnosis(spec, replay, replay, level=level, args=args, partial=True)
            continue
        leveled = with_objective(spec, metric)
        readings, tab, below = efficiency(leveled, table, budgets=args.budgets, seeds=args.seeds)
        print(
            f"\nsearch efficiency, objective {metric} (optimum {tab.best:,.1f}: "
            f"{sim_grid._short(tab.best_config)})"
        )
        spreads = repeat_spread(boots, [metric])[metric]
        if spreads:
            print("  " + within_noise(leveled, replay, tab.best, statistics.median(spreads)))
        print(f"  {'strategy':<44} " + " ".join(f"{'@' + str(b):>15}" for b in args.budgets))
        labels = list(dict.fromkeys(r.label for r in readings))
        for label in labels:
            cells = [r for r in readings if r.label == label]
            print(
                f"  {label:<44} " + " ".join(f"{c.median:>7.3f} / {c.worst:<5.3f}" for c in cells)
            )
        print(
            f"  (median / worst decile of best/optimum; ours below random's median in "
            f"{sum(below)} of {len(below)} runs at {max(args.budgets)})"
        )
        _model_and_diagnosis(spec, table, replay, level=level, args=args, partial=False)
    print_law_fit(spec, replay, args.profile)
    return 0


def _model_and_diagnosis(
    spec: SweepSpec,
    table: ReplayTable,
    measured: ReplayTable,
    *,
    level: int,
    args: argparse.Namespace,
    partial: bool,
) -> None:
    """Print the speculative model's error by tree shape (fitted on `table`) and the break-even
    diagnosis against the verdict of the `measured` rows."""
    order = [row.config for row in measured.rows.values()] if partial else None
    fitted, predictions = model_check(
        spec, table, level=level, first_k=args.first_k, budget=max(args.budgets), order=order
    )
    if predictions:
        print(f"  speculative model fitted on {fitted}, predicting {len(predictions)} trees:")
        by_shape: dict[str, list[Prediction]] = defaultdict(list)
        for p in predictions:
            by_shape[_shape(p.tree)].append(p)
        for shape, items in sorted(by_shape.items()):
            acc = [abs(p.accept[0] - p.accept[1]) for p in items if math.isfinite(p.accept[1])]
            thr = [abs(p.throughput[0] / p.throughput[1] - 1) for p in items]
            print(
                f"    {shape:<8} {len(items):>2} trees: accept length MAE "
                f"{statistics.mean(acc) if acc else math.nan:.3f}, throughput mean |error| "
                f"{statistics.mean(thr):.1%}"
            )
    agree, total, notes = diagnosis_agreement(spec, measured, level=level)
    if total:
        print(f"  break-even diagnosis agrees with the measured verdict on {agree}/{total}")
        for note in notes[:5]:
            print(f"    {note}")


if __name__ == "__main__":
    raise SystemExit(main())
