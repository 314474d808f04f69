"""How a trial ended, decided from its server's log, exit status, readiness and benchmark.

This module owns the per-line check a log watcher runs on every line a server prints
(``find_fatal``) and the one classifier that turns a trial's log, exit status and
readiness/benchmark outcome into exactly one ``Classification`` (``classify``), with the failure
modes of ``core.outcome.FailureMode`` (docs/design.md, "Failure modes"). The patterns it decides
from are data, in ``log_patterns``. It is pure: standard library only, no I/O.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.log_patterns import (
    CHILD_FAILED_PATTERN,
    ENVIRONMENT_PATTERNS,
    LINE_PREFIX,
    LOG_PATTERNS,
    LogPattern,
)

__all__ = ["Classification", "classify", "find_child_failed", "find_fatal", "killed_unexplained"]


@dataclass(frozen=True, slots=True)
class Classification:
    """The outcome of one trial.

    Attributes:
        mode: The failure mode (``FailureMode.NONE`` for a measured trial).
        reason: One line saying why, e.g. ``"OOM: torch.OutOfMemoryError: CUDA out of memory..."``.
        excerpt: The deciding log line with a few lines of context, or the log tail when no line
            decided.
    """

    mode: FailureMode
    reason: str
    excerpt: str


# Every pattern's regex contains one of these substrings literally (backslashes aside), and every
# line it matches contains it too, so a line without any of them is not fatal: that substring test
# (in C) is all an ordinary line costs, and a line with a keyword is searched only by the patterns
# that carry it. tests/unit/test_classify.py checks the invariant on every pattern's real message.
_KEYWORDS = (
    "rror",
    "xception",
    "out of memory",
    "Not enough memory",
    "no GPU memory for the KV cache",
    "memory capacity",
    "illegal memory",
    "ssert",
    "upport",
    "atchdog",
    "communicator was aborted",
    "operations have failed",
    "terminate called",
    "Capture cuda graph failed",
    "kernel image",
    "ALLOC_FAILED",
)
_NCCL_DEBUG = ("NCCL INFO", "NCCL WARN", "NCCL TRACE")


def _keywords_of(regex: str) -> tuple[str, ...]:
    literal = regex.replace("\\", "")
    return tuple(keyword for keyword in _KEYWORDS if keyword in literal)


_COMPILED: tuple[re.Pattern[str], ...] = tuple(re.compile(p.regex) for p in LOG_PATTERNS)
# keyword -> (table index, compiled regex) of the patterns that carry it, in precedence order.
_BY_KEYWORD: tuple[tuple[str, tuple[tuple[int, re.Pattern[str]], ...]], ...] = tuple(
    (
        keyword,
        tuple(
            (index, _COMPILED[index])
            for index, pattern in enumerate(LOG_PATTERNS)
            if keyword in _keywords_of(pattern.regex)
        ),
    )
    for keyword in _KEYWORDS
)
_UNKEYED = [p.regex for p in LOG_PATTERNS if not _keywords_of(p.regex)]
if _UNKEYED:  # pragma: no cover - a table edit without a keyword must fail loudly at import
    raise AssertionError(f"log patterns without a _KEYWORDS substring: {_UNKEYED}")

# Lines that may contain a pattern's text but never report a failure: NCCL's own debug output
# (also skipped early through _NCCL_DEBUG), traceback source lines (the statement that raises, a
# string literal, an assignment).
_NOT_FATAL = re.compile(
    r"\bNCCL (?:INFO|WARN|TRACE)\b"
    r"|\braise\s+[A-Za-z_][\w.]*\("
    r"|^\s*(?:[fFrRbBuU]{0,2}[\"']|(?:raise|assert|except|if|elif|return)\b)"
    r"|^\s+[A-Za-z_][\w.]*\s*\+?=\s"
)
_FRAME = re.compile(LINE_PREFIX + r"\s*File \"([^\"]+)\", line \d+")
_EXCEPTION_LINE = re.compile(
    LINE_PREFIX + r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::|\s*$)"
)
_USAGE = re.compile(r"^usage: ")

_LABELS: dict[FailureMode, str] = {
    FailureMode.NONE: "ok",
    FailureMode.OOM: "OOM",
    FailureMode.ASSERTION: "assertion",
    FailureMode.UNSUPPORTED: "unsupported",
    FailureMode.NCCL: "NCCL",
    FailureMode.INVALID_ARGS: "invalid args",
    FailureMode.STARTUP_TIMEOUT: "startup timeout",
    FailureMode.CRASH: "crash",
    FailureMode.HANG: "hang",
    FailureMode.BENCH_ERROR: "bench error",
    FailureMode.NODE_LOST: "node lost",
    FailureMode.ENVIRONMENT: "environment",
}
_CONTEXT_BEFORE = 8
_CONTEXT_AFTER = 3
_TAIL_LINES = 20
_MAX_LINE = 400
_MAX_EXCERPT_LINE = 1000
_SERVER_ARGS_FILE = "server_args.py"
# An exception that matches no pattern is still decided by the file that raised it: SGLang's
# argument checks reject the arguments; the all-reduce feature communicators failing to set up
# mean the feature does not work on this node (e.g. torch symmetric memory's `KeyError: 12` on
# SM120 in SGLang 0.5.13, a lookup in its per-architecture table).
_RAISING_FILES: tuple[tuple[str, FailureMode], ...] = (
    (_SERVER_ARGS_FILE, FailureMode.INVALID_ARGS),
    ("torch_symm_mem.py", FailureMode.UNSUPPORTED),
    ("flashinfer_comm_fusion.py", FailureMode.UNSUPPORTED),
    ("custom_all_reduce.py", FailureMode.UNSUPPORTED),
)


def _match(line: str) -> int | None:
    """Return the table index of the highest-precedence pattern matching ``line``, if any."""
    best: int | None = None
    for keyword, candidates in _BY_KEYWORD:
        if keyword not in line:
            continue
        for debug in _NCCL_DEBUG:
            if debug in line:
                return None
        for index, compiled in candidates:
            if best is not None and index >= best:
                break
            if compiled.search(line) is not None:
                best = index
                break
    if best is None or _NOT_FATAL.search(line) is not None:
        return None
    return best


def find_fatal(line: str) -> LogPattern | None:
    """Check one log line for a fatal message.

    Meant for a log watcher that sees every line a server prints: a line without any of the
    patterns' keywords costs one short substring scan. A fatal line means the trial has failed,
    but the watcher should let the server finish printing its traceback (a second or two, or until
    it exits) before stopping it, so that ``classify`` sees the whole story.

    Args:
        line: One line of server output, with or without its trailing newline.

    Returns:
        The highest-precedence matching pattern, or None when the line is not fatal.
    """
    index = _match(line)
    return None if index is None else LOG_PATTERNS[index]


_CHILD_FAILED = re.compile(CHILD_FAILED_PATTERN)


def find_child_failed(line: str) -> str | None:
    """The words of a line that says one of SGLang's processes failed, else None.

    For a log watcher: such a line ends the trial (after the usual settle for the traceback)
    even when the main process lives on; ``classify`` then gets it as ``child_failed``.
    """
    match = _CHILD_FAILED.search(line)
    return None if match is None else match[0]


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def _excerpt(lines: list[str], index: int) -> str:
    start = max(0, index - _CONTEXT_BEFORE)
    chunk = lines[start : index + _CONTEXT_AFTER + 1]
    return "\n".join(line[:_MAX_EXCERPT_LINE] for line in chunk)


def _tail(lines: list[str]) -> str:
    return "\n".join(line[:_MAX_EXCERPT_LINE] for line in lines[-_TAIL_LINES:])


def _innermost_frame(lines: list[str], index: int) -> str | None:
    """File of the traceback frame printed just above the exception line at ``index``."""
    for back in range(index - 1, max(-1, index - 6), -1):
        frame = _FRAME.match(lines[back])
        if frame is not None:
            return frame.group(1)
    return None


def _last_exception(lines: list[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[index]) and not _NOT_FATAL.search(lines[index]):
            return index
    return None


_ENVIRONMENT = tuple(re.compile(p) for p in ENVIRONMENT_PATTERNS)
_TRACEBACK_START = re.compile(LINE_PREFIX + r"Traceback \(most recent call last\):")
# Where SGLang builds and checks its arguments: `ServerArgs.__post_init__` in server_args.py,
# and from 0.5.13 the hooks it calls in `sglang/srt/arg_groups/` (e.g. speculative_hook.py).
_ARGUMENT_FRAMES = ("server_args.py", "/arg_groups/")


def _environment_line(lines: list[str]) -> int | None:
    """The line saying the node cannot run any server, if that is what ended it, else None.

    Only the exception that ended the server counts (the last exception line, or Python's own
    "Error while finding module specification" when there is none after it): a boot logs and
    survives optional imports that fail, and a server that died of OOM after such a line died
    of OOM.
    """
    last = _last_exception(lines)
    candidates = [last] if last is not None else []
    candidates += [
        i for i in range(len(lines) - 1, (last or -1), -1) if "finding module spec" in lines[i]
    ]
    for index in candidates:
        if any(pattern.search(lines[index]) for pattern in _ENVIRONMENT):
            return index
    return None


def _traceback_frames(lines: list[str], index: int) -> list[str]:
    """The files of the traceback that ends at line `index` (its last block only)."""
    frames: list[str] = []
    for back in range(index - 1, max(-1, index - 400), -1):
        if _TRACEBACK_START.match(lines[back]):
            break
        frame = _FRAME.match(lines[back])
        if frame is not None:
            frames.append(frame.group(1))
    return frames


def _while_building_arguments(lines: list[str], index: int) -> bool:
    """Whether the exception at `index` was raised while SGLang built its arguments."""
    return any(
        marker in frame for frame in _traceback_frames(lines, index) for marker in _ARGUMENT_FRAMES
    )


def _raised_from_known_file(lines: list[str]) -> tuple[int, FailureMode] | None:
    """The last exception raised from a file of `_RAISING_FILES`, with that file's mode."""
    for index in range(len(lines) - 1, -1, -1):
        if not _EXCEPTION_LINE.match(lines[index]):
            continue
        if _while_building_arguments(lines, index):
            return index, FailureMode.INVALID_ARGS
        frame = _innermost_frame(lines, index)
        if frame is None:
            continue
        for suffix, mode in _RAISING_FILES:
            if frame.endswith(suffix):
                return index, mode
    return None


