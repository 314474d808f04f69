"""Behaviour equivalence of a refactor: the same sweep, the same proposals, the same verdict.

Runs a sweep through the public command line (`python -m spec_sweep.run ...`) in a throwaway
project folder and extracts, straight from its MLflow store (MLflow's own client, none of
spec_sweep's code, so the extraction is the same before and after a change to spec_sweep):

- every trial attempt in launch order: trial id, attempt, run status, failure mode, the
  configuration, which trial a confirmation boot repeats, and the objective value;
- the sweep run's verdict: status, confirmation verdict, winner, recommendation, drift tag, and
  its final metrics (`best_<metric>`, `winner_<metric>`, `confirm_trials`, ...).

Three scenarios:

- `quickstart`: the quickstart of docs/getting-started.md (`sweeps/allreduce.yaml --simulate`),
  shortened with `--trials` and `SPEC_SWEEP_SIM_TIME_SCALE=0`. The simulated node paces tokens in
  real time, so its measured values carry timing jitter, and from the first model-driven proposal on
  (after the baseline and the screening design) two runs of the same code part ways: compare them
  with `--value-tolerance` and read only the deterministic prefix. The run's trials are also
  exported as a replay table beside OUT.json (OUT.csv), for the next scenario.
- `quickstart-replay`: the same spec replayed from that table (`--replay OUT.csv`): the
  quickstart's own measurements, with the timing jitter taken out, so the search must take the
  same path again, proposal for proposal; fully deterministic.
- `replay`: `benchmarks/grids/pcie.yaml --replay TABLE` (the table from `benchmarks/sim_grid.py`,
  generated once into `--table`, then reused as is) with seeded `--replay-noise`: fully
  deterministic, values compared exactly.

Run: `.venv/bin/python benchmarks/equivalence.py record replay /tmp/before-replay.json`, the same
after the change into `after-replay.json`, then `benchmarks/equivalence.py compare
/tmp/before-replay.json /tmp/after-replay.json` (exit 1 when they differ). About 2-4 minutes a
scenario on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_TRIAL_KEYS = ("trial_id", "attempt", "status", "failure_mode", "config", "confirms")
_PARENT_TAGS = (
    "spec_sweep.confirm_verdict",
    "spec_sweep.confirm_reason",
    "spec_sweep.winner",
    "spec_sweep.recommended",
    "spec_sweep.drift",
)


def _run_sweep(argv: list[str], project: Path, *, command: str = "run") -> tuple[int, str, float]:
    env = dict(os.environ, SPEC_SWEEP_PROJECT_DIR=str(project), SPEC_SWEEP_SIM_TIME_SCALE="0")
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spec_sweep", command, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def _extract(project: Path, experiment: str, metric: str) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"no experiment {experiment!r} in {project}/mlruns")
    runs = client.search_runs([found.experiment_id], max_results=5000)
    parents = [r for r in runs if r.data.tags.get("spec_sweep.kind") == "sweep"]
    trials = [r for r in runs if r.data.tags.get("spec_sweep.kind") == "trial"]
    trials.sort(key=lambda r: (r.info.start_time, r.data.tags.get("spec_sweep.trial_id", "")))
    sequence = []
    for run in trials:
        tags = run.data.tags
        sequence.append(
            {
                "trial_id": tags.get("spec_sweep.trial_id"),
                "attempt": tags.get("spec_sweep.attempt"),
                "status": run.info.status,
                "failure_mode": tags.get("failure_mode"),
                "config": json.loads(tags.get("spec_sweep.config", "{}")),
                "confirms": tags.get("spec_sweep.confirms"),
                "value": run.data.metrics.get(metric),
            }
        )
    parent = parents[0] if len(parents) == 1 else None
    return {
        "sequence": sequence,
        "sweep": {
            "parents": len(parents),
            "status": parent.info.status if parent else None,
            "tags": {k: parent.data.tags.get(k) for k in _PARENT_TAGS} if parent else {},
            "metrics": dict(sorted(parent.data.metrics.items())) if parent else {},
        },
    }


def _replay_table(table: Path) -> Path:
    if not table.is_file():
        table.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "sim_grid.py"),
             str(ROOT / "benchmarks" / "grids" / "pcie.yaml"), str(table)],
            cwd=ROOT, check=True,
        )  # fmt: skip
    return table


def record(args: argparse.Namespace) -> int:
    """Run one scenario and write what it proposed and decided to `args.out` (JSON)."""
    if args.scenario == "quickstart":
        spec, experiment = "sweeps/allreduce.yaml", "allreduce"
        argv = [spec, "--simulate", "--trials", str(args.trials or 12)]
    elif args.scenario == "quickstart-replay":
        spec, experiment = "sweeps/allreduce.yaml", "allreduce"
        argv = [spec, "--replay", str(args.table), "--trials", str(args.trials or 12)]
    else:
        spec, experiment = "benchmarks/grids/pcie.yaml", "grid-pcie"
        table = _replay_table(args.table)
        argv = [spec, "--replay", str(table), "--replay-noise", str(args.noise)]
        argv += ["--trials", str(args.trials or 40)]
    with tempfile.TemporaryDirectory(prefix="spec_sweep-equivalence-") as tmp:
        code, output, seconds = _run_sweep(argv, Path(tmp))
        out = _extract(Path(tmp), experiment, "output_throughput")
        if args.scenario == "quickstart":
            table = args.out.with_suffix(".csv")
            _run_sweep([spec, "-o", str(table)], Path(tmp), command="export")
    out |= {"scenario": args.scenario, "argv": argv, "exit_code": code, "wall_s": round(seconds)}
    out["output_tail"] = output.splitlines()[-40:]
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    n = len(out["sequence"])
    print(f"{args.scenario}: exit {code}, {n} trial runs, {seconds:.0f} s -> {args.out}")
    print(f"verdict: {out['sweep']['tags'].get('spec_sweep.confirm_verdict')}, "
          f"recommended {out['sweep']['tags'].get('spec_sweep.recommended')}")  # fmt: skip
    return 0 if code == 0 else 1


def _close(a: Any, b: Any, tolerance: float) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-12)
    return bool(a == b)


def compare(args: argparse.Namespace) -> int:
    """Print the two sequences side by side; exit 1 at the first difference."""
    a, b = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    tolerance = args.value_tolerance
    rows = max(len(a["sequence"]), len(b["sequence"]))
    same = a["exit_code"] == b["exit_code"] and len(a["sequence"]) == len(b["sequence"])
    print(f"{'trial':<10} {'mode':<13} {'value before':>13} {'after':>13}  same  configuration")
    for i in range(rows):
        x = a["sequence"][i] if i < len(a["sequence"]) else {}
        y = b["sequence"][i] if i < len(b["sequence"]) else {}
        ok = all(x.get(k) == y.get(k) for k in _TRIAL_KEYS)
        ok = ok and _close(x.get("value"), y.get("value"), tolerance)
        same = same and ok
        label = x.get("trial_id") or y.get("trial_id")
        vx, vy = x.get("value"), y.get("value")
        cfg = json.dumps(x.get("config", y.get("config")), separators=(",", ":"))
        print(
            f"{label:<10} {x.get('failure_mode') or '-':<13} "
            f"{'' if vx is None else f'{vx:.6g}':>13} {'' if vy is None else f'{vy:.6g}':>13}  "
            f"{'yes ' if ok else 'NO  '}  {cfg[:90]}"
        )
    for key in ("parents", "status"):
        same = same and a["sweep"][key] == b["sweep"][key]
    for key in _PARENT_TAGS:
        x, y = a["sweep"]["tags"].get(key), b["sweep"]["tags"].get(key)
        ok = x == y or (key == "spec_sweep.confirm_reason" and tolerance > 0)
        same = same and ok
        print(f"{key}: {x!r}{'' if ok else f' != {y!r}'}")
    ma, mb = a["sweep"]["metrics"], b["sweep"]["metrics"]
    for key in sorted(set(ma) | set(mb)):
        ok = _close(ma.get(key), mb.get(key), tolerance)
        same = same and ok
        if not ok or args.verbose:
            print(f"metric {key}: {ma.get(key)} {'==' if ok else '!='} {mb.get(key)}")
    print(f"exit codes {a['exit_code']} / {b['exit_code']}; trial runs "
          f"{len(a['sequence'])} / {len(b['sequence'])}")  # fmt: skip
    print("IDENTICAL" if same else "DIFFERENT")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    """`equivalence.py record {quickstart,replay} OUT.json` | `compare BEFORE.json AFTER.json`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run a scenario and write its sequence")
    rec.add_argument("scenario", choices=["quickstart", "quickstart-replay", "replay"])
    rec.add_argument("out", type=Path)
    rec.add_argument("--trials", type=int, help="search budget (quickstart 12, replay 40)")
    rec.add_argument(
        "--table",
        type=Path,
        default=Path(tempfile.gettempdir()) / "spec_sweep_equivalence" / "pcie.csv",
        help="replay table (replay: generated by benchmarks/sim_grid.py when absent; "
        "quickstart-replay: the OUT.csv of a quickstart recording)",
    )
    rec.add_argument("--noise", type=float, default=0.02, help="--replay-noise")
    cmp_ = sub.add_parser("compare", help="compare two recorded sequences")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    cmp_.add_argument(
        "--value-tolerance",
        type=float,
        default=0.0,
        help="relative tolerance on values (the live simulator's timing jitter)",
    )
    cmp_.add_argument("-v", "--verbose", action="store_true", help="print every final metric")
    args = parser.parse_args(argv)
    return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
