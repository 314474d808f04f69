"""`spec-sweep ui` before and after: time to first answer, processes and memory of the server.

Reference ("before"): what `spec-sweep ui` ran until now, `mlflow ui` with its defaults (four
uvicorn workers, MLflow's job runner and its huey consumers) under a Python parent that had
imported the tracking module. Measured: `spec-sweep ui` (one `mlflow server` worker, job execution
off, the trials view published by a short-lived child). Both serve the same SQLite store, which
holds a 30-trial sweep written through `Tracker` (no Ray needed), and the runs are alternated.

- first answer: from launch until the UI can be used: for the reference, `GET /` answers 200;
  for `spec-sweep ui`, it has printed the trials view's URL (by then `/health` answers and the
  view is stored; `GET /` is checked too);
- processes and memory: the whole process tree, once its process count has stayed the same for
  5 s after the first answer and one runs search was served (MLflow starts its job consumers
  after the server answers). RSS counts shared pages once per process; USS only unique pages.

Run: `.venv/bin/python benchmarks/ui_server.py [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _make_store(project: Path) -> str:
    """A store holding a finished 30-trial sweep of sweeps/allreduce.yaml."""
    from spec_sweep.core.config import baseline_config
    from spec_sweep.core.outcome import FailureMode
    from spec_sweep.spec_load import load_spec
    from spec_sweep.store.tracker import Tracker

    spec = load_spec(ROOT / "sweeps" / "allreduce.yaml")
    uri = f"sqlite:///{project / 'mlruns' / 'mlflow.db'}"
    (project / "mlruns").mkdir(parents=True)
    base = baseline_config(spec)
    tracker = Tracker(uri, spec.experiment)
    parent, _ = tracker.start_sweep(spec, state_id="bench", simulate=True)
    for i in range(30):
        config = {**base, "cuda-graph-max-bs": [64, 128, 256, 512][i % 4]}
        config["mem-fraction-static"] = round(0.80 + 0.01 * (i % 9), 2)
        run = tracker.start_trial(parent, trial_id=f"t{i:04d}", config=config, system_metrics=False)
        ok = i % 6 != 5
        tracker.finish_trial(
            run,
            failure_mode=FailureMode.NONE if ok else FailureMode.OOM,
            metrics={"output_throughput": 80.0 + i % 10, "speedup_vs_baseline": 1.0} if ok else {},
            reason="" if ok else "CUDA out of memory",
            elapsed_s=10.0,
        )
    tracker.finish_sweep(parent)
    return uri


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _settle(pid: int, base: str) -> tuple[int, float, float]:
    """Process count, RSS and USS (MiB) of the tree once its process count is stable for 5 s."""
    httpx.post(
        f"{base}/ajax-api/2.0/mlflow/runs/search",
        json={"experiment_ids": ["1"], "max_results": 100},
        timeout=30,
    ).raise_for_status()
    count, since, deadline = -1, time.monotonic(), time.monotonic() + 90
    while time.monotonic() < deadline:
        now = len(_tree(pid))
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= 5:
            break
        time.sleep(0.25)
    rss = uss = 0.0
    procs = _tree(pid)
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss += info.rss
        uss += info.uss
    return len(procs), rss / 2**20, uss / 2**20


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    except ProcessLookupError:
        pass


def measure_reference(uri: str, project: Path) -> tuple[float, int, float, float]:
    """The old `spec-sweep ui`: `mlflow ui` under a parent that imported the tracking module."""
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--default-artifact-root",
        (project / "mlruns" / "artifacts").as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    code = f"import spec_sweep.store.tracker, subprocess, sys; sys.exit(subprocess.call({argv!r}))"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        while not _answers(f"{base}/"):
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise RuntimeError("mlflow ui did not start")
            time.sleep(0.1)
        first = time.monotonic() - t0
        return (first, *_settle(proc.pid, base))
    finally:
        _stop(proc)


def measure_ours(uri: str, project: Path) -> tuple[float, int, float, float]:
    """`spec-sweep ui`: until it prints the trials view's URL."""
    port = _free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spec_sweep", "ui", "--port", str(port), "--tracking-uri", uri],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "viewStateShareKey=" in line:
                break
        else:
            raise RuntimeError(f"spec-sweep ui exited with {proc.wait()}")
        first = time.monotonic() - t0
        if not _answers(f"{base}/"):
            raise RuntimeError("the URL was printed before the UI answered")
        return (first, *_settle(proc.pid, base))
    finally:
        _stop(proc)


def main() -> None:
    """Measure both, alternately, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ui-bench-") as tmp:
        project = Path(tmp)
        uri = _make_store(project)
        rows: dict[str, list[tuple[float, int, float, float]]] = {"before": [], "after": []}
        for i in range(args.repeat):
            rows["before"].append(measure_reference(uri, project))
            rows["after"].append(measure_ours(uri, project))
            print(
                f"run {i + 1}: before {rows['before'][-1]}, after {rows['after'][-1]}", flush=True
            )
    med = {k: [statistics.median(x[j] for x in v) for j in range(4)] for k, v in rows.items()}
    print(f"\nmedian of {args.repeat} runs each, {os.cpu_count()} cores\n")
    print("| | first answer (s) | processes | RSS (MiB) | USS (MiB) |")
    print("|---|---:|---:|---:|---:|")
    names = {
        "before": "before: `mlflow ui` defaults (reference)",
        "after": "after: `spec-sweep ui`",
    }
    for key in ("before", "after"):
        t, n, rss, uss = med[key]
        print(f"| {names[key]} | {t:.1f} | {n:.0f} | {rss:,.0f} | {uss:,.0f} |")
    b, a = med["before"], med["after"]
    print(
        f"| after / before | {a[0] / b[0]:.2f} | {a[1] / b[1]:.2f} | {a[2] / b[2]:.2f} "
        f"| {a[3] / b[3]:.2f} |"
    )


if __name__ == "__main__":
    main()
