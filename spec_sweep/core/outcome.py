"""How a trial ended: the failure modes, the trial's result and what it tells Ray Tune.

This module owns the outcome of one trial in its two travelling shapes, each with one
serializer each way:

- `TrialResult`: everything a trial ended with (failure mode, reason, metrics, the command it
  launched, its log excerpt), written to the trial folder as `result.json` before anything is
  recorded (`to_dict` / `from_dict`);
- `TrialReport`: what a trial reports to Ray Tune, which tells the searcher and the live table
  (`to_tune` / `from_tune`; the keys are `names.RESULT_*`).

How the record reaches MLflow and back is `record`. `FailureMode` is the one list of ways a
trial ends (docs/design.md, "Failure modes"). Standard library only.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from spec_sweep.core import names
from spec_sweep.core.config import Config
from spec_sweep.core.secrets import redact_argv, redact_env

__all__ = ["REUSABLE_MODES", "FailureMode", "TrialReport", "TrialResult"]


class FailureMode(enum.StrEnum):
    """How a trial ended (docs/design.md, "Failure modes"); exactly one per trial."""

    NONE = "none"
    """The trial finished and was measured."""
    OOM = "oom"
    """GPU memory ran out (weights, KV cache, CUDA-graph capture, cuBLAS/NCCL buffers)."""
    ASSERTION = "assertion"
    """An assertion failed (``AssertionError``, DeepEP host/device or CUDA device asserts)."""
    UNSUPPORTED = "unsupported"
    """A feature or the GPU architecture is not supported by a kernel or backend."""
    NCCL = "nccl"
    """A collective failed or timed out (NCCL / torch.distributed)."""
    INVALID_ARGS = "invalid_args"
    """The server rejected its arguments (argparse or ServerArgs validation)."""
    STARTUP_TIMEOUT = "startup_timeout"
    """The server did not become ready before the boot deadline."""
    CRASH = "crash"
    """The server exited (or died) for another reason."""
    HANG = "hang"
    """The server stopped answering during the benchmark."""
    BENCH_ERROR = "bench_error"
    """The server answered, but requests failed."""
    WRONG_OUTPUT = "wrong_output"
    """The server answered, but its greedy outputs diverge where the baseline was confident."""
    NODE_LOST = "node_lost"
    """The node or its Ray worker went away; the trial is retried elsewhere."""
    ENVIRONMENT = "environment"
    """The node cannot start any server: an import error, no GPU visible, a driver too old for
    the CUDA runtime, a missing model. Not the configuration's fault: the sweep stops."""


#: Outcomes that asking again would not change (a hang or a crash may be transient).
REUSABLE_MODES = frozenset(
    {
        FailureMode.NONE,
        FailureMode.OOM,
        FailureMode.ASSERTION,
        FailureMode.UNSUPPORTED,
        FailureMode.INVALID_ARGS,
    }
)


def parse_mode(text: str | None) -> FailureMode | None:
    """A failure mode from its recorded text (None: absent or not a mode we know)."""
    if text and text in FailureMode._value2member_map_:
        return FailureMode(text)
    return None


@dataclass(frozen=True)
class TrialResult:
    """How one trial ended, with everything needed to record it.

    Attributes:
        trial_id: The trial's id (unique within a sweep).
        config: The configuration (parameter key -> value).
        failure_mode: Exactly one outcome (docs/design.md, "Failure modes").
        reason: One line saying why.
        metrics: Metric name -> value (docs/design.md, "MLflow layout"), only what was measured.
        command: The server argv as launched (`python` not yet resolved).
        env: The environment variables the trial added.
        log_path: The server log, if a server was launched.
        log_excerpt: The log lines that decided the outcome.
        elapsed_s: Wall time of the whole trial.
        prompt_source: Where the prompts came from (random ids and their range, or text).
        exit_code: The server's own exit status, if it exited before being stopped.
        gpu_released: Whether the GPU memory was confirmed released (None without GPUs).
        started_at: Wall-clock start (epoch seconds).
    """

    trial_id: str
    config: Config
    failure_mode: FailureMode
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    log_excerpt: str = ""
    elapsed_s: float = 0.0
    prompt_source: str = ""
    exit_code: int | None = None
    gpu_released: bool | None = None
    started_at: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the trial was measured."""
        return self.failure_mode is FailureMode.NONE

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the trial folder's `result.json`), secret-named values of the
        command and environment hidden (`secrets.redact_argv`; a sealed spec's are already)."""
        out = asdict(self)
        out["failure_mode"] = self.failure_mode.value
        out["command"] = redact_argv(self.command)
        out["env"] = redact_env(self.env)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialResult:
        """The inverse of `to_dict`."""
        values = dict(data)
        values["failure_mode"] = FailureMode(values["failure_mode"])
        values["command"] = tuple(values.get("command", ()))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in known})


