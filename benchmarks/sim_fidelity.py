"""Fidelity of the simulated node: each reference figure beside what the simulator produces.

For every profile (``rtx-pro-6000-pcie-x8``: the write-up in shared/background;
``h200-nvlink-x8``: public SGLang figures named in the profile), this reads the profile's
``reference`` block and, for each figure, starts ``python -m spec_sweep.sim`` with the reference
configuration (time scale 0), measures through the HTTP API and prints the target, the simulated
value and the relative error:

* ``decode_tok_s``: per-request decode speed of streamed requests, (completion tokens after the
  first chunk) / (time from the first to the last chunk), tokens from ``meta_info``;
* ``decode_tok_s_total``: the same summed over concurrent requests;
* ``speedup_total``: ``decode_tok_s_total`` of the configuration over the baseline's;
* ``avail_after_load_gib``: free memory per GPU after the weights, from the server log
  (``Load weight end. ... avail mem=...``), checked against ``/server_info``;
* ``verify_ms``: the verify step of the performance model (not observable over HTTP).

Then every failing feature of the reference is launched under both SGLang flavors (0.5.23 and
0.5.13) and the failure text the simulator printed is shown with its exit status. Throughput
figures must be within 3 %; the script exits 1 otherwise.

Run: ``.venv/bin/python benchmarks/sim_fidelity.py`` (about two minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spec_sweep.manifest import load_manifest  # noqa: E402
from spec_sweep.sim.cli import adapt_args  # noqa: E402
from spec_sweep.sim.model import NodeConfig, SpecSettings, plan_node  # noqa: E402
from spec_sweep.sim.perf import PerfModel  # noqa: E402
from spec_sweep.sim.profiles import Profile, load_profile  # noqa: E402

READY = "The server is fired up and ready to roll!"
TOLERANCE = 0.03
VERSIONS = ("0.5.23", "0.5.13")
THROUGHPUT = ("decode_tok_s", "decode_tok_s_total", "speedup_total")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Sim:
    """A running simulator."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start(
    profile: str,
    args: list[str],
    tmp: Path,
    *,
    version: str = "0.5.23",
    env: dict[str, str] | None = None,
) -> Sim:
    """Launch the simulator like the trial launcher does."""
    port = _free_port()
    log = tmp / f"{profile}-{port}.log"
    environ = dict(os.environ, SPEC_SWEEP_SIM_TIME_SCALE="0", **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(ROOT), environ.get("PYTHONPATH", "")] if p
    )
    cmd = [
        sys.executable,
        "-m",
        "spec_sweep.sim",
        "--model-path",
        "model",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--sim-profile",
        profile,
        "--sim-sglang-version",
        version,
        *args,
    ]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=environ, start_new_session=True
        )
    return Sim(proc, port, log)


def wait(sim: Sim, timeout: float = 30.0) -> bool:
    """Wait for readiness (True) or exit (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if READY in sim.text():
            return True
        if sim.proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def stop(sim: Sim) -> None:
    """Stop the simulator's process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sim.proc.pid, signal.SIGTERM)
    try:
        sim.proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sim.proc.pid, signal.SIGKILL)
        sim.proc.wait(5)


