"""A trial as the record of truth holds it, and its MLflow tags both ways.

This module owns `TrialRecord` (one attempt of a trial as the tracking store keeps it: run id,
status, configuration, failure mode, metrics, reason, timing, tags) and the one mapping between
a trial and its child run's tags and params: `trial_tags` when the run opens, `outcome_tags`
when it closes, `kill_tags` when an attempt is lost, `config_params`, and `record_from_run`
back. The store (`spec_sweep.store.tracker`) only moves these dicts in and out of MLflow, so
the layout of docs/design.md, "MLflow layout" is written down here once. Standard library and
the spec only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spec_sweep.core import names
from spec_sweep.core.config import Config, config_hash, render_value
from spec_sweep.core.ids import is_repeat
from spec_sweep.core.outcome import FailureMode, parse_mode
from spec_sweep.core.secrets import redact

__all__ = [
    "TrialRecord",
    "config_params",
    "kill_tags",
    "outcome_tags",
    "param_value",
    "record_from_run",
    "trial_tags",
]

_REASON_CHARS = 4000
_EXCERPT_CHARS = 4000
_PARAM_CHARS = 6000


@dataclass(frozen=True)
class TrialRecord:
    """A trial attempt as the store holds it."""

    run_id: str
    trial_id: str
    status: str
    config: Config
    failure_mode: FailureMode | None
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    elapsed_s: float | None = None
    start_time: int = 0
    end_time: int | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """Whether the trial ran to a classified outcome."""
        return self.status == "FINISHED" and self.failure_mode is not None

    @property
    def search(self) -> bool:
        """Whether it is a search trial (not a confirmation boot or baseline re-measure)."""
        return not is_repeat(self.trial_id)

    @property
    def measured(self) -> bool:
        """Whether it finished with failure mode `none`."""
        return self.finished and self.failure_mode is FailureMode.NONE

    def with_metrics(self, metrics: Mapping[str, float]) -> TrialRecord:
        """The same record with metrics added (as the store returns it once they are logged)."""
        return replace(self, metrics={**self.metrics, **metrics})


def param_value(value: Any) -> str:
    """A configuration value as an MLflow param (`null`, `true`, `false`, else as launched)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return render_value(value)


def config_params(config: Mapping[str, Any], secrets: Iterable[str] = ()) -> dict[str, str]:
    """A trial's params: its configuration, one param per parameter key, secrets redacted."""
    secrets = tuple(secrets)
    return {k: redact(param_value(v), secrets)[:_PARAM_CHARS] for k, v in config.items()}


def trial_tags(
    *,
    trial_id: str,
    config: Mapping[str, Any],
    parent_run_id: str | None = None,
    attempt: int | None = 1,
    fingerprint: str | None = None,
    confirms: str | None = None,
    manual: bool = False,
) -> dict[str, str]:
    """The tags a trial's run opens with (docs/design.md, "MLflow layout").

    Args:
        trial_id: Our trial id.
        config: The configuration.
        parent_run_id: The sweep's parent run (None for `spec-sweep trial`, which has none).
        attempt: The attempt number (None leaves it out).
        fingerprint: The node fingerprint the measurement may be reused on.
        confirms: The trial a confirmation boot repeats.
        manual: A trial run by `spec-sweep trial`.
    """
    tags = {names.TAG_PARENT: parent_run_id} if parent_run_id is not None else {}
    tags |= {
        names.TAG_KIND: names.KIND_TRIAL,
        names.TAG_TRIAL_ID: trial_id,
        names.TAG_CONFIG: json.dumps(dict(config)),
        names.TAG_CONFIG_HASH: config_hash(config),
    }
    if attempt is not None:
        tags[names.TAG_ATTEMPT] = str(attempt)
    if fingerprint:
        tags[names.TAG_FINGERPRINT] = fingerprint
    if confirms is not None:
        tags[names.TAG_CONFIRMS] = confirms
    if manual:
        tags[names.TAG_MANUAL] = "true"
    return tags


def outcome_tags(
    *,
    failure_mode: FailureMode,
    reason: str,
    elapsed_s: float,
    secrets: Iterable[str] = (),
    prompt_source: str = "",
    log_excerpt: str = "",
    reused_from: str | None = None,
) -> dict[str, str]:
    """The tags a trial's run closes with: how it ended, why, how long it took."""
    tags = {
        names.TAG_FAILURE: failure_mode.value,
        names.TAG_REASON: redact(reason, tuple(secrets))[:_REASON_CHARS],
        names.TAG_ELAPSED: f"{elapsed_s:.3f}",
    }
    if prompt_source:
        tags[names.TAG_PROMPTS] = prompt_source
    if log_excerpt:
        tags[names.TAG_LOG_EXCERPT] = log_excerpt[-_EXCERPT_CHARS:]
    if reused_from is not None:
        tags[names.TAG_REUSED] = reused_from
    return tags


def kill_tags(
    reason: str, *, failure_mode: FailureMode | None = None, elapsed_s: float | None = None
) -> dict[str, str]:
    """The tags of an attempt closed KILLED: why, how it ended when that is known, and the node
    time it held when its run's own times would overstate it (`loads.lost_attempt_seconds`)."""
    tags = {names.TAG_FAILURE: failure_mode.value} if failure_mode is not None else {}
    tags[names.TAG_REASON] = reason[:_REASON_CHARS]
    if elapsed_s is not None:
        tags[names.TAG_ELAPSED] = f"{elapsed_s:.3f}"
    return tags


def record_from_run(
    *,
    run_id: str,
    status: str,
    tags: Mapping[str, str],
    metrics: Mapping[str, float],
    start_time: int | None,
    end_time: int | None,
) -> TrialRecord:
    """A trial record from its run's fields (the inverse of the writers above)."""
    tags = dict(tags)
    try:
        config = json.loads(tags.get(names.TAG_CONFIG, "{}"))
    except ValueError:
        config = {}
    elapsed = tags.get(names.TAG_ELAPSED)
    return TrialRecord(
        run_id=run_id,
        trial_id=tags.get(names.TAG_TRIAL_ID, ""),
        status=status,
        config=config,
        failure_mode=parse_mode(tags.get(names.TAG_FAILURE)),
        # The node's telemetry (`system/...`) is not a result of the configuration.
        metrics={k: v for k, v in metrics.items() if not k.startswith(names.SYSTEM_PREFIX)},
        reason=tags.get(names.TAG_REASON, ""),
        elapsed_s=float(elapsed) if elapsed else None,
        start_time=int(start_time or 0),
        end_time=int(end_time) if end_time else None,
        tags=tags,
    )
