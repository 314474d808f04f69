"""Node-hours to a confirmed answer with two fidelities: boots that load no weights, then few real.

A real boot of a large model spends most of its time loading weights (`node_hours.py`'s boot
model: ~252 s of weights for Kimi-K2.5 from local NVMe against 60 s of measuring). SGLang boots
any model with `--load-format dummy` (and a draft with `--speculative-draft-load-format dummy`):
random weights of the real shapes, allocated but not read from disk. Such a boot shows whether a
configuration boots (OOM at both ends, rejected trees, assertions, unsupported backends) and
what a decode cycle costs, but not how much a speculative tree accepts: random weights accept
nothing. This benchmark measures, in simulation only, what a sweep built on that split would
cost and find, beside `node_hours.py`'s strategies run in the same process:

* **today's defaults** and **new defaults**: `node_hours.TODAY` and `node_hours.NEW` unchanged
  (every boot loads its weights).
* **two fidelities**: the sweep's own searcher (`SweepSearcher`, the same 40 trials, SGLang's
  memory rule as in the new defaults) with every search trial booted with dummy weights (boot
  cost: start-up, distributed init, allocating random weights `--dummy-alloc` seconds, KV pool,
  CUDA graphs, measuring, teardown; a failure stops where SGLang stops, without the weight load).
  A dummy boot yields the failure mode and the cycle cost `accept / (throughput / concurrency)`
  (`real_fidelity.cycle_cost`); the acceptance comes from real boots, per tree and draft model
  (`tree_of`): the first `--accept-boots` distinct trees whose dummy boot came up are booted
  again with real weights, which measures their accept length (and their throughput); after
  that, up to `--accept-cap` trees in all, a tree whose predicted throughput is within
  `--accept-margin` of the best predicted so far. A tree never booted for real gets its accept
  length from `search.spec_model.SpecModel` fitted on the really-measured EAGLE trees of the
  same draft model (of any, while that one has none; an NGRAM size from the measured NGRAM ones).
  The searcher is told the predicted throughput `concurrency x accept / cycle`
  (`real_fidelity.predicted_throughput`). After the search, the top `--promote` configurations
  by predicted throughput are booted with real weights, then `core.confirm.plan` and
  `core.verdict` run on the real boots only: the recommendation is always a configuration
  measured with real weights.

The truths are the landscapes' tables (family A `landscapes.py`, family B
`landscapes_specbundle.py`, test seeds 100-139) and the real replay table
(`benchmarks/real/table-0.5.17/rows.csv`, SGLang 0.5.17 on an H200, objective
`output_throughput_c1`, one run per searcher seed; the boot model scaled to a large model, 590 GB
of weights over 61 layers, as the write-up's node).

In the simulation a dummy boot behaves as the GPU check measured it (`scripts/real_fidelity.py`
on an H100, `benchmarks/real/fidelity-0.5.17`, at concurrency 1): its failure mode is the real
one (13 of 13 agreed), and the throughput predicted from it (its decode cycle and first-token
time with the real acceptance) is the real one times a per-configuration factor drawn with
`--cycle-error` (log-sd; 0.011 by default, the check's prediction error at c1: median 0.7%,
max 2.8%), on top of the same run-to-run noise as a real boot. Nothing here booted SGLang.

A seed **counts** when the true value of the confirmed recommendation is >= 0.95 of the table's
optimum. The line this strategy has to meet (issue "Half the node-hours"): >= 9 of 10 seeds
counting, with <= 0.5x the node-hours today's defaults spend to their own answer (total over the
seeds, and the median of the per-seed ratios, both printed).

Run: `.venv/bin/python benchmarks/two_fidelity.py` (both families' 40 test seeds and 10 seeds on
the real table, about 6 minutes on the 2-core development machine); `--quick` (5 seeds per
family, 3 on the real table, under a minute) for a smoke run; `--family tuning` for the seeds
the settings were chosen on; `--families a`, `--seeds 100-109`, `--real-seeds 3`, `--no-real`;
the strategy's settings: `--trials`, `--accept-boots`, `--accept-cap`, `--accept-margin`,
`--promote`, `--dummy-alloc`, `--dummy-measure`, `--cycle-error`. Results:
docs/evidence/two-fidelity.md.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import landscapes  # noqa: E402
import node_hours as nh  # noqa: E402
import real_table  # noqa: E402
import search_efficiency as se  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from real_fidelity import cycle_cost, predicted_throughput  # noqa: E402

from spec_sweep.core import confirm, verdict  # noqa: E402
from spec_sweep.core.config import baseline_config  # noqa: E402
from spec_sweep.core.history import History  # noqa: E402
from spec_sweep.core.hours import node_hours  # noqa: E402
from spec_sweep.core.names import AVAIL_METRIC, TAG_PREDICTED, WEIGHTS_METRIC  # noqa: E402
from spec_sweep.core.outcome import FailureMode  # noqa: E402
from spec_sweep.core.record import TrialRecord  # noqa: E402
from spec_sweep.search.fidelity import Acceptance, Tree, tree_of  # noqa: E402
from spec_sweep.search.searcher import SweepSearcher  # noqa: E402
from spec_sweep.spec_load import load_spec  # noqa: E402
from spec_sweep.store.replay import load_replay  # noqa: E402

GOOD = 0.95  # a seed counts when its recommendation is >= this share of the optimum
LINE_SHARE = 0.9  # >= 9 of 10 seeds
LINE_HOURS = 0.5  # <= 0.5x today's node-hours
REAL_ROWS = ROOT / "benchmarks" / "real" / "table-0.5.17" / "rows.csv"
REAL_SPEC = ROOT / "sweeps" / "real_table_smollm2.yaml"
TAG_FIDELITY = "spec_sweep.fidelity"


# ---------------------------------------------------------------------------------------------
# Trees and their acceptance: `search.fidelity.tree_of` and `Acceptance` (the product's own)


# ---------------------------------------------------------------------------------------------
# Nodes: the landscapes' and the real table's


def real_node(folder: Path) -> nh.Node:
    """The real table as a node: SGLang 0.5.17's measured answers, a large model's boots."""
    spec = load_spec(REAL_SPEC)
    spec = spec.model_copy(
        update={
            "objective": spec.objective.model_copy(update={"metric": "output_throughput_c1"}),
            "budget": spec.budget.model_copy(update={"trials": 40}),
            "searcher": spec.searcher.model_copy(update={"kind": "tpe"}),
        }
    )
    replay, _ = real_table.complete(spec, load_replay(REAL_ROWS, spec))
    table = se.table_from("real", spec, replay)
    # 141 GB free and the 135M model's 0.27 GB: the memory rule predicts nothing on this node;
    # the boots are timed as the write-up's large model (590 GB over 8 GPUs, 61 layers).
    return nh.Node("real", "real", table, nh.BootModel(weights_gb=590.0), 141.0, 0.27)


def _concurrency(node: nh.Node) -> int:
    metric = node.spec.objective.metric
    if "_c" in metric and metric.rsplit("_c", 1)[1].isdigit():
        return int(metric.rsplit("_c", 1)[1])
    return int(node.spec.workload.concurrency[0])


def _accept_metric(metric: str) -> str:
    return metric.replace("output_throughput", "accept_length")


class DummyBench(nh.Bench):
    """Boots with dummy weights: no weight load (`client_load_s` is the random allocation)."""

    def client(self, config: Mapping[str, Any]) -> bool:
        return True

    def measure(self, trial_id: str, config: Mapping[str, Any]) -> TrialRecord:
        record = super().measure(trial_id, config)
        if record.failure_mode is not FailureMode.INVALID_ARGS:  # the log shows the memory
            record.metrics[AVAIL_METRIC] = self.node.gpu_gb
            record.metrics[WEIGHTS_METRIC] = self.node.weights_per_gpu
        record.tags[TAG_FIDELITY] = "dummy"
        return record


# ---------------------------------------------------------------------------------------------
# The strategy


@dataclass(frozen=True)
class TwoFidelity:
    """The two-fidelity strategy's settings (see the module doc)."""

    label: str = "two fidelities"
    accept_boots: int = 4
    accept_cap: int = 10
    accept_margin: float = 0.9
    promote: int = 3
    dummy_alloc_s: float = 5.0
    dummy_measure_s: float = 20.0
    cycle_error: float = 0.011
    budget: Mapping[str, Any] = field(default_factory=lambda: dict(nh.NEW.budget))


