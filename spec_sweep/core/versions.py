"""SGLang versions compared as numbers, and what each version offers spec_sweep.

This module owns `version_key` (`"0.5.13.post1"` -> `(0, 5, 13)`) and the version thresholds
spec_sweep relies on, each with where in SGLang's sources it was read
(docs/concepts/sglang-versions.md):
`/server_info` `startup_time` and the "Engine startup timings" line (0.5.17), the weight-cache
daemon (0.5.17) and `SGLANG_CACHE_DIR` (0.5.18), and `weight_cache_problem` (a spec whose
`node.weight_cache` cannot work). Every rule is a threshold, so a version newer than any known
one gets the newest known rules (`newer_than_known` says so). `version_line` says which version
a spec was resolved to and why. Standard library and the spec only.
"""

from __future__ import annotations

import re

from spec_sweep.manifest import newest_version
from spec_sweep.spec import NodeSpec, SweepSpec

__all__ = [
    "CACHE_DIR_SINCE",
    "STARTUP_TIME_SINCE",
    "WEIGHT_CACHE_SINCE",
    "at_least",
    "newer_than_known",
    "version_key",
    "version_line",
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


def newer_than_known(version: str) -> str | None:
    """The one-line notice for a version newer than any spec_sweep knows (None: a known one).

    Its flags come from its own parser (a manifest built at run time); every behaviour keyed by
    version (log patterns, `startup_time`, cache variables, weight cache, adaptive rules) takes
    the newest known version's rules.
    """
    newest = newest_version()
    if version_key(version) <= version_key(newest):
        return None
    return (
        f"SGLang {version} is newer than any version spec_sweep knows ({newest}): its flags "
        f"come from its own parser; log patterns, startup timing, caches and adaptive rules "
        f"follow {newest}'s"
    )


def version_line(node: NodeSpec) -> str:
    """Which SGLang version a spec's flags and rules follow, and why, in one line."""
    version = node.sglang_version
    source = node.sglang_version_source
    if source == "node":
        why = "auto: the version installed where node.launch runs"
    elif source == "server":
        why = "reported by the server"
    elif source == "auto":
        prefix = node.launch_prefix()
        if len(prefix) >= 3 and prefix[1:3] == ("-m", "sglang.launch_server"):
            why = "auto, and no SGLang is installed here: the newest bundled manifest"
        else:
            why = (
                "auto, and node.launch is a custom prefix: the newest bundled manifest until "
                "the baseline's server reports its version"
            )
    else:
        why = "node.sglang_version"
    return f"SGLang {version} ({why})"
