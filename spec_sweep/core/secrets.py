"""Secrets: values of the spec that never reach a log, a record or a screen in clear.

This module owns which values are secret (those of environment variables and server arguments
whose names contain TOKEN, KEY, SECRET or PASSWORD: docs/design.md, "MLflow layout") and
`redact`, which every writer of commands, reasons and logs applies. Standard library and the
spec only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from spec_sweep.spec import SweepSpec

__all__ = ["redact", "secret_values"]

_SECRET_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
_REDACTED = "***"


def secret_values(spec: SweepSpec) -> list[str]:
    """Values of env vars and server args whose names look secret."""
    values = [str(v) for k, v in spec.node.env.items() if _SECRET_RE.search(k) and v]
    values += [
        str(v)
        for k, v in spec.node.server_args.items()
        if _SECRET_RE.search(k) and isinstance(v, str | int | float) and str(v)
    ]
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret value in `text` with `***`."""
    for secret in secrets:
        text = text.replace(secret, _REDACTED)
    return text
