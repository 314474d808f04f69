"""The exceptions spec_sweep raises on purpose, in one tree that depends on nothing.

Three levels of failure (docs/design.md, "Failure modes"): a failed request is data, a failed
trial is a classified result (`core.outcome.FailureMode`), and only what stops a command is an
exception. `SpecError` means a bad spec or bad usage, found before anything launched (exit 2);
`TrialError` means the machinery around a trial failed, not the configuration under test;
everything else we raise on purpose is a `SpecSweepError` (exit 1). Standard library only, so
every module can import it without depending on the classifier.
"""

from __future__ import annotations

__all__ = ["SpecError", "SpecSweepError", "TrialError"]


class SpecSweepError(Exception):
    """Base class of every error spec_sweep raises on purpose."""


class SpecError(SpecSweepError):
    """A sweep spec or command-line usage is invalid; nothing was launched."""


class TrialError(SpecSweepError):
    """The trial infrastructure failed (not the configuration under test).

    A configuration that makes the server fail is a *result* (a `node.classify.Classification`),
    never this error; `TrialError` is for the machinery around it: a port that cannot be bound,
    a log file that cannot be written, GPUs that never became free
    (`node.gpu.GpuBusyError`), no free server port (`node.ports.PortUnavailableError`).
    """
