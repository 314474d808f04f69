"""Node-hours to a confirmed answer: today's defaults against the new ones, on both families.

A user pays for node-hours, and on a real node nearly all of them are boots. Per landscape
(`benchmarks/landscapes.py`, family A; `benchmarks/landscapes_specbundle.py`, family B; test
seeds 100-139, tuning seeds 0-19) this runs whole sweeps without Ray, as `noise.py` does: the
sweep's own searcher (`SweepSearcher`), the landscape's value of each configuration as the
truth, a fresh run-to-run draw per boot (`--noise`, 2%), a 95% within-boot interval around
each measurement, then the confirmation boots `core.confirm.plan` asks for, batch by batch, and
`core.verdict` (the recommended configuration is what the summary prints as the launch
command). Every boot gets a wall time from the boot model below; the sweep's node-hours are
`core.hours.node_hours` of its records, the product's own accounting.

Strategies:

* **today**: the defaults before this change: `budget.trials` 40 (the landscapes' spec),
  confirmation of the top 3 with 3 fresh boots each and up to 6 while tied, the baseline once
  more; every boot loads its weights from disk; the first boot of the sweep pays the JIT
  compile (caches not pinned: a fresh container).
* **new defaults**: what changed by default: SGLang's memory rule before each launch
  (`core.memory`; the facts come from the baseline's log: the node's GPU memory and the
  landscape's weights per GPU), confirmation with 2 fresh boots each before judging and up to 4
  while undecided, compile caches pinned (no JIT: warm from an earlier sweep on the node); the
  search still spends its 40 trials.
* **+ until: converged** (opt-in, `budget.until: converged`, `patience` 15): the search stops
  once converged, 40 trials at most.
* **+ node.weight_cache** (opt-in, off by default): the same with SGLang's weight-cache daemon:
  after the baseline, the daemon loads the weights once, and every non-speculative trial on the
  baseline's parallel layout boots as its client.
* **auto_benchmark**: SGLang's `auto_benchmark` tier-2 plan (`search_efficiency.py`), every
  candidate booted once, the best single measurement as the answer, no confirmation.
* **two fidelities** (`benchmarks/two_fidelity.py`, beside today's and the new defaults): the
  search on boots that load no weights (`--load-format dummy`), acceptance and the top from
  real boots; its own script, which reuses this one's boot model, nodes and sweeps.
* **hand campaign** (`--campaign`, the write-up's node, `benchmarks/grids/pcie.yaml`): the
  configurations the write-up's campaign booted by hand (/work/shared/background, "The Moment
  of Reckoning"), each booted once, the best measured as the answer, against ours on that grid.

**The boot model** (seconds; the real boots of docs/evidence/real-gpus.md, scaled to a large model;
every phase but the untimed start-up drawn with the boot-to-boot spread of one configuration booted
again, CV 4%: 51.85 / 51.93 s on 0.5.17, 53.7 / 54.7 / 58.5 s on 0.5.13):

* untimed start-up (imports, tokenizer, spawning schedulers, HTTP server, warm-up): 45.5 s with
  a CV of 14%, the median and spread of `boot_other_s` over the real table's 52 boots that came
  up (benchmarks/real/table-0.5.17/rows.csv: SGLang 0.5.17 on the H200, 35.9-59.7 s; the first
  estimate, one baseline boot's 51.85 s minus the 2.51 s SGLang timed, was 49.3 s); not bound
  to model size; up to ~40 s of it is Python importing SGLang's modules, ~20 s in the server
  process and again in the scheduler it spawns (`-X importtime` on the H200 machine,
  2026-12-03, benchmarks/real/2026-12-03/);
* distributed init: 15 s (0.5.13 on 2 x H200: 13.7-15.0 s; 0.02 s on one GPU);
* weights: the node's weights (family A: its share of a 141 GB GPU x 8; family B: its model's
  bytes) at 2.34 GB/s from local NVMe, the simulated PCIe profile's 252 s for Kimi-K2.5's ~590
  GB (the 135M's 0.2 s comes from the page cache and says nothing about a disk); a weight-cache
  client: 5 s (ASSUMED for a large model: mapping the daemon's weights over CUDA IPC took 0.04 s
  for the 135M checkpoint's 184 tensors on the H200, SGLang 0.5.17, 2026-12-02, against 0.23 s
  from disk; the mapping grows with the number of tensors, not their bytes);
* KV allocation 1.1 s (0.5.17 NGRAM: 1.12 s);
* CUDA graphs: 0.0125 s per layer and captured batch size (0.5.17: 2.25 s for 30 layers and 6
  sizes), 61 layers (family B: its model's), SGLang's capture list up to
  `cuda-graph-max-bs`, x4 with speculative decoding (0.5.13 EAGLE-3: 6.1 s against 1.54 s);
* JIT on the first boot of a sweep without pinned caches: 62.5 s (0.5.17's first boot captured
  its decode graphs in 64.70 s, later boots in 2.25 s);
* measuring 60 s (a minute of benchmark), teardown 10 s (0.5.17 matrix: trial minus boot
  minus benchmark);
* failed boots stop where SGLang stops: `invalid_args` at argument parsing (21.8 s, 0.5.17's
  NGRAM page-size refusal), a low-end OOM after the weights (0.5.17's: 48.3 s of a 51.9 s
  boot), a high-end OOM, `crash`, `assertion`, `unsupported` and `nccl` half-way through the
  capture; each then 10 s of teardown.

A seed **counts** when the sweep's recommended configuration's true value is within 1% of the
landscape's optimum ("opt"); since no search reaches the optimum on every node in 40 trials
(docs/evidence/search-efficiency.md), also when it is within 1% of what today's sweep recommends on
that node or better ("today's answer"). Hours: the median over seeds and the total.

Run: `.venv/bin/python benchmarks/node_hours.py --markdown` (both families' test seeds, about
4 minutes on the 2-core development machine on 2026-12-01, 7 on 2026-12-03); `--family tuning`
for the seeds the settings were chosen on; `--families a`, `--seeds 100-109`; `--campaign` for
the write-up's node.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
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
import search_efficiency as se  # noqa: E402

from spec_sweep.core import confirm, verdict  # noqa: E402
from spec_sweep.core.config import baseline_config, normalize_config  # noqa: E402
from spec_sweep.core.history import History  # noqa: E402
from spec_sweep.core.hours import node_hours  # noqa: E402
from spec_sweep.core.names import (  # noqa: E402
    AVAIL_METRIC,
    MEASURE_METRIC,
    TAG_PREDICTED,
    WEIGHTS_METRIC,
    boot_metric,
)
from spec_sweep.core.outcome import FailureMode  # noqa: E402
from spec_sweep.core.record import TrialRecord  # noqa: E402
from spec_sweep.search.searcher import SweepSearcher  # noqa: E402
from spec_sweep.spec import SweepSpec  # noqa: E402

WITHIN = 0.01
_ALGO = "speculative-algorithm"
_MEM = "mem-fraction-static"


# ---------------------------------------------------------------------------------------------
# The boot model


@dataclass(frozen=True)
class BootModel:
    """Seconds of one boot's phases on one landscape's node (see the module doc)."""

    weights_gb: float  # the whole model's weights (all GPUs)
    layers: int = 61
    other_s: float = 45.5
    other_spread: float = 0.14
    init_s: float = 15.0
    load_gbps: float = 2.34
    kv_s: float = 1.1
    graph_s: float = 0.0125  # per layer and captured size
    spec_graphs: float = 4.0
    jit_s: float = 62.5
    measure_s: float = 60.0
    teardown_s: float = 10.0
    invalid_s: float = 21.8
    client_load_s: float = 5.0
    spread: float = 0.04

    @property
    def load_s(self) -> float:
        return self.weights_gb / self.load_gbps


def capture_sizes(max_bs: int) -> int:
    """How many batch sizes SGLang captures up to `max_bs` (1, 2, 4, 8, then every 8 to 256,
    every 16 above): the length of its default capture list."""
    small = sum(1 for b in (1, 2, 4) if b <= max_bs)
    return small + min(max_bs, 256) // 8 + max(0, max_bs - 256) // 16


def _graph_bs(config: Mapping[str, Any]) -> int:
    for key, value in config.items():
        if key.startswith("cuda-graph-max-bs") and isinstance(value, int):
            return value
    return 160


@dataclass(frozen=True)
class BootPlan:
    """How boots are paid for in one strategy."""

    jit_first: bool  # the first boot compiles kernels (caches not pinned)
    weight_cache: bool  # non-speculative trials on the baseline's layout boot as clients


def boot_record_parts(
    model: BootModel,
    config: Mapping[str, Any],
    mode: FailureMode,
    *,
    low_end: bool,
    client: bool,
    jit: bool,
    rng: random.Random,
) -> tuple[float, dict[str, float]]:
    """(elapsed seconds, metrics) of one boot: the phases it reached, `boot_s` and `measure_s`
    when it came up."""

    def draw(seconds: float, spread: float = model.spread) -> float:
        return seconds * max(0.5, rng.gauss(1.0, spread))

    if mode is FailureMode.INVALID_ARGS:
        return draw(model.invalid_s) + model.teardown_s, {}
    phases = {
        "other": draw(model.other_s, model.other_spread),
        "init": draw(model.init_s),
        "load_weight": draw(model.client_load_s if client else model.load_s),
        "kv_cache": draw(model.kv_s),
    }
    sizes = capture_sizes(_graph_bs(config))
    graphs = model.graph_s * model.layers * sizes
    if config.get(_ALGO) is not None:
        graphs *= model.spec_graphs
    graphs = draw(graphs) + (model.jit_s if jit else 0.0)
    metrics = {boot_metric(k): round(v, 3) for k, v in phases.items() if k != "other"}
    if mode is FailureMode.OOM and low_end:
        return sum(phases.values()) + model.teardown_s, metrics
    if mode is not FailureMode.NONE:
        metrics[boot_metric("cuda_graph")] = round(graphs / 2, 3)
        return sum(phases.values()) + graphs / 2 + model.teardown_s, metrics
    phases["cuda_graph"] = graphs
    boot = sum(phases.values())
    metrics |= {boot_metric("cuda_graph"): round(graphs, 3), boot_metric("other"): phases["other"]}
    metrics |= {"boot_s": boot, MEASURE_METRIC: model.measure_s}
    return boot + model.measure_s + model.teardown_s, metrics


# ---------------------------------------------------------------------------------------------
# One landscape


@dataclass
class Node:
    """A landscape with what the benchmark needs of it."""

    family: str
    name: str
    table: se.Table
    boot: BootModel
    gpu_gb: float  # GPU memory free before the weights load (the memory rule's `pre`)
    weights_per_gpu: float  # GB

    @property
    def spec(self) -> SweepSpec:
        return self.table.spec


def node_of(family: str, land: Any) -> Node:
    """The benchmark's view of a generated landscape."""
    table = se.table_from(land.name, land.spec, land.table)
    if family == "a":
        gpu = 141.0  # an H200's memory; family A sizes memory as shares of one GPU
        per_gpu = land.node.weights * gpu
        boot = BootModel(weights_gb=per_gpu * 8)
    else:
        phys = land.node.phys
        gpu, per_gpu = phys.hw.mem_gb, phys.weights_gb
        boot = BootModel(weights_gb=per_gpu * 8, layers=phys.model.layers)
    return Node(family, land.name, table, boot, gpu, per_gpu)