def _error(seed: int, key: str, sd: float) -> float:
    if sd <= 0:
        return 1.0
    return math.exp(random.Random(f"{seed}/{key}/cycle").gauss(0.0, sd))


def _needs_acceptance(
    tree: Tree | None, guess: float, best: float, acceptance: Acceptance, settings: TwoFidelity
) -> bool:
    """Whether a tree whose dummy boot came up gets a real boot for its acceptance: the first
    `accept_boots` trees, then (up to `accept_cap` trees) those whose predicted throughput
    with the fitted law's acceptance is within `accept_margin` of the best predicted so far."""
    if tree is None or acceptance.known(tree):
        return False
    count = len(acceptance.measured)
    if count < settings.accept_boots:
        return True
    return count < settings.accept_cap and guess >= settings.accept_margin * best


def run_two_fidelity(
    node: nh.Node, settings: TwoFidelity, *, seed: int, noise: float
) -> nh.Outcome:
    """Dummy boots for the search, real boots for acceptance, the top and confirmation."""
    base = node.spec
    spec = base.model_copy(
        update={
            "budget": base.budget.model_copy(update=dict(settings.budget)),
            "searcher": base.searcher.model_copy(update={"seed": seed}),
        }
    )
    plan = nh.BootPlan(jit_first=False, weight_cache=False)
    dummy_node = replace(
        node,
        boot=replace(
            node.boot, client_load_s=settings.dummy_alloc_s, measure_s=settings.dummy_measure_s
        ),
    )
    real = nh.Bench(node, seed, spec, noise, plan)
    dummy = DummyBench(dummy_node, seed, spec, noise, plan)
    metric = spec.objective.metric
    accept_key = _accept_metric(metric)
    level = _concurrency(node)
    searcher = SweepSearcher(
        spec, history=[], requeue=[("t0000", baseline_config(spec), 1)], next_index=1
    )
    acceptance = Acceptance()
    dummies: list[TrialRecord] = []
    reals: list[TrialRecord] = []
    cycles: dict[str, tuple[float, Tree | None]] = {}  # trial id -> (dummy cycle, tree)
    best = 0.0  # the best predicted throughput so far
    for i in range(spec.budget.trials):
        proposal = searcher.suggest(f"tune{i}")
        if proposal is None:
            break
        config = dict(proposal.config)
        if proposal.predicted:
            record = real.predicted(proposal.trial_id, config, proposal.predicted)
            dummies.append(record)
            searcher.complete(f"tune{i}", {"failure_mode": FailureMode.OOM.value})
            continue
        record = dummy.measure(proposal.trial_id, config)
        dummies.append(record)
        mode = record.failure_mode or FailureMode.NONE
        report: dict[str, Any] = {"failure_mode": mode.value, **record.metrics}
        if mode is FailureMode.NONE and metric in record.metrics:
            tree = tree_of(config)
            true_accept = record.metrics.get(accept_key, 1.0) if tree is not None else 1.0
            # the dummy boot's cycle: the real one, times the fidelity's own error
            cycle = cycle_cost(record.metrics[metric], level, true_accept)
            cycle *= _error(seed, proposal.trial_id, settings.cycle_error)
            cycles[proposal.trial_id] = (cycle, tree)
            guess = predicted_throughput(
                acceptance.length(tree) if tree is not None else 1.0, cycle, level
            )
            if tree is not None and _needs_acceptance(tree, guess, best, acceptance, settings):
                measured = real.measure(proposal.trial_id, config)
                measured.tags[TAG_FIDELITY] = "real (acceptance)"
                reals.append(measured)
                if measured.failure_mode is FailureMode.NONE and accept_key in measured.metrics:
                    acceptance.add(tree, measured.metrics[accept_key])
            accept = acceptance.length(tree) if tree is not None else 1.0
            value = predicted_throughput(accept, cycle, level)
            best = max(best, value)
            record.metrics[metric] = value
            for side in ("_ci_low", "_ci_high"):
                record.metrics.pop(metric + side, None)
            if tree is not None:
                record.metrics[accept_key] = accept
            report = {"failure_mode": "none", **record.metrics}
        searcher.complete(f"tune{i}", report)
    trials = len(dummies)
    reals += _promote(real, dummies, cycles, acceptance, reals, settings.promote, level)
    search_reals = len(reals)
    while boots := confirm.plan(History(spec, reals)):
        reals += [real.measure(b.trial_id, dict(b.config)) for b in boots]
    history = History(spec, reals)
    judged = verdict.verdict(history)
    pick = judged.recommended.config if judged and judged.recommended else None
    if pick is None and history.best is not None:
        pick = history.best.config
    hours = node_hours(history).total + node_hours(History(spec, dummies)).total
    predicted = sum(1 for r in dummies if TAG_PREDICTED in r.tags)
    return nh.Outcome(
        truth=real.truth(pick) if pick is not None else None,
        hours=hours,
        trials=trials,
        boots=len(reals) + len(dummies) - predicted,
        predicted=predicted,
        confirm_boots=len(reals) - search_reals,
        records=dummies + reals,
    )


