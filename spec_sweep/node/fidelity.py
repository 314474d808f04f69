"""Dummy-weight boots (`spec-sweep trial --dummy-weights`): the flags, and what the result keeps.

This module owns what makes a trial's boot a dummy-weight one and what such a boot can say.
SGLang boots any model with `--load-format dummy` (random weights allocated on the GPU, nothing
read) and a draft model with `--speculative-draft-load-format dummy`; `dummy_weights_spec` adds
both to the spec's fixed server arguments (the draft flag only when the configuration runs a
draft model, `command.draft_model`), with the flag names of the node's SGLang version (its flag
manifest), and turns the quality gate off. On SGLang 0.5.17 on an H100
(docs/evidence/two-fidelity.md) such a boot fails as the real boot fails, and its time to first
token and its decode cycle with the first token taken out (`decode_cycle_ms`) are the real
boot's; its acceptance is not (a dummy EAGLE-3 draft accepts nothing, NGRAM on a dummy target
accepts every draft token), nor its greedy text, nor a speculative configuration's throughput.
So `dummy_metrics` drops what a dummy boot cannot tell: the accept lengths and the quality
gate's metrics, and for a speculative configuration everything that follows from its acceptance
(throughput, its intervals, decode speed, inter-token latency, cost per token).
`dummy_boot_spec` and `dummy_result` are the one way `spec-sweep trial --dummy-weights` and a
sweep's dummy-weight trials (`budget.fidelity.mode: two`) boot and keep a dummy boot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spec_sweep.core.outcome import TrialResult
from spec_sweep.errors import SpecError
from spec_sweep.manifest import FlagManifest, ManifestError, load_manifest
from spec_sweep.node.command import draft_model
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_metrics import INTERVAL_NAMES, LEVEL_METRICS, QUALITY_METRICS

__all__ = [
    "DRAFT_LOAD_FORMAT",
    "DUMMY_TELLS",
    "LOAD_FORMAT",
    "QUALITY_NOT_JUDGED",
    "dummy_boot_spec",
    "dummy_metrics",
    "dummy_result",
    "dummy_weights_spec",
    "speculative",
]

#: SGLang's flag for the target model's load format.
LOAD_FORMAT = "load-format"
#: SGLang's flag for the draft model's load format (unset: the target's).
DRAFT_LOAD_FORMAT = "speculative-draft-load-format"
_DUMMY = "dummy"
_ALGORITHM = "speculative-algorithm"
#: What a dummy-weight boot tells, and what not, in one line.
DUMMY_TELLS = (
    "dummy weights: this boot tells whether the configuration boots, its decode cycle "
    "(decode_cycle_ms) and its time to first token; not its acceptance, its output quality, "
    "or the throughput of a speculative configuration"
)
#: The quality gate's verdict on a dummy-weight boot.
QUALITY_NOT_JUDGED = "not judged: dummy weights"
_DROPPED = ("accept_length", *QUALITY_METRICS)
#: What a speculative configuration's dummy boot keeps of the level metrics: the time to first
#: token and the decode cycle, the two that do not follow from its acceptance.
_KEPT_SPECULATIVE = ("ttft_p50_ms", "ttft_p99_ms", "decode_cycle_ms")
_DROPPED_SPECULATIVE = (
    *(m for m in LEVEL_METRICS if m not in _KEPT_SPECULATIVE),
    *INTERVAL_NAMES,
    "usd_per_million_tokens",
)


def _dest(manifest: FlagManifest | None, name: str) -> str:
    """The attribute SGLang stores flag `name` under (a spelling-independent identity)."""
    flag = manifest.lookup(name) if manifest is not None else None
    return flag.dest if flag is not None else name.replace("-", "_")


def dummy_weights_spec(
    spec: SweepSpec, config: Mapping[str, Any], *, manifest: FlagManifest | None
) -> SweepSpec:
    """The spec whose trial of `config` boots with dummy weights, and without the quality gate.

    Args:
        spec: The sweep.
        config: The trial's configuration.
        manifest: The flag manifest of the node's SGLang version (None: none is known here;
            the flags go out under SGLang's own names and the server judges them).

    Returns:
        A copy of `spec` whose `node.server_args` add `load-format: dummy` (and
        `speculative-draft-load-format: dummy` when `config` runs a draft model), whose
        `quality` is off (random weights write no text worth judging) and whose
        `node.weight_cache` is off (it boots as no daemon's client: it reads no weights).

    Raises:
        SpecError: The spec already sets a load format (in `node.server_args` or the search
            space), or the node's SGLang version lacks a flag the dummy boot needs.
    """
    drafting = draft_model(spec, config) is not None
    wanted = [LOAD_FORMAT, *([DRAFT_LOAD_FORMAT] if drafting else [])]
    taken = {_dest(manifest, name) for name in (LOAD_FORMAT, DRAFT_LOAD_FORMAT)}
    places: list[tuple[str, list[str]]] = [
        ("node.server_args", list(spec.node.server_args)),
        ("search_space.params", list(spec.params)),
    ]
    for where, keys in places:
        for key in keys:
            if not key.startswith("env.") and _dest(manifest, key) in taken:
                raise SpecError(
                    f"--dummy-weights: {where}.{key} is set, and a dummy-weight boot sets the "
                    f"load format itself: remove {key} from {where} or run without "
                    "--dummy-weights"
                )
    args = dict(spec.node.server_args)
    for name in wanted:
        flag = manifest.lookup(name) if manifest is not None else None
        if manifest is not None and flag is None:
            raise SpecError(
                f"--dummy-weights: SGLang {manifest.sglang_version} has no --{name} flag, so "
                "this configuration cannot boot without reading weights: run without "
                "--dummy-weights, or on an SGLang version that has the flag"
            )
        args[flag.name if flag is not None else name] = _DUMMY
    # a boot that reads no weights has none to map from the weight-cache daemon
    node = spec.node.model_copy(update={"server_args": args, "weight_cache": False})
    return spec.model_copy(update={"node": node, "quality": None})


def speculative(spec: SweepSpec, config: Mapping[str, Any]) -> bool:
    """Whether a trial of `config` decodes speculatively (its `speculative-algorithm`, else the
    fixed one of `node.server_args`, is set)."""
    algorithm = config.get(_ALGORITHM, spec.node.server_args.get(_ALGORITHM))
    return algorithm not in (None, False, "") and str(algorithm).lower() != "none"


def dummy_metrics(metrics: Mapping[str, float], *, speculative: bool) -> dict[str, float]:
    """A dummy-weight boot's metrics without those it cannot tell: the accept lengths (a dummy
    draft accepts nothing, NGRAM on a dummy target everything) and the quality gate's; with
    `speculative`, also every level metric that follows from the acceptance (throughput and its
    intervals, decode speed, inter-token latency) and the cost per token."""
    dropped = (*_DROPPED, *(_DROPPED_SPECULATIVE if speculative else ()))
    return {
        name: value
        for name, value in metrics.items()
        if not any(name == base or name.startswith(f"{base}_c") for base in dropped)
    }


def dummy_boot_spec(
    spec: SweepSpec, config: Mapping[str, Any], *, manifest_dir: Path | None
) -> SweepSpec:
    """`dummy_weights_spec` with the flag manifest of the spec's SGLang version (bundled, or
    built for the node under `manifest_dir`); without one the flags go out under SGLang's own
    names and the server judges them."""
    try:
        manifest = load_manifest(spec.node.sglang_version, folder=manifest_dir)
    except ManifestError:
        manifest = None
    return dummy_weights_spec(spec, config, manifest=manifest)


def dummy_result(spec: SweepSpec, config: Mapping[str, Any], result: TrialResult) -> TrialResult:
    """A dummy-weight boot's result with only the metrics it can tell (`dummy_metrics`)."""
    kept = dummy_metrics(result.metrics, speculative=speculative(spec, config))
    return dataclasses.replace(result, metrics=kept)
