"""Where a server's boot went, read from SGLang's own log lines or its `/server_info` (pure).

This module owns `parse_boot` (a server log -> `BootPhases`) and `from_startup_time` (the
`startup_time` object of `/server_info`). SGLang times its boot phases itself, differently per
version (the real logs of tests/fixtures/sglang/ and the wheels' sources):

- distributed init: "Init torch distributed ends. elapsed=X s" (0.5.13 model_runner.py, 0.5.17
  distributed/bootstrap.py), "Init parallel ends. elapsed=X s" (0.5.23);
- weights: "Load weight end. elapsed=X s, ..., avail mem=A GB, mem usage=U GB." once per model
  (the target, then a speculative draft), after "Load weight begin. avail mem=P GB";
- CUDA graphs: 0.5.13 "Capture cuda graph end. Time elapsed: X s." (and "Capture draft cuda
  graph", "Capture draft extend cuda graph"), 0.5.14+ "Capture <target decode|target verify|
  draft decode|draft extend> CUDA graph end. elapsed=X s"; 0.5.13's piecewise CUDA graph
  (torch.compile of the dynamic-shape graph, then capture per token count) "Capture piecewise
  CUDA graph end. Time elapsed: X s.";
- from 0.5.17, one line "Engine startup timings (s): load_weight=..., kv_cache_allocation=...,
  scheduler_e2e=..., cuda_graph={prefill=..., decode=..., ...}, tokenizer_e2e=..." and the same
  figures as `/server_info` `startup_time` (the critical path over ranks).

With several tensor-parallel ranks each prints its own lines; a phase lasts as long as its
slowest rank (its critical path). Whatever SGLang does not time (Python imports, the tokenizer,
spawning the schedulers, the HTTP server, the warm-up request) is `other`: the measured boot
minus the timed phases. The first "Load weight" pair also says how much GPU memory was free
before the target's weights and how much they took: the facts of SGLang's memory rule
(`core.memory`). Standard library only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.core.names import AVAIL_METRIC, BOOT_PHASES, WEIGHTS_METRIC, boot_metric

__all__ = ["BootPhases", "from_startup_time", "parse_boot", "parse_startup_line"]

#: `[2026-11-30 22:04:05 TP0] message` (the rank part is absent with one GPU).
_LINE = re.compile(
    r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (?P<rank>[^\]]*))?\] (?P<msg>.*)$"
)
_NUMBER = r"(-?\d+(?:\.\d+)?)"
_INIT = re.compile(rf"Init (?:torch distributed|parallel) ends\. elapsed={_NUMBER} s")
_LOAD_BEGIN = re.compile(rf"Load weight begin\. avail mem={_NUMBER} GB")
_LOAD_END = re.compile(
    rf"Load weight end\. elapsed={_NUMBER} s,.*?avail mem={_NUMBER} GB, mem usage={_NUMBER} GB"
)
#: 0.5.13 "Capture cuda graph end. Time elapsed: X s." (and the draft ones); 0.5.14+ "Capture
#: target decode CUDA graph end. elapsed=X s" / "... bs=[...], elapsed=X s".
_GRAPH = re.compile(
    rf"Capture (?!piecewise)[a-z ]*?(?:cuda|CUDA) graph end\.(?: Time elapsed: | .*?elapsed=)"
    rf"{_NUMBER} s"
)
_PIECEWISE = re.compile(rf"Capture piecewise CUDA graph end\. Time elapsed: {_NUMBER} s")
_STARTUP = re.compile(r"Engine startup timings \(s\): (?P<body>.*)$")
_PAIR = re.compile(rf"(\w+)={_NUMBER}")


@dataclass(frozen=True)
class BootPhases:
    """A boot's phases as SGLang timed them, and the memory facts of its first weight load.

    Attributes:
        seconds: Phase (`names.BOOT_PHASES` but `other`) -> seconds on the critical path.
        source: Where they came from: `server_info`, `startup timings line`, `log lines`, or
            empty when the log had none of them.
        avail_gib: GPU memory free when the target's weights began to load (GiB, the most
            over ranks: an upper bound of what SGLang's memory rule calls `pre`), if the log
            got that far.
        weights_gib: GPU memory the target's weights took (GiB, least over ranks).
        startup_time: The `startup_time` object (from 0.5.17), if there was one.
    """

    seconds: dict[str, float] = field(default_factory=dict)
    source: str = ""
    avail_gib: float | None = None
    weights_gib: float | None = None
    startup_time: dict[str, Any] | None = None

    @property
    def timed_s(self) -> float:
        """The seconds SGLang timed (every phase but `other`)."""
        return sum(self.seconds.values())

    def metrics(self, *, boot_s: float | None = None) -> dict[str, float]:
        """The trial metrics: `boot_<phase>_s` per timed phase (and `boot_other_s` given the
        measured boot), the memory facts."""
        out = {boot_metric(k): round(v, 3) for k, v in self.seconds.items()}
        if boot_s is not None and self.seconds:
            out[boot_metric("other")] = round(max(0.0, boot_s - self.timed_s), 3)
        if self.avail_gib is not None:
            out[AVAIL_METRIC] = self.avail_gib
        if self.weights_gib is not None:
            out[WEIGHTS_METRIC] = self.weights_gib
        return out


def parse_startup_line(text: str) -> dict[str, Any] | None:
    """The `startup_time` object an "Engine startup timings (s): ..." line prints, or None."""
    match = _STARTUP.search(text)
    if match is None:
        return None
    body = match["body"]
    out: dict[str, Any] = {}
    graphs = re.search(r"cuda_graph=\{(?P<inner>[^}]*)\}", body)
    if graphs is not None:
        out["cuda_graph"] = {k: float(v) for k, v in _PAIR.findall(graphs["inner"])}
        body = body.replace(graphs[0], "")
    out.update({k: float(v) for k, v in _PAIR.findall(body)})
    return out


def from_startup_time(startup_time: Mapping[str, Any]) -> dict[str, float]:
    """Phase seconds from a `startup_time` object (`/server_info`, 0.5.17+)."""
    out: dict[str, float] = {}
    for key, phase in (("load_weight", "load_weight"), ("kv_cache_allocation", "kv_cache")):
        value = startup_time.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[phase] = float(value)
    graphs = startup_time.get("cuda_graph")
    if isinstance(graphs, Mapping):
        out["cuda_graph"] = sum(
            float(v) for v in graphs.values() if isinstance(v, int | float) and v > 0
        )
    return out


@dataclass
class _Scan:
    """What the log's lines said, per rank."""

    per_rank: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    loads: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    startup: dict[str, Any] | None = None

    def line(self, rank: str, msg: str) -> None:
        """Take one log record's message."""
        if (found := _LOAD_BEGIN.search(msg)) is not None:
            if not self.loads[rank]:
                self.loads[rank].append(float(found[1]))  # free before the target's weights
            return
        if (found := _LOAD_END.search(msg)) is not None:
            self.per_rank[rank]["load_weight"] += float(found[1])
            if len(self.loads[rank]) == 1:
                self.loads[rank].append(float(found[3]))  # what the target's weights took
            return
        for pattern, phase in _TIMED:
            if (found := pattern.search(msg)) is not None:
                self.per_rank[rank][phase] += float(found[1])
                return
        if (line := parse_startup_line(msg)) is not None:
            self.startup = line


