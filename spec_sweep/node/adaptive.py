"""A trial's adaptive speculative config on the node: the file SGLang opens, and its answer.

This module owns the two things a trial does for `--speculative-adaptive`
(docs/concepts/adaptive.md): it writes the trial's adaptive config (`core.adaptive`: the one
built after the search, one given with `spec-sweep trial --set`, or the spec's candidates) to
`adaptive-config.json` in the trial folder before launch, since SGLang takes a file path
(`write_config`); and after the trial it refuses a measurement SGLang took with adaptive mode
turned off ("speculative_adaptive disabled: ... Falling back to static speculative params."):
the trial asked for adaptive decoding and ran a static chain, so it is `invalid_args` with
SGLang's reason (`adaptive_verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spec_sweep.core.adaptive import adaptive_text
from spec_sweep.core.adaptive_rules import CONFIG_FILE, adaptive_on, disabled_in_log
from spec_sweep.core.outcome import FailureMode
from spec_sweep.spec import SweepSpec

__all__ = ["adaptive_verdict", "write_config"]


def write_config(spec: SweepSpec, config: Mapping[str, Any], trial_dir: Path) -> str | None:
    """Write the trial's adaptive config to its folder; returns the path (None: none to write)."""
    text = adaptive_text(spec, config)
    if text is None:
        return None
    path = trial_dir / CONFIG_FILE
    path.write_text(text + "\n")
    return str(path.resolve())


def adaptive_verdict(
    spec: SweepSpec,
    config: Mapping[str, Any],
    mode: FailureMode,
    reason: str,
    log_text: str,
) -> tuple[FailureMode, str]:
    """The trial's outcome, `invalid_args` when it asked for adaptive mode and SGLang ran the
    static parameters instead."""
    if mode is not FailureMode.NONE or not adaptive_on(config, spec.node.server_args):
        return mode, reason
    why = disabled_in_log(log_text)
    if why is None:
        return mode, reason
    return FailureMode.INVALID_ARGS, (
        f"SGLang turned adaptive speculative decoding off ({why}) and ran the static "
        "parameters: not the configuration asked for"
    )
