#!/usr/bin/env python3
"""Dummy-weight boots against real ones, on one GPU: do failures and cycle costs transfer?

The two-fidelity sweep (`benchmarks/two_fidelity.py`) learns whether a configuration boots and
what a decode cycle costs from boots that load no weights (`--load-format dummy`, and
`--speculative-draft-load-format dummy` for a draft model), and how much a speculative tree
accepts from few real boots. This script measures whether that holds on the real engine: each
configuration of `configurations()` (>= 20: both OOM ends, a rejected tree, a tree that crashes
at its first request, plain decoding at several CUDA-graph sizes and memory fractions, NGRAM and
EAGLE-3 chains and trees) is booted with dummy weights and with real ones, one server at a time,
dummy then real per configuration (a drift hits both alike), and for each boot records:

* the failure mode, from the server log (`spec_sweep.node.classify`), and its one-line reason;
* the boot phases SGLang timed (`spec_sweep.node.boot_phases.parse_boot`) and the wall time to
  `/health`;
* at concurrency 1 and 8 (`spec_sweep.node.client`, the sweep's own benchmark and metrics): the
  output throughput, the accept length, and the cycle cost `1 / (tokens per second per request /
  accept length)` (`cycle_cost`).

Every boot is written to `OUT/<name>.<fidelity>.json` (the server log beside it) as soon as it
ends, and a boot already there is skipped: a run cut short resumes with the same command.
`OUT/summary.json` (also printed) compares the fidelities (`compare`): failure-mode agreement per
real class (and every disagreement by name); the dummy decode cycle's error against the real one
(`decode_cycle`: the first token's time taken out, since a dummy draft accepts nothing and
`cycle_cost` would spread that time over more cycles); per algorithm both cycles' ratios and the
accept lengths; the predicted throughput (the real acceptance, from the other configurations of
the same tree when there are any, with the dummy boot's decode cycle and first-token time,
`predicted_from_decode`) against the real measurement; and the prediction anchored on a real
boot of the same tree (its real throughput times the ratio of the two dummy throughputs).

Usage (repository root, SGLang importable: `eval "$(scripts/real_session.sh env 0.5.17)"`)::

    python scripts/real_fidelity.py --out OUT/fidelity-0.5.17 --version 0.5.17
    python scripts/real_fidelity.py --out OUT/f --only plain eagle3-s3-k1-d4   # a subset
    python scripts/real_fidelity.py --out OUT/f --dry-run                       # print commands
    python scripts/real_fidelity.py --out OUT/f --summary                       # compare only
    python scripts/real_fidelity.py --out OUT/f --summary --only plain ngram-d8 # some of it
    python scripts/real_fidelity.py --out OUT/f --again plain.real  # boot again, keep the first

A boot booted again (`--again`) keeps its earlier record in `OUT/repeats/`; the summary's
`spread` compares the two boots of one configuration at one fidelity, the noise floor the
dummy-against-real differences are read against. Each record says which host measured it
(`host`: CPU model, GPU and its UUID): two leases of a lent GPU can be different machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec_sweep.node.metrics import decode_cycle
from spec_sweep.node.ports import port_is_free
from spec_sweep.search.fidelity import predicted_from_decode  # the sweep's own prediction

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".models" / "smollm2-135m"
HOST = "127.0.0.1"
PORT = 23000
FIDELITIES = ("dummy", "real")
LEVELS = (1, 8)
#: The per-level metrics a record keeps.
_KEPT = re.compile(r"^(output_throughput|accept_length|itl_p50_ms|ttft_p50_ms)_c\d+$")


# ---------------------------------------------------------------------------------------------
# The arithmetic (pure; benchmarks/two_fidelity.py uses the same)


def cycle_cost(throughput: float, concurrency: int, accept: float) -> float:
    """Seconds per decode cycle: `1 / (tokens per second per request / accept length)`.

    Args:
        throughput: Output tokens per second of all `concurrency` requests together.
        concurrency: Requests decoding at once.
        accept: Tokens emitted per cycle (1.0 without speculative decoding).

    Raises:
        ValueError: A value is not positive.
    """
    if not (throughput > 0 and concurrency > 0 and accept > 0):
        raise ValueError(
            f"cycle_cost: throughput {throughput}, concurrency {concurrency}, accept {accept}: "
            "all must be > 0"
        )
    return accept / (throughput / concurrency)


def predicted_throughput(accept: float, cycle_s: float, concurrency: int) -> float:
    """Output tokens per second of `concurrency` requests emitting `accept` tokens a cycle."""
    return concurrency * accept / cycle_s


# ---------------------------------------------------------------------------------------------
# The configurations


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in version.split(".")[:3])


@dataclass(frozen=True)
class Config:
    """One configuration: its name, the flags beyond the common ones, what it is there for.

    Attributes:
        name: File-name-safe identifier.
        flags: SGLang flags added to (or replacing) `common_flags`.
        tree: What its acceptance depends on: `("EAGLE3", steps, topk, draft tokens)`,
            `("NGRAM", draft tokens)`, or None without speculative decoding.
        why: The class of fact it checks (`oom-low`, `oom-high`, `rejected`, `crash`, `plain`,
            `graph`, `memory`, `ngram`, `chain`, `tree`, `refused`).
    """

    name: str
    flags: tuple[str, ...]
    tree: tuple[Any, ...] | None
    why: str


def configurations(version: str, draft: Path) -> list[Config]:
    """The configurations booted at both fidelities (flag names for this SGLang version)."""
    split = _version_tuple(version) >= (0, 5, 14)
    cgbs = "--cuda-graph-max-bs-decode" if split else "--cuda-graph-max-bs"

    def plain(name: str, why: str, graph: int = 32, mem: float = 0.8) -> Config:
        return Config(name, (cgbs, str(graph), "--mem-fraction-static", str(mem)), None, why)

    def eagle(
        steps: int, topk: int, tokens: int, why: str, graph: int = 32, mem: float = 0.8
    ) -> Config:
        name = f"eagle3-s{steps}-k{topk}-d{tokens}"
        if graph != 32:
            name += f"-g{graph}"
        if mem != 0.8:
            name += f"-m{round(mem * 100)}"
        flags = (
            *("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft)),
            *("--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk)),
            *("--speculative-num-draft-tokens", str(tokens)),
            *(cgbs, str(graph), "--mem-fraction-static", str(mem)),
        )
        runs = steps + 1 if topk == 1 else tokens
        return Config(name, flags, ("EAGLE3", steps, topk, runs), why)

    def ngram(tokens: int, graph: int = 32) -> Config:
        flags = ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(tokens))
        name = f"ngram-d{tokens}" + ("" if graph == 32 else f"-g{graph}")
        return Config(name, (*flags, cgbs, str(graph)), ("NGRAM", tokens), "ngram")

    return [
        plain("plain", "plain"),
        plain("plain-g16", "graph", graph=16),
        plain("plain-g8", "graph", graph=8),
        plain("plain-g128", "graph", graph=128),
        plain("plain-m60", "memory", mem=0.6),
        plain("plain-m90", "memory", mem=0.9),
        # too little static memory for the KV pool: refused before serving
        plain("oom-low", "oom-low", mem=0.001),
        # too much: nothing left for activations and the graphs' memory
        plain("oom-high", "oom-high", graph=512, mem=0.995),
        plain("oom-high-2", "oom-high", mem=0.999),
        # a tree SGLang cannot build: 0.5.17 takes the flags, then capturing the draft graphs
        # fails ("selected index k out of range"; the sweep's `rejected` trees)
        eagle(1, 2, 4, "rejected"),
        # refused while SGLang parses its arguments: on a Hopper GPU because trtllm_mha needs
        # Blackwell (an unsupported backend); on Blackwell because top-k > 1 is a tree that
        # backend cannot run (speculative_hook.py: "trtllm_mha backend only supports topk = 1")
        Config(
            "eagle3-s2-k2-d4-trtllm",
            (*eagle(2, 2, 4, "refused").flags, "--attention-backend", "trtllm_mha"),
            ("EAGLE3", 2, 2, 4),
            "refused",
        ),
        # fewer draft tokens than steps + 1 with top-k > 1: 0.5.17's first verify fails
        # compacting the accepted path, before the server is ready
        eagle(5, 2, 4, "crash"),
        ngram(4),
        ngram(8),
        ngram(8, graph=16),
        eagle(1, 1, 2, "chain"),
        eagle(3, 1, 4, "chain"),
        eagle(5, 1, 6, "chain"),
        eagle(3, 1, 4, "chain", graph=16),
        eagle(3, 1, 4, "chain", mem=0.9),
        eagle(2, 2, 4, "tree"),
        eagle(3, 2, 8, "tree"),
        eagle(2, 4, 8, "tree"),
        eagle(3, 4, 4, "tree"),
        eagle(5, 4, 8, "tree"),
        eagle(2, 4, 8, "tree", graph=16),
    ]


def common_flags(version: str, model: Path) -> list[str]:
    """What every server gets: the real table's fixed flags (sweeps/real_table_smollm2.yaml)."""
    split = _version_tuple(version) >= (0, 5, 14)
    prefill_off = (
        ["--cuda-graph-backend-prefill", "disabled"]
        if split
        else ["--disable-piecewise-cuda-graph"]
    )
    return [
        *["--model-path", str(model), "--attention-backend", "triton"],
        *["--sampling-backend", "pytorch", "--skip-server-warmup", *prefill_off],
    ]


