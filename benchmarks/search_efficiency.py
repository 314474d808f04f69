"""Search efficiency: how close to the optimum each search strategy gets in a few trials.

Every trial on a real node costs minutes of 8 GPUs, so the number of trials a search needs is
the product's central performance figure.

**The families** (default, `--family test`; `--family tuning` for the seeds the search's
settings were chosen on): generated nodes, whole replay tables, of two independent families
(`--families a b`, both by default): A, `benchmarks/landscapes.py` (the search was tuned on its
tuning seeds, and it shares the search's tree-shape assumption), and B,
`benchmarks/landscapes_specbundle.py` (its own speculative model, calibrated on SpecBundle;
several draft heads, searched as `speculative-draft-model-path`). Test seeds 100-139, tuning
seeds 0-19 in both. Side by side, one run per node and budget (the spec's `budget.trials` =
`--budgets`, 20 40 80 by default; the searcher's seed is the node's seed): ours (the sweep's
`SweepSearcher`, `searcher.kind: tpe`), random search (`SweepSearcher`, `kind: random`), plain
Optuna TPE with constraints (`run_plain_tpe`), and the auto_benchmark tier-2 plan (below); only
ours reads its budget, so the others run once at the largest budget and are read at each.
Printed per family: the median and worst decile (10th percentile) over the nodes of
best/optimum at each budget, the mean share of the first 40 trials that failed, on how many
nodes the strategy ended below random search's median on that node (`--random-seeds`, 20
random-search runs per node, seeds apart from the strategies' own), and how many 40-trial runs
reported a non-speculative best on nodes where a speculative configuration is >= 1.3x better.
The issue's acceptance for ours is checked at the end of each family; `--markdown` prints both
families in one table, each strategy's rows side by side. One run per node swings the "below
random" counts by 3-4 nodes (one change of the search moved 45 of the 120 tuning nodes by more
than 0.03): `--search-seeds 3` runs each seeded strategy three times per node (seeds node, +1000,
+2000) and counts runs, the way to judge a change on the tuning sets.
`--boot-noise SD` measures every boot of the family tables with a fresh factor exp(N(0, SD)) on
the objective (the tables hold one fixed value per configuration; the real H200 table's boots of
one configuration spread with a between-boot sd of about 20%), for every strategy and for
random search's reference runs alike, and reads each run by the true value of the configuration
it measured best, as its user would get it without confirmation boots.

**The simulator grids** (`--family none --grids pcie h200`): the measurement below, on replay
tables that hold
a whole grid of configurations (`benchmarks/grids/*.yaml`, one per simulated node, each over a
thousand configurations with large failing regions), exported from the simulator's own model by
`benchmarks/sim_grid.py` into `--cache` (generated once, ~30 s a grid; not committed).

For each grid and strategy, every run counts the trials until the best-so-far (over successful
trials meeting the objective's constraints) is within 2 % of the table's best, up to `--cap`
trials ("> cap" when never), and the share of trials spent on failing configurations, both up
to that point and over the first `--budget` trials. Strategies:

* **TPE, failure-aware** (the sweep's default) and **TPE, failures ignored**: exactly the sweep's
  searcher, `spec_sweep.search.searcher.SweepSearcher` (`failure_aware=True` / `False`),
  driven without Ray: the baseline first, the screening design, no repeated configuration,
  local steps. One run per seed (`searcher.seed` = 0 .. seeds-1).
* **random search**: `SweepSearcher` with `searcher.kind: random` (baseline first, then uniform
  draws over the define-by-run space, no repeats).
* **SGLang auto_benchmark, tier 2**: the candidate plan of `python -m sglang.auto_benchmark`
  (sgl-project/sglang `python/sglang/auto_benchmark_lib.py`, `build_candidates`): the baseline,
  then the cartesian product of the first three searched flags, then one flag at a time for the
  next five, each flag cut to its first three values, deduplicated; a base stage over the
  server flags, then a speculative stage over the EAGLE tree flags on top of the best base
  configuration. Every candidate is one server launch, in plan order. Environment variables
  are not searchable there (`server.env` is fixed), so `env.*` parameters keep their baseline
  value. The plan has nothing random: every seed gives the same run. Two rows: with
  `search.max_candidates: null` (the whole tier-2 plan) and with its default of 8 per stage.

The sweep path itself (Ray Tune + MLflow, `spec-sweep run --replay`) drives the same searcher
class, so it proposes the same configurations; it only adds about 0.06 s of orchestration per
trial (`benchmarks/overhead.py`).

Run: `.venv/bin/python benchmarks/search_efficiency.py --markdown` (both families' test sets; about
5 minutes on 2 cores; `--families a --random-seeds 0` runs family A alone, without random's median);
`... --family none --grids pcie h200` (a few minutes on 2 cores, plus 45 s the first time to
generate the tables); `--validate 18` first checks each table against the real trial path
(`sim_grid.py --validate`, about 5 minutes); `--markdown` prints the table of
docs/evidence/search-efficiency.md; `--first-seed 10 --seeds 40` repeats it on other seeds.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import itertools
import json
import logging
import math
import pickle
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import landscapes  # noqa: E402
import landscapes_specbundle  # noqa: E402
import sim_grid  # noqa: E402

from spec_sweep.core.config import (  # noqa: E402
    Config,
    baseline_config,
    is_active,
    normalize_config,
    ordered_keys,
)
from spec_sweep.core.objective import Objective  # noqa: E402
from spec_sweep.core.outcome import FailureMode  # noqa: E402
from spec_sweep.search.searcher import SweepSearcher  # noqa: E402
from spec_sweep.spec import Scalar, SweepSpec  # noqa: E402
from spec_sweep.spec_load import load_spec  # noqa: E402
from spec_sweep.store.replay import ReplayTable, load_replay  # noqa: E402

GRIDS = {
    "pcie": ROOT / "benchmarks" / "grids" / "pcie.yaml",
    "h200": ROOT / "benchmarks" / "grids" / "h200.yaml",
}
TOLERANCE = 0.02
#: The speculative knobs: auto_benchmark searches them in its second stage.
_SPECULATIVE = "speculative-algorithm"
_AUTO_BENCH_TIER2_HEAD = 3  # flags in the cartesian product
_AUTO_BENCH_TIER2_ITEMS = 8  # flags searched at all
_AUTO_BENCH_TIER2_VALUES = 3  # values per flag
_AUTO_BENCH_DEFAULT_MAX = 8  # DEFAULT_MAX_CANDIDATES


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass
class Table:
    """A grid's replay table and what a search is measured against."""

    name: str
    spec: SweepSpec
    replay: ReplayTable
    best: float
    best_config: Config
    failing: float
    near: int
    random_hit: float
    #: Boot-to-boot noise (`--boot-noise`): the log-sd of a fresh factor on the objective per
    #: trial, drawn from `rng`; 0: the table's values as they are.
    boot_noise: float = 0.0
    rng: random.Random | None = field(default=None, repr=False, compare=False)

    def noisy(self, sd: float, seed: str) -> Table:
        """This table with a fresh boot-noise stream (`sd` 0: itself)."""
        return self if sd <= 0 else replace(self, boot_noise=sd, rng=random.Random(seed))

    def true_value(self, config: Mapping[str, Any]) -> float | None:
        """A configuration's objective as the table holds it (without boot noise)."""
        row = self.replay.lookup(normalize_config(self.spec, config))
        return None if row is None else _value(self.spec, row.failure_mode, row.metrics)

    def target_met(self, value: float | None) -> bool:
        """Whether a best-so-far value is within 2 % of the table's best."""
        if value is None:
            return False
        if self.spec.objective.mode == "max":
            return value >= self.best * (1.0 - TOLERANCE)
        return value <= self.best * (1.0 + TOLERANCE)


