"""The simulated node's stand-in for SGLang's weight-cache daemon (``--weight-cache-mode``).

``python -m spec_sweep.sim.weight_cache --model-path M [--tp-size N] [--sim-profile P] ...``
takes the command line of ``python -m sglang.srt.weight_cache.daemon`` (weight_cache/daemon.py
0.5.17:815-903), spends the profile's weight-load seconds (times ``SPEC_SWEEP_SIM_TIME_SCALE``),
prints what SGLang's daemons print, one rank after another in each rank's own log format
(daemon.py 0.5.17:557; "Loading model from disk", "Model loaded from disk in", "Listening on"
its socket, :287-314 and :424), and waits until it is stopped. Not the launcher's "All N weight
cache daemons on node R are ready" (:774): the real launcher configures no logging, so that
line never reaches the log. It holds no memory and serves nothing: a simulated server booted
with ``--weight-cache-mode client`` loads its weights in ``boot.CLIENT_LOAD_S`` whether or not
a daemon runs, and its memory is a disk boot's.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from spec_sweep.sim import texts
from spec_sweep.sim.profiles import load_profile


def main(argv: list[str] | None = None) -> int:
    """Load (pretend), say ready, wait for SIGTERM."""
    parser = argparse.ArgumentParser(prog="spec_sweep.sim.weight_cache")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--pp-size", type=int, default=1)
    parser.add_argument("--sim-profile", default="h200-nvlink-x8")
    args, _ = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    profile = load_profile(args.sim_profile)
    scale = float(os.environ.get("SPEC_SWEEP_SIM_TIME_SCALE", "0.004"))

    def log(rank: int, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp},000 [Daemon gpu={rank} tp_rank={rank}] INFO {message}", flush=True)

    ranks = range(args.tp_size * args.pp_size)
    seconds = profile.boot.load_weights * scale
    lines = {r: texts.weight_cache_daemon_lines(r, args.model_path, seconds) for r in ranks}
    for rank in ranks:
        log(rank, lines[rank][0])
    time.sleep(seconds)
    for rank in ranks:
        for message in lines[rank][1:]:
            log(rank, message)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
