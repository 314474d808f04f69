"""The quality gate's rule: are a trial's greedy outputs identical, equivalent, lossy or wrong?

This module owns the judging of the output-quality gate (docs/concepts/quality-gate.md), pure (no
I/O). A trial's greedy outputs of the fixed prompts are compared with the baseline's over the
first `quality.tokens` tokens, and the trial is judged on the evidence of all its prompts at once:

* The deficit (`deficit`, nats per token): how much less likely the baseline itself finds the
  trial's tokens than its own, per token judged. At each prompt's first different token the
  baseline's log-probability of its own choice minus that of the trial's token (a token outside
  its top list counts as the list's lowest, which favours the trial; a difference where the
  baseline reported no list counts as `_UNSEEN_GAP_NATS`), summed over the prompts and divided
  by the tokens judged (every position up to and including each prompt's first difference; the
  paths differ after it). Exact ties (bf16 logits tie often) cost nothing; a trial that leaves
  the baseline rarely, and only where it hesitated, scores near 0; one that leaves it early,
  often or where it was sure scores high.
* The class: `identical` (every prompt equal), `equivalent` (deficit <=
  `quality.max_equivalent_deficit`: what another kernel's rounding does), `lossy` (above it, up to
  `quality.min_wrong_deficit`: outputs change beyond numerical noise, e.g. an fp8 KV cache or fp8
  weights), `wrong` (above that: tokens the baseline did not consider, e.g. a kernel bug). A trial
  passes when it is identical or equivalent, or lossy with `quality.allow_lossy`.

Each prompt also gets a verdict for the record (`PromptVerdict`): identical, a near-tie flip (the
first different token within `quality.margin_nats` of the baseline's choice) or a confident
divergence. Those labels explain a trial; the class decides it. The requests and the record are
`node.quality`'s; how the defaults were measured is on the quality-gate page.
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
    "QualityClass",
    "Top",
    "agreement",
    "classify_deficit",
    "deficit",
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


class QualityClass(StrEnum):
    """A trial's outputs against the baseline's, on the evidence of all prompts."""

    IDENTICAL = "identical"
    """Every prompt's first `tokens` tokens are the baseline's."""
    EQUIVALENT = "equivalent"
    """Differences another kernel's rounding explains (deficit <= `max_equivalent_deficit`)."""
    LOSSY = "lossy"
    """Outputs change beyond numerical noise (fp8 caches, quantized weights)."""
    WRONG = "wrong"
    """Tokens the baseline did not consider (deficit > `min_wrong_deficit`): a bug."""