def _digest(spec_path: Path) -> str:
    """What the table depends on: the grid spec, the generator and the simulator's code."""
    parts = [spec_path, Path(sim_grid.__file__)]
    parts += sorted((ROOT / "spec_sweep" / "sim").rglob("*.py"))
    parts += sorted((ROOT / "spec_sweep" / "sim" / "profiles").glob("*.yaml"))
    parts += [
        ROOT / "spec_sweep" / "node" / f for f in ("classify.py", "log_patterns.py", "metrics.py")
    ]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.read_bytes())
    return digest.hexdigest()[:12]


def load_table(name: str, spec_path: Path, cache: Path) -> Table:
    """The grid's replay table, generated into `cache` unless it is there already."""
    spec = load_spec(spec_path)
    path = cache / f"{spec.name}-{_digest(spec_path)}.csv"
    if not path.exists():
        t0 = time.monotonic()
        rows = sim_grid.generate(spec)
        partial = path.with_suffix(".part")
        sim_grid.write_table(spec, rows, partial)
        partial.replace(path)
        print(f"generated {path} ({len(rows)} rows, {time.monotonic() - t0:.0f} s)")
    replay = load_replay(path, spec)
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    scored = [(row, _value(spec, row.failure_mode, row.metrics)) for row in replay.rows.values()]
    ok = [(row, v) for row, v in scored if v is not None]
    best_row, best = max(ok, key=lambda rv: sign * rv[1])
    table = Table(
        name=name,
        spec=spec,
        replay=replay,
        best=best,
        best_config=best_row.config,
        failing=sum(1 for r in replay.rows.values() if r.failure_mode is not FailureMode.NONE)
        / len(replay),
        near=0,
        random_hit=0.0,
    )
    near = [row for row, v in ok if table.target_met(v)]
    table.near = len(near)
    table.random_hit = sum(_random_probability(spec, row.config) for row in near)
    return table


def table_from(name: str, spec: SweepSpec, replay: ReplayTable) -> Table:
    """A `Table` over an in-memory replay table (a generated landscape)."""
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    scored = [(row, _value(spec, row.failure_mode, row.metrics)) for row in replay.rows.values()]
    ok = [(row, v) for row, v in scored if v is not None]
    best_row, best = max(ok, key=lambda rv: sign * rv[1])
    failing = sum(1 for r in replay.rows.values() if r.failure_mode is not FailureMode.NONE)
    return Table(name, spec, replay, best, best_row.config, failing / len(replay), 0, 0.0)


def _value(spec: SweepSpec, mode: FailureMode, metrics: Mapping[str, float]) -> float | None:
    """The objective of a successful trial that meets the constraints, else None."""
    if mode is not FailureMode.NONE:
        return None
    value = metrics.get(spec.objective.metric)
    if value is None or not math.isfinite(value):
        return None
    if not Objective.of(spec).meets(metrics):
        return None
    return float(value)


def _random_probability(spec: SweepSpec, config: Mapping[str, Scalar]) -> float:
    """Probability that one uniform draw over the define-by-run space is `config`."""
    p = 1.0
    for key in config:
        p /= len(spec.params[key].values())
    return p


# ---------------------------------------------------------------------------------------------
# Runs


@dataclass
class Run:
    """One search on one table."""

    hit: int | None  # trials until within 2 % (None: not within the cap / plan)
    failed: list[bool] = field(default_factory=list)  # per trial, in order
    best: list[float | None] = field(default_factory=list)  # best-so-far after each trial
    configs: list[Config | None] = field(default_factory=list)  # the new best, when one
    seconds: float = 0.0
    tried: list[Config] = field(default_factory=list)  # per trial, in order
    #: With boot noise (`judged`): after each trial, the best true value among those measured.
    found: list[float | None] = field(default_factory=list)

    def best_after(self, limit: int) -> float | None:
        """Best objective value within the first `limit` trials (or all, if fewer ran)."""
        head = self.best[:limit]
        return head[-1] if head else None

    def failed_share(self, limit: int) -> float:
        """Share of the first `limit` trials (or all, if fewer ran) that failed."""
        head = self.failed[:limit]
        return sum(head) / len(head) if head else 0.0


def _trial(table: Table, config: Mapping[str, Any]) -> tuple[FailureMode, dict[str, float]]:
    """One boot of `config`: its row, the objective times a fresh boot factor when noisy."""
    row = table.replay.lookup(normalize_config(table.spec, config))
    if row is None:
        raise RuntimeError(f"{table.name}: configuration not in the grid: {dict(config)}")
    metric = table.spec.objective.metric
    if table.rng is None or row.failure_mode is not FailureMode.NONE or metric not in row.metrics:
        return row.failure_mode, row.metrics
    factor = math.exp(table.rng.gauss(0.0, table.boot_noise))
    return row.failure_mode, {**row.metrics, metric: row.metrics[metric] * factor}