def _describe_exit(exit_code: int) -> str:
    """Say how a process ended: ``-11`` -> ``"code -11 (SIGSEGV)"``."""
    number = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    try:
        name = signal.Signals(number).name if number > 0 else ""
    except ValueError:
        name = ""
    if not name:
        return f"code {exit_code}"
    return f"code {exit_code} ({name})" if exit_code < 0 else f"code {exit_code} (128+{name})"


def _decided(mode: FailureMode, lines: list[str], index: int) -> Classification:
    return Classification(
        mode=mode,
        reason=f"{_LABELS[mode]}: {_one_line(lines[index])}",
        excerpt=_excerpt(lines, index),
    )


#: Signals that end a server from outside. SGLang's own `kill_process_tree(os.getpid())`
#: SIGKILLs itself too, but only after its log says what went wrong.
_OUTSIDE_SIGNALS = frozenset({-signal.SIGKILL, -signal.SIGTERM})


def killed_unexplained(mode: FailureMode, reason: str, exit_code: int | None) -> bool:
    """Whether a crash is a SIGKILL or SIGTERM that nothing in the log explains: no fatal line
    decided it and no exception was logged (the reason rules 7 and 8 give, without a last
    exception). Such a kill came from outside the server: the machine, or our own teardown."""
    return (
        mode is FailureMode.CRASH
        and exit_code in _OUTSIDE_SIGNALS
        and f"exited with {_describe_exit(exit_code)}" in reason
        and "; last exception:" not in reason
    )