#: How far below the baseline's choice a different token counts where the baseline reported no
#: top list (nats): as sure as a model gets, so such a difference reads as lossy or wrong.
_UNSEEN_GAP_NATS = 10.0


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
        quality_class: The class that decided (None when not judged).
        deficit: The deficit (nats per token; None when not judged).
    """

    judged: bool
    passed: bool
    reason: str
    verdicts: tuple[PromptVerdict, ...] = ()
    agreement: float | None = None
    tokens: int = 0
    remark: str = ""
    quality_class: QualityClass | None = None
    deficit: float | None = None

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
    def lossy(self) -> bool:
        """Whether the outputs were judged lossy (passed only under `quality.allow_lossy`)."""
        return self.quality_class is QualityClass.LOSSY

    @property
    def note(self) -> str:
        """What a passing trial's reason says about quality ("" when outputs were identical)."""
        if not self.judged or self.near_ties or self.confident:
            return self.reason
        return self.remark

    def metrics(self) -> dict[str, float]:
        """The trial's quality metrics (docs/mlflow.md); none when not judged."""
        share = self.confident_share
        if share is None:
            return {}
        first = [v.position for v in self.verdicts if v.position is not None]
        return {
            "quality_agreement": round(self.agreement or 0.0, 4),
            "quality_confident_share": round(share, 4),
            "quality_near_tie_flips": float(self.near_ties),
            "quality_first_divergence": float(min(first) if first else self.tokens),
            "quality_deficit": round(self.deficit or 0.0, 6),
            "quality_lossy": 1.0 if self.lossy else 0.0,
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


def _first_gap(
    reference: Sequence[int], top: Sequence[Top | None] | None, output: Sequence[int], tokens: int
) -> tuple[int, float]:
    """(tokens judged, the baseline's log-probability gap at the first difference; 0 if none)."""
    ref, out = list(reference[:tokens]), list(output[:tokens])
    pos = _common_prefix(ref, out)
    if pos >= len(ref):
        return len(ref), 0.0
    entries = top[pos] if top is not None and pos < len(top) else None
    if not entries:
        return pos + 1, _UNSEEN_GAP_NATS
    lps = {token: lp for lp, token in entries}
    chosen = out[pos] if pos < len(out) else None
    mine = lps.get(chosen, min(lps.values())) if chosen is not None else min(lps.values())
    return pos + 1, max(lps.values()) - mine


def deficit(
    reference: Sequence[Sequence[int]],
    top: Sequence[Sequence[Top | None] | None] | None,
    outputs: Sequence[Sequence[int]],
    *,
    tokens: int,
) -> float:
    """The deficit of a trial's greedy outputs (nats per token judged; module doc).

    Raises:
        ValueError: different prompt counts, or no prompt.
    """
    if len(reference) != len(outputs) or not reference:
        raise ValueError(f"{len(reference)} reference outputs but {len(outputs)} outputs")
    judged, lost = 0, 0.0
    for i, (ref, out) in enumerate(zip(reference, outputs, strict=True)):
        n, gap = _first_gap(ref, top[i] if top is not None and i < len(top) else None, out, tokens)
        judged += n
        lost += gap
    return lost / judged if judged else 0.0


def classify_deficit(value: float, *, identical: bool, quality: QualitySpec) -> QualityClass:
    """The class of a trial from its deficit (module doc)."""
    if identical:
        return QualityClass.IDENTICAL
    if value <= quality.max_equivalent_deficit:
        return QualityClass.EQUIVALENT
    if value <= quality.min_wrong_deficit:
        return QualityClass.LOSSY
    return QualityClass.WRONG


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
        quality: The gate's settings (`tokens`, `margin_nats`, the deficit bounds, `allow_lossy`).

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
    value = deficit(reference, top, outputs, tokens=quality.tokens)
    identical = all(v.divergence is Divergence.IDENTICAL for v in verdicts)
    kind = classify_deficit(value, identical=identical, quality=quality)
    passed = kind in (QualityClass.IDENTICAL, QualityClass.EQUIVALENT) or (
        kind is QualityClass.LOSSY and quality.allow_lossy
    )
    reason = _reason(verdicts, kind, value, passed=passed, quality=quality)
    return QualityCheck(
        True, passed, reason, verdicts, score, quality.tokens, quality_class=kind, deficit=value
    )


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
    verdicts: Sequence[PromptVerdict],
    kind: QualityClass,
    value: float,
    *,
    passed: bool,
    quality: QualitySpec,
) -> str:
    n = len(verdicts)
    if kind is QualityClass.IDENTICAL:
        return f"greedy outputs identical to the baseline's on {n}/{n} prompts"
    confident = [v for v in verdicts if v.divergence is Divergence.CONFIDENT]
    near = [v for v in verdicts if v.divergence is Divergence.NEAR_TIE]
    identical = n - len(confident) - len(near)
    bound = {
        QualityClass.EQUIVALENT: f"<= quality.max_equivalent_deficit "
        f"{quality.max_equivalent_deficit:g}",
        QualityClass.LOSSY: f"> quality.max_equivalent_deficit {quality.max_equivalent_deficit:g}",
        QualityClass.WRONG: f"> quality.min_wrong_deficit {quality.min_wrong_deficit:g}",
    }[kind]
    first = min((v.position for v in verdicts if v.position is not None), default=0)
    text = (
        f"{kind.value} (deficit {value:.3g} nats/token {bound}): "
        f"{identical}/{n} prompts identical, "
        f"{len(near)} diverge at a near tie, {len(confident)} where the baseline was confident, "
        f"first at token {first}"
    )
    if kind is QualityClass.LOSSY:
        text += (
            "; kept as a candidate (quality.allow_lossy)"
            if passed
            else "; set quality.allow_lossy to keep lossy configurations"
        )
    if confident:
        text += f"; first confident: {_where(confident[0])}"
    return text
