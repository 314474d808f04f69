"""Export a full grid of configurations from the simulated node into a replay table (docs/design.md,
"Replay table").

For every configuration of a sweep spec whose parameters are all finite (choices, int ranges,
float ranges with a step), this computes what a trial of that configuration would end with on the
simulated node, **without starting a server**: it uses the simulator's own code, the same code
the simulated server runs.

* The configuration becomes the exact server command line (`spec_sweep.node.command.build_command`)
  and is parsed by the simulator's own parser (`spec_sweep.sim.cli.parse_command_line`; a flag
  the manifest rejects is `invalid_args`, as argparse's exit 2 is).
* `spec_sweep.sim.model.plan_node` decides the boot (memory walk, feature rules, draft-tree
  checks). The log lines the server would print that decide an outcome (resolution warnings,
  per-rank communication warnings, the failure's traceback with SGLang's "Scheduler hit an
  exception" prefix) and its exit status go through the trial path's own classifier
  (`spec_sweep.node.classify.classify`), so a failure gets the mode the real trial would record
  (e.g. an impossible draft tree, a `RuntimeError` in the draft capture, is `crash`).
* A configuration that boots is measured as the trial's client would measure the spec's workload
  (concurrency 1 only): the workload's own prompts (`spec_sweep.node.prompts.load_prompts`, warm-up
  first) and their token counts as the server counts them; per request a prefill
  (`PerfModel.prefill_ms`) and then decode steps (`PerfModel.step_ms`) until `output_len`
  tokens, times the configuration's seeded per-boot factor (`PerfModel.boot_factor`; the
  per-step jitter has mean 1). Speculative cycles per request come from the simulator's own
  golden-ratio `AcceptSampler` averaged over its start phase. Metrics follow
  `spec_sweep.node.metrics`: `output_throughput`, `request_throughput`, `ttft_p50_ms`,
  `ttft_p99_ms`, `itl_p50_ms`, `decode_speed_p50`, `accept_length`.

`--validate N` runs N configurations of the grid (the baseline, the best, then a seeded sample
that covers every failure mode) through the real trial path (`spec_sweep.node.trial.run_trial` with
`simulate=True`, `SPEC_SWEEP_SIM_TIME_SCALE=0`, the grid spec's own small workload) and prints, per
configuration, the generated and the measured failure mode and throughput.

Run: `.venv/bin/python benchmarks/sim_grid.py benchmarks/grids/pcie.yaml /tmp/pcie.csv`
(about 25 s a grid), `... --validate 18` (2-3 minutes a grid: the simulated server paces
tokens in real time).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spec_sweep.core.config import Config, baseline_config, config_key, is_active, ordered_keys  # noqa: E402
from spec_sweep.core.outcome import FailureMode  # noqa: E402
from spec_sweep.core.record import TrialRecord  # noqa: E402
from spec_sweep.manifest import load_manifest  # noqa: E402
from spec_sweep.node.classify import classify  # noqa: E402
from spec_sweep.node.command import build_command  # noqa: E402
from spec_sweep.node.metrics import percentile  # noqa: E402
from spec_sweep.node.prompts import load_prompts  # noqa: E402
from spec_sweep.sim import texts  # noqa: E402
from spec_sweep.sim.cli import parse_command_line  # noqa: E402
from spec_sweep.sim.model import NodePlan, plan_node  # noqa: E402
from spec_sweep.sim.perf import AcceptSampler, PerfModel  # noqa: E402
from spec_sweep.sim.profiles import Profile, load_profile  # noqa: E402
from spec_sweep.spec import SweepSpec, WorkloadSpec  # noqa: E402
from spec_sweep.spec_load import load_spec  # noqa: E402
from spec_sweep.store.replay import export_columns, export_rows, write_csv  # noqa: E402

#: Start phases of the accept-length sampler averaged per request (its u_0 is seeded per request).
_ACCEPT_PHASES = 32
_STAMP = "[2026-01-01 00:00:00]"
_STAMP_TP0 = "[2026-01-01 00:00:00 TP0]"


@dataclass(frozen=True)
class GridRow:
    """One configuration of the grid and the outcome a trial of it would have.

    Attributes:
        config: The configuration (active parameters only).
        failure_mode: How the trial would end.
        reason: The classifier's one-line reason.
        metrics: Metrics the client would measure (empty for a failure).
    """

    config: Config
    failure_mode: FailureMode
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The grid


def grid_configs(spec: SweepSpec) -> Iterator[Config]:
    """Every configuration of the spec's (finite) search space, in a stable order.

    Conditional parameters (`when:`) only vary where they are active, so each configuration
    appears once.

    Raises:
        ValueError: a parameter has no finite list of values (a float range without `step`).
    """
    params = spec.params
    order = ordered_keys(params)
    values = {key: params[key].values() for key in order}

    def expand(index: int, config: Config) -> Iterator[Config]:
        if index == len(order):
            yield dict(config)
            return
        key = order[index]
        if not is_active(params[key], config):
            yield from expand(index + 1, config)
            return
        for value in values[key]:
            config[key] = value
            yield from expand(index + 1, config)
        del config[key]

    yield from expand(0, {})


def grid_size(spec: SweepSpec) -> int:
    """The number of configurations of the grid."""
    return sum(1 for _ in grid_configs(spec))


# ---------------------------------------------------------------------------------------------
# One configuration


@contextlib.contextmanager
def _parser_reused(version: str) -> Iterator[None]:
    """Within the block, the simulator parses every command line with one parser per version.

    `parse_command_line` rebuilds SGLang's parser from the flag manifest on every call (25 ms,
    nearly all of a configuration's cost). A parser holds no state between `parse_args` calls,
    so the block builds it once and hands the same one out; the manifest is restored after.
    """
    manifest = load_manifest(version)
    build = manifest.build_parser
    cache: dict[Any, argparse.ArgumentParser] = {}

    def cached(*, prog: str | None = None, extra: Any = None) -> argparse.ArgumentParser:
        key = (prog, version)
        if key not in cache:
            cache[key] = build(prog=prog, extra=extra)
        return cache[key]

    object.__setattr__(manifest, "build_parser", cached)
    try:
        yield
    finally:
        object.__delattr__(manifest, "build_parser")


class GridModel:
    """Outcomes of a spec's configurations on the simulated node, from the simulator's model.

    Args:
        spec: The sweep (its `node.sim_profile`, `node.sglang_version` and `workload`).
    """

    def __init__(self, spec: SweepSpec) -> None:
        if spec.workload.concurrency != (1,):
            raise ValueError(
                f"workload.concurrency {list(spec.workload.concurrency)}: the grid generator "
                "models one request at a time only: use 'concurrency: 1'"
            )
        if not spec.node.sim_profile:
            raise ValueError("node.sim_profile is not set: name the simulated node's profile")
        self.spec = spec
        self.profile: Profile = load_profile(spec.node.sim_profile)
        self._prompt_tokens = _level_prompt_tokens(spec.workload, model_path=spec.node.model)

    def outcome(self, config: Mapping[str, Any]) -> GridRow:
        """What a trial of `config` would end with."""
        config = dict(config)
        command = build_command(self.spec, config, simulate=True)
        argv = list(command.argv[len(self.spec.node.launch_prefix(simulate=True)) :])
        try:
            _, node_config = parse_command_line(argv, dict(command.env))
        except SystemExit:
            return GridRow(config, FailureMode.INVALID_ARGS, "the simulator's parser rejected it")
        plan = plan_node(self.profile, node_config)
        log_text, exit_code = _decisive_log(plan)
        ready = plan.failure is None
        verdict = classify(log_text=log_text, exit_code=exit_code, ready=ready)
        if verdict.mode is not FailureMode.NONE:
            return GridRow(config, verdict.mode, verdict.reason)
        return GridRow(config, FailureMode.NONE, verdict.reason, self._metrics(plan))

    def _metrics(self, plan: NodePlan) -> dict[str, float]:
        perf = PerfModel(self.profile, plan)
        factor = perf.boot_factor
        output_len = self.spec.workload.output_len
        step_s = perf.step_ms(1) * factor / 1000.0
        rates = perf.depth_acceptance(natural=True) if perf.spec is not None else []
        cycles = (
            _mean_cycles(tuple(rates), output_len - 1) if perf.spec is not None else output_len - 1
        )
        ttfts = [perf.prefill_ms(tokens) * factor / 1000.0 for tokens in self._prompt_tokens]
        decode_s = cycles * step_s
        total = sum(ttft + decode_s for ttft in ttfts)
        count = len(ttfts)
        metrics: dict[str, float] = {
            "output_throughput": count * output_len / total,
            "request_throughput": count / total,
        }
        ttft_ms = [t * 1000.0 for t in ttfts]
        metrics["ttft_p50_ms"] = percentile(ttft_ms, 50) or 0.0
        metrics["ttft_p99_ms"] = percentile(ttft_ms, 99) or 0.0
        if output_len > 1:
            tokens_per_event = (output_len - 1) / cycles
            metrics["itl_p50_ms"] = step_s * 1000.0 / tokens_per_event
            metrics["decode_speed_p50"] = (output_len - 1) / decode_s
        if perf.spec is not None and cycles > 0:
            metrics["accept_length"] = (output_len - 1) / cycles
        return metrics


def _level_prompt_tokens(workload: WorkloadSpec, *, model_path: str) -> list[int]:
    """Prompt tokens (as the simulated server counts them) of the measured requests."""
    prompts, _ = load_prompts(workload, model_path=model_path)
    first = workload.warmup_prompts
    chosen = [prompts[i % len(prompts)] for i in range(first, first + workload.num_prompts)]
    return [
        max(1, round(len(p.encode("utf-8")) / 4)) if isinstance(p, str) else max(1, len(p))
        for p in chosen
    ]


@functools.lru_cache(maxsize=4096)
def _mean_cycles(rates: tuple[float, ...], tokens: int) -> float:
    """Mean speculative cycles to commit `tokens` tokens, over the sampler's start phases."""
    if tokens <= 0:
        return 0.0
    counts = []
    for phase in range(_ACCEPT_PHASES):
        sampler = AcceptSampler(list(rates), seed=0)
        sampler._u = (phase + 0.5) / _ACCEPT_PHASES  # the seeded start phase, spread evenly
        left, cycles = tokens, 0
        while left > 0:
            produced, _ = sampler.next(left)
            left -= produced
            cycles += 1
        counts.append(cycles)
    return statistics.fmean(counts)