def _promote(
    real: nh.Bench,
    dummies: Sequence[TrialRecord],
    cycles: Mapping[str, tuple[float, Tree | None]],
    acceptance: Acceptance,
    reals: Sequence[TrialRecord],
    count: int,
    level: int,
) -> list[TrialRecord]:
    """Real boots of the top `count` distinct configurations by predicted throughput (with
    every acceptance measured by now), those not booted for real already."""
    ranked: list[tuple[float, TrialRecord]] = []
    for record in dummies:
        if record.trial_id not in cycles:
            continue
        cycle, tree = cycles[record.trial_id]
        accept = acceptance.length(tree) if tree is not None else 1.0
        ranked.append((predicted_throughput(accept, cycle, level), record))
    ranked.sort(key=lambda vr: -vr[0])
    done = {r.trial_id for r in reals}
    seen: set[str] = set()
    out: list[TrialRecord] = []
    for _, record in ranked:
        if len(seen) >= count:
            break
        key = str(sorted(record.config.items()))
        if key in seen:
            continue
        seen.add(key)
        if record.trial_id not in done:
            promoted = real.measure(record.trial_id, dict(record.config))
            promoted.tags[TAG_FIDELITY] = "real (promoted)"
            out.append(promoted)
            done.add(record.trial_id)
    return out