def _draw(seed: int, trial_id: str, sd: float) -> float:
    digest = hashlib.sha256(f"{seed}/{trial_id}".encode()).hexdigest()
    return max(0.0, random.Random(int(digest[:16], 16)).gauss(1.0, sd))


@dataclass
class Bench:
    """Boots one landscape's configurations: outcome from the table, noise per boot, time."""

    node: Node
    seed: int
    spec: SweepSpec
    noise: float
    plan: BootPlan
    clock: int = 0
    booted: int = 0

    def truth(self, config: Mapping[str, Any]) -> float | None:
        mode, metrics = se._trial(self.node.table, config)
        return se._value(self.spec, mode, metrics)

    def client(self, config: Mapping[str, Any]) -> bool:
        if not self.plan.weight_cache or self.booted == 0:
            return False  # the baseline boots from disk: the daemon starts after it
        base = baseline_config(self.spec)
        same_layout = config.get("ep-size", 1) == base.get("ep-size", 1)
        return config.get(_ALGO) is None and same_layout

    def measure(self, trial_id: str, config: Mapping[str, Any]) -> TrialRecord:
        mode, metrics = se._trial(self.node.table, config)
        metric = self.spec.objective.metric
        rng = random.Random(f"{self.seed}/{trial_id}/boot")
        base_mem = baseline_config(self.spec).get(_MEM)
        low_end = isinstance(base_mem, float) and float(config.get(_MEM, base_mem)) < base_mem
        elapsed, timing = boot_record_parts(
            self.node.boot,
            config,
            mode,
            low_end=low_end,
            client=self.client(config),
            jit=self.plan.jit_first and self.booted == 0,
            rng=rng,
        )
        self.booted += 1
        out = dict(timing)
        if mode is not FailureMode.INVALID_ARGS and not self.client(config):
            out |= {AVAIL_METRIC: self.node.gpu_gb, WEIGHTS_METRIC: self.node.weights_per_gpu}
        if mode is FailureMode.NONE and metric in metrics:
            value = metrics[metric] * _draw(self.seed, trial_id, self.noise)
            half = random.Random(f"{self.seed}/{trial_id}/ci").uniform(0.005, 0.02)
            out |= {k: v for k, v in metrics.items() if k != metric}
            out |= {
                metric: value,
                f"{metric}_ci_low": value * (1 - half),
                f"{metric}_ci_high": value * (1 + half),
            }
        self.clock += 1
        return TrialRecord(
            run_id=f"run-{trial_id}",
            trial_id=trial_id,
            status="FINISHED",
            config=normalize_config(self.spec, config),
            failure_mode=mode,
            metrics=out,
            elapsed_s=elapsed,
            start_time=self.clock,
        )

    def predicted(self, trial_id: str, config: Mapping[str, Any], why: str) -> TrialRecord:
        mode, _ = se._trial(self.node.table, config)
        if mode is not FailureMode.OOM:  # the rule must never predict a boot that works
            raise AssertionError(f"{self.node.name}: predicted {config} boots ({mode.value})")
        self.clock += 1
        return TrialRecord(
            run_id=f"run-{trial_id}",
            trial_id=trial_id,
            status="FINISHED",
            config=normalize_config(self.spec, config),
            failure_mode=FailureMode.OOM,
            reason=why,
            elapsed_s=0.0,
            start_time=self.clock,
            tags={TAG_PREDICTED: "sglang memory rule"},
        )