def _decisive_log(plan: NodePlan) -> tuple[str, int | None]:
    """The log lines that decide a trial's outcome, and the server's exit status.

    Resolution warnings, per-rank communication warnings (some of them are fatal lines for the
    classifier), then the failure as the server prints it: a main-process traceback (exit 1),
    or a scheduler's "Scheduler hit an exception" record after which SGLang kills the tree
    (exit -9).
    """
    lines = [f"{_STAMP} {w}" for w in plan.main_warnings]
    failure = plan.failure
    if failure is not None and failure.where == "main":
        return "\n".join([*lines, failure.text]), 1
    lines += [f"{_STAMP_TP0} {w}" for w in plan.rank_warnings]
    if failure is None:
        return "\n".join(lines), None
    lines += [texts.fill_pid(line, 12345) for line in failure.pre_lines]
    lines.append(f"{_STAMP_TP0} {texts.SCHEDULER_EXCEPTION_PREFIX}{failure.text}")
    return "\n".join(lines), -9


# ---------------------------------------------------------------------------------------------
# The table


def generate(spec: SweepSpec) -> list[GridRow]:
    """Every configuration of the spec's grid with its outcome."""
    model = GridModel(spec)
    with _parser_reused(spec.node.sglang_version):
        return [model.outcome(config) for config in grid_configs(spec)]