def judged(table: Table, run: Run) -> Run:
    """`run` read as its user would end it on a noisy table: after each trial, the true value
    of the configuration it measured best so far (what the search would report), not the
    lucky measurement. Noise-free tables: `run` itself."""
    if table.rng is None:
        return run
    best: float | None = None
    out: list[float | None] = []
    for config in run.configs:
        if config is not None:
            best = table.true_value(config)
        out.append(best)
    top: float | None = None
    found: list[float | None] = []
    sign = 1.0 if table.spec.objective.mode == "max" else -1.0
    for config in run.tried:
        value = table.true_value(config)
        if value is not None and (top is None or sign * value > sign * top):
            top = value
        found.append(top)
    return replace(run, best=out, found=found)


def run_searcher(
    table: Table, *, kind: str, seed: int, failure_aware: bool, cap: int, budget: int
) -> Run:
    """Drive the sweep's own searcher on the table, without Ray, until the goal and the budget."""
    spec = table.spec.model_copy(
        update={"searcher": table.spec.searcher.model_copy(update={"kind": kind, "seed": seed})}
    )
    t0 = time.monotonic()
    searcher = SweepSearcher(
        spec,
        history=[],
        requeue=[("t0000", baseline_config(spec), 1)],
        next_index=1,
        failure_aware=failure_aware,
    )
    run = Run(hit=None)
    best: float | None = None
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    for i in range(cap):
        tune_id = f"tune{i}"
        proposal = searcher.suggest(tune_id)
        if proposal is None:
            break  # the searcher ran out of configurations
        config = proposal.params
        mode, metrics = _trial(table, config)
        searcher.complete(tune_id, {"failure_mode": mode.value, **metrics})
        run.failed.append(mode is not FailureMode.NONE)
        run.tried.append(dict(config))
        value = _value(spec, mode, metrics)
        if value is not None and (best is None or sign * value > sign * best):
            best = value
            run.configs.append(normalize_config(spec, config))
        else:
            run.configs.append(None)
        run.best.append(best)
        if run.hit is None and table.target_met(best):
            run.hit = i + 1
        if run.hit is not None and i + 1 >= budget:
            break
    run.seconds = time.monotonic() - t0
    return run