#: Lines that time a phase (the first that matches a message counts it).
_TIMED = ((_INIT, "init"), (_PIECEWISE, "piecewise_cuda_graph"), (_GRAPH, "cuda_graph"))


def parse_boot(log_text: str, *, server_info: Mapping[str, Any] | None = None) -> BootPhases:
    """The boot phases and memory facts of a server log (and its `/server_info`, if read).

    Args:
        log_text: The server's whole log (stdout and stderr).
        server_info: The server's `/server_info` answer, when it was read (0.5.17+ carries
            `startup_time`, which is preferred to the log's line of the same figures).

    Returns:
        What SGLang timed; phases it did not reach are absent.
    """
    scan = _Scan()
    for raw in log_text.splitlines():
        match = _LINE.match(raw.strip())
        if match is not None:
            scan.line(match["rank"] or "", match["msg"])
    seconds: dict[str, float] = {}
    for phase in BOOT_PHASES:
        values = [ranks[phase] for ranks in scan.per_rank.values() if phase in ranks]
        if values:
            seconds[phase] = max(values)  # the critical path: the slowest rank
    source = "log lines" if seconds else ""
    startup = scan.startup
    info_startup = (server_info or {}).get("startup_time")
    if isinstance(info_startup, Mapping):
        startup, source = dict(info_startup), "server_info"
    elif startup is not None:
        source = "startup timings line"
    if startup is not None:
        seconds.update(from_startup_time(startup))
    befores = [v[0] for v in scan.loads.values() if v]
    usages = [v[1] for v in scan.loads.values() if len(v) == 2]
    return BootPhases(
        seconds=seconds,
        source=source,
        avail_gib=max(befores) if befores else None,
        weights_gib=min(usages) if usages else None,
        startup_time=startup,
    )