# ---------------------------------------------------------------------------------------------
# Report


@dataclass
class Cell:
    """One strategy over the seeds of one set."""

    label: str
    truths: list[float | None] = field(default_factory=list)
    optima: list[float] = field(default_factory=list)
    hours: list[float] = field(default_factory=list)
    real_boots: list[int] = field(default_factory=list)
    dummy_boots: list[int] = field(default_factory=list)
    dummy_hours: list[float] = field(default_factory=list)

    def add(self, outcome: nh.Outcome, optimum: float, spec: Any) -> None:
        self.truths.append(outcome.truth)
        self.optima.append(optimum)
        self.hours.append(outcome.hours)
        dummies = [r for r in outcome.records if r.tags.get(TAG_FIDELITY) == "dummy"]
        self.dummy_boots.append(len(dummies))
        self.real_boots.append(outcome.boots - len(dummies))
        self.dummy_hours.append(node_hours(History(spec, dummies)).total if dummies else 0.0)

    def good(self) -> int:
        return sum(
            1
            for t, best in zip(self.truths, self.optima, strict=True)
            if t is not None and t >= GOOD * best
        )

    def ratio(self, today: Cell) -> tuple[float, float]:
        """(total hours / today's total, median of the per-seed ratios)."""
        total = sum(self.hours) / sum(today.hours)
        per = statistics.median(h / b for h, b in zip(self.hours, today.hours, strict=True))
        return total, per


