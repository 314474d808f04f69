"""The quality gate's rule: is a greedy output identical, a near-tie flip, or wrong?

This module owns the judging of README "Output quality", pure (no I/O): a trial's greedy output
of a prompt is compared with the baseline's over the first `quality.tokens` tokens and is

* identical;
* a near-tie flip: the first different token is one the baseline itself rated within
  `quality.margin_nats` of its own choice at that position (natural-log probability, from the
  baseline's top log-probabilities). Another kernel's rounding decides such a near tie the other
  way: benign. The continuation is another greedy path from there on and is not compared;
* a confident divergence: any other first difference (the trial's token is further below the
  baseline's choice, or outside the baseline's top list, or the baseline reported nothing
  there, or the trial's output ended early).

A trial fails (`QualityCheck.passed` False, then `wrong_output`) when the share of prompts with
a confident divergence exceeds `quality.max_confident_share`. The defaults and how they were
measured are in the README; the requests and the record are `node.quality`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

from spec_sweep.spec import QualitySpec

__all__ = [
    "Divergence",
    "PromptVerdict",
    "QualityCheck",
    "Top",
    "agreement",
    "judge_outputs",
    "judge_prompt",
    "parse_top_logprobs",
]

#: One output position's top list: (logprob, token id), best first.
Top: TypeAlias = list[tuple[float, int]]


class Divergence(StrEnum):
    """How a prompt's greedy output compares with the baseline's."""

    IDENTICAL = "identical"
    """The first `tokens` tokens are the baseline's."""
    NEAR_TIE = "near_tie"
    """First differs at a token the baseline rated within `margin_nats` of its choice."""
    CONFIDENT = "confident"
    """First differs where the baseline was confident: wrong."""


@dataclass(frozen=True)
class PromptVerdict:
    """The gate's verdict on one prompt.

    Attributes:
        index: The prompt's place in the fixed set.
        divergence: Identical, a near-tie flip or a confident divergence.
        position: The first different position (0-based; None when identical).
        margin: The baseline's top-1 minus top-2 log-probability there (None: not reported).
        gap: The baseline's top-1 log-probability minus its log-probability of the trial's
            token there (None: the token is outside the baseline's top list, or none).
        baseline_token: The baseline's token there.
        trial_token: The trial's token there (None: its output ended).
    """

    index: int
    divergence: Divergence
    position: int | None = None
    margin: float | None = None
    gap: float | None = None
    baseline_token: int | None = None
    trial_token: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The verdict as `quality.json` holds it."""
        out: dict[str, Any] = {"prompt_index": self.index, "verdict": self.divergence.value}
        if self.position is not None:
            out.update(
                position=self.position,
                margin=self.margin,
                gap=self.gap,
                baseline_token=self.baseline_token,
                trial_token=self.trial_token,
            )
        return out


@dataclass(frozen=True)
class QualityCheck:
    """The gate's verdict on one trial.

    Attributes:
        judged: Whether the outputs were judged (False: no reference, or the request failed).
        passed: Whether the trial may count (True when not judged).
        reason: One line: the verdict and the first deciding prompt, or why not judged.
        verdicts: One per prompt (empty when not judged).
        agreement: Mean common prefix over the first N tokens / N (informational).
        tokens: N, the tokens judged per prompt.
        remark: What a passing trial's reason must say even with identical outputs.
    """

    judged: bool
    passed: bool
    reason: str
    verdicts: tuple[PromptVerdict, ...] = ()
    agreement: float | None = None
    tokens: int = 0
    remark: str = ""

    def _count(self, kind: Divergence) -> int:
        return sum(1 for v in self.verdicts if v.divergence is kind)

    @property
    def confident(self) -> int:
        """Prompts with a confident divergence."""
        return self._count(Divergence.CONFIDENT)

    @property
    def near_ties(self) -> int:
        """Prompts whose first difference is a near-tie flip."""
        return self._count(Divergence.NEAR_TIE)

    @property
    def confident_share(self) -> float | None:
        """The share of prompts with a confident divergence (None when not judged)."""
        return self.confident / len(self.verdicts) if self.judged and self.verdicts else None

    @property
    def note(self) -> str:
        """What a passing trial's reason says about quality ("" when outputs were identical)."""
        if not self.judged or self.near_ties or self.confident:
            return self.reason
        return self.remark

    def metrics(self) -> dict[str, float]:
        """The trial's quality metrics (README, "MLflow layout"); none when not judged."""
        share = self.confident_share
        if share is None:
            return {}
        first = [v.position for v in self.verdicts if v.position is not None]
        return {
            "quality_agreement": round(self.agreement or 0.0, 4),
            "quality_confident_share": round(share, 4),
            "quality_near_tie_flips": float(self.near_ties),
            "quality_first_divergence": float(min(first) if first else self.tokens),
        }


def parse_top_logprobs(meta: Any) -> list[Top | None] | None:
    """`meta_info.output_top_logprobs` as (logprob, token id) lists, best first.

    SGLang 0.5.13 and 0.5.17 (`TokenizerManager.add_logprob_to_meta_info`) give one entry per
    output position, each a list of `top_logprobs_num` `[logprob, token_id, text-or-null]`, or
    null where none were computed.

    Returns:
        One top list per position (None for a position without one), or None when the answer
        has no `output_top_logprobs`.
    """
    raw = meta.get("output_top_logprobs") if isinstance(meta, dict) else None
    if not isinstance(raw, list):
        return None
    out: list[Top | None] = []
    for entries in raw:
        top: Top = []
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, list | tuple) and len(entry) >= 2 and entry[0] is not None:
                top.append((float(entry[0]), int(entry[1])))
        top.sort(key=lambda e: -e[0])
        out.append(top or None)
    return out