# ---------------------------------------------------------------------------------------------
# Strategies


@dataclass(frozen=True)
class Settings:
    """A strategy that runs the sweep's own searcher and confirmation."""

    label: str
    budget: dict[str, Any]
    plan: BootPlan
    memory_rule: bool


TODAY = Settings(
    "today's defaults",
    {
        "trials": 40,
        "until": "trials",
        "confirm": 3,
        "confirm_repeats": 3,
        "confirm_max_repeats": 6,
        "remeasure_baseline": True,
    },
    BootPlan(jit_first=True, weight_cache=False),
    memory_rule=False,
)
NEW = Settings(
    "new defaults",
    {
        "trials": 40,
        "until": "trials",
        "confirm": 3,
        "confirm_repeats": 2,
        "confirm_max_repeats": 4,
        "remeasure_baseline": True,
    },
    BootPlan(jit_first=False, weight_cache=False),
    memory_rule=True,
)
CONVERGED = replace(
    NEW,
    label="new + until: converged",
    budget={**NEW.budget, "until": "converged", "patience": 15},
)
NEW_CACHE = replace(
    CONVERGED,
    label="new + until: converged + node.weight_cache",
    plan=BootPlan(jit_first=False, weight_cache=True),
)
AUTO_LABEL = "auto_benchmark tier-2 plan"


