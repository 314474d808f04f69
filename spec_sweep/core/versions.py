"""SGLang versions compared as numbers, and what each version offers spec_sweep.

This module owns `version_key` (`"0.5.13.post1"` -> `(0, 5, 13)`) and the version thresholds
spec_sweep relies on, each with where in SGLang's sources it was read (docs/sglang-versions.md):
`/server_info` `startup_time` and the "Engine startup timings" line (0.5.17), the weight-cache
daemon (0.5.17) and `SGLANG_CACHE_DIR` (0.5.18), and `weight_cache_problem` (a spec whose
`node.weight_cache` cannot work). Standard library and the spec only.
"""

from __future__ import annotations

import re

from spec_sweep.spec import SweepSpec

__all__ = [
    "CACHE_DIR_SINCE",
    "STARTUP_TIME_SINCE",
    "WEIGHT_CACHE_SINCE",
    "at_least",
    "version_key",
    "weight_cache_problem",
]

#: `/server_info` `startup_time` and "Engine startup timings (s): ..." (entrypoints/engine.py
#: 0.5.17:995-1022, observability/startup_time.py; absent from 0.5.13-0.5.16).
STARTUP_TIME_SINCE = (0, 5, 17)
#: `python -m sglang.srt.weight_cache.daemon` and `--weight-cache-mode` (server_args.py
#: 0.5.17:3388-3420; absent from 0.5.13).
WEIGHT_CACHE_SINCE = (0, 5, 17)
#: `SGLANG_CACHE_DIR`, one root for Triton, Inductor, CUDA and FlashInfer caches (environ.py
#: 0.5.18; 0.5.17 and older read each library's own variable).
CACHE_DIR_SINCE = (0, 5, 18)


def version_key(version: str) -> tuple[int, ...]:
    """The leading numbers of a version (`"0.5.13.post1"` -> `(0, 5, 13)`)."""
    out: list[int] = []
    for part in re.split(r"[.\-+]", version):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def at_least(version: str, since: tuple[int, ...]) -> bool:
    """Whether `version` is `since` or newer."""
    return version_key(version) >= since


def weight_cache_problem(spec: SweepSpec) -> str | None:
    """Why `node.weight_cache` cannot work for this spec (None: it can, or it is off)."""
    node = spec.node
    if not node.weight_cache:
        return None
    if not at_least(node.sglang_version, WEIGHT_CACHE_SINCE):
        return (
            f"SGLang's weight-cache daemon (--weight-cache-mode) arrived in 0.5.17 and "
            f"node.sglang_version is {node.sglang_version}: use 0.5.17 or newer, or drop "
            "node.weight_cache"
        )
    if "weight-cache-mode" in node.server_args or "weight-cache-mode" in spec.params:
        return (
            "node.weight_cache sets --weight-cache-mode itself (client for the trials that can "
            "use the daemon): remove weight-cache-mode from node.server_args and search_space"
        )
    if node.launch and node.launch[-1] not in ("sglang.launch_server", "spec_sweep.sim"):
        return (
            f"node.weight_cache starts SGLang's daemon beside `python -m sglang.launch_server`, "
            f"and node.launch is {' '.join(node.launch)!r}: leave node.launch out, or drop "
            "node.weight_cache"
        )
    return None
