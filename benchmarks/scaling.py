"""Wall time of the same simulated sweep on 1, 2 and 4 nodes, against the ideal speed-up.

Each row starts its own Ray cluster on this machine exactly like the cluster integration test
(`tests/integration/test_cluster.py`): a head with no GPUs and no `spec_sweep_node`, plus N
worker "nodes" (`ray start --address=...`, own temp dir, 8 logical GPUs, one
`spec_sweep_node`), and runs the same 16-trial sweep on it with `python -m spec_sweep.run
--simulate --address ...`, tracked by one `mlflow server` on 127.0.0.1. The sweep is fixed:
random search with seed 0 over `cuda-graph-max-bs` and `mem-fraction-static` (every proposal
runs; none fails), the simulated PCIe node at boot time scale 0, and a workload whose decode is
paced in real time (~85 tok/s), so a trial lasts a few seconds of mostly sleeping: parallelism
shows even on a 2-core machine.

Columns: `wall s` is the driver's whole run (Ray connect, 16 trials, report), with its
speed-up over the first row; `trials s` is from the first trial's start to the last trial's end
in MLflow, with its speed-up against the ideal N x (`efficiency` = speed-up / ideal); `at once`
is the most trials that ran at the same time; `trial s` is the mean trial length (MLflow run
start to end), which shows how much concurrent trials slow each other down on this machine.

Run: `.venv/bin/python benchmarks/scaling.py [--trials 16] [--output-len 128] [--nodes 1 2 4]`
(about 6 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The cluster, MLflow server and driver helpers of the cluster integration test (one source of
# truth for "a local multi-node cluster"); its conftest sets the test environment defaults
# (simulator boot time scale 0, Ray token auth, no usage stats).
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration")]

from test_cluster import (  # noqa: E402
    local_cluster,
    mlflow_server_at,
    start_sweep,
    trial_runs,
)


def run_row(
    nodes: int, *, uri: str, work: Path, trials: int, output_len: int
) -> dict[str, float | int | list[str]]:
    """One sweep on a fresh cluster of `nodes` worker nodes."""
    name = f"scaling-n{nodes}"
    with local_cluster(nodes) as cluster:
        t0 = time.monotonic()
        sweep = start_sweep(
            work / name,
            name=name,
            address=cluster.address,
            tracking_uri=uri,
            trials=trials,
            output_len=output_len,
        )
        code = sweep.wait(timeout=3600)
        wall = time.monotonic() - t0
    if code != 0:
        raise SystemExit(f"{name}: driver exited {code}:\n{sweep.output()}")
    runs = [r for r in trial_runs(uri, name) if r.info.status == "FINISHED"]
    if len(runs) != trials:
        raise SystemExit(f"{name}: {len(runs)} finished trials, expected {trials}")
    starts = [r.info.start_time / 1000 for r in runs]
    ends = [r.info.end_time / 1000 for r in runs]
    failed = [r for r in runs if r.data.tags.get("failure_mode") != "none"]
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return {
        "nodes": nodes,
        "wall": wall,
        "span": max(ends) - min(starts),
        "trial": statistics.mean(e - s for s, e in zip(starts, ends, strict=True)),
        "failed": len(failed),
        "peak": peak,
        "configs": sorted(r.data.tags["spec_sweep.config"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--output-len", type=int, default=128, help="tokens per request")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()

    print(f"machine: {os.cpu_count()} cores; sweep: {args.trials} trials, random seed 0, ", end="")
    print(f"output_len {args.output_len} (3 requests per trial, 1 warm-up)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="spec_sweep-scaling-") as tmp:
        work = Path(tmp)
        (work / "mlflow").mkdir()
        with mlflow_server_at(work / "mlflow") as uri:
            for nodes in args.nodes:
                row = run_row(
                    nodes, uri=uri, work=work, trials=args.trials, output_len=args.output_len
                )
                rows.append(row)
                print(f"  {nodes} node(s): {row['wall']:.1f} s", flush=True)

    same = all(r["configs"] == rows[0]["configs"] for r in rows)
    base = rows[0]
    base_n = int(base["nodes"])
    print()
    print(
        "| nodes | wall s | speed-up (wall) | trials s | speed-up (trials) | ideal | efficiency "
        "| at once | trial s | failed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        n = int(r["nodes"])
        up_wall = float(base["wall"]) / float(r["wall"])
        up = float(base["span"]) / float(r["span"])
        ideal = n / base_n
        print(
            f"| {n} | {r['wall']:.1f} | {up_wall:.2f}x | {r['span']:.1f} | {up:.2f}x | "
            f"{ideal:g}x | {up / ideal:.0%} | {r['peak']} | {r['trial']:.2f} | {r['failed']} |"
        )
    print()
    print(f"same {args.trials} configurations in every row: {same}")
    if not same:
        print(json.dumps([r["configs"] for r in rows], indent=1))


if __name__ == "__main__":
    main()