@dataclass
class Outcome:
    """One strategy's sweep on one landscape."""

    truth: float | None  # true value of the recommended configuration
    hours: float
    trials: int
    boots: int
    predicted: int
    confirm_boots: int
    records: list[TrialRecord] = field(default_factory=list)


def run_sweep(node: Node, settings: Settings, *, seed: int, noise: float) -> Outcome:
    """The sweep's own searcher and confirmation on one landscape (see the module doc)."""
    base = node.spec
    spec = base.model_copy(
        update={
            "budget": base.budget.model_copy(update=settings.budget),
            "searcher": base.searcher.model_copy(update={"seed": seed}),
        }
    )
    bench = Bench(node, seed, spec, noise, settings.plan)
    searcher = SweepSearcher(
        spec, history=[], requeue=[("t0000", baseline_config(spec), 1)], next_index=1
    )
    records: list[TrialRecord] = []
    for i in range(spec.budget.trials):
        proposal = searcher.suggest(f"tune{i}")
        if proposal is None:
            break
        config = dict(proposal.config)
        if proposal.predicted and settings.memory_rule:
            record = bench.predicted(proposal.trial_id, config, proposal.predicted)
        else:
            record = bench.measure(proposal.trial_id, config)
        records.append(record)
        report = {"failure_mode": record.failure_mode.value, **record.metrics}
        if not settings.memory_rule:  # today: no memory facts reach the searcher
            report = {k: v for k, v in report.items() if k not in (AVAIL_METRIC, WEIGHTS_METRIC)}
        searcher.complete(f"tune{i}", report)
    trials = len(records)
    while boots := confirm.plan(History(spec, records)):
        records += [bench.measure(b.trial_id, dict(b.config)) for b in boots]
    history = History(spec, records)
    judged = verdict.verdict(history)
    pick = judged.recommended.config if judged and judged.recommended else None
    if pick is None and history.best is not None:
        pick = history.best.config
    hours = node_hours(history).total
    if settings.plan.weight_cache and bench.booted > 1:
        # the daemon: started once after the baseline, loading the weights from disk
        hours += (node.boot.other_s + node.boot.init_s + node.boot.load_s) / 3600.0
    predicted = sum(1 for r in records if TAG_PREDICTED in r.tags)
    return Outcome(
        truth=bench.truth(pick) if pick is not None else None,
        hours=hours,
        trials=trials,
        boots=len(records) - predicted,
        predicted=predicted,
        confirm_boots=len(records) - trials,
        records=records,
    )


