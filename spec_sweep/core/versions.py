"""SGLang versions compared as numbers, and what each version offers spec_sweep.

This module owns `version_key` (`"0.5.13.post1"` -> `(0, 5, 13)`) and the version thresholds
spec_sweep relies on, each with where in SGLang's sources it was read (docs/sglang-versions.md):
`/server_info` `startup_time` and the "Engine startup timings" line (0.5.17), the weight-cache
daemon (0.5.17) and `SGLANG_CACHE_DIR` (0.5.18). Standard library only.
"""

from __future__ import annotations

import re

__all__ = [
    "CACHE_DIR_SINCE",
    "STARTUP_TIME_SINCE",
    "WEIGHT_CACHE_SINCE",
    "at_least",
    "version_key",
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