def command(
    config: Config, fidelity: str, *, version: str, model: Path, python: str, port: int
) -> list[str]:
    """The `sglang.launch_server` command of one configuration at one fidelity."""
    if fidelity not in FIDELITIES:
        raise ValueError(f"fidelity {fidelity!r}: give one of {', '.join(FIDELITIES)}")
    argv = [python, "-m", "sglang.launch_server", *common_flags(version, model), *config.flags]
    if fidelity == "dummy":
        argv += ["--load-format", "dummy"]
        if config.tree is not None and config.tree[0] == "EAGLE3":
            argv += ["--speculative-draft-load-format", "dummy"]
    return [*argv, "--host", HOST, "--port", str(port), "--nccl-port", str(port + 7)]


# ---------------------------------------------------------------------------------------------
# The comparison (pure: records in, summary out)


#: Tokens per request of the records that do not say (the script's default when they were made).
DEFAULT_OUTPUT_LEN = 128


def _cycles(record: Mapping[str, Any]) -> dict[int, float]:
    """Cycle cost per concurrency level of one boot that measured (accept 1.0 when absent)."""
    out: dict[int, float] = {}
    for level in LEVELS:
        tput = record.get("metrics", {}).get(f"output_throughput_c{level}")
        accept = record.get("metrics", {}).get(f"accept_length_c{level}") or 1.0
        if tput:
            out[level] = cycle_cost(tput, level, accept)
    return out


