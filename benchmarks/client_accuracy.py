"""Check the load generator against the simulated node's ground truth, and measure what it costs.

For the baseline and an EAGLE-3 configuration of the PCIe Blackwell profile, this starts
``python -m spec_sweep.sim`` on a free port (boot time scaled to 0), warms it up, and then at
concurrency 1, 8 and 64 runs ``spec_sweep.node.client.run_benchmark_sync`` on the built-in text
prompts and compares:

- output throughput: the client's ``output_throughput`` (server-counted tokens / the client's
  wall time of the level) against the server's own view, ground truth built from ``meta_info``
  because ``/server_info`` exposes no token or busy-time counter: total ``completion_tokens`` /
  the time the server held at least one request, each request's server interval being its
  ``e2e_latency`` ending where the client saw its stream end. The two differ by the time the
  client left the server idle (gaps between requests, slow start);
- accept length: the client's ``accept_length`` against the simulator's own counters
  (``internal_states[0].avg_spec_accept_length`` = accepted tokens / verify steps, reset by
  ``/flush_cache`` before each level, no warm-up inside the level). SGLang's per-request
  convention (mean of ``completion_tokens / spec_verify_ct``, which counts the prefill token) is
  printed beside it;
- the client's own CPU cost: ``time.process_time()`` around the benchmark per 1,000 streamed
  tokens, and as a share of one core over the level's wall time.

Prints a table and exits 1 if a measured value is off by more than 1%. Run it with
``python benchmarks/client_accuracy.py`` (about a minute: the simulator decodes in real time).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spec_sweep.node.client import BenchResult, RequestOutput, run_benchmark_sync
from spec_sweep.node.metrics import bench_metrics
from spec_sweep.spec import WorkloadSpec

PROFILE = "rtx-pro-6000-pcie-x8"
BASE_ARGS = ("--tp-size", "8", "--trust-remote-code")
CONFIGS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "eagle3": (
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    ),
}
LEVELS = (1, 8, 64)
TOLERANCE = 0.01
BOOT_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table."""

    config: str
    concurrency: int
    requests: int
    tokens: int
    client_tps: float
    truth_tps: float
    client_accept: float | None
    truth_accept: float | None
    per_request_accept: float | None
    cpu_ms_per_1k: float
    cpu_share: float

    @property
    def tps_error(self) -> float:
        return self.client_tps / self.truth_tps - 1.0

    @property
    def accept_error(self) -> float | None:
        if self.client_accept is None or self.truth_accept is None:
            return None
        return self.client_accept / self.truth_accept - 1.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SimServer:
    """`python -m spec_sweep.sim` in its own process group, stopped on exit."""

    def __init__(self, extra: tuple[str, ...], log_path: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        argv = [
            sys.executable,
            "-m",
            "spec_sweep.sim",
            "--model-path",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--sim-profile",
            PROFILE,
            "--sim-time-scale",
            "0",
            *BASE_ARGS,
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the simulator exited with {self.proc.returncode} before ready: "
                    f"see {self.log_path}"
                )
            try:
                if httpx.get(f"{self.url}/health_generate", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the simulator was not ready in {BOOT_TIMEOUT_S:g} s: {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _server_busy_s(outputs: list[RequestOutput]) -> float:
    """Length of the union of the server-side request intervals [end - e2e, end]."""
    spans = sorted(
        (o.start_s + o.latency_s - o.e2e_latency_s, o.start_s + o.latency_s)
        for o in outputs
        if o.e2e_latency_s is not None
    )
    busy = 0.0
    lo, hi = spans[0]
    for start, end in spans[1:]:
        if start > hi:
            busy += hi - lo
            lo, hi = start, end
        else:
            hi = max(hi, end)
    return busy + hi - lo


def _sim_accept_length(url: str) -> float | None:
    info = httpx.get(f"{url}/server_info", timeout=10).json()
    value = info["internal_states"][0].get("avg_spec_accept_length")
    return float(value) if value is not None else None


def _measure(config: str, url: str, concurrency: int, *, output_len: int) -> Row:
    flushed = httpx.post(f"{url}/flush_cache", timeout=10)
    if flushed.status_code != 200:
        raise RuntimeError(f"/flush_cache failed: {flushed.status_code} {flushed.text}")
    workload = WorkloadSpec(
        dataset="builtin",
        output_len=output_len,
        num_prompts=max(8, 2 * concurrency),
        concurrency=(concurrency,),
        warmup_prompts=0,
        seed=concurrency,
    )
    cpu0 = time.process_time()
    bench: BenchResult = run_benchmark_sync(
        url, workload, model_path="m", request_timeout_s=REQUEST_TIMEOUT_S
    )
    cpu = time.process_time() - cpu0
    if bench.error_count or bench.hung:
        raise RuntimeError(f"{config} c={concurrency}: {bench.error_count} errors: {bench}")
    (level,) = bench.levels
    outputs = list(level.outputs)
    metrics = bench_metrics(bench, multi_level=False)
    tokens = sum(o.output_tokens for o in outputs)
    ratios = [o.output_tokens / o.spec_verify_ct for o in outputs if o.spec_verify_ct]
    return Row(
        config=config,
        concurrency=concurrency,
        requests=len(outputs),
        tokens=tokens,
        client_tps=metrics["output_throughput"],
        truth_tps=tokens / _server_busy_s(outputs),
        client_accept=metrics.get("accept_length"),
        truth_accept=_sim_accept_length(url),
        per_request_accept=sum(ratios) / len(ratios) if ratios else None,
        cpu_ms_per_1k=cpu * 1000.0 / tokens * 1000.0,
        cpu_share=cpu / level.duration_s,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.2f}%"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _print(rows: list[Row]) -> None:
    header = (
        f"{'config':<9}{'c':>4}{'reqs':>6}{'tokens':>8}{'client tok/s':>14}{'truth tok/s':>13}"
        f"{'err':>9}{'accept':>8}{'sim acc':>9}{'err':>9}{'SGLang/req':>12}{'err':>9}"
        f"{'CPU ms/1k tok':>15}{'CPU %core':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        per_req_error = (
            None
            if r.per_request_accept is None or r.truth_accept is None
            else r.per_request_accept / r.truth_accept - 1.0
        )
        print(
            f"{r.config:<9}{r.concurrency:>4}{r.requests:>6}{r.tokens:>8}"
            f"{r.client_tps:>14.2f}{r.truth_tps:>13.2f}{_pct(r.tps_error):>9}"
            f"{_num(r.client_accept):>8}{_num(r.truth_accept):>9}{_pct(r.accept_error):>9}"
            f"{_num(r.per_request_accept):>12}{_pct(per_req_error):>9}"
            f"{r.cpu_ms_per_1k:>15.1f}{r.cpu_share * 100:>10.1f}%"
        )


def main() -> int:
    """Run every configuration and level, print the table, exit 1 beyond the tolerance."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-len", type=int, default=128, help="max_new_tokens per request")
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="client-accuracy-") as tmp:
        for config in args.configs:
            server = SimServer(CONFIGS[config], Path(tmp) / f"{config}.log")
            try:
                server.wait_ready()
                warmup = WorkloadSpec(
                    dataset="builtin", output_len=16, num_prompts=8, concurrency=8
                )
                run_benchmark_sync(
                    server.url, warmup, model_path="m", request_timeout_s=REQUEST_TIMEOUT_S
                )
                for concurrency in LEVELS:
                    rows.append(
                        _measure(config, server.url, concurrency, output_len=args.output_len)
                    )
            finally:
                server.stop()
    print(
        f"profile {PROFILE}, builtin prompts, output_len {args.output_len}; "
        "throughput truth = completion_tokens / server-busy time from meta_info e2e_latency; "
        "accept truth = the simulator's avg_spec_accept_length counter"
    )
    _print(rows)
    bad = [
        r
        for r in rows
        if abs(r.tps_error) > TOLERANCE
        or (r.accept_error is not None and abs(r.accept_error) > TOLERANCE)
    ]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} rows within {TOLERANCE:.0%}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
