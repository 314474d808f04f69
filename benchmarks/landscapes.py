"""A family of random, physically plausible node landscapes, as replay tables.

One seed is one node: an 8-GPU server (NVLink or PCIe, a dense or MoE model, a concurrency)
with a search space over the knobs a sweep tunes, and the outcome of every configuration of
that space, from a small model of what decides it:

* **speculative decoding** (EAGLE-3): acceptance per draft depth (a first-depth rate that
  decays with depth) and per top-k (each extra candidate at a depth raises its acceptance by a
  node-specific gain; the draft tokens fill depths first, then widen them, as SGLang's
  `organize_draft_results` keeps the best-scored candidates); a cycle is `steps` draft steps
  (each dearer with top-k), one verify forward whose compute grows with the `concurrency x
  draft tokens` it scores, one draft extend and a fixed overhead;
* **communication**: all-reduces per step, their latency and bandwidth terms per NCCL
  algorithm (NVLS only on NVLink: unsupported on PCIe), FlashInfer all-reduce fusion (faster on
  NVLink; unsupported on some PCIe nodes), expert parallelism and its all-to-all backend
  (DeepEP, FlashInfer) on MoE models;
* **CUDA graphs**: a step replays a graph only while its batch of tokens (`concurrency`, times
  the draft tokens when speculating) fits the captured size (`cuda-graph-max-bs`), else it runs
  eagerly, 1.3-2.2x slower: a cliff;
* **memory**: weights, the draft model, activations, graph memory (grows with the captured size
  and the draft tokens), the DeepEP workspace: too low a `mem-fraction-static` leaves no room for
  the KV cache of `concurrency` requests, too high leaves no room for the rest: OOM at both ends;
* **SGLang's tree rules** (`spec_sweep.tree_rules`, read from SGLang's sources): rejected trees
  fail as SGLang fails them (`invalid_args` for argument errors, `crash` for the draft worker's
  `torch.topk` error), top-k 1 rewrites the draft tokens;
* **interaction failures**: on some nodes DeepEP asserts with top-k >= 4 trees, FlashInfer's
  all-to-all crashes with all-reduce fusion;
* **measurement noise**: each configuration's throughput is recorded with a seeded 0-3 % error.

The optimum lies sometimes in the non-speculative branch (high concurrency, poor acceptance),
sometimes in chains (top-k 1), sometimes in wide trees. Seeds 0-19 are the TUNING set (the
search's settings were chosen on them, with the two simulator grids of `benchmarks/grids/`,
which are members of the family too: `search_efficiency.py --family tuning`), seeds 100-139 the
TEST set (reported only: `--family test`).

Run: `.venv/bin/python benchmarks/landscapes.py 7 /tmp/node7.csv` writes seed 7's spec
(`/tmp/node7.yaml`) and its whole table in the replay-table format (`spec-sweep run
/tmp/node7.yaml --replay /tmp/node7.csv` replays it); `--describe 0-19` prints the nodes.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spec_sweep.failures import FailureMode  # noqa: E402
from spec_sweep.replay import ReplayRow, ReplayTable  # noqa: E402
from spec_sweep.report import export_columns, write_csv  # noqa: E402
from spec_sweep.space import Config, config_key, is_active, ordered_keys  # noqa: E402
from spec_sweep.spec import SweepSpec, load_spec  # noqa: E402
from spec_sweep.tree_rules import check_tree  # noqa: E402

TUNING_SEEDS = tuple(range(20))
TEST_SEEDS = tuple(range(100, 140))

_ALGO = "speculative-algorithm"
_STEPS = "speculative-num-steps"
_TOPK = "speculative-eagle-topk"
_DRAFT = "speculative-num-draft-tokens"
_NCCL = "env.NCCL_ALGO"


@dataclass
class Node:
    """The physics of one node (all times in ms, memory as a share of one GPU's memory)."""

    seed: int
    nvlink: bool
    moe: bool
    version: str
    concurrency: int
    decode_ms: float  # compute of one decode step at batch 1
    per_token: float  # extra compute per extra token while memory-bound (share of decode_ms)
    knee: float  # tokens per forward where compute stops being memory-bound
    ar_count: int
    ar_lat_ms: float
    ar_bw_ms: float  # per token
    algo_lat: dict[str, float]
    algo_bw: dict[str, float]
    fusion: float | None  # all-reduce time factor with fusion (None: unsupported)
    ep_compute: float
    a2a: dict[str, float | None]  # step time factor per all-to-all backend (None: fails)
    deepep_topk_assert: bool
    fi_a2a_fusion_crash: bool
    attention: dict[str, float]
    eager: float
    eager_ms: float
    draft_ms: float
    topk_cost: float
    extend_ms: float
    spec_overhead_ms: float
    accept1: float
    decay: float
    width_gain: float
    weights: float
    draft_weights: float
    kv_per_request: float
    activations: float
    graph_per_token: float
    deepep_workspace: float
    noise: float
    space: dict[str, dict[str, Any]] = field(default_factory=dict)


def draw_node(seed: int) -> Node:
    """The node of one seed."""
    rng = random.Random(f"landscape:{seed}")
    nvlink = rng.random() < 0.6
    moe = rng.random() < 0.65
    concurrency = rng.choice([1, 1, 2, 4, 4, 8, 16, 32, 64])
    lat = rng.uniform(0.008, 0.016) if nvlink else rng.uniform(0.025, 0.06)
    algos = ["Ring", "Tree"] + (["NVLS"] if nvlink else [])
    algo_lat = {"auto": 1.0, "Ring": rng.uniform(0.9, 1.5), "Tree": rng.uniform(0.65, 1.35)}
    algo_bw = {"auto": 1.0, "Ring": rng.uniform(0.8, 1.1), "Tree": rng.uniform(0.9, 1.6)}
    if nvlink:
        algo_lat["NVLS"] = rng.uniform(0.45, 0.95)
        algo_bw["NVLS"] = rng.uniform(0.6, 1.0)
    fusion: float | None
    if nvlink:
        fusion = rng.uniform(0.55, 0.9)
    else:
        fusion = rng.uniform(0.8, 1.0) if rng.random() < 0.5 else None
    a2a: dict[str, float | None] = {
        "none": rng.uniform(1.0, 1.25),
        "deepep": rng.uniform(0.8, 1.1),
        "flashinfer": rng.uniform(0.75, 1.05) if (nvlink or rng.random() < 0.4) else None,
    }
    attention = {"auto": 1.0, "flashinfer": rng.uniform(0.93, 1.08)}
    if rng.random() < 0.6:
        attention["trtllm_mha"] = rng.uniform(0.82, 0.98)
    decode_ms = rng.uniform(7.0, 32.0)
    weights = rng.uniform(0.38, 0.68)
    graph_values = sorted(rng.sample([8, 16, 32, 64, 128, 256, 512], 4))
    steps = sorted(rng.sample([1, 2, 3, 4, 5, 6, 7, 8], 5))
    drafts = sorted(rng.sample([2, 3, 4, 6, 8, 10, 12, 16], 5))
    mems = sorted(rng.sample([0.7, 0.74, 0.78, 0.82, 0.85, 0.88, 0.9, 0.93], 4))
    node = Node(
        seed=seed,
        nvlink=nvlink,
        moe=moe,
        version=rng.choice(["0.5.13", "0.5.23"]),
        concurrency=concurrency,
        decode_ms=decode_ms,
        per_token=rng.uniform(0.001, 0.004),
        knee=rng.uniform(12.0, 96.0),
        ar_count=rng.choice([60, 80, 120, 160]),
        ar_lat_ms=lat,
        ar_bw_ms=rng.uniform(0.0002, 0.0008) * (1 if nvlink else 4),
        algo_lat=algo_lat,
        algo_bw=algo_bw,
        fusion=fusion,
        ep_compute=rng.uniform(0.75, 1.12),
        a2a=a2a,
        deepep_topk_assert=rng.random() < 0.5,
        fi_a2a_fusion_crash=rng.random() < 0.4,
        attention=attention,
        eager=rng.uniform(1.3, 2.2),
        eager_ms=rng.uniform(1.0, 4.0),
        draft_ms=decode_ms * rng.uniform(0.04, 0.14),
        topk_cost=rng.uniform(0.02, 0.15),
        extend_ms=decode_ms * rng.uniform(0.05, 0.15),
        spec_overhead_ms=rng.uniform(0.3, 2.0),
        accept1=rng.uniform(0.45, 0.9),
        decay=rng.uniform(0.82, 0.98),
        width_gain=rng.uniform(0.08, 0.5),
        weights=weights,
        draft_weights=rng.uniform(0.01, 0.04),
        kv_per_request=rng.uniform(0.0008, 0.005),
        activations=rng.uniform(0.04, 0.09),
        graph_per_token=rng.uniform(0.00006, 0.00025),
        deepep_workspace=rng.uniform(0.015, 0.04),
        noise=rng.uniform(0.0, 0.03),
    )
    cuda_graph = "cuda-graph-max-bs" if node.version == "0.5.13" else "cuda-graph-max-bs-decode"
    space: dict[str, dict[str, Any]] = {
        _ALGO: {"choices": [None, "EAGLE3"]},
        _STEPS: {
            "choices": steps,
            "default": 3 if 3 in steps else steps[1],
            "when": {_ALGO: "EAGLE3"},
        },
        _TOPK: {"choices": [1, 2, 4, 8], "default": 1, "when": {_ALGO: "EAGLE3"}},
        _DRAFT: {
            "choices": drafts,
            "default": 4 if 4 in drafts else drafts[1],
            "when": {_ALGO: "EAGLE3"},
        },
        cuda_graph: {"choices": graph_values, "default": graph_values[2]},
        "mem-fraction-static": {"choices": mems, "default": mems[len(mems) // 2]},
        _NCCL: {"choices": [None, *algos]},
    }
    if node.version == "0.5.13":
        space["enable-flashinfer-allreduce-fusion"] = {"choices": [False, True], "default": False}
    else:
        space["flashinfer-allreduce-fusion-backend"] = {"choices": [None, "auto"]}
    if rng.random() < 0.3:
        space["attention-backend"] = {"choices": [None, *[a for a in attention if a != "auto"]]}
    if moe:
        space["ep-size"] = {"choices": [1, 8], "default": 1}
        space["moe-a2a-backend"] = {
            "choices": ["none", "deepep", "flashinfer"],
            "default": "none",
            "when": {"ep-size": 8},
        }
    node.space = space
    # The baseline (defaults, no speculation) boots: a node someone already serves from.
    mem = space["mem-fraction-static"]["default"]
    need = max(0.02, concurrency * node.kv_per_request)
    node.weights = min(node.weights, mem - need * 1.3 - node.draft_weights - 0.02)
    graph_mem = node.graph_per_token * space[cuda_graph]["default"]
    node.activations = min(node.activations, 1.0 - mem - graph_mem - 0.01)
    return node


_MODELS = {
    (True, "0.5.13"): ("moonshotai/Kimi-K2.5", "lightseekorg/kimi-k2.5-eagle3"),
    (True, "0.5.23"): ("Qwen/Qwen3-235B-A22B", "lmsys/Qwen3-235B-A22B-EAGLE3"),
    (False, "0.5.13"): ("meta-llama/Llama-3.3-70B-Instruct", "lmsys/sglang-EAGLE3-LLaMA3.3-70B"),
    (False, "0.5.23"): ("meta-llama/Llama-3.1-405B-Instruct", "lmsys/EAGLE3-LLaMA3.1-405B"),
}


def spec_yaml(node: Node) -> dict[str, Any]:
    """The sweep spec of a node (what a user of that node would write)."""
    model, draft = _MODELS[(node.moe, node.version)]
    return {
        "name": f"landscape-{node.seed}",
        "description": f"Generated node {node.seed} of benchmarks/landscapes.py",
        "node": {
            "backend": "sglang",
            "model": model,
            "draft_model": draft,
            "gpus": 8,
            "sglang_version": node.version,
            "server_args": {"tp-size": 8, "trust-remote-code": True},
        },
        "search_space": {"params": node.space},
        "baseline": {_ALGO: None},
        "workload": {
            "dataset": "builtin",
            "output_len": 128,
            "num_prompts": 4 * node.concurrency,
            "concurrency": node.concurrency,
            "warmup_prompts": 1,
        },
        "objective": {"metric": "output_throughput", "mode": "max"},
        "budget": {"trials": 40, "max_concurrent": 1},
        "searcher": {"kind": "tpe", "seed": 0},
    }


def load_node_spec(node: Node, folder: Path) -> SweepSpec:
    """Write the node's spec YAML into `folder` and load it (the project's own validation)."""
    path = folder / f"landscape-{node.seed}.yaml"
    path.write_text(yaml.safe_dump(spec_yaml(node), sort_keys=False))
    return load_spec(path)


# ---------------------------------------------------------------------------------------------
# Outcome of one configuration


def _depth_budget(steps: int, topk: int, draft_tokens: int) -> list[int]:
    """Candidates per depth: one per depth first, then widening from the top (best scores)."""
    nodes = max(0, draft_tokens - 1)
    budget = [1 if d < nodes else 0 for d in range(steps)]
    left = nodes - sum(budget)
    for d in range(steps):
        extra = min(left, max(0, topk - budget[d]))
        budget[d] += extra
        left -= extra
    return budget


def accept_length(node: Node, steps: int, topk: int, draft_tokens: int) -> float:
    """Expected tokens per speculative cycle (the bonus token included)."""
    length, prob = 1.0, 1.0
    for d, width in enumerate(_depth_budget(steps, topk, draft_tokens)):
        if width == 0:
            break
        p = node.accept1 * node.decay**d
        prob *= 1.0 - (1.0 - p) * (1.0 - node.width_gain) ** (width - 1)
        length += prob
    return length


def _noise(node: Node, config: Mapping[str, Any]) -> float:
    digest = hashlib.sha256(f"{node.seed}:{config_key(config)}".encode()).digest()
    z = random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, 1.0)
    return 1.0 + node.noise * max(-2.5, min(2.5, z))


def outcome(node: Node, config: Mapping[str, Any]) -> tuple[FailureMode, dict[str, float]]:
    """How a trial of `config` ends on `node`, and what it measures."""
    spec_on = config.get(_ALGO) is not None
    steps = topk = draft = 0
    if spec_on:
        steps, topk = int(config[_STEPS]), int(config[_TOPK])
        draft = steps + 1 if topk == 1 else int(config[_DRAFT])
    c = node.concurrency
    nccl = config.get(_NCCL) or "auto"
    if nccl == "CollnetDirect" or (nccl == "NVLS" and not node.nvlink):
        return FailureMode.UNSUPPORTED, {}
    fusion = bool(config.get("enable-flashinfer-allreduce-fusion")) or bool(
        config.get("flashinfer-allreduce-fusion-backend")
    )
    if fusion and node.fusion is None:
        return FailureMode.UNSUPPORTED, {}
    attention = config.get("attention-backend") or "auto"
    ep = int(config.get("ep-size") or 1)
    a2a = str(config.get("moe-a2a-backend") or "none") if ep > 1 else "none"
    a2a_factor = node.a2a[a2a] if ep > 1 else 1.0
    if a2a_factor is None:
        return FailureMode.UNSUPPORTED, {}
    if ep > 1 and a2a == "flashinfer" and fusion and node.fi_a2a_fusion_crash:
        return FailureMode.CRASH, {}
    # memory: the static pool holds weights, the draft model and the KV cache ...
    mem = float(config["mem-fraction-static"])
    kv = mem - node.weights - (node.draft_weights if spec_on else 0.0)
    need = max(0.02, c * node.kv_per_request * (1.3 if spec_on else 1.0))
    if kv < need:
        return FailureMode.OOM, {}
    # ... the rest holds activations, CUDA graphs and the DeepEP workspace
    graph = int(next(v for k, v in config.items() if k.startswith("cuda-graph-max-bs")))
    graph_mem = node.graph_per_token * graph * (1.0 + 0.12 * draft if spec_on else 1.0)
    rest = node.activations + graph_mem + (node.deepep_workspace if a2a == "deepep" else 0.0)
    if nccl == "NVLS":
        rest += 0.01
    if 1.0 - mem < rest:
        return FailureMode.OOM, {}
    if spec_on:
        check = check_tree(config)
        if not check.runs:
            text = check.rejected or ""
            if text.startswith(("ValueError", "AssertionError", "TypeError")):
                return FailureMode.INVALID_ARGS, {}
            return FailureMode.CRASH, {}
        if a2a == "deepep" and topk >= 4 and node.deepep_topk_assert:
            return FailureMode.ASSERTION, {}
    # time of one step
    ar_scale = node.algo_lat[nccl] * (node.fusion if fusion and node.fusion else 1.0)
    compute_scale = node.attention[attention] * (node.ep_compute if ep > 1 else 1.0) * a2a_factor

    def forward(tokens: int) -> float:
        bound = max(1.0 + node.per_token * (tokens - 1), tokens / node.knee)
        compute = node.decode_ms * bound * compute_scale
        comm = node.ar_count * (
            node.ar_lat_ms * ar_scale + node.ar_bw_ms * node.algo_bw[nccl] * tokens
        )
        return compute + comm

    def graphed(ms: float, tokens: int) -> float:
        return ms if tokens <= graph else ms * node.eager + node.eager_ms

    metrics: dict[str, float] = {}
    if not spec_on:
        step = graphed(forward(c), c)
        tokens_per_step = 1.0
    else:
        width = c * topk
        draft_step = node.draft_ms * (1.0 + node.topk_cost * (topk - 1)) * (
            1.0 + 0.01 * width
        ) + 2 * (node.ar_lat_ms * ar_scale)
        cycle = steps * draft_step + forward(c * draft) + node.extend_ms + node.spec_overhead_ms
        step = graphed(cycle, c * draft)
        tokens_per_step = accept_length(node, steps, topk, draft)
        metrics["accept_length"] = round(tokens_per_step, 4)
    throughput = c * 1000.0 * tokens_per_step / step * _noise(node, config)
    metrics["output_throughput"] = round(throughput, 3)
    return FailureMode.NONE, metrics


# ---------------------------------------------------------------------------------------------
# Whole tables


def configurations(spec: SweepSpec) -> Iterator[Config]:
    """Every configuration of a finite space (define-by-run: inactive parameters left out)."""
    keys = ordered_keys(spec.params)

    def walk(i: int, config: Config) -> Iterator[Config]:
        if i == len(keys):
            yield dict(config)
            return
        param = spec.params[keys[i]]
        if not is_active(param, config):
            yield from walk(i + 1, config)
            return
        for value in param.values():
            config[keys[i]] = value
            yield from walk(i + 1, config)
            del config[keys[i]]

    yield from walk(0, {})


@dataclass
class Landscape:
    """A node, its spec and the outcome of every configuration (a replay table)."""

    name: str
    spec: SweepSpec
    table: ReplayTable
    node: Node | None = None


def build(seed: int, folder: Path) -> Landscape:
    """The landscape of one seed (its spec written into `folder`)."""
    node = draw_node(seed)
    spec = load_node_spec(node, folder)
    rows: dict[str, ReplayRow] = {}
    for line, config in enumerate(configurations(spec), start=2):
        mode, metrics = outcome(node, config)
        rows[config_key(config)] = ReplayRow(line, config, mode, metrics)
    table = ReplayTable(path=f"landscape:{seed}", rows=rows)
    return Landscape(name=f"node{seed}", spec=spec, table=table, node=node)


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_table(landscape: Landscape, path: Path) -> int:
    """Write the landscape as a replay table (`spec-sweep export`'s layout); returns its rows."""
    spec = landscape.spec
    columns = export_columns(spec)
    params = set(spec.params)

    def rows() -> Iterator[dict[str, str]]:
        for row in landscape.table.rows.values():
            out: dict[str, str] = {}
            for column in columns:
                if column in params:
                    out[column] = _cell(row.config[column]) if column in row.config else ""
                elif column == "failure_mode":
                    out[column] = row.failure_mode.value
                else:
                    value = row.metrics.get(column)
                    out[column] = repr(value) if value is not None else ""
            yield out

    return write_csv(path, columns, rows())


def describe(landscape: Landscape) -> str:
    """One line about a landscape: size, failing share, where its optimum lies."""
    rows = list(landscape.table.rows.values())
    ok = [r for r in rows if r.failure_mode is FailureMode.NONE]
    best = max(ok, key=lambda r: r.metrics["output_throughput"])
    nonspec = max(
        (r for r in ok if r.config.get(_ALGO) is None),
        key=lambda r: r.metrics["output_throughput"],
    )
    kind = "non-speculative"
    if best.config.get(_ALGO) is not None:
        kind = "chain" if best.config[_TOPK] == 1 else f"tree top-{best.config[_TOPK]}"
    modes = Counter(r.failure_mode.value for r in rows if r.failure_mode is not FailureMode.NONE)
    node = landscape.node
    where = (
        ""
        if node is None
        else (
            f"{'NVLink' if node.nvlink else 'PCIe'} {'MoE' if node.moe else 'dense'} "
            f"c={node.concurrency} SGLang {node.version}: "
        )
    )
    failing = ", ".join(f"{m} {n}" for m, n in modes.most_common())
    gain = best.metrics["output_throughput"] / nonspec.metrics["output_throughput"]
    return (
        f"{landscape.name}: {where}{len(rows)} configurations, "
        f"{1 - len(ok) / len(rows):.0%} failing ({failing}); "
        f"optimum {kind}, {gain:.2f}x the best non-speculative"
    )


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`landscapes.py SEED OUT.csv` or `landscapes.py --describe 0-19`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed", type=int, nargs="?")
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--describe", metavar="SEEDS", help="e.g. 0-19 or 100-139")
    args = parser.parse_args(argv)
    if args.describe:
        with tempfile.TemporaryDirectory() as tmp:
            for seed in parse_seeds(args.describe):
                print(describe(build(seed, Path(tmp))))
        return 0
    if args.seed is None or args.out is None:
        parser.error("give SEED and OUT.csv, or --describe SEEDS")
    landscape = build(args.seed, args.out.parent)
    spec_path = args.out.with_suffix(".yaml")
    (args.out.parent / f"landscape-{args.seed}.yaml").replace(spec_path)
    count = write_table(landscape, args.out)
    print(f"{describe(landscape)}\nwrote {spec_path} and {args.out} ({count} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = [
    "TEST_SEEDS",
    "TUNING_SEEDS",
    "Landscape",
    "Node",
    "accept_length",
    "build",
    "configurations",
    "describe",
    "draw_node",
    "outcome",
    "parse_seeds",
    "write_table",
]