def run_auto_benchmark(node: Node, *, seed: int, noise: float) -> Outcome:
    """SGLang auto_benchmark's tier-2 plan: every candidate booted once, best measured wins."""
    bench = Bench(node, seed, node.spec, noise, BootPlan(jit_first=True, weight_cache=False))
    records = [bench.measure(f"a{i:04d}", c) for i, c in enumerate(_auto_configs(node))]
    history = History(node.spec, records)
    best = history.best
    return Outcome(
        truth=bench.truth(best.config) if best is not None else None,
        hours=node_hours(history).total,
        trials=len(records),
        boots=len(records),
        predicted=0,
        confirm_boots=0,
        records=records,
    )


def _auto_configs(node: Node) -> list[dict[str, Any]]:
    """The configurations the auto_benchmark plan launches, in order (as search_efficiency)."""
    launched: list[dict[str, Any]] = []
    original = se._trial

    def spy(table: se.Table, config: Mapping[str, Any]) -> tuple[FailureMode, dict[str, float]]:
        launched.append(dict(config))
        return original(table, config)

    se._trial = spy  # type: ignore[assignment]
    try:
        se.run_auto_benchmark(node.table, max_candidates=None, budget=0)
    finally:
        se._trial = original  # type: ignore[assignment]
    return launched