def run_set(
    name: str,
    nodes: Sequence[tuple[nh.Node, int]],
    strategies: Sequence[Any],
    *,
    noise: float,
    log: Callable[[str], None],
) -> list[Cell]:
    """Every strategy on every (node, searcher seed)."""
    cells = [Cell(s.label) for s in strategies]
    for node, seed in nodes:
        t0 = time.monotonic()
        parts = []
        for strategy, cell in zip(strategies, cells, strict=True):
            if isinstance(strategy, TwoFidelity):
                outcome = run_two_fidelity(node, strategy, seed=seed, noise=noise)
            else:
                outcome = nh.run_sweep(node, strategy, seed=seed, noise=noise)
            cell.add(outcome, node.table.best, node.spec)
            share = (outcome.truth or 0.0) / node.table.best
            parts.append(f"{strategy.label} {outcome.hours:.1f} h {share:.3f}")
        log(f"{name} {node.name} seed {seed}: {', '.join(parts)} [{time.monotonic() - t0:.0f} s]")
    return cells


def table_lines(name: str, cells: Sequence[Cell]) -> list[str]:
    """The markdown table of one set (the first cell is today's defaults)."""
    today = cells[0]
    n = len(today.truths)
    lines = [
        f"\n{name} ({n} seeds)",
        "| strategy | >= 0.95 of the optimum | node-hours, total | node-hours, median | vs today "
        "(total / median of per-seed ratios) | real boots (mean) | dummy boots (mean) | "
        "dummy boots alone vs today (total) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in cells:
        total, per = cell.ratio(today)
        floor = f"{sum(cell.dummy_hours) / sum(today.hours):.2f}" if any(cell.dummy_hours) else "-"
        lines.append(
            f"| {cell.label} | {cell.good()}/{n} ({cell.good() / n:.0%}) | {sum(cell.hours):.1f} | "
            f"{statistics.median(cell.hours):.2f} | {total:.2f} / {per:.2f} | "
            f"{statistics.fmean(cell.real_boots):.1f} | {statistics.fmean(cell.dummy_boots):.1f} | "
            f"{floor} |"
        )
    return lines


def line_verdict(cell: Cell, today: Cell) -> str:
    """Whether `cell` meets the line (>= 90% of seeds >= 0.95, <= 0.5x today's node-hours)."""
    n = len(cell.truths)
    share = cell.good() / n
    total, per = cell.ratio(today)
    ok_share, ok_hours = share >= LINE_SHARE, max(total, per) <= LINE_HOURS
    verdict_text = "MET" if ok_share and ok_hours else "NOT MET"
    parts = [f"{cell.good()}/{n} = {share:.0%} >= 0.95 (line 90%)"]
    parts.append(f"node-hours {total:.2f}x total, {per:.2f}x median (line 0.50x)")
    today_share = today.good() / n
    return f"{cell.label}: {verdict_text}: {'; '.join(parts)}; today's own {today_share:.0%}"


def main(argv: Sequence[str] | None = None) -> int:
    """`two_fidelity.py [--quick] [--families a b] [--seeds 100-109] [--real-seeds N]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=["a", "b"], default=["a", "b"])
    parser.add_argument("--seeds", help="only these test seeds, e.g. 100-109")
    parser.add_argument(
        "--real-seeds", type=int, default=10, help="searcher seeds on the real table"
    )
    parser.add_argument("--no-real", action="store_true", help="skip the real table")
    parser.add_argument("--quick", action="store_true", help="5 seeds per family, 3 on the real")
    parser.add_argument("--noise", type=float, default=0.02, help="run-to-run sd per boot")
    parser.add_argument("--accept-boots", type=int, default=4, help="trees booted for acceptance")
    parser.add_argument(
        "--accept-cap", type=int, default=10, help="trees booted for acceptance, at most"
    )
    parser.add_argument(
        "--accept-margin",
        type=float,
        default=0.9,
        help="after --accept-boots, a tree within this share of the best predicted is measured",
    )
    parser.add_argument("--trials", type=int, default=40, help="search trials (dummy boots)")
    parser.add_argument("--promote", type=int, default=3, help="top predicted booted for real")
    parser.add_argument(
        "--dummy-alloc", type=float, default=5.0, help="s to allocate dummy weights"
    )
    parser.add_argument(
        "--dummy-measure", type=float, default=20.0, help="s of benchmark per dummy boot"
    )
    parser.add_argument("--family", choices=["test", "tuning"], default="test")
    parser.add_argument("--cycle-error", type=float, default=0.011, help="dummy prediction log-sd")
    parser.add_argument("--quiet", action="store_true", help="no line per seed")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials {args.trials}: give 1 or more")
    for name in ("accept_boots", "accept_cap", "promote"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give 0 or more")
    for name in ("dummy_alloc", "dummy_measure", "cycle_error", "noise"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give 0 or more")
    logging.getLogger("optuna").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    t0 = time.monotonic()
    pool = landscapes.TEST_SEEDS if args.family == "test" else landscapes.TUNING_SEEDS
    seeds: Sequence[int] = pool
    if args.seeds:
        seeds = [s for s in landscapes.parse_seeds(args.seeds) if s in pool]
    real_seeds = args.real_seeds
    if args.quick:
        seeds, real_seeds = list(seeds)[:5], min(real_seeds, 3)
    two = TwoFidelity(
        accept_boots=args.accept_boots,
        accept_cap=max(args.accept_cap, args.accept_boots),
        accept_margin=args.accept_margin,
        promote=args.promote,
        dummy_alloc_s=args.dummy_alloc,
        dummy_measure_s=args.dummy_measure,
        budget={**nh.NEW.budget, "trials": args.trials},
        cycle_error=args.cycle_error,
    )
    strategies = [nh.TODAY, nh.NEW, two]

    def log(text: str) -> None:
        if not args.quiet:
            print(text, flush=True)

    out: list[str] = []
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        sets: list[tuple[str, list[tuple[nh.Node, int]]]] = []
        for family in args.families:
            nodes = nh.family_nodes(family, seeds, Path(tmp))
            sets.append(
                (
                    f"family {family.upper()}, {args.family} seeds",
                    [(n, se.table_seed(n.table)) for n in nodes],
                )
            )
        if not args.no_real and real_seeds > 0:
            node = real_node(Path(tmp))
            sets.append(("real table 0.5.17 (c1)", [(node, s) for s in range(real_seeds)]))
        for name, runs in sets:
            cells = run_set(name, runs, strategies, noise=args.noise, log=log)
            out += table_lines(name, cells)
            verdicts.append(f"{name}: {line_verdict(cells[-1], cells[0])}")
    print("\n".join(out))
    print("\nthe line (>= 9 of 10 seeds >= 0.95 with <= 0.5x today's node-hours):")
    for text in verdicts:
        print(f"  {text}")
    print(
        f"\nsettings: accept boots {two.accept_boots} (at most {two.accept_cap}, margin "
        f"{two.accept_margin}), trials {args.trials}, promote {two.promote}, dummy allocation "
        f"{two.dummy_alloc_s} s, dummy measuring {two.dummy_measure_s} s, "
        f"cycle error {two.cycle_error}, noise {args.noise}; "
        f"{time.monotonic() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = ["Acceptance", "TwoFidelity", "main", "run_two_fidelity", "tree_of"]