async def _one(session: aiohttp.ClientSession, url: str, tokens: int) -> float:
    body = {
        "text": "Write a long story about a lighthouse keeper.",
        "stream": True,
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
    }
    first_t = last_t = 0.0
    first_n = last_n = 0
    async with session.post(url, json=body) as resp:
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: {"):
                continue
            now = time.perf_counter()
            count = json.loads(line[6:])["meta_info"]["completion_tokens"]
            if first_t == 0.0:
                first_t, first_n = now, count
            last_t, last_n = now, count
    return (last_n - first_n) / (last_t - first_t) if last_t > first_t else 0.0


async def _decode_speeds(port: int, concurrency: int, tokens: int) -> list[float]:
    url = f"http://127.0.0.1:{port}/generate"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await _one(session, url, 8)
        return list(await asyncio.gather(*(_one(session, url, tokens) for _ in range(concurrency))))


def _args(profile: Profile, figure: dict[str, Any], version: str) -> list[str]:
    ref = profile.reference
    args = figure.get("args", [])
    if args == "writeup_setting":
        args = ref["writeup_setting"]["args"]
    manifest = load_manifest(version)
    return adapt_args([*ref.get("base_args", []), *args], manifest)


def _avail_after_load(log: str) -> float | None:
    match = re.search(r"TP0\] Load weight end\..*?avail mem=([0-9.]+) GB", log)
    return float(match.group(1)) if match else None


def _tokens_for(target: float, concurrency: int) -> int:
    per_request = target / max(1, concurrency) if concurrency > 1 else target
    return int(min(700, max(200, per_request * 7)))


def measure(profile: Profile, figure: dict[str, Any], tmp: Path) -> float:
    """Measure one figure through the simulator."""
    metric = figure["metric"]
    args = _args(profile, figure, "0.5.23")
    if metric == "verify_ms":
        return _model_value(profile, args)
    sim = start(profile.name, args, tmp, env=figure.get("env"))
    try:
        if not wait(sim):
            raise RuntimeError(f"{figure['id']}: did not boot:\n{sim.text()[-2000:]}")
        if metric == "avail_after_load_gib":
            value = _avail_after_load(sim.text())
            state = _get_json(sim.port, "/server_info")["internal_states"][0]["memory_usage"]
            total = profile.hardware.total_gib - profile.hardware.startup_overhead_gib
            assert value is not None
            assert abs(total - state["weight"] - value) < 0.02
            return value
        concurrency = int(figure.get("concurrency", 1))
        target = float(figure["target"])
        if metric == "speedup_total":
            tokens = 300
            speeds = asyncio.run(_decode_speeds(sim.port, concurrency, tokens))
            base_figure = {"args": [], "metric": "decode_tok_s_total"}
            base = start(profile.name, _args(profile, base_figure, "0.5.23"), tmp)
            try:
                if not wait(base):
                    raise RuntimeError("baseline did not boot")
                base_speeds = asyncio.run(_decode_speeds(base.port, concurrency, tokens))
            finally:
                stop(base)
            return sum(speeds) / sum(base_speeds)
        speeds = asyncio.run(
            _decode_speeds(sim.port, concurrency, _tokens_for(target, concurrency))
        )
        return sum(speeds) if metric == "decode_tok_s_total" else speeds[0]
    finally:
        stop(sim)


def _get_json(port: int, path: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data


def _model_value(profile: Profile, args: list[str]) -> float:
    def arg(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    spec = SpecSettings(
        str(arg("--speculative-algorithm")),
        int(arg("--speculative-num-steps") or 3),
        int(arg("--speculative-eagle-topk") or 1),
        int(arg("--speculative-num-draft-tokens") or 4),
        arg("--speculative-draft-model-path"),
    )
    mfs = arg("--mem-fraction-static")
    config = NodeConfig(
        flavor="new",
        model_path="model",
        tp_size=8,
        spec=spec,
        mem_fraction_static=float(mfs) if mfs else None,
    )
    return PerfModel(profile, plan_node(profile, config)).verify_ms(1)


def check_failure(profile: Profile, entry: dict[str, Any], tmp: Path) -> list[tuple[str, str, str]]:
    """Launch a failing feature under both flavors; return (version, outcome, text) rows."""
    rows = []
    for version in VERSIONS:
        flavor = "new" if version == "0.5.23" else "old"
        if "expect_metric" in entry:
            spec = entry["expect_metric"]
            fig = {
                "id": entry["id"],
                "args": entry["args"],
                "metric": spec["metric"],
                "concurrency": spec["concurrency"],
                "target": spec["at_most"],
                "env": entry.get("env"),
            }
            if version != "0.5.23":
                continue
            value = measure(profile, fig, tmp)
            ok = value <= float(spec["at_most"]) * (1 + TOLERANCE)
            rows.append(
                (
                    version,
                    "runs" if ok else "TOO FAST",
                    f"{value:.1f} tok/s (Ring: <= {spec['at_most']})",
                )
            )
            continue
        args = adapt_args(
            [*profile.reference.get("base_args", []), *entry["args"]], load_manifest(version)
        )
        sim = start(profile.name, args, tmp, version=version, env=entry.get("env"))
        try:
            ready = wait(sim, timeout=20)
            expect = entry["expect"][flavor]
            text = sim.text()
            line = next((ln for ln in text.splitlines() if expect in ln), "")
            status = "ready (warning)" if ready else f"exit {sim.proc.poll()}"
            if not line:
                status += " MISSING TEXT"
            rows.append((version, status, line.strip()[:150]))
        finally:
            stop(sim)
    return rows


def run_profile(name: str, tmp: Path) -> bool:
    """Print the fidelity tables of one profile; True when every figure is within tolerance."""
    profile = load_profile(name)
    ref = profile.reference
    print(f"\n== {profile.name}: {ref.get('source', '')}")
    print(f"{'figure':<18} {'what':<58} {'target':>9} {'sim':>9} {'error':>7}")
    ok = True
    for figure in ref.get("figures", []):
        value = measure(profile, figure, tmp)
        target = float(figure["target"])
        error = (value - target) / target
        flag = ""
        if figure["metric"] in THROUGHPUT and abs(error) > TOLERANCE:
            flag, ok = "  <-- over 3%", False
        print(
            f"{figure['id']:<18} {figure['what'][:58]:<58} {target:>9.2f} {value:>9.2f} "
            f"{error:>+7.1%}{flag}"
        )
    failures = ref.get("failures", [])
    if failures:
        print(
            f"\n{'failing feature':<20} {'sglang':<7} {'outcome':<24} text printed by the simulator"
        )
        for entry in failures:
            for version, outcome, text in check_failure(profile, entry, tmp):
                print(f"{entry['id']:<20} {version:<7} {outcome:<24} {text}")
                if "MISSING" in outcome or "TOO FAST" in outcome:
                    ok = False
    return ok


def main() -> int:
    """Run every profile's fidelity check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="*", default=["rtx-pro-6000-pcie-x8", "h200-nvlink-x8"])
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="sim-fidelity-") as tmpdir:
        for name in args.profiles:
            ok = run_profile(name, Path(tmpdir)) and ok
    print("\nall throughput figures within 3%" if ok else "\nSOME FIGURES ARE OFF")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
