"""The quality gate's rule (node.divergence), pure: identical, near-tie flip or confident.

Constructed outputs, and the answer of a real SGLang 0.5.17 server (one H200, the real
SmolLM2-135M checkpoint in bf16: tests/fixtures/sglang/0.5.17/streams/
base-generate_batch_logprobs.json, 2 prompts x 24 greedy tokens, top 5 log-probabilities) as the
baseline, with trial outputs made from it where its own margins say what must happen; and NGRAM's
outputs against the baseline's, both recorded from real 0.5.17 servers (tests/fixtures/quality/).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spec_sweep.node.divergence import (
    Divergence,
    QualityClass,
    Top,
    agreement,
    deficit,
    judge_outputs,
    judge_prompt,
    parse_top_logprobs,
)
from spec_sweep.spec import QualitySpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "sglang" / "0.5.17" / "streams" / "base-generate_batch_logprobs.json"


def _real() -> tuple[list[list[int]], list[list[Top | None]]]:
    answer: list[dict[str, Any]] = json.loads(REAL.read_text())
    ids = [item["output_ids"] for item in answer]
    tops = [parse_top_logprobs(item["meta_info"]) for item in answer]
    assert all(t is not None for t in tops)
    return ids, [t for t in tops if t is not None]


def _with(ids: list[int], position: int, token: int) -> list[int]:
    """The output of a trial that took `token` at `position` and then another path."""
    return [*ids[:position], token, *(t + 1 for t in ids[position + 1 :])]


def test_the_real_answer_parses_to_sorted_top_lists() -> None:
    ids, tops = _real()
    assert [len(i) for i in ids] == [24, 24]
    assert all(len(t) == 24 for t in tops)
    first = tops[0][0]
    assert first is not None
    assert len(first) == 5
    assert first[0] == (pytest.approx(-0.2710792124271393), 7042)  # the chosen " Paris"
    assert [lp for lp, _ in first] == sorted((lp for lp, _ in first), reverse=True)
    # Every greedy token is the top of its list, or tied with it (bf16 logits tie).
    for out, top in zip(ids, tops, strict=True):
        for token, entries in zip(out, top, strict=True):
            assert entries is not None
            assert dict((t, lp) for lp, t in entries)[token] == entries[0][0]


def test_parse_top_logprobs_without_them_or_with_null_positions() -> None:
    assert parse_top_logprobs({"output_token_logprobs": []}) is None
    assert parse_top_logprobs(None) is None
    assert parse_top_logprobs({"output_top_logprobs": [None, [[-0.1, 3, None]], []]}) == [
        None,
        [(-0.1, 3)],
        None,
    ]


@pytest.mark.parametrize(
    ("prompt", "position", "runner_up", "expected", "margin"),
    [
        # bf16 margins of the real baseline: 0.1875 and 0.375 are near ties (< 0.5) ...
        (0, 5, True, Divergence.NEAR_TIE, 0.1875),
        (0, 9, True, Divergence.NEAR_TIE, 0.375),
        (1, 22, True, Divergence.NEAR_TIE, 0.0625),
        # ... 1.25 and 13 nats are not, even for the runner-up token.
        (0, 1, True, Divergence.CONFIDENT, 1.25),
        (1, 4, True, Divergence.CONFIDENT, 13.0),
        # A token outside the baseline's top 5 at a near tie is not a near-tie flip.
        (0, 5, False, Divergence.CONFIDENT, 0.1875),
    ],
)
def test_a_real_baseline_judges_a_flip_by_its_own_margin(
    prompt: int, position: int, runner_up: bool, expected: Divergence, margin: float
) -> None:
    ids, tops = _real()
    entries = tops[prompt][position]
    assert entries is not None
    token = entries[1][1] if runner_up else 11  # id 11 is in no top list of the answer
    out = _with(ids[prompt], position, token)

    v = judge_prompt(ids[prompt], tops[prompt], out, index=prompt, tokens=24, margin_nats=0.5)

    assert v.divergence is expected
    assert v.position == position
    assert v.margin == pytest.approx(margin)
    assert v.gap == (pytest.approx(margin) if runner_up else None)
    assert (v.baseline_token, v.trial_token) == (ids[prompt][position], token)


def test_an_exact_tie_the_baseline_broke_the_other_way_is_a_near_tie() -> None:
    ids, tops = _real()
    entries = tops[0][23]  # margin 0: the baseline chose the second of two tied tokens
    assert entries is not None
    assert entries[0][1] != ids[0][23]
    out = _with(ids[0], 23, entries[0][1])
    v = judge_prompt(ids[0], tops[0], out, index=0, tokens=24, margin_nats=0.5)
    assert (v.divergence, v.margin, v.gap) == (Divergence.NEAR_TIE, 0.0, 0.0)


def test_margin_zero_demands_identical_outputs_and_the_window_limits_what_is_judged() -> None:
    ids, tops = _real()
    out = _with(ids[0], 5, 1797)
    assert judge_prompt(ids[0], tops[0], out, index=0, tokens=24, margin_nats=0.0).divergence is (
        Divergence.CONFIDENT
    )
    # Only the first `tokens` tokens count: a difference at position 5 is outside 5 tokens.
    assert judge_prompt(ids[0], tops[0], out, index=0, tokens=5, margin_nats=0.0).divergence is (
        Divergence.IDENTICAL
    )


def test_no_logprobs_or_an_output_that_ends_early_is_confident() -> None:
    ref = [1, 2, 3, 4]
    near: list[Top | None] = [[(-0.1, 1), (-0.2, 9)]] * 4
    assert judge_prompt(ref, None, [1, 9, 3, 4], index=0, tokens=4, margin_nats=0.5).divergence is (
        Divergence.CONFIDENT
    )
    assert judge_prompt(ref, near, [1, 9], index=0, tokens=4, margin_nats=0.5).divergence is (
        Divergence.NEAR_TIE
    )
    ended = judge_prompt(ref, near, [1, 2], index=0, tokens=4, margin_nats=0.5)
    assert (ended.divergence, ended.position, ended.trial_token) == (Divergence.CONFIDENT, 2, None)
    # A longer output than the baseline's is judged on the baseline's tokens.
    assert judge_prompt(
        ref, near, [1, 2, 3, 4, 5], index=0, tokens=8, margin_nats=0.5
    ).divergence is (Divergence.IDENTICAL)


def test_the_deficit_decides_identical_equivalent_lossy_and_wrong() -> None:
    ids, tops = _real()
    near = _with(ids[0], 5, 1797)  # the runner-up, 0.1875 nats below, at position 5 of prompt 0
    wrong = _with(ids[1], 4, 11)  # a token outside the top list where the margin was 13 nats
    q = QualitySpec(num_prompts=2, tokens=24)

    same = judge_outputs(ids, tops, ids, quality=q)
    assert (same.passed, same.quality_class, same.deficit) == (True, QualityClass.IDENTICAL, 0.0)
    assert same.reason == "greedy outputs identical to the baseline's on 2/2 prompts"
    assert same.note == ""
    assert same.metrics() == {
        "quality_agreement": 1.0,
        "quality_confident_share": 0.0,
        "quality_near_tie_flips": 0.0,
        "quality_first_divergence": 24.0,
        "quality_deficit": 0.0,
        "quality_lossy": 0.0,
    }

    # One near-tie flip: 0.1875 nats lost over the 6 + 24 tokens judged.
    flipped = judge_outputs(ids, tops, [near, ids[1]], quality=q)
    assert flipped.deficit == pytest.approx(0.1875 / 30)
    assert flipped.quality_class is QualityClass.LOSSY  # above 0.003: 30 tokens are little evidence
    assert not flipped.passed
    assert flipped.reason.startswith(
        "lossy (deficit 0.00625 nats/token > quality.max_equivalent_deficit 0.003): 1/2 prompts "
        "identical, 1 diverge at a near tie, 0 where the baseline was confident, first at token 5; "
        "set quality.allow_lossy to keep lossy configurations"
    )
    assert flipped.metrics()["quality_lossy"] == 1.0
    wide = q.model_copy(update={"max_equivalent_deficit": 0.01})
    equivalent = judge_outputs(ids, tops, [near, ids[1]], quality=wide)
    assert (equivalent.passed, equivalent.quality_class) == (True, QualityClass.EQUIVALENT)
    assert equivalent.note == equivalent.reason
    assert equivalent.metrics()["quality_first_divergence"] == 5.0
    assert equivalent.metrics()["quality_agreement"] == pytest.approx((5 / 24 + 1) / 2, abs=1e-4)
    kept = judge_outputs(
        ids, tops, [near, ids[1]], quality=q.model_copy(update={"allow_lossy": True})
    )
    assert (kept.passed, kept.quality_class, kept.lossy) == (True, QualityClass.LOSSY, True)
    assert "kept as a candidate (quality.allow_lossy)" in kept.reason

    # A token the baseline did not consider, where it was sure: wrong, even with allow_lossy.
    bad = judge_outputs(
        ids, tops, [ids[0], wrong], quality=q.model_copy(update={"allow_lossy": True})
    )
    assert (bad.passed, bad.quality_class) == (False, QualityClass.WRONG)
    assert bad.deficit is not None
    assert bad.deficit > q.min_wrong_deficit
    assert "first confident: prompt #1 at token 4: token 11 outside the baseline's top list" in (
        bad.reason
    )
    assert "(top-2 margin 13 nats)" in bad.reason


def test_the_deficit_counts_a_difference_without_a_top_list_as_sure_and_ignores_exact_ties() -> (
    None
):
    ref = [[1, 2, 3, 4]] * 4
    # No log-probabilities from the baseline: a difference counts 10 nats.
    assert deficit(ref, None, [[1, 9, 3, 4], *ref[1:]], tokens=4) == pytest.approx(10 / 14)
    tied: list[Top | None] = [[(-0.5, 1), (-0.5, 9)]] * 4
    # A flip at an exact tie loses nothing.
    assert deficit(ref, [tied] * 4, [[9, 0, 0, 0], *ref[1:]], tokens=4) == 0.0
    # An output that ended counts as the lowest listed token.
    assert deficit(ref, [tied] * 4, [[1, 2], *ref[1:]], tokens=4) == 0.0
    with pytest.raises(ValueError, match="reference outputs"):
        deficit(ref, None, ref[:2], tokens=4)


def _fixture_checks(path: Path) -> list[tuple[str, str, str, Any]]:
    data = json.loads(path.read_text())
    out = []
    for name, trial in data["trials"].items():
        for fmt, outputs in trial["formats"].items():
            ref = data["formats"][fmt]
            top = [parse_top_logprobs({"output_top_logprobs": p}) for p in ref["baseline_top"]]
            check = judge_outputs(ref["baseline_ids"], top, outputs["ids"], quality=QualitySpec())
            out.append((name, fmt, trial["group"], check))
    return out


REAL_FIXTURES = sorted((FIXTURES / "quality").glob("real-*.json"))


@pytest.mark.parametrize("path", REAL_FIXTURES, ids=[p.stem for p in REAL_FIXTURES])
def test_real_lossless_configurations_pass_and_lossy_ones_are_lossy(path: Path) -> None:
    """Real servers (tests/fixtures/quality/README.md): every lossless configuration (baseline
    boots, benign flags, NGRAM, EAGLE-3 chain and tree, two boots each) is identical or
    equivalent at the defaults; every lossy one (fp8 KV cache both formats, fp8 weights) is
    lossy, not wrong."""
    checks = _fixture_checks(path)
    assert checks
    for name, fmt, group, check in checks:
        if group == "lossless":
            assert check.passed, (name, fmt, check.reason)
            assert check.quality_class in (QualityClass.IDENTICAL, QualityClass.EQUIVALENT)
        else:
            assert check.quality_class is QualityClass.LOSSY, (name, fmt, check.reason)
            assert not check.passed


def test_real_lossy_deficits_are_at_least_twice_the_lossless_ones_on_every_gpu() -> None:
    """The acceptance line: the closest lossy configuration's deficit is at least twice the
    farthest lossless one's, over every real fixture (H100: SGLang 0.5.17 and 0.5.13; H200:
    NGRAM on 0.5.17), and the default bound sits between them with room on both sides."""
    checks = [c for path in REAL_FIXTURES for c in _fixture_checks(path)]
    lossless = max(c.deficit or 0.0 for _, _, group, c in checks if group == "lossless")
    lossy = min(c.deficit or 0.0 for _, _, group, c in checks if group == "lossy")
    assert lossy >= 5 * lossless, (lossless, lossy)
    bound = QualitySpec().max_equivalent_deficit
    assert lossless * 2 <= bound <= lossy / 2
    gpus = {json.loads(p.read_text())["gpu"].split()[0] for p in REAL_FIXTURES}
    assert gpus == {"H100", "H200"}


def test_agreement_is_the_mean_common_prefix_over_the_first_n_tokens() -> None:
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
    assert agreement(ref, ref, tokens=4) == (1.0, None)
    got = [[1, 2, 3, 4], [5, 0, 7, 8], [9, 9, 9, 9, 1]]
    # prompt 1 diverges at its 2nd token: 1/4; later equal tokens do not count back.
    assert agreement(ref, got, tokens=4) == (pytest.approx((1 + 0.25 + 1) / 3), 1)
    assert agreement(ref, [[1, 2], [5, 6, 7, 8], [9, 9, 9, 9]], tokens=4)[0] == pytest.approx(
        (0.5 + 1 + 1) / 3
    )
    with pytest.raises(ValueError, match="reference outputs"):
        agreement(ref, ref[:2], tokens=4)
