"""What SGLang's answers say: error texts, final counts, the server's accept length.

Pure helpers of the benchmark client (`client`): the readable part of an error response or an
error event (SGLang's `{"error": {"message": ...}}`), one line per error, clipped; an exception
as one line; an integer field read defensively; and the speculative accept length of
`/server_info` (its `internal_states`, or the top level on older SGLang versions).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "accept_length_of",
    "as_int",
    "clip",
    "error_message",
    "error_text",
    "event_error",
    "exception_text",
]

_MAX_ERROR_CHARS = 300


def event_error(data: bytes) -> str | None:
    """The error carried by an event without `completion_tokens`, if any."""
    try:
        event = json.loads(data)
    except ValueError:
        return f"unparsable event: {clip(data.decode(errors='replace'))}"
    if isinstance(event, dict) and "error" in event:
        return error_message(event["error"])
    return None


def error_message(error: Any) -> str:
    """An error object (dict with `message`, or anything) as one clipped line."""
    if isinstance(error, dict):
        message = error.get("message", error)
        return clip(str(message))
    return clip(str(error))


def error_text(body: bytes) -> str:
    """The readable part of an error response body (SGLang: `{"error": {"message": ...}}`)."""
    text = body.decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return clip(text) or "(empty body)"
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if key in data:
                return error_message(data[key])
    return clip(text)


def exception_text(exc: Exception, tokens: int) -> str:
    """An exception that ended a request, as one line (with the tokens it had streamed)."""
    detail = str(exc) or repr(exc)
    where = f" after {tokens} output tokens" if tokens else ""
    return clip(f"{type(exc).__name__}{where}: {detail}")


def clip(text: str) -> str:
    """`text` on one line, at most `_MAX_ERROR_CHARS` long."""
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def as_int(value: Any, default: int) -> int:
    """`value` if it is an integer (not a bool), else `default`."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return default


def accept_length_of(info: Any) -> float | None:
    """The positive, finite `avg_spec_accept_length` of a `/server_info` answer, if any."""
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    places = [states[0]] if isinstance(states, list) and states else []
    places.append(info)  # older SGLang versions spread the internal state into the top level
    for place in places:
        value = place.get("avg_spec_accept_length") if isinstance(place, dict) else None
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            return float(value)
    return None