# ---------------------------------------------------------------------------------------------
# The write-up's hand campaign (benchmarks/grids/pcie.yaml)

#: What the write-up's campaign booted by hand on the PCIe node, in order (its text: the
#: baseline at 82 tok/s, --cuda-graph-max-bs 128 at 89.5, EAGLE-3 at ~53 and 54.1 with
#: --cuda-graph-max-bs 128 --mem-fraction-static 0.88, then FlashInfer all-reduce fusion, NCCL
#: Tree, torch symmetric memory, expert parallelism with FlashInfer's all-to-all, each a dead
#: end, and "different step counts, different top-k values"). A reconstruction: the text names
#: the experiments, not every launch.
CAMPAIGN: tuple[dict[str, Any], ...] = (
    {},
    {"cuda-graph-max-bs": 128},
    {_ALGO: "EAGLE3"},
    {_ALGO: "EAGLE3", "enable-flashinfer-allreduce-fusion": True},
    {_ALGO: "EAGLE3", "env.NCCL_ALGO": "Tree"},
    {_ALGO: "EAGLE3", "enable-torch-symm-mem": True},
    {_ALGO: "EAGLE3", "ep-size": 8, "moe-a2a-backend": "flashinfer"},
    {_ALGO: "EAGLE3", "ep-size": 8},
    {_ALGO: "EAGLE3", "speculative-num-steps": 2, "speculative-num-draft-tokens": 2},
    {
        _ALGO: "EAGLE3",
        "speculative-num-steps": 5,
        "speculative-num-draft-tokens": 8,
        "speculative-eagle-topk": 2,
    },
    {_ALGO: "EAGLE3", "cuda-graph-max-bs": 128},
)


def run_campaign(node: Node, *, seed: int, noise: float) -> Outcome:
    """The hand campaign: each experiment booted once, the best measured kept."""
    spec = node.spec
    base = baseline_config(spec)
    bench = Bench(node, seed, spec, noise, BootPlan(jit_first=True, weight_cache=False))
    records = []
    for i, change in enumerate(CAMPAIGN):
        config = se._resolve(spec, {**base, **change})
        records.append(bench.measure(f"h{i:04d}", config))
    history = History(spec, records)
    best = history.best
    return Outcome(
        truth=bench.truth(best.config) if best is not None else None,
        hours=node_hours(history).total,
        trials=len(records),
        boots=len(records),
        predicted=0,
        confirm_boots=0,
        records=records,
    )


# ---------------------------------------------------------------------------------------------
# Report


@dataclass
class Row:
    """One strategy over a set of landscapes."""

    label: str
    outcomes: list[Outcome] = field(default_factory=list)
    optima: list[float] = field(default_factory=list)
    today: list[float | None] = field(default_factory=list)  # today's recommended truth

    def hits(self) -> int:
        return sum(
            1
            for o, best in zip(self.outcomes, self.optima, strict=True)
            if o.truth is not None and o.truth >= best * (1 - WITHIN)
        )

    def as_good_as_today(self) -> int:
        return sum(
            1
            for o, t in zip(self.outcomes, self.today, strict=True)
            if o.truth is not None and (t is None or o.truth >= t * (1 - WITHIN))
        )

    def hours(self) -> list[float]:
        return [o.hours for o in self.outcomes]


