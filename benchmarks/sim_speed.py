"""Speed of the simulated node itself: start-up time and streaming capacity on one core.

Measures, and prints as a table:

* start-up: wall time from spawning ``python -m spec_sweep.sim`` at ``--sim-time-scale 0`` to the
  readiness line ("The server is fired up and ready to roll!"), several runs;
* streaming capacity: the simulator pinned to one CPU core (the client on another), a profile
  derived from ``h200-nvlink-x8`` whose steps are short enough that the model asks for more than
  5,000 tokens/s in total, many concurrent streaming requests; reports the tokens/s the model
  asks for and the tokens/s the client actually receives (tokens counted from ``meta_info``).

Run: ``.venv/bin/python benchmarks/sim_speed.py`` (about 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
READY = "The server is fired up and ready to roll!"
BASE = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(
    args: list[str], log: Path, *, cpu: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = dict(os.environ, SPEC_SWEEP_SIM_TIME_SCALE="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    cmd = [sys.executable, "-m", "spec_sweep.sim", *args, "--port", str(port)]
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True
        )
    return proc, port


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if READY in log.read_text(errors="replace"):
            return time.perf_counter() - start
        if proc.poll() is not None:
            raise RuntimeError(log.read_text(errors="replace")[-2000:])
        time.sleep(0.005)
    raise RuntimeError("not ready")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def measure_startup(runs: int, tmp: Path) -> list[float]:
    """Seconds from spawn to the readiness line, ``runs`` times (PCIe profile, scale 0)."""
    times = []
    for i in range(runs):
        log = tmp / f"startup-{i}.log"
        start = time.perf_counter()
        proc, _ = _start(["--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8"], log, cpu=None)
        try:
            _wait_ready(proc, log)
            times.append(time.perf_counter() - start)
        finally:
            _stop(proc)
    return times


def fast_profile(tmp: Path, step_ms: float) -> Path:
    """A profile whose decode step takes about ``step_ms`` at any batch size."""
    src = ROOT / "spec_sweep" / "sim" / "profiles" / "h200-nvlink-x8.yaml"
    data = yaml.safe_load(src.read_text())
    data["name"] = "sim-speed-bench"
    decode = data["perf"]["decode"]
    decode["compute_ms"] = step_ms
    decode["compute_per_req_ms"] = 0.0
    data["perf"]["allreduce"].update(decode_us=0.0, per_token_us=0.0)
    data["perf"]["prefill"].update(base_ms=1.0, per_token_ms=0.0)
    path = tmp / "sim-speed-bench.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _stream_one(session: aiohttp.ClientSession, url: str, tokens: int) -> int:
    body = {"text": "speed", "stream": True, "sampling_params": {"max_new_tokens": tokens}}
    got = 0
    async with session.post(url, json=body) as resp:
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"data: {") and b'"finish_reason":{' in line:
                got = json.loads(line[6:])["meta_info"]["completion_tokens"]
    return got


async def _load(url: str, concurrency: int, tokens: int) -> tuple[int, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(_stream_one(session, url, tokens) for _ in range(concurrency))
        )
        return sum(counts), time.perf_counter() - start


def measure_streaming(
    tmp: Path, *, concurrency: int, tokens: int, step_ms: float
) -> dict[str, float]:
    """Client-side tokens/s with the simulator on CPU 0 and this client on CPU 1."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    profile = fast_profile(tmp, step_ms)
    log = tmp / "stream.log"
    args = [*BASE, "--sim-profile", str(profile), "--max-running-requests", str(concurrency)]
    args += ["--cuda-graph-max-bs-decode", str(concurrency), "--decode-log-interval", "1000"]
    proc, port = _start(args, log, cpu=0)
    try:
        _wait_ready(proc, log)
        url = f"http://127.0.0.1:{port}/generate"
        asyncio.run(_load(url, 4, 16))  # warm the connection path
        cpu0 = _proc_cpu(proc.pid)
        total, seconds = asyncio.run(_load(url, concurrency, tokens))
        cpu = _proc_cpu(proc.pid) - cpu0
    finally:
        _stop(proc)
    demanded = concurrency * 1000.0 / step_ms
    return {
        "concurrency": concurrency,
        "tokens": total,
        "seconds": seconds,
        "demanded_tok_s": demanded,
        "achieved_tok_s": total / seconds,
        "sim_cpu_share": cpu / seconds,
    }


def _proc_cpu(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    """Run the measurements and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmpdir:
        tmp = Path(tmpdir)
        startup = measure_startup(args.runs, tmp)
        paced = measure_streaming(
            tmp, concurrency=args.concurrency, tokens=args.tokens, step_ms=10.0
        )
        saturated = measure_streaming(
            tmp, concurrency=args.concurrency, tokens=args.tokens, step_ms=2.0
        )
    print("simulated node speed (benchmarks/sim_speed.py)")
    print(f"{'measure':<52} {'value':>10} {'goal':>10}")
    rows = [
        (
            "start-up to ready, scale 0, median of runs (s)",
            f"{statistics.median(startup):.3f}",
            "< 1.000",
        ),
        ("start-up to ready, scale 0, slowest run (s)", f"{max(startup):.3f}", ""),
    ]
    for label, run in (("paced", paced), ("saturated", saturated)):
        rows += [
            (f"{label}: tokens/s asked by the model", f"{run['demanded_tok_s']:.0f}", ""),
            (
                f"{label}: tokens/s received, sim on 1 core",
                f"{run['achieved_tok_s']:.0f}",
                ">= 5000",
            ),
            (f"{label}: simulator CPU share of its core", f"{run['sim_cpu_share']:.2f}", ""),
        ]
    for label, value, goal in rows:
        print(f"{label:<52} {value:>10} {goal:>10}")
    print(
        f"  ({args.concurrency} concurrent streams x {args.tokens} tokens; one SSE event per "
        "decode step; client pinned to another core)"
    )
    ok = statistics.median(startup) < 1.0 and paced["achieved_tok_s"] >= 5000
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
