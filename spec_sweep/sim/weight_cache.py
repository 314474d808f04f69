"""The simulated node's stand-in for SGLang's weight-cache daemon (``--weight-cache-mode``).

``python -m spec_sweep.sim.weight_cache --model-path M [--tp-size N] [--sim-profile P] ...``
takes the command line of ``python -m sglang.srt.weight_cache.daemon`` (weight_cache/daemon.py
0.5.17:815-903), spends the profile's weight-load seconds (times ``SPEC_SWEEP_SIM_TIME_SCALE``),
prints SGLang's ready line ("All N weight cache daemons on node 0 are ready", daemon.py
0.5.17:774) and waits until it is stopped. It holds no memory and serves nothing: a simulated
server booted with ``--weight-cache-mode client`` loads its weights in ``boot.CLIENT_LOAD_S``
whether or not a daemon runs, and its memory is a disk boot's.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from spec_sweep.sim.profiles import load_profile

_log = logging.getLogger("sglang.srt.weight_cache.daemon")


def main(argv: list[str] | None = None) -> int:
    """Load (pretend), say ready, wait for SIGTERM."""
    parser = argparse.ArgumentParser(prog="spec_sweep.sim.weight_cache")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--sim-profile", default="h200-nvlink-x8")
    args, _ = parser.parse_known_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    profile = load_profile(args.sim_profile)
    scale = float(os.environ.get("SPEC_SWEEP_SIM_TIME_SCALE", "0.004"))
    for rank in range(args.tp_size):
        _log.info(
            f"[WeightCacheDaemon gpu={rank} tp_rank={rank}] Loading model from disk: "
            f"{args.model_path}"
        )
    time.sleep(profile.boot.load_weights * scale)
    for rank in range(args.tp_size):
        _log.info(f"Weight cache daemon pp_rank=0 tp_rank={rank} is ready")
    _log.info(f"All {args.tp_size} weight cache daemons on node 0 are ready")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