def _decode(record: Mapping[str, Any], level: int) -> tuple[float, float] | None:
    """(decode cycle, time to first token) in seconds at `level`, or None without both."""
    metrics = record.get("metrics", {})
    tput = metrics.get(f"output_throughput_c{level}")
    ttft_ms = metrics.get(f"ttft_p50_ms_c{level}")
    if not tput or ttft_ms is None:
        return None
    accept = metrics.get(f"accept_length_c{level}") or 1.0
    length = int(record.get("output_len") or DEFAULT_OUTPUT_LEN)
    return decode_cycle(tput, level, accept, ttft_ms / 1000.0, length), ttft_ms / 1000.0


def _accepts(records: Mapping[str, Mapping[str, Any]], level: int) -> dict[str, float]:
    """Real boots' accept length at `level`, per configuration name."""
    out = {}
    for name, rec in records.items():
        value = rec.get("metrics", {}).get(f"accept_length_c{level}")
        if rec.get("fidelity") == "real" and value:
            out[name] = float(value)
    return out


def compare(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fidelities compared (see the module doc).

    Args:
        records: Boot records, each with `name`, `fidelity`, `failure_mode`, `tree` (a list or
            None), `metrics` (`output_throughput_c<N>`, `accept_length_c<N>`).

    Returns:
        `failure_modes`: per real failure mode, how many configurations the dummy boot agreed on,
        and `disagreements` by name; `cycle`: per level the relative errors dummy/real - 1
        (median, max of absolute, per name); `predicted`: per level the relative error of the
        predicted throughput against the real one (median, max of absolute, per name), with
        `acceptance_from` saying whether another configuration of the same tree supplied it.
    """
    by: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for rec in records:
        by[rec["name"]][rec["fidelity"]] = rec
    pairs = {n: f for n, f in by.items() if all(x in f for x in FIDELITIES)}
    modes: dict[str, dict[str, int]] = defaultdict(lambda: {"configurations": 0, "agree": 0})
    disagreements = []
    for name, fid in sorted(pairs.items()):
        real, dummy = fid["real"]["failure_mode"], fid["dummy"]["failure_mode"]
        modes[real]["configurations"] += 1
        if real == dummy:
            modes[real]["agree"] += 1
        else:
            disagreements.append({"name": name, "real": real, "dummy": dummy})
    reals = {n: f["real"] for n, f in pairs.items()}
    trees = {n: tuple(r["tree"]) if r.get("tree") else None for n, r in reals.items()}
    cycle: dict[str, Any] = {}
    predicted: dict[str, Any] = {}
    for level in LEVELS:
        accepts = _accepts(reals, level)
        cyc, pred = {}, {}
        for name, fid in sorted(pairs.items()):
            if _served(fid, level) is None:
                continue
            real, dummy = _decode(fid["real"], level), _decode(fid["dummy"], level)
            if real is None or dummy is None:
                continue
            cyc[name] = dummy[0] / real[0] - 1.0
            tree = trees[name]
            same = [
                accepts[n] for n, t in trees.items() if n != name and t == tree and n in accepts
            ]
            if tree is None:
                accept, source = 1.0, "plain"
            elif same:
                accept, source = statistics.fmean(same), "same tree, other knobs"
            elif name in accepts:
                accept, source = accepts[name], "itself"
            else:
                continue
            length = int(fid["real"].get("output_len") or DEFAULT_OUTPUT_LEN)
            guess = predicted_from_decode(accept, dummy[0], dummy[1], level, length)
            real_tput = fid["real"]["metrics"][f"output_throughput_c{level}"]
            pred[name] = {"error": guess / real_tput - 1.0, "acceptance_from": source}
        cycle[f"c{level}"] = _errors(cyc)
        predicted[f"c{level}"] = _errors({n: p["error"] for n, p in pred.items()}) | {
            "acceptance_from": {n: p["acceptance_from"] for n, p in pred.items()}
        }
    return {
        "configurations": len(pairs),
        "failure_modes": dict(sorted(modes.items())),
        "disagreements": disagreements,
        "cycle": cycle,
        "by_algorithm": _by_algorithm(pairs, trees),
        "predicted": predicted,
        "anchored": _anchored(pairs, trees),
    }


def _served(fid: Mapping[str, Mapping[str, Any]], level: int) -> tuple[float, float] | None:
    """(dummy, real) output throughput at `level` of a configuration both fidelities served."""
    if fid["real"]["failure_mode"] != "none" or fid["dummy"]["failure_mode"] != "none":
        return None
    key = f"output_throughput_c{level}"
    dummy, real = fid["dummy"].get("metrics", {}).get(key), fid["real"].get("metrics", {}).get(key)
    return (float(dummy), float(real)) if dummy and real else None


def _algorithm(tree: tuple[Any, ...] | None) -> str:
    return "plain" if tree is None else str(tree[0])


def _by_algorithm(
    pairs: Mapping[str, Mapping[str, Mapping[str, Any]]],
    trees: Mapping[str, tuple[Any, ...] | None],
) -> dict[str, Any]:
    """Per algorithm and level: the dummy cycle over the real one, as `cycle_cost` (the first
    token's time spread over the cycles, so it moves with the acceptance) and as `decode_cycle`
    (the first token taken out), and both accept lengths."""
    out: dict[str, Any] = {}
    for level in LEVELS:
        groups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for name, fid in pairs.items():
            if _served(fid, level) is None:
                continue
            dummy_cycle = _cycles(fid["dummy"]).get(level)
            real_cycle = _cycles(fid["real"]).get(level)
            dummy_decode, real_decode = _decode(fid["dummy"], level), _decode(fid["real"], level)
            if not (dummy_cycle and real_cycle and dummy_decode and real_decode):
                continue
            group = groups[_algorithm(trees[name])]
            group["ratio"].append(dummy_cycle / real_cycle)
            group["decode"].append(dummy_decode[0] / real_decode[0])
            for fidelity in FIDELITIES:
                accept = fid[fidelity].get("metrics", {}).get(f"accept_length_c{level}") or 1.0
                group[f"accept_{fidelity}"].append(float(accept))
        out[f"c{level}"] = {
            algo: {
                "n": len(g["ratio"]),
                "cycle_ratio_median": statistics.median(g["ratio"]),
                "cycle_ratio_min": min(g["ratio"]),
                "cycle_ratio_max": max(g["ratio"]),
                "decode_ratio_median": statistics.median(g["decode"]),
                "decode_ratio_min": min(g["decode"]),
                "decode_ratio_max": max(g["decode"]),
                "accept_dummy_median": statistics.median(g["accept_dummy"]),
                "accept_real_median": statistics.median(g["accept_real"]),
            }
            for algo, g in sorted(groups.items())
        }
    return out


def _anchored(
    pairs: Mapping[str, Mapping[str, Mapping[str, Any]]],
    trees: Mapping[str, tuple[Any, ...] | None],
) -> dict[str, Any]:
    """The prediction anchored on a real boot of the same tree: a configuration's real
    throughput predicted as an anchor's real throughput times the dummy throughput ratio
    (configuration over anchor), averaged over the anchors (the other configurations of the
    same tree, plain decoding included, served at both fidelities). The dummy boots then carry
    only what the other knobs (graph batch, memory, backends) change, and the acceptance and
    the per-tree cycle bias come from the real anchor."""
    out: dict[str, Any] = {}
    for level in LEVELS:
        served = {n: v for n, f in pairs.items() if (v := _served(f, level)) is not None}
        errors: dict[str, float] = {}
        for name, (dummy, real) in sorted(served.items()):
            guesses = [
                anchor_real * dummy / anchor_dummy
                for other, (anchor_dummy, anchor_real) in served.items()
                if other != name and trees[other] == trees[name]
            ]
            if guesses:
                errors[name] = statistics.fmean(guesses) / real - 1.0
        out[f"c{level}"] = _errors(errors)
    return out


def _errors(errors: Mapping[str, float]) -> dict[str, Any]:
    if not errors:
        return {"n": 0}
    absolute = [abs(e) for e in errors.values()]
    return {
        "n": len(errors),
        "median_abs": statistics.median(absolute),
        "max_abs": max(absolute),
        "per_configuration": {n: round(e, 4) for n, e in errors.items()},
    }


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The summary as a few printed lines."""
    lines = [f"{summary['configurations']} configurations booted at both fidelities"]
    for mode, count in summary["failure_modes"].items():
        lines.append(
            f"  real {mode}: dummy agrees in {count['agree']} of {count['configurations']}"
        )
    for item in summary["disagreements"]:
        lines.append(f"  DISAGREE {item['name']}: real {item['real']}, dummy {item['dummy']}")
    for level, algos in summary.get("by_algorithm", {}).items():
        for algo, g in algos.items():
            lines.append(
                f"  {algo} {level}: dummy / real cycle {g['cycle_ratio_median']:.3f} "
                f"({g['cycle_ratio_min']:.3f}-{g['cycle_ratio_max']:.3f}), decode cycle "
                f"{g['decode_ratio_median']:.3f} ({g['decode_ratio_min']:.3f}-"
                f"{g['decode_ratio_max']:.3f}), {g['n']} configurations; accept dummy "
                f"{g['accept_dummy_median']:.2f} real {g['accept_real_median']:.2f}"
            )
    for key, levels in summary.get("spread", {}).items():
        parts = ", ".join(
            f"{lv} decode {v['decode_ratio']:.3f} ttft {v['ttft_ratio']:.3f}"
            for lv, v in levels.items()
        )
        lines.append(f"  again {key}: later / earlier boot {parts}")
    for part in ("cycle", "predicted", "anchored"):
        for level, errs in summary.get(part, {}).items():
            if errs.get("n"):
                lines.append(
                    f"  {part} {level}: |error| median {errs['median_abs']:.1%}, "
                    f"max {errs['max_abs']:.1%} over {errs['n']}"
                )
    return lines


# ---------------------------------------------------------------------------------------------
# Booting and measuring (needs SGLang and a GPU)


def _free_port(first: int) -> int:
    port = first
    # the server's, its two next ones, the NCCL port (+7) and SGLang's ZMQ block (+10000)
    offsets = (0, 1, 2, 7, 10_000)
    while not all(port_is_free(port + offset, HOST) for offset in offsets):
        port += 20
    return port


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def boot_and_measure(
    config: Config, fidelity: str, args: argparse.Namespace, log: Path
) -> dict[str, Any]:
    """Boot one server, benchmark it at `LEVELS` when it comes up, stop it; the boot's record."""
    import httpx

    from spec_sweep.node.boot_phases import parse_boot
    from spec_sweep.node.classify import classify
    from spec_sweep.node.client import run_benchmark_sync
    from spec_sweep.node.metrics import bench_metrics
    from spec_sweep.spec import WorkloadSpec

    port = _free_port(args.first_port)
    argv = command(
        config, fidelity, version=args.version, model=args.model, python=args.python, port=port
    )
    env = {**os.environ, "SGLANG_IS_FLASHINFER_AVAILABLE": "false", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://{HOST}:{port}"
    ready_s: float | None = None
    timed_out = False
    bench_error: str | None = None
    metrics: dict[str, float] = {}
    info: dict[str, Any] | None = None
    try:
        while proc.poll() is None:
            if time.monotonic() - started > args.boot_timeout_s:
                timed_out = True
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                    ready_s = time.monotonic() - started
                    break
            time.sleep(1.0)
        if ready_s is not None:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                info = httpx.get(url + "/server_info", timeout=30.0, trust_env=False).json()
            workload = WorkloadSpec.model_validate(
                {
                    "dataset": "builtin",
                    "output_len": args.output_len,
                    "num_prompts": args.prompts,
                    "concurrency": list(LEVELS),
                    "warmup_prompts": 2,
                    "seed": 0,
                }
            )
            try:
                bench = run_benchmark_sync(
                    url, workload, model_path=str(args.model), request_timeout_s=120.0
                )
                metrics = bench_metrics(bench, multi_level=True)
                bench_error = bench.first_error
            except Exception as exc:  # recorded: the server's failure is what is measured
                bench_error = f"{type(exc).__name__}: {exc}"
    finally:
        exit_code = proc.poll()
        _stop(proc)
    text = log.read_text(errors="replace")
    verdict = classify(
        log_text=text,
        exit_code=exit_code,
        ready=ready_s is not None,
        boot_timed_out=timed_out,
        bench_error=bench_error,
    )
    phases = parse_boot(text, server_info=info)
    cycles = {} if verdict.mode.value != "none" else _cycles({"metrics": metrics})
    return {
        "name": config.name,
        "fidelity": fidelity,
        "why": config.why,
        "tree": list(config.tree) if config.tree else None,
        "sglang_version": args.version,
        "prompts": args.prompts,
        "output_len": args.output_len,
        "command": argv,
        "failure_mode": verdict.mode.value,
        "reason": verdict.reason,
        "boot_s": ready_s,
        "boot_phases": phases.seconds,
        "boot_phases_source": phases.source,
        "metrics": {k: v for k, v in metrics.items() if _KEPT.match(k)},
        "cycle_s": {f"c{k}": v for k, v in cycles.items()},
        "wall_s": time.monotonic() - started,
        "host": host_facts(),
    }


def host_facts() -> dict[str, str]:
    """What tells two machines apart: the CPU model, the GPU and its UUID (two leases of a lent
    GPU can be different hosts, and the host's speed moves a small model's cycle)."""
    facts: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,uuid,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.splitlines()[0]
        facts["gpu"], facts["gpu_uuid"], facts["driver"] = (x.strip() for x in out.split(","))
    return facts


#: Where `--again` keeps the earlier boot of a configuration booted again (inside `--out`).
REPEATS = "repeats"


def load_records(out: Path) -> list[dict[str, Any]]:
    """Every boot record in `out` (the latest boot of each configuration and fidelity)."""
    return [
        json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.name != "summary.json"
    ]


def keep_earlier(out: Path, key: str) -> None:
    """Move the record (and log) of `key` (`<name>.<fidelity>`) into `out/repeats/`, numbered,
    so that the next run boots it again and the spread of the two boots can be compared."""
    folder = out / REPEATS
    folder.mkdir(exist_ok=True)
    n = 1
    while (folder / f"{key}.{n}.json").exists():
        n += 1
    for suffix in ("json", "log"):
        src = out / f"{key}.{suffix}"
        if src.exists():
            src.rename(folder / f"{key}.{n}.{suffix}")


def spread(
    records: Sequence[Mapping[str, Any]], earlier: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Boot-to-boot spread at one fidelity: each earlier boot of a configuration against the
    latest boot of the same configuration and fidelity, at every level both served (later over
    earlier: decode cycle, time to first token, throughput). This is the noise floor any
    dummy-against-real difference has to be read against."""
    latest = {(r["name"], r["fidelity"]): r for r in records}
    out: dict[str, Any] = {}
    for first in earlier:
        later = latest.get((first["name"], first["fidelity"]))
        if later is None or "none" not in (first["failure_mode"], later["failure_mode"]):
            continue
        entry: dict[str, Any] = {}
        for level in LEVELS:
            a, b = _decode(first, level), _decode(later, level)
            key = f"output_throughput_c{level}"
            ta, tb = first["metrics"].get(key), later["metrics"].get(key)
            if a and b and ta and tb:
                entry[f"c{level}"] = {
                    "decode_ratio": round(b[0] / a[0], 4),
                    "ttft_ratio": round(b[1] / a[1], 4),
                    "throughput_ratio": round(tb / ta, 4),
                }
        if entry:
            out[f"{first['name']}.{first['fidelity']}"] = entry
    return out


def _boot_all(chosen: Sequence[Config], args: argparse.Namespace) -> None:
    """Boot every (configuration, fidelity) not recorded in `--out` yet, one at a time."""
    t0 = time.monotonic()
    boots = [(c, f) for c in chosen for f in args.fidelities]
    for config, fidelity in boots:
        path = args.out / f"{config.name}.{fidelity}.json"
        if path.exists():
            print(f"{config.name} {fidelity}: recorded, skipped", flush=True)
            continue
        if args.stop_after_s is not None and time.monotonic() - t0 > args.stop_after_s:
            print(
                f"--stop-after-s {args.stop_after_s:g} reached: resume with the same command",
                flush=True,
            )
            break
        record = boot_and_measure(
            config, fidelity, args, args.out / f"{config.name}.{fidelity}.log"
        )
        path.write_text(json.dumps(record, indent=1))
        c1 = record["metrics"].get("output_throughput_c1")
        print(
            f"[{time.monotonic() - t0:6.0f}s] {config.name} {fidelity}: "
            f"{record['failure_mode']} boot {record['boot_s']} c1 "
            f"{'-' if c1 is None else round(c1, 1)} cycle {record['cycle_s']}",
            flush=True,
        )


def _keys(table: Mapping[str, Config]) -> set[tuple[str, str]]:
    return {(name, fidelity) for name in table for fidelity in FIDELITIES}


def main(argv: Sequence[str] | None = None) -> int:
    """`real_fidelity.py --out DIR [--version V] [--only NAME ...] [--dry-run] [--summary]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="records and logs (resumable)")
    parser.add_argument("--version", default="0.5.17", help="SGLang version (decides flag names)")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--draft", type=Path, help="EAGLE-3 head (default: MODEL-eagle3)")
    parser.add_argument("--only", nargs="+", help="configurations to boot (default: all)")
    parser.add_argument("--fidelities", nargs="+", choices=FIDELITIES, default=list(FIDELITIES))
    parser.add_argument("--prompts", type=int, default=32, help="requests per level")
    parser.add_argument("--output-len", type=int, default=128, help="tokens per request")
    parser.add_argument("--boot-timeout-s", type=float, default=480.0)
    parser.add_argument("--first-port", type=int, default=PORT)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument(
        "--stop-after-s",
        type=float,
        help="start no boot after this many seconds (a call's time limit: resume next call)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, boot nothing")
    parser.add_argument("--summary", action="store_true", help="compare what --out holds only")
    parser.add_argument(
        "--again",
        nargs="+",
        default=[],
        metavar="NAME.FIDELITY",
        help="boot these again (e.g. plain.real); the earlier record moves to OUT/repeats/",
    )
    args = parser.parse_args(argv)
    if not _version_tuple(args.version) or len(_version_tuple(args.version)) < 3:
        parser.error(f"--version {args.version!r}: give an SGLang version such as 0.5.17")
    for name in ("prompts", "output_len"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give 1 or more")
    draft = args.draft or args.model.with_name(args.model.name + "-eagle3")
    table = {c.name: c for c in configurations(args.version, draft)}
    unknown = [n for n in args.only or [] if n not in table]
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: unknown; known: {', '.join(table)}")
    chosen = [table[n] for n in args.only] if args.only else list(table.values())
    if args.dry_run:
        for config in chosen:
            for fidelity in args.fidelities:
                argv_ = command(
                    config,
                    fidelity,
                    version=args.version,
                    model=args.model,
                    python=args.python,
                    port=args.first_port,
                )
                print(f"# {config.name} ({config.why}), {fidelity}")
                print(" ".join(argv_))
        print(f"# {len(chosen)} configurations x {len(args.fidelities)} fidelities")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    wrong = [k for k in args.again if k.rpartition(".")[::2] not in _keys(table)]
    if wrong:
        parser.error(
            f"--again {' '.join(wrong)}: give NAME.FIDELITY, e.g. plain.real (fidelities: "
            f"{', '.join(FIDELITIES)})"
        )
    for key in [] if args.summary else args.again:
        keep_earlier(args.out, key)
    if not args.summary:
        # a time limit's SIGTERM unwinds through boot_and_measure's `finally`: no orphaned server
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            _boot_all(chosen, args)
        finally:
            signal.signal(signal.SIGTERM, previous)
    names = {c.name for c in chosen}
    records = [r for r in load_records(args.out) if r["name"] in names]
    summary = compare(records)
    earlier = [r for r in load_records(args.out / REPEATS) if r["name"] in names]
    summary["spread"] = spread(records, earlier)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(summary_lines(summary)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = [
    "Config",
    "command",
    "common_flags",
    "compare",
    "configurations",
    "cycle_cost",
    "decode_cycle",
    "main",
    "predicted_from_decode",
    "predicted_throughput",
]