def run_family(
    nodes: Sequence[Node], *, noise: float, strategies: Sequence[str], log: Callable[[str], None]
) -> list[Row]:
    """Every strategy on every landscape (the searcher's seed is the node's seed)."""
    table: dict[str, Settings | None] = {
        "today": TODAY,
        "new": NEW,
        "converged": CONVERGED,
        "cache": NEW_CACHE,
        "auto": None,
        **VARIANTS,
    }
    rows = [Row(AUTO_LABEL if table[k] is None else table[k].label) for k in strategies]  # type: ignore[union-attr]
    for node in nodes:
        seed = se.table_seed(node.table)
        t0 = time.monotonic()
        found: dict[str, Outcome] = {}
        for key, row in zip(strategies, rows, strict=True):
            chosen = table[key]
            if chosen is None:
                outcome = run_auto_benchmark(node, seed=seed, noise=noise)
            else:
                outcome = run_sweep(node, chosen, seed=seed, noise=noise)
            found[key] = outcome
            row.outcomes.append(outcome)
            row.optima.append(node.table.best)
        today = found.get("today")
        for row in rows:
            row.today.append(today.truth if today is not None else None)
        parts = ", ".join(
            f"{k} {o.hours:.1f} h ({o.trials}+{o.confirm_boots}, "
            f"{(o.truth or 0) / node.table.best:.3f})"
            for k, o in found.items()
        )
        log(f"{node.name}: {parts} [{time.monotonic() - t0:.0f} s]")
    return rows


def _fmt_row(row: Row, base: Row | None) -> str:
    n = len(row.outcomes)
    hours = row.hours()
    ratio = ""
    if base is not None:
        total = sum(hours) / sum(base.hours())
        per = statistics.median(h / b for h, b in zip(hours, base.hours(), strict=True))
        ratio = f"{total:.2f} / {per:.2f}"
    boots = statistics.mean(o.boots for o in row.outcomes)
    predicted = sum(o.predicted for o in row.outcomes)
    trials = statistics.mean(o.trials for o in row.outcomes)
    confirm_boots = statistics.mean(o.confirm_boots for o in row.outcomes)
    return (
        f"| {row.label} | {row.hits()}/{n} | {row.as_good_as_today()}/{n} | "
        f"{statistics.median(hours):.2f} | {sum(hours):.0f} | {ratio} | {trials:.1f} | "
        f"{confirm_boots:.1f} | {boots:.1f} | {predicted} |"
    )