def write_table(spec: SweepSpec, rows: Sequence[GridRow], path: Path) -> int:
    """Write the rows as a replay table in `spec-sweep export`'s layout; returns the row count."""
    records = [
        TrialRecord(
            run_id=f"grid{i}",
            trial_id=f"g{i:06d}",
            status="FINISHED",
            config=row.config,
            failure_mode=row.failure_mode,
            metrics=row.metrics,
            reason=row.reason,
            start_time=i,
        )
        for i, row in enumerate(rows)
    ]
    return write_csv(path, export_columns(spec), export_rows(spec, records))


def summarize(spec: SweepSpec, rows: Sequence[GridRow]) -> str:
    """A few lines: size, failing fraction by mode, the best configuration and the baseline."""
    metric = spec.objective.metric
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    ok = [r for r in rows if r.failure_mode is FailureMode.NONE and metric in r.metrics]
    modes = Counter(r.failure_mode.value for r in rows if r.failure_mode is not FailureMode.NONE)
    failing = sum(modes.values())
    out = [
        f"{spec.name}: {len(rows)} configurations, {failing} failing "
        f"({failing / max(1, len(rows)):.1%}: "
        + ", ".join(f"{m} {n}" for m, n in modes.most_common())
        + ")"
    ]
    if ok:
        best = max(ok, key=lambda r: sign * r.metrics[metric])
        value = best.metrics[metric]
        near = sum(1 for r in ok if sign * r.metrics[metric] >= sign * value - 0.02 * abs(value))
        out.append(f"  best {metric} = {value:.2f}: {config_key(best.config)}")
        out.append(f"  within 2% of the best: {near} configurations ({near / len(rows):.2%})")
    base = baseline_config(spec)
    for row in rows:
        if config_key(row.config) == config_key(base):
            shown = f"{row.metrics[metric]:.2f}" if metric in row.metrics else "-"
            out.append(f"  baseline {metric} = {shown} ({row.failure_mode.value})")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Validation against the real trial path


