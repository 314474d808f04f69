"""Trial ids: the baseline's, a search trial's, and a confirmation boot's.

`t0000` is the baseline, `t<NNNN>` the N-th search trial, `<trial id>.r<n>` the n-th
confirmation boot (or baseline re-measure) of a trial: a repeat runs the same configuration
again under its own id, so the record tells search trials and repeats apart by id alone.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BASELINE_ID",
    "is_repeat",
    "next_index",
    "repeat_id",
    "repeat_number",
    "repeated_of",
    "trial_name",
]

#: The id of the baseline trial (evaluated first by every sweep).
BASELINE_ID = "t0000"
_SEP = ".r"


def trial_name(index: int) -> str:
    """The id of the `index`-th trial of a sweep (`t0000` is the baseline)."""
    return f"t{index:04d}"


def next_index(trial_ids: Iterable[str]) -> int:
    """The index of the next new trial after these ids (1 when there are none)."""
    indices = [int(t[1:]) for t in trial_ids if t[1:].isdigit()]
    return max(indices, default=0) + 1


def repeat_id(trial_id: str, n: int) -> str:
    """The id of the `n`-th confirmation boot of `trial_id` (`t0007.r1`)."""
    return f"{trial_id}{_SEP}{n}"


def is_repeat(trial_id: str) -> bool:
    """Whether a trial id is a confirmation boot (or a baseline re-measure)."""
    return _SEP in trial_id


def repeated_of(trial_id: str) -> str:
    """The trial id a confirmation boot repeats (the id itself for a search trial)."""
    return trial_id.split(_SEP, 1)[0]


def repeat_number(trial_id: str) -> int:
    """The number of a confirmation boot (`t0007.r2` -> 2)."""
    return int(trial_id.rsplit(_SEP, 1)[1])
