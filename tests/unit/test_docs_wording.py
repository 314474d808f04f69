"""What the documentation, scripts and code say: the product, not how it was built or where.

Two checks over the repository's text files, each failing with every offending `file:line`:

- No work-log wording ("the seventh session", "this session", "this stop", "last stop") in
  README.md, docs/, scripts/, spec_sweep/ and benchmarks/*.py: they say what a thing does and
  why; history goes to CHANGELOG.md and the evidence pages (docs/evidence/).
- No absolute path of a machine the code was written or measured on (`/work/main`, the real-GPU
  runner's `/tmp/ss/` session folder, `/root/repo`, `/root/site`) in README.md, docs/,
  benchmarks/, spec_sweep/, scripts/ or tests/: paths are relative to the repository or to the
  model folder. Server logs and answers recorded verbatim from real SGLang
  (`tests/fixtures/sglang/`) are left as SGLang printed them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth"
    r"|twenty-\w+|thirtieth|\d+(?:st|nd|rd|th))"
)
#: Work-log wording: an ordinal session, "this session", "this stop", "last stop".
DIARY = re.compile(
    rf"\b{_ORDINAL} session\b|\bthis (?:session|stop)\b|\blast stop\b", re.IGNORECASE
)
#: Absolute paths of the machines the project was developed and measured on.
MACHINE_PATH = re.compile(r"/work/main\b|/tmp/ss/|/root/(?:repo|site)\b")

_TEXT_SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".json", ".txt", ".csv", ".toml", ".lock"}
_SKIP_DIRS = {".venv", "__pycache__", ".git", "site", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _files(*places: str, suffixes: Iterable[str] = _TEXT_SUFFIXES) -> Iterator[Path]:
    wanted = set(suffixes)
    for place in places:
        path = ROOT / place
        if path.is_file():
            yield path
            continue
        if not path.is_dir():
            continue
        for file in sorted(path.rglob("*")):
            parts = set(file.relative_to(ROOT).parts)
            if file.is_file() and file.suffix in wanted and not parts & _SKIP_DIRS:
                yield file


def _hits(files: Iterable[Path], pattern: re.Pattern[str]) -> list[str]:
    hits = []
    for file in files:
        if file == Path(__file__).resolve():
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            match = pattern.search(line)
            if match:
                hits.append(f"{file.relative_to(ROOT)}:{number}: {match.group(0)!r}")
    return hits


def test_no_work_log_wording_in_docs_scripts_or_code() -> None:
    files = [
        *_files("README.md", "docs", "scripts", "spec_sweep"),
        *sorted((ROOT / "benchmarks").glob("*.py")),
    ]
    hits = _hits(files, DIARY)
    assert not hits, "work-log wording (say what the thing does and why):\n" + "\n".join(hits)


def test_no_absolute_machine_paths_in_evidence_docs_or_code() -> None:
    recorded = ROOT / "tests" / "fixtures" / "sglang"
    files = [
        f
        for f in _files("README.md", "docs", "benchmarks", "spec_sweep", "scripts", "tests")
        if recorded not in f.parents
    ]
    hits = _hits(files, MACHINE_PATH)
    assert not hits, "absolute machine paths (use repository-relative ones):\n" + "\n".join(hits)


def test_the_patterns_catch_what_they_are_for() -> None:
    for text in (
        "the eleventh session",
        "Twelfth session (1 x H200)",
        "the 12th session",
        "this session's training",
        "in this stop",
        "the last stop",
    ):
        assert DIARY.search(text), text
    for text in ("async with session.post(url)", "each session of pytest", "a session's cache"):
        assert not DIARY.search(text), text
    for text in ('"/work/main/.models/x"', "/tmp/ss/out/0.5.17", "/root/site/sglang/x.py"):
        assert MACHINE_PATH.search(text), text
    for text in ("/root/.ray/auth_token", "/tmp/ssw-ovh-1", "/tmp/spec_sweep-ray-1"):
        assert not MACHINE_PATH.search(text), text