def print_rows(name: str, rows: Sequence[Row]) -> None:
    """The markdown table of one family."""
    print(f"\n{name}")
    print(
        "| strategy | recommended within 1% of the optimum | as good as today's answer "
        "(within 1%) | node-hours, median | node-hours, total | vs today (total / median "
        "of per-node ratios) | search trials (mean) | confirmation boots (mean) | boots "
        "(mean) | boots avoided (memory rule, total) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = rows[0] if rows and rows[0].label == TODAY.label else None
    for row in rows:
        print(_fmt_row(row, base if row is not base else None))


def family_nodes(family: str, seeds: Sequence[int], folder: Path) -> list[Node]:
    """The landscapes of one family as benchmark nodes."""
    module = se.FAMILIES[family]
    return [node_of(family, module.build(seed, folder)) for seed in seeds]


def campaign(noise: float, seeds: int) -> None:
    """The hand campaign against ours on the write-up's node (the PCIe grid)."""
    cache = Path(tempfile.gettempdir()) / "spec_sweep_grids"
    cache.mkdir(parents=True, exist_ok=True)
    table = se.load_table("pcie", se.GRIDS["pcie"], cache)
    node = Node("pcie", "pcie", table, BootModel(weights_gb=590.0), 94.93 + 0.5, 73.23)
    rows = [Row("hand campaign (the write-up)"), Row(TODAY.label), Row(NEW.label)]
    for seed in range(seeds):
        outcomes = [
            run_campaign(node, seed=seed, noise=noise),
            run_sweep(node, TODAY, seed=seed, noise=noise),
            run_sweep(node, NEW, seed=seed, noise=noise),
        ]
        for row, outcome in zip(rows, outcomes, strict=True):
            row.outcomes.append(outcome)
            row.optima.append(table.best)
            row.today.append(outcomes[1].truth)
    print_rows(f"the write-up's node (PCIe grid, {seeds} seeds)", [rows[1], rows[2], rows[0]])


def _tune(args: argparse.Namespace) -> list[str]:
    """Apply the tuning options to the new defaults (tune on tuning seeds only); returns the
    strategies to run (one `new` row per patience given)."""
    global NEW, CONVERGED, NEW_CACHE
    given = {
        "confirm": args.confirm,
        "confirm_repeats": args.repeats,
        "confirm_max_repeats": args.max_repeats,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    if changes:
        NEW = replace(NEW, budget={**NEW.budget, **changes})
        CONVERGED = replace(CONVERGED, budget={**CONVERGED.budget, **changes})
        NEW_CACHE = replace(NEW_CACHE, budget={**NEW_CACHE.budget, **changes})
        print(f"new defaults changed for tuning: {changes}")
    strategies = list(args.strategies)
    for patience in args.patience or []:
        key = f"new-p{patience}"
        VARIANTS[key] = replace(
            CONVERGED,
            label=f"new + until: converged, patience {patience}",
            budget={**CONVERGED.budget, "patience": patience},
        )
        strategies.insert(strategies.index("new") + 1 if "new" in strategies else 1, key)
    return strategies


#: Tuning variants of the new defaults (`--patience`).
VARIANTS: dict[str, Settings] = {}


def main(argv: Sequence[str] | None = None) -> int:
    """`node_hours.py [--family test|tuning] [--families a b] [--seeds 100-109] [--campaign]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=["test", "tuning"], default="test")
    parser.add_argument("--families", nargs="+", choices=["a", "b"], default=["a", "b"])
    parser.add_argument("--seeds", help="only these seeds of the set, e.g. 100-109")
    parser.add_argument("--noise", type=float, default=0.02, help="run-to-run sd per boot")
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["today", "new", "converged", "cache", "auto"],
        choices=["today", "new", "converged", "cache", "auto"],
    )
    parser.add_argument(
        "--campaign",
        type=int,
        default=0,
        metavar="SEEDS",
        help="also the write-up's node: the hand campaign against ours",
    )
    parser.add_argument("--markdown", action="store_true", help="(tables are markdown)")
    parser.add_argument(
        "--patience",
        type=int,
        nargs="+",
        help="tuning: the new defaults' patience (several: a row each)",
    )
    parser.add_argument("--confirm", type=int, help="tuning: the new defaults' confirm")
    parser.add_argument("--repeats", type=int, help="tuning: the new confirm_repeats")
    parser.add_argument("--max-repeats", type=int, help="tuning: the new confirm_max_repeats")
    parser.add_argument("--quiet", action="store_true", help="no line per node")
    args = parser.parse_args(argv)
    logging.getLogger("optuna").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    t0 = time.monotonic()
    seeds = landscapes.TEST_SEEDS if args.family == "test" else landscapes.TUNING_SEEDS
    if args.seeds:
        seeds = tuple(s for s in landscapes.parse_seeds(args.seeds) if s in seeds)

    def log(text: str) -> None:
        if not args.quiet:
            print(text, flush=True)

    strategies = _tune(args)
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            nodes = family_nodes(family, seeds, Path(tmp))
            rows = run_family(nodes, noise=args.noise, strategies=strategies, log=log)
            print_rows(f"family {family.upper()}, {args.family} seeds ({len(nodes)})", rows)
    if args.campaign:
        campaign(args.noise, args.campaign)
    print(f"\n{time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = ["BootModel", "boot_record_parts", "capture_sizes", "main", "run_sweep"]