def auto_benchmark_tier2(
    base_flags: Mapping[str, Scalar],
    search_space: Sequence[tuple[str, Sequence[Scalar]]],
    *,
    max_candidates: int | None,
) -> list[dict[str, Scalar]]:
    """`build_candidates(..., tier=2)` of sgl-project/sglang python/sglang/auto_benchmark_lib.py.

    The base flags first; then, over the first eight flags cut to their first three values,
    the cartesian product of the first three and one flag at a time for the rest; duplicates
    dropped (same flags and values); at most `max_candidates`.
    """
    items = [
        (key, list(values)[:_AUTO_BENCH_TIER2_VALUES])
        for key, values in list(search_space)[:_AUTO_BENCH_TIER2_ITEMS]
    ]
    candidates = [dict(base_flags)]
    if items:
        head, tail = items[:_AUTO_BENCH_TIER2_HEAD], items[_AUTO_BENCH_TIER2_HEAD:]
        for combo in itertools.product(*[values for _, values in head]):
            candidate = dict(base_flags)
            for (key, _), value in zip(head, combo, strict=True):
                candidate[key] = value
            candidates.append(candidate)
        for key, values in tail:
            for value in values:
                candidates.append({**base_flags, key: value})
    out: list[dict[str, Scalar]] = []
    seen: set[str] = set()
    for candidate in candidates:
        key = json.dumps(candidate, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append(candidate)
        if max_candidates is not None and len(out) >= max_candidates:
            break
    return out


def _resolve(spec: SweepSpec, flags: Mapping[str, Scalar]) -> Config:
    """The grid configuration a launch with these flags is: unset flags take their default."""
    config: Config = {}
    for key in ordered_keys(spec.params):
        param = spec.params[key]
        if not is_active(param, config):
            continue
        if key in flags:
            config[key] = flags[key]
        elif "default" in param.model_fields_set:
            config[key] = param.default
        else:
            config[key] = None
    return config


def run_auto_benchmark(table: Table, *, max_candidates: int | None, budget: int) -> Run:
    """SGLang auto_benchmark's tier-2 search (base stage, then speculative stage) on the table."""
    spec = table.spec
    t0 = time.monotonic()
    baseline = baseline_config(spec)
    params = spec.params
    speculative = {k for k, p in params.items() if k == _SPECULATIVE or _SPECULATIVE in p.when}
    searchable = [k for k in params if not k.startswith("env.") and k not in speculative]
    fixed = {k: v for k, v in baseline.items() if k.startswith("env.")}
    base_flags = {k: baseline[k] for k in searchable if k in baseline}
    base_flags[_SPECULATIVE] = None
    space = [(k, params[k].values()) for k in searchable]
    run = Run(hit=None)
    best: float | None = None
    best_flags: dict[str, Scalar] | None = None
    sign = 1.0 if spec.objective.mode == "max" else -1.0

    def launch(flags: dict[str, Scalar]) -> None:
        nonlocal best, best_flags
        config = _resolve(spec, {**fixed, **flags})
        mode, metrics = _trial(table, config)
        run.failed.append(mode is not FailureMode.NONE)
        run.tried.append(dict(config))
        value = _value(spec, mode, metrics)
        if value is not None and (best is None or sign * value > sign * best):
            best, best_flags = value, flags
            run.configs.append(config)
        else:
            run.configs.append(None)
        run.best.append(best)
        if run.hit is None and table.target_met(best):
            run.hit = len(run.failed)

    for flags in auto_benchmark_tier2(base_flags, space, max_candidates=max_candidates):
        launch(flags)
    algorithms = [v for v in params[_SPECULATIVE].values() if v is not None]
    if best_flags is not None and algorithms:
        tree = [(k, params[k].values()) for k in params if k in speculative and k != _SPECULATIVE]
        spec_base = {**best_flags, _SPECULATIVE: algorithms[0]}
        for flags in auto_benchmark_tier2(spec_base, tree, max_candidates=max_candidates):
            launch(flags)
    del budget
    run.seconds = time.monotonic() - t0
    return run


# ---------------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class Strategy:
    """A search strategy of the table."""

    label: str
    seeded: bool
    run: Callable[[Table, int], Run]


def strategies(cap: int, budget: int) -> list[Strategy]:
    """The strategies compared, in table order."""

    def searcher(kind: str, failure_aware: bool) -> Callable[[Table, int], Run]:
        def go(table: Table, seed: int) -> Run:
            return run_searcher(
                table, kind=kind, seed=seed, failure_aware=failure_aware, cap=cap, budget=budget
            )

        return go

    def auto(max_candidates: int | None) -> Callable[[Table, int], Run]:
        def go(table: Table, seed: int) -> Run:
            del seed
            return run_auto_benchmark(table, max_candidates=max_candidates, budget=budget)

        return go

    return [
        Strategy("TPE, failure-aware (ours)", True, searcher("tpe", True)),
        Strategy("TPE, failures ignored", True, searcher("tpe", False)),
        Strategy("random search", True, searcher("random", True)),
        Strategy("auto_benchmark tier 2", False, auto(None)),
        Strategy("auto_benchmark tier 2, 8/stage", False, auto(_AUTO_BENCH_DEFAULT_MAX)),
    ]


@dataclass
class Cell:
    """A strategy's runs on one table, summarised."""

    label: str
    runs: list[Run]
    cap: int
    budget: int
    seeded: bool

    @property
    def hits(self) -> list[float]:
        return [float(r.hit) if r.hit is not None else math.inf for r in self.runs]

    @property
    def median(self) -> float:
        return statistics.median(self.hits)

    @property
    def worst(self) -> float:
        return max(self.hits)

    def shown(self, value: float) -> str:
        if math.isinf(value):
            plan = max(len(r.failed) for r in self.runs)
            return f"> {self.cap}" if self.seeded else f"never ({plan})"
        return f"{value:g}"

    @property
    def failed_until_hit(self) -> float:
        return statistics.median(r.failed_share(r.hit or len(r.failed)) for r in self.runs)

    @property
    def failed_in_budget(self) -> float:
        return statistics.median(r.failed_share(self.budget) for r in self.runs)

    def best_in_budget(self, table_best: float) -> float:
        """Median over runs of the best value found in the budget, as a share of the best."""
        found = [r.best_after(self.budget) for r in self.runs]
        return statistics.median((v or 0.0) / table_best for v in found)


def _ratio(cell: Cell, random: Cell) -> str:
    if math.isinf(cell.median):
        return "-"
    if math.isinf(random.median):
        return f"< {cell.median / cell.cap:.2f}"
    return f"{cell.median / random.median:.2f}"


def describe_table(table: Table) -> str:
    """The grid in a few lines."""
    spec = table.spec
    modes = Counter(
        r.failure_mode.value
        for r in table.replay.rows.values()
        if r.failure_mode is not FailureMode.NONE
    )
    base_row = table.replay.lookup(baseline_config(spec))
    base = _value(spec, base_row.failure_mode, base_row.metrics) if base_row is not None else None
    expected = math.ceil(math.log(0.5) / math.log(1.0 - table.random_hit))
    shown = ", ".join(f"{k}={v}" for k, v in table.best_config.items())
    return "\n".join(
        [
            f"{table.name} ({spec.node.sim_profile}, SGLang {spec.node.sglang_version}): "
            f"{len(table.replay)} configurations, {table.failing:.1%} failing "
            f"({', '.join(f'{m} {n}' for m, n in modes.most_common())})",
            f"  best {spec.objective.metric} {table.best:.2f} "
            f"(baseline {'-' if base is None else f'{base:.2f}'}): {shown}",
            f"  within 2 %: {table.near} configurations; one uniform draw hits them with "
            f"p = {table.random_hit:.4f} (random search needs {expected} trials at the median)",
        ]
    )


def print_tables(results: Mapping[str, list[Cell]], tables: Mapping[str, Table]) -> None:
    """The results as aligned text."""
    for name, cells in results.items():
        print()
        print(describe_table(tables[name]))
        random = next(c for c in cells if c.label == "random search")
        budget = cells[0].budget
        best = tables[name].best
        print(
            f"  {'strategy':<31} {'median':>8} {'worst':>10} {'÷ random':>9} "
            f"{'failed until 2%':>16} {f'failed of {budget}':>13} {f'best in {budget}':>11} "
            f"{'s/run':>6}"
        )
        for cell in cells:
            print(
                f"  {cell.label:<31} {cell.shown(cell.median):>8} {cell.shown(cell.worst):>10} "
                f"{_ratio(cell, random):>9} {cell.failed_until_hit:>16.0%} "
                f"{cell.failed_in_budget:>13.0%} {cell.best_in_budget(best):>11.1%} "
                f"{statistics.fmean(r.seconds for r in cell.runs):>6.2f}"
            )


def print_markdown(
    results: Mapping[str, list[Cell]], tables: Mapping[str, Table], seeds: int
) -> None:
    """The results as the evidence page's markdown table."""
    budget = next(iter(results.values()))[0].budget
    print()
    print(
        f"| grid | strategy | trials to within 2 % (median / worst of {seeds} seeds) "
        f"| median ÷ random | failed trials until then | failed of the first {budget} "
        f"| best of the first {budget} (median) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, cells in results.items():
        random = next(c for c in cells if c.label == "random search")
        for cell in cells:
            trials = (
                f"{cell.shown(cell.median)} / {cell.shown(cell.worst)}"
                if cell.seeded
                else f"{cell.shown(cell.median)} (deterministic)"
            )
            print(
                f"| {name} | {cell.label} | {trials} | {_ratio(cell, random)} "
                f"| {cell.failed_until_hit:.0%} | {cell.failed_in_budget:.0%} "
                f"| {cell.best_in_budget(tables[name].best):.1%} |"
            )


def check_goals(results: Mapping[str, list[Cell]]) -> list[str]:
    """The issue's goals for our TPE, per grid: one line each, PASS or FAIL."""
    lines = []
    for name, cells in results.items():
        ours, random = cells[0], next(c for c in cells if c.label == "random search")
        ratio = ours.median / random.median if not math.isinf(random.median) else 0.0
        checks = [
            ("median <= 40", ours.median <= 40),
            ("<= 1/3 of random's median", ratio <= 1 / 3),
            (
                "failed share < 25 % (until 2 % and of the budget)",
                ours.failed_until_hit < 0.25 and ours.failed_in_budget < 0.25,
            ),
        ]
        for what, ok in checks:
            lines.append(f"{name}: {'PASS' if ok else 'FAIL'} {what}")
    return lines


# ---------------------------------------------------------------------------------------------
# The family of landscapes (benchmarks/landscapes.py)

#: Trials at which the family's table reads the best-so-far.
FAMILY_BUDGETS = (20, 40, 80)
_ALGO = "speculative-algorithm"


def run_plain_tpe(table: Table, *, seed: int, budget: int) -> Run:
    """Optuna's TPESampler as a user would set it up: defaults, failures as constraints.

    Every proposal is launched (a repeat costs a trial, as it would), a failed trial is told as
    COMPLETE with value 0 and a violated constraint (`Trial.set_constraint`, Optuna 5's way;
    `constraints_func` is deprecated there), so TPE sees it.
    """
    import optuna

    from spec_sweep.search.space import SearchSpace

    spec = table.spec
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(baseline_config(spec))
    space = SearchSpace(spec.params)
    run = Run(hit=None)
    best: float | None = None
    t0 = time.monotonic()
    for _ in range(budget):
        trial = study.ask()
        config = space.sample(trial)
        mode, metrics = _trial(table, config)
        value = _value(spec, mode, metrics)
        trial.set_constraint("failed", 0.0 if value is not None else 1.0)
        study.tell(trial, value if value is not None else 0.0)
        run.failed.append(mode is not FailureMode.NONE)
        run.tried.append(dict(config))
        if value is not None and (best is None or value > best):
            best = value
        run.best.append(best)
        run.configs.append(config if value is not None and value == best else None)
    run.seconds = time.monotonic() - t0
    return run


def _family_strategies() -> list[tuple[str, bool, Callable[[Table, int, int], Run]]]:
    """(label, whether a run depends on its budget, run) per strategy, in table order."""

    def ours(table: Table, seed: int, budget: int) -> Run:
        return _with_budget(table, "tpe", True, seed, budget)

    def rand(table: Table, seed: int, budget: int) -> Run:
        return _with_budget(table, "random", True, seed, budget)

    def plain(table: Table, seed: int, budget: int) -> Run:
        return run_plain_tpe(table, seed=seed, budget=budget)

    def auto(table: Table, seed: int, budget: int) -> Run:
        del seed
        run = run_auto_benchmark(table, max_candidates=None, budget=budget)
        run.best, run.failed = run.best[:budget], run.failed[:budget]
        run.configs = run.configs[:budget]
        return run

    # Only ours reads the budget (its screening design is a quarter of it); the others propose
    # the same sequence whatever the budget, so one run at the largest budget gives them all.
    return [
        ("ours (TPE + SGLang rules + tested models)", True, ours),
        (RANDOM_LABEL, False, rand),
        ("Optuna TPE, constraints (plain)", False, plain),
        ("auto_benchmark tier 2 plan", False, auto),
    ]


RANDOM_LABEL = "random search"


def _with_budget(table: Table, kind: str, aware: bool, seed: int, budget: int) -> Run:
    spec = table.spec.model_copy(
        update={"budget": table.spec.budget.model_copy(update={"trials": budget})}
    )
    sized = replace(table, spec=spec, failing=0.0, near=0, random_hit=0.0)
    return run_searcher(sized, kind=kind, seed=seed, failure_aware=aware, cap=budget, budget=budget)


def _decile(values: Sequence[float]) -> float:
    """The worst decile: the 10th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def table_seed(table: Table) -> int:
    """The node's seed, from its name (`node7`, `b7`)."""
    match = re.search(r"(\d+)$", table.name)
    return int(match.group(1)) if match else 0


@dataclass
class FamilyCell:
    """One strategy's runs over a family set: best/optimum per budget and failing share."""

    label: str
    ratios: dict[int, list[float]] = field(default_factory=dict)
    failed: dict[int, list[float]] = field(default_factory=dict)
    below: dict[int, list[bool]] = field(default_factory=dict)  # under random's median there
    #: With boot noise: the best true value the run measured, over the optimum (what
    #: confirmation boots could at most recover), per budget.
    found: dict[int, list[float]] = field(default_factory=dict)
    missed: int = 0  # runs at 40 whose best was non-speculative while speculation won >= 1.3x
    seconds: float = 0.0
    #: Every run, for `--runs-out`: node, seed, budget, best/optimum and random's median there.
    runs: list[dict[str, Any]] = field(default_factory=list)


def random_medians(
    tables: Sequence[Table], *, budgets: Sequence[int], seeds: int, boot_noise: float = 0.0
) -> dict[str, dict[int, float]]:
    """Per table and budget: the median best/optimum of random search over `seeds` runs.

    The runs' seeds (`1_000_000 + 100 * node seed + k`) are apart from the seed of every
    strategy's own run (the node's seed), so the reference is not the random row's own run.
    With `boot_noise`, random search measures with the same noise and is judged the same way.
    """
    out: dict[str, dict[int, float]] = {}
    top = max(budgets)
    for table in tables:
        base = 1_000_000 + 100 * table_seed(table)
        runs = [
            judged(noisy, _with_budget(noisy, "random", True, base + k, top))
            for k in range(seeds)
            for noisy in [table.noisy(boot_noise, f"{table.name}/random/{base + k}")]
        ]
        out[table.name] = {
            b: statistics.median((r.best_after(b) or 0.0) / table.best for r in runs)
            for b in budgets
        }
    return out


#: Apart from the node's own seed (`table_seed`), a strategy's further runs on a node use these
#: steps (`--search-seeds`); random search's reference runs start at 1,000,000.
SEARCH_SEED_STEP = 1000


def run_family(
    tables: Sequence[Table],
    *,
    budgets: Sequence[int],
    strategies: Sequence[str] | None = None,
    medians: Mapping[str, Mapping[int, float]] | None = None,
    search_seeds: int = 1,
    boot_noise: float = 0.0,
) -> list[FamilyCell]:
    """Every strategy on every table, `search_seeds` runs per table and budget (seeds: the
    table's seed, then + 1000, + 2000, ...).

    With `medians` (random search's median per table and budget, `random_medians`), each cell
    also records which of its runs ended below that median. One run per node is what the
    issue's criterion reads; several show whether a change moved the search or the seed's luck
    (one change of the search moved 45 of the 120 tuning nodes by more than 0.03 at one run each).
    With `boot_noise`, every boot's objective gets a fresh factor (`Table.noisy`) and a run is
    judged by the true value of the configuration it measured best (`judged`).
    """
    cells = []
    top = max(budgets)
    for label, by_budget, go in _family_strategies():
        if strategies is not None and not any(s in label for s in strategies):
            continue
        cell = FamilyCell(label)
        t0 = time.monotonic()
        runs = [
            (table, table_seed(table) + SEARCH_SEED_STEP * k)
            for table in tables
            for k in range(max(1, search_seeds))
        ]
        for table, seed in runs:
            spec_gain = _speculative_gain(table)
            tag = f"{table.name}/{label}/{seed}"
            whole = None if by_budget else _noisy_run(go, table, seed, top, boot_noise, tag)
            for budget in budgets:
                run = (
                    _noisy_run(go, table, seed, budget, boot_noise, tag) if whole is None else whole
                )
                best = run.best_after(budget) or 0.0
                ratio = best / table.best
                cell.ratios.setdefault(budget, []).append(ratio)
                cell.failed.setdefault(budget, []).append(run.failed_share(budget))
                if run.found:
                    reached = run.found[: max(1, budget)][-1] or 0.0
                    cell.found.setdefault(budget, []).append(reached / table.best)
                median = medians[table.name][budget] if medians is not None else None
                if median is not None:
                    cell.below.setdefault(budget, []).append(ratio < median)
                cell.runs.append(
                    {
                        "node": table.name,
                        "seed": seed,
                        "budget": budget,
                        "ratio": ratio,
                        "random": median,
                    }
                )
                if budget == 40 and spec_gain >= 1.3 and _best_is_plain(run, budget):
                    cell.missed += 1
        cell.seconds = time.monotonic() - t0
        cells.append(cell)
    return cells


def _read_runs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare_runs(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Two `--runs-out` files read run for run: a change of the search judged by paired runs.

    The runs are seeded, so the same (family, strategy, node, seed, budget) is the same node
    searched from the same seed; per family and budget: the runs both files hold, the mean
    change of best/optimum with its standard error, how many runs rose or fell by more than
    0.005, and before -> after the median, the worst decile, the runs below random's median
    and those within 1% of the optimum. A paired mean is far less noisy than counts of runs
    below random's median, which a change's luck on two or three runs moves.
    """
    key = ("family", "strategy", "node", "seed", "budget")
    old = {tuple(r[k] for k in key): r for r in before}
    pairs: dict[tuple[str, str, int], list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for run in after:
        match = old.get(tuple(run[k] for k in key))
        if match is not None:
            pairs.setdefault((run["family"], run["strategy"], run["budget"]), []).append(
                (match, run)
            )
    if not pairs:
        return [
            "no run of AFTER has a run of BEFORE with its family, strategy, node, seed and budget"
        ]
    strategies = {strategy for _, strategy, _ in pairs}
    lines = [
        "family budget runs   mean change (se)  rose fell   median before/after  "
        "p10 before/after  <random before/after  within 1% before/after"
    ]
    for (family, strategy, budget), rows in sorted(pairs.items()):
        a = [r["ratio"] for r, _ in rows]
        b = [r["ratio"] for _, r in rows]
        diff = [y - x for x, y in zip(a, b, strict=True)]
        se = statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        lines.append(
            f"{family:>6} {budget:>6} {len(rows):>4} {statistics.fmean(diff):>+9.4f} ({se:.4f})"
            f" {sum(d > 0.005 for d in diff):>5} {sum(d < -0.005 for d in diff):>4}"
            f"   {statistics.median(a):.3f} / {statistics.median(b):.3f}"
            f"      {_decile(a):.3f} / {_decile(b):.3f}"
            f"   {_below_random(r for r, _ in rows):>8} / {_below_random(r for _, r in rows):<8}"
            f"   {sum(x >= 0.99 for x in a):>9} / {sum(x >= 0.99 for x in b)}"
            + (f"   {strategy}" if len(strategies) > 1 else "")
        )
    return lines


def _below_random(runs: Iterable[Mapping[str, Any]]) -> int:
    """How many `--runs-out` runs ended below random search's median on their node."""
    return sum(1 for r in runs if r["random"] is not None and r["ratio"] < r["random"])


def _noisy_run(
    go: Callable[[Table, int, int], Run], table: Table, seed: int, budget: int, sd: float, tag: str
) -> Run:
    """One run of a strategy on `table` with boot noise `sd` (its own stream), judged."""
    noisy = table.noisy(sd, f"{tag}/{budget}")
    return judged(noisy, go(noisy, seed, budget))


def _speculative_gain(table: Table) -> float:
    """Best speculative over best non-speculative configuration of the table."""
    best = {True: 0.0, False: 0.0}
    for row in table.replay.rows.values():
        value = _value(table.spec, row.failure_mode, row.metrics)
        if value is not None:
            key = row.config.get(_ALGO) is not None
            best[key] = max(best[key], value)
    return best[True] / best[False] if best[False] > 0 else math.inf


def _best_is_plain(run: Run, budget: int) -> bool:
    configs = [c for c in run.configs[:budget] if c is not None]
    return bool(configs) and configs[-1].get(_ALGO) is None


def _below(cell: FamilyCell, budget: int) -> str:
    flags = cell.below.get(budget)
    if not flags:
        return "-"
    return f"{sum(flags)}/{len(flags)}"


def print_family(
    name: str, cells: Sequence[FamilyCell], *, count: int, markdown: bool, search_seeds: int = 1
) -> None:
    """The family table: median and worst decile per budget, failing share, below random."""
    budgets = sorted(cells[0].ratios)
    runs = "one run" if search_seeds <= 1 else f"{search_seeds} runs (seeds)"
    print(f"\n{name}: {count} landscapes, {runs} each per budget")
    head = " ".join(f"{f'@{b} med / p10':>15}" for b in budgets)
    below = " ".join(f"{f'<rnd@{b}':>8}" for b in budgets)
    print(f"  {'strategy':<47} {head} {'failed@40':>9} {below} {'plain best':>10} {'s':>6}")
    for cell in cells:
        parts = " ".join(
            f"{statistics.median(cell.ratios[b]):>6.3f} / {_decile(cell.ratios[b]):<6.3f}"
            for b in budgets
        )
        shares = " ".join(f"{_below(cell, b):>8}" for b in budgets)
        failed = statistics.fmean(cell.failed.get(40, [0.0]))
        print(
            f"  {cell.label:<47} {parts} {failed:>9.0%} {shares} {cell.missed:>10} "
            f"{cell.seconds:>6.0f}"
        )
        if cell.found:
            measured = " ".join(
                f"{statistics.median(cell.found[b]):>6.3f} / {_decile(cell.found[b]):<6.3f}"
                for b in budgets
            )
            print(f"  {'  its best measured, true value':<47} {measured}")
    if markdown:
        print_family_markdown({name: cells})


def print_family_markdown(families: Mapping[str, Sequence[FamilyCell]]) -> None:
    """The evidence page's table: each strategy with one row per family, side by side."""
    first = next(iter(families.values()))
    budgets = sorted(first[0].ratios)
    cols = " | ".join(f"at {b} (median / worst decile)" for b in budgets)
    below = " | ".join(f"below random's median at {b}" for b in budgets)
    print(
        f"\n| strategy | family | {cols} | failing trials (of 40) | {below} "
        "| plain reported, spec >= 1.3x |"
    )
    print("|---|---|" + "---:|" * (2 * len(budgets) + 2))
    for i, cell in enumerate(first):
        for family, cells in families.items():
            row = cells[i]
            parts = " | ".join(
                f"{statistics.median(row.ratios[b]):.3f} / {_decile(row.ratios[b]):.3f}"
                for b in budgets
            )
            shares = " | ".join(
                f"{sum(row.below[b]) / len(row.below[b]):.0%} ({sum(row.below[b])})"
                if row.below.get(b)
                else "-"
                for b in budgets
            )
            failed = statistics.fmean(row.failed.get(40, [0.0]))
            print(f"| {cell.label} | {family} | {parts} | {failed:.0%} | {shares} | {row.missed} |")


def family_goals(cells: Sequence[FamilyCell], *, search_seeds: int = 1) -> list[str]:
    """The issue's acceptance on a family set, for our searcher (with several runs per node,
    the 'below random' line counts runs)."""
    unit = "nodes" if search_seeds <= 1 else f"runs ({search_seeds} per node)"
    ours = cells[0]
    checks = []
    if 40 in ours.ratios:  # `--budgets` without 40 reads none of the 40-trial lines
        checks += [
            ("median best/optimum at 40 >= 0.95", statistics.median(ours.ratios[40]) >= 0.95),
            ("worst decile at 40 >= 0.85", _decile(ours.ratios[40]) >= 0.85),
            ("failing share at 40 <= 25%", statistics.fmean(ours.failed[40]) <= 0.25),
            ("never non-speculative best when speculation wins >= 1.3x", ours.missed == 0),
        ]
    if 20 in ours.ratios:
        checks.append(
            ("median best/optimum at 20 >= 0.90", statistics.median(ours.ratios[20]) >= 0.90)
        )
    for budget in sorted(ours.below):
        flags = ours.below[budget]
        if flags:
            checks.append(
                (
                    f"never below random search's median at {budget} (below on {sum(flags)} "
                    f"of {len(flags)} {unit})",
                    not any(flags),
                )
            )
    return [f"{'PASS' if ok else 'FAIL'} {what}" for what, ok in checks]


#: The landscape families: A (`landscapes.py`) and B (`landscapes_specbundle.py`).
FAMILIES: dict[str, Any] = {"a": landscapes, "b": landscapes_specbundle}


def _source_digest(path: Path) -> str:
    """What a generator's output depends on: its source file, every file of this repository it
    imports (transitively, packages' `__init__` included) and the data under `benchmarks/data`."""
    seen: set[Path] = set()
    todo = [path.resolve()]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for node in ast.walk(ast.parse(current.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    base = ROOT.joinpath(*parts[:i])
                    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                        if candidate.is_file():
                            todo.append(candidate.resolve())
                local = ROOT / "benchmarks" / f"{name}.py"
                if local.is_file():
                    todo.append(local)
    files = sorted(seen) + sorted((ROOT / "benchmarks" / "data").rglob("*"))
    digest = hashlib.sha256()
    for file in files:
        if file.is_file():
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def family_tables(
    seeds: Sequence[int],
    folder: Path,
    *,
    family: str = "a",
    descriptions: dict[str, str] | None = None,
    cache: Path | None = None,
) -> list[Table]:
    """The landscapes of these seeds of one family as tables (and their one-line descriptions).

    With `cache`, each landscape is kept there under a digest of its generator's sources
    (`_source_digest`) and read back while they are unchanged (a family of 40 nodes takes
    about two minutes to generate)."""
    module = FAMILIES[family]
    digest = _source_digest(Path(module.__file__)) if cache is not None else ""
    out = []
    for seed in seeds:
        path = None if cache is None else cache / f"family-{family}-{seed}-{digest}.pkl"
        if path is not None and path.is_file():
            with path.open("rb") as f:
                name, spec, replay, description = pickle.load(f)  # written below, by this function
        else:
            land = module.build(seed, folder)
            name, spec, replay = land.name, land.spec, land.table
            description = module.describe(land)
            if path is not None:
                partial = path.with_suffix(".part")
                with partial.open("wb") as f:
                    pickle.dump((name, spec, replay, description), f)
                partial.replace(path)
        out.append(table_from(name, spec, replay))
        if descriptions is not None:
            descriptions[name] = description
    return out


def print_per_node(
    tables: Sequence[Table],
    cells: Sequence[FamilyCell],
    medians: Mapping[str, Mapping[int, float]] | None,
    descriptions: Mapping[str, str],
) -> None:
    """Per node: every strategy's best/optimum per budget, random's median, the node."""
    budgets = sorted(cells[0].ratios)
    for i, table in enumerate(tables):
        runs = "  ".join(
            f"{cell.label.split(' (')[0].split(',')[0]}: "
            + "/".join(f"{cell.ratios[b][i]:.3f}" for b in budgets)
            for cell in cells
        )
        ref = "" if medians is None else "/".join(f"{medians[table.name][b]:.3f}" for b in budgets)
        print(f"  {table.name}: {runs}  random median: {ref}")
        print(f"    {descriptions.get(table.name, '')}")


def _families(args: argparse.Namespace) -> None:
    """The family tables (`--family` other than none), each family in turn."""
    t0 = time.monotonic()
    results: dict[str, list[FamilyCell]] = {}
    for name in args.families:
        module = FAMILIES[name]
        seeds = {
            "test": module.TEST_SEEDS,
            "tuning": module.TUNING_SEEDS,
            "tuning-extra": module.EXTRA_TUNING_SEEDS,
            "validation": module.VALIDATION_SEEDS,
        }[args.family]
        if args.landscapes:
            seeds = tuple(s for s in landscapes.parse_seeds(args.landscapes) if s in seeds)
        t1 = time.monotonic()
        descriptions: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            family = family_tables(
                seeds, Path(tmp), family=name, descriptions=descriptions, cache=args.cache
            )
        print(
            f"family {name.upper()}: generated {len(family)} landscapes "
            f"({time.monotonic() - t1:.0f} s)",
            flush=True,
        )
        medians = None
        if args.random_seeds:
            t2 = time.monotonic()
            medians = random_medians(
                family, budgets=args.budgets, seeds=args.random_seeds, boot_noise=args.boot_noise
            )
            print(
                f"family {name.upper()}: random search's median over {args.random_seeds} "
                f"runs per node ({time.monotonic() - t2:.0f} s)",
                flush=True,
            )
        cells = run_family(
            family,
            budgets=args.budgets,
            strategies=args.only,
            medians=medians,
            search_seeds=args.search_seeds,
            boot_noise=args.boot_noise,
        )
        label = f"family {name.upper()} ({module.__name__}.py), {args.family} set"
        print_family(
            label, cells, count=len(family), markdown=False, search_seeds=args.search_seeds
        )
        if args.per_node:
            print_per_node(family, cells, medians, descriptions)
        for line in family_goals(cells, search_seeds=args.search_seeds):
            print(f"family {name.upper()} {args.family}: {line}")
        print(f"family {name.upper()}: {time.monotonic() - t1:.0f} s", flush=True)
        results[f"{name.upper()}"] = cells
        if args.runs_out is not None:
            with args.runs_out.open("a") as out:
                for cell in cells:
                    for run in cell.runs:
                        row = {"family": name.upper(), "strategy": cell.label} | run
                        out.write(json.dumps(row) + "\n")
    if args.markdown:
        print_family_markdown(results)
    print(f"Total {time.monotonic() - t0:.0f} s.")


def main(argv: Sequence[str] | None = None) -> int:
    """`search_efficiency.py [--seeds 10] [--cap 300] [--budget 40] [--validate N]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--family",
        choices=["test", "tuning", "tuning-extra", "validation", "none"],
        default="test",
        help="seed set of the landscape families (report on test; tune on tuning and "
        "tuning-extra, seeds 20-59; check a change on validation, seeds 200-239, before it is "
        "kept)",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        choices=sorted(FAMILIES),
        default=sorted(FAMILIES),
        help="a = benchmarks/landscapes.py, b = benchmarks/landscapes_specbundle.py (both)",
    )
    parser.add_argument("--landscapes", help="only these seeds of the set, e.g. 100-109")
    parser.add_argument(
        "--budgets",
        nargs="+",
        type=int,
        default=list(FAMILY_BUDGETS),
        help="trials at which the family tables read the best (default 20 40 80)",
    )
    parser.add_argument(
        "--random-seeds",
        type=int,
        default=20,
        metavar="N",
        help="random-search runs per node for its median (0: no 'below random' column)",
    )
    parser.add_argument(
        "--search-seeds",
        type=int,
        default=1,
        metavar="K",
        help="runs per node of each seeded strategy in the family tables (seeds node, +1000, "
        "...); medians, deciles and 'below random' then count runs, not nodes (judge a change "
        "of the search on 3 or more)",
    )
    parser.add_argument(
        "--boot-noise",
        type=float,
        default=0.0,
        metavar="SD",
        help="family tables: each boot's objective times exp(N(0, SD)), fresh per trial, and a "
        "run judged by the true value of the configuration it measured best (0.2: the real "
        "H200 table's between-boot sd)",
    )
    parser.add_argument("--only", nargs="+", help="only strategies whose label has these words")
    parser.add_argument(
        "--per-node",
        action="store_true",
        help="also each node: every strategy's best/optimum per budget, random's median",
    )
    parser.add_argument(
        "--grids", nargs="*", choices=sorted(GRIDS), default=[], help="also the simulator grids"
    )
    parser.add_argument("--seeds", type=int, default=10, help="runs per seeded strategy")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first run")
    parser.add_argument("--cap", type=int, default=300, help="most trials per run")
    parser.add_argument("--budget", type=int, default=40, help="trials the failure share counts")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "spec_sweep_grids",
        help="where the generated replay tables and family landscapes are kept",
    )
    parser.add_argument(
        "--validate",
        type=int,
        default=0,
        metavar="N",
        help="first run N configurations of each grid through the real trial path",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="also print the evidence page's markdown table"
    )
    parser.add_argument(
        "--runs-out",
        type=Path,
        metavar="FILE",
        help="append every family run (node, seed, budget, best/optimum, random's median) to "
        "FILE as JSON lines, for --compare",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="only compare two --runs-out files run for run (the same nodes and seeds) and exit",
    )
    args = parser.parse_args(argv)
    if args.compare:
        before, after = args.compare
        for path in (before, after):
            if not path.is_file():
                parser.error(f"--compare {path}: no such file; write one with --runs-out {path}")
        for line in compare_runs(_read_runs(before), _read_runs(after)):
            print(line)
        return 0
    if args.search_seeds > 1 and args.per_node:
        parser.error("--per-node reads one run per node: leave out --search-seeds")
    if args.boot_noise < 0 or (args.boot_noise > 0 and args.family == "none"):
        parser.error(
            f"--boot-noise {args.boot_noise}: a log-sd >= 0, read by the family tables only "
            "(leave it out with --family none)"
        )
    logging.getLogger("ray").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    args.cache.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    ok = True
    if args.family != "none":
        _families(args)
    if not args.grids:
        return 0
    tables = {name: load_table(name, GRIDS[name], args.cache) for name in args.grids}
    validated = True
    if args.validate:
        for table in tables.values():
            rows = [
                sim_grid.GridRow(row.config, row.failure_mode, "", row.metrics)
                for row in table.replay.rows.values()
            ]
            validated = sim_grid.validate(table.spec, rows, args.validate) and validated
    results: dict[str, list[Cell]] = {}
    for name, table in tables.items():
        cells = []
        for strategy in strategies(args.cap, args.budget):
            first = args.first_seed
            seeds = range(first, first + args.seeds) if strategy.seeded else range(1)
            runs = [strategy.run(table, seed) for seed in seeds]
            cells.append(Cell(strategy.label, runs, args.cap, args.budget, strategy.seeded))
        results[name] = cells
    print_tables(results, tables)
    if args.markdown:
        print_markdown(results, tables, args.seeds)
    print()
    for line in check_goals(results):
        print(line)
    last = args.first_seed + args.seeds - 1
    print(
        f"\n{args.seeds} seeds per seeded strategy ({args.first_seed}..{last}), cap {args.cap} "
        f"trials; the auto_benchmark plan is deterministic (one run). "
        f"Total {time.monotonic() - t0:.0f} s."
    )
    return 0 if validated and ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