def _undecided(mode: FailureMode, detail: str, lines: list[str]) -> Classification:
    return Classification(mode=mode, reason=f"{_LABELS[mode]}: {detail}", excerpt=_tail(lines))


def classify(
    *,
    log_text: str,
    exit_code: int | None,
    ready: bool,
    boot_timed_out: bool = False,
    bench_hung: bool = False,
    bench_error: str | None = None,
    node_lost: bool = False,
    child_failed: str | None = None,
) -> Classification:
    """Classify how a trial ended: exactly one failure mode, a one-line reason and an excerpt.

    Rules, first match wins:

    1. ``node_lost`` -> ``node_lost``.
    2. Not ready, and a line says the node cannot run any server (``ENVIRONMENT_PATTERNS``: an
       import error, no GPU, a driver too old, a missing model) -> ``environment``.
    3. A fatal log line (``LOG_PATTERNS``, precedence = table order, then earliest line) decides
       its mode, even if the process still runs; if that line ends a traceback that passes
       through SGLang's argument construction (``server_args.py`` or ``arg_groups/``, at any
       depth: checks moved into hooks that ``ServerArgs.__post_init__`` calls), the mode is
       ``invalid_args``: the server rejected its arguments, deterministically.
    4. Any other exception raised while building the arguments -> ``invalid_args``; from an
       all-reduce feature communicator (torch symmetric memory, FlashInfer fusion, custom
       all-reduce) -> ``unsupported`` (``_RAISING_FILES``).
    5. Exit code 2 with argparse's ``usage:`` text -> ``invalid_args``.
    6. Not ready and the boot deadline passed -> ``startup_timeout``.
    7. Not ready otherwise (exited before ready, or one of its processes said it failed) ->
       ``crash``, naming the exit code or signal (``-11`` -> SIGSEGV) or the failure line, and
       the last exception line if there is one.
    8. Ready, and the process exited on its own, or one of its processes said it failed, during
       the benchmark -> ``crash``.
    9. Ready and the benchmark hung -> ``hang``.
    10. Ready and requests failed -> ``bench_error``.
    11. Otherwise -> ``none``.

    Args:
        log_text: The server's whole log (stdout and stderr).
        exit_code: The server's exit status if it exited on its own (negative: killed by that
            signal); None if it was still running when the trial stopped it (the trial's own
            SIGTERM is not a crash).
        ready: Whether the server became ready (health check passed).
        boot_timed_out: Whether the boot deadline passed before it was ready.
        bench_hung: Whether the benchmark stopped getting answers.
        bench_error: The benchmark's error summary when requests failed, else None.
        node_lost: Whether the node or its Ray worker went away.
        child_failed: What a line said when one of the server's processes failed while the trial
            still ran it (``find_child_failed``; the main process may live on); None if none did.

    Returns:
        The classification.
    """
    lines = log_text.splitlines()
    if node_lost:
        return _undecided(
            FailureMode.NODE_LOST, "the node or its Ray worker went away; retry elsewhere", lines
        )

    if not ready:
        environment = _environment_line(lines)
        if environment is not None:
            return _decided(FailureMode.ENVIRONMENT, lines, environment)

    fatal = _fatal_line(lines)
    if fatal is not None:
        return fatal

    raised = _raised_from_known_file(lines)
    if raised is not None:
        return _decided(raised[1], lines, raised[0])

    if exit_code == 2 and any(_USAGE.match(line) for line in lines):
        return _undecided(
            FailureMode.INVALID_ARGS, "exited with code 2 after printing argparse usage", lines
        )

    if not ready:
        return _never_ready(
            lines, exit_code=exit_code, boot_timed_out=boot_timed_out, child_failed=child_failed
        )
    return _after_ready(
        lines,
        exit_code=exit_code,
        bench_hung=bench_hung,
        bench_error=bench_error,
        child_failed=child_failed,
    )