def validation_sample(
    spec: SweepSpec, rows: Sequence[GridRow], count: int, *, seed: int
) -> list[GridRow]:
    """The baseline, the best, one configuration of each failure mode, then a seeded sample.

    The sample alternates measured and failing configurations, so that about half of the
    configurations compare a throughput even on a grid where most configurations fail.
    """
    rng = random.Random(seed)
    metric = spec.objective.metric
    sign = 1.0 if spec.objective.mode == "max" else -1.0
    by_key = {config_key(r.config): r for r in rows}
    chosen: dict[str, GridRow] = {}
    base = by_key.get(config_key(baseline_config(spec)))
    if base is not None:
        chosen[config_key(base.config)] = base
    ok = [r for r in rows if r.failure_mode is FailureMode.NONE and metric in r.metrics]
    if ok:
        best = max(ok, key=lambda r: sign * r.metrics[metric])
        chosen[config_key(best.config)] = best
    for mode in sorted({r.failure_mode for r in rows}, key=lambda m: m.value):
        if mode is not FailureMode.NONE:
            pick = rng.choice([r for r in rows if r.failure_mode is mode])
            chosen.setdefault(config_key(pick.config), pick)
    measured = [r for r in rows if r.failure_mode is FailureMode.NONE]
    failing = [r for r in rows if r.failure_mode is not FailureMode.NONE]
    rng.shuffle(measured)
    rng.shuffle(failing)
    for row in itertools.chain.from_iterable(itertools.zip_longest(measured, failing)):
        if len(chosen) >= count:
            break
        if row is not None:
            chosen.setdefault(config_key(row.config), row)
    return list(chosen.values())[:count]