def agreement(
    reference: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *, tokens: int
) -> tuple[float, int | None]:
    """Mean common-prefix agreement over the first `tokens` tokens, and the first diverging prompt.

    Informational (`quality_agreement`): after a near-tie flip the paths differ, so it does not
    tell a benign flip from a bug; the verdict is `judge_outputs`'.

    Returns:
        (mean over prompts of common prefix / N, index of the first prompt that differs or None).

    Raises:
        ValueError: different prompt counts, or no prompt.
    """
    if len(reference) != len(outputs) or not reference:
        raise ValueError(f"{len(reference)} reference outputs but {len(outputs)} outputs")
    scores: list[float] = []
    first: int | None = None
    for i, (ref, out) in enumerate(zip(reference, outputs, strict=True)):
        ref_n, out_n = list(ref[:tokens]), list(out[:tokens])
        same = _common_prefix(ref_n, out_n)
        scores.append(same / tokens)
        if first is None and (same < tokens or ref_n != out_n):
            first = i
    return sum(scores) / len(scores), first


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    return same


def judge_prompt(
    reference: Sequence[int],
    top: Sequence[Top | None] | None,
    output: Sequence[int],
    *,
    index: int,
    tokens: int,
    margin_nats: float,
) -> PromptVerdict:
    """Judge one prompt's greedy output against the baseline's (see the module doc).

    Args:
        reference: The baseline's output ids.
        top: The baseline's top log-probabilities per position (None: not reported).
        output: The trial's output ids.
        index: The prompt's place in the set.
        tokens: N: only the first N tokens are judged.
        margin_nats: A first different token the baseline rated less than this far below its
            own choice is a near-tie flip.
    """
    ref, out = list(reference[:tokens]), list(output[:tokens])
    pos = _common_prefix(ref, out)
    if pos >= len(ref):
        return PromptVerdict(index, Divergence.IDENTICAL)
    trial_token = out[pos] if pos < len(out) else None
    entries = top[pos] if top is not None and pos < len(top) else None
    margin = gap = None
    if entries:
        ranked = sorted(lp for lp, _ in entries)[::-1]
        margin = ranked[0] - ranked[1] if len(ranked) > 1 else None
        mine = [lp for lp, token in entries if token == trial_token]
        gap = ranked[0] - max(mine) if mine else None
    near = gap is not None and gap < margin_nats
    return PromptVerdict(
        index,
        Divergence.NEAR_TIE if near else Divergence.CONFIDENT,
        position=pos,
        margin=margin,
        gap=gap,
        baseline_token=ref[pos],
        trial_token=trial_token,
    )


def judge_outputs(
    reference: Sequence[Sequence[int]],
    top: Sequence[Sequence[Top | None] | None] | None,
    outputs: Sequence[Sequence[int]],
    *,
    quality: QualitySpec,
) -> QualityCheck:
    """Judge a trial's greedy outputs against the baseline's (see the module doc).

    Args:
        reference: The baseline's output ids per prompt.
        top: The baseline's top log-probabilities per prompt and position (None: none).
        outputs: The trial's output ids per prompt (same prompts, same order).
        quality: The gate's settings (`tokens`, `margin_nats`, `max_confident_share`).

    Raises:
        ValueError: different prompt counts, or no prompt.
    """
    score, _ = agreement(reference, outputs, tokens=quality.tokens)
    verdicts = tuple(
        judge_prompt(
            ref,
            top[i] if top is not None and i < len(top) else None,
            out,
            index=i,
            tokens=quality.tokens,
            margin_nats=quality.margin_nats,
        )
        for i, (ref, out) in enumerate(zip(reference, outputs, strict=True))
    )
    share = sum(v.divergence is Divergence.CONFIDENT for v in verdicts) / len(verdicts)
    passed = share <= quality.max_confident_share + 1e-9
    reason = _reason(verdicts, share, passed=passed, quality=quality)
    return QualityCheck(True, passed, reason, verdicts, score, quality.tokens)


def _where(v: PromptVerdict) -> str:
    """One divergence in words."""
    if v.trial_token is None:
        token = "the output ended"
    elif v.gap is None:
        token = f"token {v.trial_token} outside the baseline's top list"
    else:
        token = f"token {v.trial_token} {v.gap:.4g} nats below the baseline's {v.baseline_token}"
    margin = f"top-2 margin {v.margin:.4g} nats" if v.margin is not None else "no margin reported"
    return f"prompt #{v.index} at token {v.position}: {token} ({margin})"


def _reason(
    verdicts: Sequence[PromptVerdict], share: float, *, passed: bool, quality: QualitySpec
) -> str:
    n = len(verdicts)
    confident = [v for v in verdicts if v.divergence is Divergence.CONFIDENT]
    near = [v for v in verdicts if v.divergence is Divergence.NEAR_TIE]
    identical = n - len(confident) - len(near)
    if not confident and not near:
        return f"greedy outputs identical to the baseline's on {n}/{n} prompts"
    flips = f"{len(near)}/{n} prompts flipped at a near tie"
    if near:
        widest = max(v.gap or 0.0 for v in near)
        flips += f" (widest {widest:.4g} < quality.margin_nats {quality.margin_nats:g} nats)"
    share_text = (
        f"(share {share:.3g} {'<=' if passed else '>'} quality.max_confident_share "
        f"{quality.max_confident_share:g})"
    )
    confident_text = f"{len(confident)}/{n} prompts diverge where the baseline was confident"
    if passed:
        text = f"quality passed: {flips}, {identical} identical, {confident_text} {share_text}"
    else:
        text = f"{confident_text} {share_text}, {flips}, {identical} identical"
    if confident:
        text += f"; first confident: {_where(confident[0])}"
    return text