def _fatal_line(lines: list[str]) -> Classification | None:
    """Rule 3: the fatal line of highest precedence (then the earliest) decides, if any."""
    best: tuple[int, int] | None = None  # (pattern index, line index)
    for line_index, line in enumerate(lines):
        pattern_index = _match(line)
        if pattern_index is not None and (best is None or pattern_index < best[0]):
            best = (pattern_index, line_index)
            if pattern_index == 0:
                break
    if best is None:
        return None
    pattern_index, line_index = best
    mode = LOG_PATTERNS[pattern_index].mode
    if mode is not FailureMode.INVALID_ARGS and _while_building_arguments(lines, line_index):
        mode = FailureMode.INVALID_ARGS
    return _decided(mode, lines, line_index)


def _never_ready(
    lines: list[str], *, exit_code: int | None, boot_timed_out: bool, child_failed: str | None
) -> Classification:
    """Rules 6 and 7: a server that never became ready timed out or crashed."""
    if boot_timed_out:
        return _undecided(
            FailureMode.STARTUP_TIMEOUT,
            "the server was not ready before the boot deadline",
            lines,
        )
    if exit_code is None and child_failed is not None:
        detail = f"a server process failed before ready ({child_failed!r})"
    elif exit_code is None:
        detail = "the server never became ready (still running, no fatal line)"
    else:
        detail = f"exited with {_describe_exit(exit_code)} before ready"
    last = _last_exception(lines)
    if last is not None:
        detail += f"; last exception: {_one_line(lines[last])}"
    return _undecided(FailureMode.CRASH, detail, lines)


def _after_ready(
    lines: list[str],
    *,
    exit_code: int | None,
    bench_hung: bool,
    bench_error: str | None,
    child_failed: str | None,
) -> Classification:
    """Rules 8 to 11: a ready server crashed, hung, failed requests, or was measured."""
    if exit_code is not None or child_failed is not None:
        how = (
            f"exited with {_describe_exit(exit_code)}"
            if exit_code is not None
            else f"a server process failed ({child_failed!r})"
        )
        detail = f"{how} during the benchmark"
        last = _last_exception(lines)
        if last is not None:
            detail += f"; last exception: {_one_line(lines[last])}"
        return _undecided(FailureMode.CRASH, detail, lines)
    if bench_hung:
        return _undecided(
            FailureMode.HANG, "the server stopped answering during the benchmark", lines
        )
    if bench_error is not None:
        return _undecided(FailureMode.BENCH_ERROR, _one_line(bench_error), lines)
    return Classification(mode=FailureMode.NONE, reason=_LABELS[FailureMode.NONE], excerpt="")