def validate(spec: SweepSpec, rows: Sequence[GridRow], count: int, *, seed: int = 0) -> bool:
    """Run a sample of the grid through the real trial path; print and check the agreement.

    Each configuration runs through `spec_sweep.node.trial.run_trial(simulate=True)` on the
    simulated node at time scale 0 (boots take no time; tokens are paced in real time), with
    the spec's own (small) workload, so the trial measures exactly what the table holds.
    Returns whether every failure mode matched and every throughput is within 3 %.
    """
    from spec_sweep.node.trial import run_trial

    small = spec
    model = GridModel(small)
    sample = validation_sample(spec, rows, count, seed=seed)
    env = {"SPEC_SWEEP_SIM_TIME_SCALE": "0"}
    print(
        f"\nvalidation: {len(sample)} configurations of {spec.name} "
        "through run_trial(simulate=True)"
    )
    print(
        f"{'#':>2}  {'generated':<12} {'trial':<12} {'gen tok/s':>9} {'trial tok/s':>11} "
        f"{'err':>6}  configuration"
    )
    ok_all = True
    errors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sim_grid_validate_") as tmp:
        for i, row in enumerate(sample):
            expected = model.outcome(row.config)
            result = run_trial(
                small, row.config, trial_dir=Path(tmp) / f"v{i}", simulate=True, extra_env=env
            )
            gen = expected.metrics.get("output_throughput")
            got = result.metrics.get("output_throughput")
            err = (got - gen) / gen if gen and got else None
            same = expected.failure_mode is result.failure_mode
            close = err is None or abs(err) <= 0.03
            if err is not None:
                errors.append(abs(err))
            ok_all = ok_all and same and close and ((gen is None) == (got is None))
            flag = "" if same and close else "  <-- MISMATCH"
            print(
                f"{i:>2}  {expected.failure_mode.value:<12} {result.failure_mode.value:<12} "
                f"{_num(gen):>9} {_num(got):>11} {_pct(err):>6}  {_short(row.config)}{flag}"
            )
    if errors:
        print(
            f"throughput error: median {statistics.median(errors):.2%}, max {max(errors):.2%} "
            f"over {len(errors)} measured configurations"
        )
    print(
        "validation "
        + ("PASSED" if ok_all else "FAILED")
        + ": failure modes equal, throughput within 3 %"
    )
    return ok_all


def _num(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{value:+.1%}" if value is not None else "-"


def _short(config: Mapping[str, Any]) -> str:
    abbrev = {
        "speculative-algorithm": "spec",
        "speculative-num-steps": "steps",
        "speculative-eagle-topk": "topk",
        "speculative-num-draft-tokens": "draft",
        "cuda-graph-max-bs": "bs",
        "cuda-graph-max-bs-decode": "bs",
        "mem-fraction-static": "mfs",
        "enable-flashinfer-allreduce-fusion": "fusion",
        "flashinfer-allreduce-fusion-backend": "fusion",
        "enable-torch-symm-mem": "symm",
        "disable-custom-all-reduce": "no-car",
        "moe-a2a-backend": "a2a",
        "ep-size": "ep",
        "env.NCCL_ALGO": "nccl",
    }
    return " ".join(f"{abbrev.get(k, k)}={v}" for k, v in config.items())


# ---------------------------------------------------------------------------------------------
# Command line


def main(argv: Sequence[str] | None = None) -> int:
    """`sim_grid.py SPEC.yaml OUT.csv [--validate N]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="sweep spec whose parameters are all finite")
    parser.add_argument(
        "out", type=Path, help="replay table to write (CSV; docs/design.md, Replay table)"
    )
    parser.add_argument(
        "--validate",
        type=int,
        default=0,
        metavar="N",
        help="also run N configurations through the real trial path and compare",
    )
    args = parser.parse_args(argv)
    spec = load_spec(args.spec)
    t0 = time.monotonic()
    rows = generate(spec)
    count = write_table(spec, rows, args.out)
    print(f"wrote {args.out}: {count} rows in {time.monotonic() - t0:.1f} s")
    print(summarize(spec, rows))
    if args.validate > 0 and not validate(spec, rows, args.validate):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