_REPORT_KEYS = frozenset(
    {
        names.RESULT_TRIAL_ID,
        names.RESULT_FAILURE,
        names.RESULT_REASON,
        names.RESULT_FROM_RECORD,
        names.RESULT_INTERRUPTED,
        names.RESULT_ENVIRONMENT,
        names.RESULT_TIME_TRIAL,
        names.RESULT_TIME_RECORD,
    }
)


@dataclass(frozen=True)
class TrialReport:
    """What one trial tells Ray Tune (and through it the searcher and the live table).

    Attributes:
        trial_id: Our trial id.
        failure_mode: How it ended; None when it did not end (`interrupted`).
        reason: One line saying why.
        metrics: What it measured (with the speed-up over the baseline once known).
        from_record: Answered from the record (a finished trial, or a reused measurement).
        interrupted: The driver stopped it (Ctrl-C) or the node cannot start any server.
        environment: Why the node cannot start any server (the sweep stops), if so.
        time_trial_s: Wall time of the trial itself.
        time_record_s: Time spent reading and writing the record.
    """

    trial_id: str
    failure_mode: FailureMode | None = None
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    from_record: bool = False
    interrupted: bool = False
    environment: str | None = None
    time_trial_s: float | None = None
    time_record_s: float | None = None

    @property
    def ended(self) -> bool:
        """Whether the trial reached a classified outcome the searcher may learn from."""
        return not self.interrupted and self.failure_mode is not None

    def to_tune(self) -> dict[str, Any]:
        """The flat dict Tune records (metrics at the top level, as Tune expects them)."""
        out: dict[str, Any] = {names.RESULT_TRIAL_ID: self.trial_id}
        if self.interrupted:
            out[names.RESULT_INTERRUPTED] = True
            if self.environment is not None:
                out[names.RESULT_ENVIRONMENT] = self.environment
            out[names.RESULT_REASON] = self.reason
            return out
        out[names.RESULT_FAILURE] = (self.failure_mode or FailureMode.CRASH).value
        out[names.RESULT_REASON] = self.reason
        out[names.RESULT_FROM_RECORD] = self.from_record
        out.update({k: float(v) for k, v in self.metrics.items()})
        if self.time_trial_s is not None:
            out[names.RESULT_TIME_TRIAL] = self.time_trial_s
        if self.time_record_s is not None:
            out[names.RESULT_TIME_RECORD] = self.time_record_s
        return out

    @classmethod
    def from_tune(cls, data: Mapping[str, Any] | None) -> TrialReport:
        """The inverse of `to_tune` (Tune's own bookkeeping keys land among the metrics)."""
        data = data or {}
        metrics = {
            k: float(v)
            for k, v in data.items()
            if k not in _REPORT_KEYS and isinstance(v, int | float) and not isinstance(v, bool)
        }
        environment = data.get(names.RESULT_ENVIRONMENT)
        return cls(
            trial_id=str(data.get(names.RESULT_TRIAL_ID, "")),
            failure_mode=parse_mode(data.get(names.RESULT_FAILURE)),
            reason=str(data.get(names.RESULT_REASON, "")),
            metrics=metrics,
            from_record=bool(data.get(names.RESULT_FROM_RECORD, False)),
            interrupted=bool(data.get(names.RESULT_INTERRUPTED, False)),
            environment=str(environment) if environment else None,
            time_trial_s=_number(data.get(names.RESULT_TIME_TRIAL)),
            time_record_s=_number(data.get(names.RESULT_TIME_RECORD)),
        )


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
