"""SGLang's adaptive rules as the product applies them (`core.adaptive_rules`).

The controller's fixed point (`settle`) is checked against the simulated node's own,
independent copy of SGLang's slot (`spec_sweep.sim.adaptive.AdaptiveStepSlot`), fed the same
acceptance batch after batch.
"""

from __future__ import annotations

import json

import pytest

from spec_sweep.core.adaptive_rules import (
    Slot,
    adaptive_on,
    adaptive_version,
    config_text,
    describe_slots,
    disabled_in_log,
    launch_problem,
    off_reason,
    parse_config_text,
    settle,
)
from spec_sweep.sim import adaptive as sim_adaptive

V13 = adaptive_version("0.5.13")
V17 = adaptive_version("0.5.17")
V23 = adaptive_version("0.5.23")
assert V13 is not None
assert V17 is not None
assert V23 is not None


def test_versions() -> None:
    assert adaptive_version("0.5.10") is None
    old = adaptive_version("0.5.12")
    assert old is not None
    assert not old.per_batch_size
    assert (V13.per_batch_size, V13.zero_step, V13.resolve_first) == (True, False, False)
    assert (V17.per_batch_size, V17.zero_step, V17.resolve_first) == (True, True, True)
    assert V13.floor == 1
    assert V17.floor == 0
    assert adaptive_version("0.5.17.post1") == V17.__class__("0.5.17.post1", True, True, True)


def test_config_text_is_the_versions_format_in_batch_size_order() -> None:
    slots = [Slot(32, (2,)), Slot(1, (3,)), Slot(8, (3, 2, 3))]
    text = config_text(slots, V17)
    assert text == (
        '{"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [2, 3]}, '
        '"32": {"candidate_steps": [2]}}'
    )
    zero = config_text([Slot(1, (3,)), Slot(32, (0,))], V17)
    assert zero.endswith('"32": {"candidate_steps": [0]}}')
    with pytest.raises(ValueError, match=r"not all >= 1 \(SGLang 0.5.13\)"):
        config_text([Slot(1, (3,)), Slot(32, (0,))], V13)
    with pytest.raises(ValueError, match="distinct"):
        config_text([Slot(1, (3,)), Slot(1, (2,))], V17)
    with pytest.raises(ValueError, match="one global adaptive slot"):
        config_text([Slot(1, (3,))], adaptive_version("0.5.12"))  # type: ignore[arg-type]


def test_parse_config_text_refuses_what_sglang_refuses() -> None:
    raw, slots = parse_config_text(
        '{"ema_alpha": 0.3, "8": {"candidate_steps": [3, 1]}, "1": {"candidate_steps": [5]}}', V13
    )
    assert raw["ema_alpha"] == 0.3
    assert slots == [Slot(1, (5,)), Slot(8, (1, 3))]
    for text, match in [
        ("{1: 2}", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"ema_alpha": 0.2}', "at least one integer-string BS key"),
        ('{"1": {"candidate_steps": []}}', "BS 1: candidate_steps must be a list of positive"),
        ('{"1": {"candidate_steps": [0, 1]}}', "positive ints"),
        ('{"1": {"candidate_steps": [true]}}', "positive ints"),
        ('{"1": [1, 2]}', "positive ints"),
    ]:
        with pytest.raises(ValueError, match=match):
            parse_config_text(text, V13)
    _, slots = parse_config_text('{"1": {"candidate_steps": [0, 1]}}', V17)
    assert slots == [Slot(1, (0, 1))]


def test_off_reason_in_sglangs_words() -> None:
    eagle = {"speculative-algorithm": "EAGLE3", "speculative-num-steps": 3}
    assert off_reason(V17, eagle) is None
    assert off_reason(V17, {**eagle, "speculative-algorithm": "NEXTN"}) is None
    assert off_reason(V17, {"speculative-algorithm": "NGRAM"}) == (
        "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"
    )
    assert off_reason(V17, {}) == "speculative_algorithm=None (only EAGLE/EAGLE3 are supported)"
    assert off_reason(V17, {**eagle, "speculative-eagle-topk": 2}) == (
        "speculative_eagle_topk=2 (only topk=1 is supported)"
    )
    assert off_reason(V17, eagle, {"speculative-eagle-topk": 4}) is not None
    # Attention DP: 0.5.13 reads the flag alone; later versions need dp-size > 1 with it.
    assert off_reason(V13, eagle, {"enable-dp-attention": True}) == (
        "enable_dp_attention=True is not supported (adaptive tier decisions are not synchronized "
        "across DP ranks)"
    )
    assert off_reason(V17, eagle, {"enable-dp-attention": True}) is None
    assert off_reason(V23, eagle, {"enable-dp-attention": True, "dp-size": 2}) == (
        "attention DP is not supported (adaptive tier decisions are not synchronized across DP "
        "ranks)"
    )
    assert "MultiLayerEagleWorkerV2" in str(
        off_reason(V17, {**eagle, "enable-multi-layer-eagle": True})
    )
    assert "TboAttnBackend" in str(off_reason(V17, eagle, {"enable-two-batch-overlap": True}))
    assert "decode_attn_backend_group" in str(off_reason(V17, eagle, {"enable-pdmux": True}))


def test_the_disabled_warning_is_read_from_a_log() -> None:
    line = sim_adaptive.DISABLED_WARNING.format(
        reason="speculative_eagle_topk=2 (only topk=1 is supported)"
    )
    log = f"[2026-12-01 10:00:00] {line}\n[2026-12-01 10:00:01] Load weight begin.\n"
    assert disabled_in_log(log) == "speculative_eagle_topk=2 (only topk=1 is supported)"
    assert disabled_in_log("AdaptiveSpeculativeParams initialized: steps=3") is None


def test_launch_problem_initial_steps_must_be_a_candidate() -> None:
    text = '{"1": {"candidate_steps": [3]}, "32": {"candidate_steps": [1, 2]}}'
    eagle = {"speculative-algorithm": "EAGLE3"}
    assert launch_problem(V13, {**eagle, "speculative-num-steps": 2}, {}, text) is None
    assert launch_problem(V13, {**eagle, "speculative-num-steps": 5}, {}, text) == (
        "--speculative-num-steps=5 is not in the adaptive config candidate_steps [1, 2, 3]. "
        "Pass one of those values."
    )
    # 0.5.13 applies its EAGLE defaults first: unset steps must be set to a candidate.
    assert "unset" in str(launch_problem(V13, eagle, {}, text))
    # 0.5.14+: unset steps become the middle candidate.
    assert launch_problem(V17, eagle, {}, text) is None
    assert "positive ints" in str(launch_problem(V13, eagle, {}, '{"1": {"candidate_steps": [0]}}'))


def test_switch_and_description() -> None:
    assert adaptive_on({"speculative-adaptive": True})
    assert not adaptive_on({"speculative-adaptive": False}, {"speculative-adaptive": True})
    assert adaptive_on({}, {"speculative-adaptive": True})
    assert describe_slots('{"ema_alpha": 0.2, "8": {"candidate_steps": [2, 3]}, '
                          '"1": {"candidate_steps": [3]}}') == "1:[3] 8:[2,3]"  # fmt: skip
    assert describe_slots("not json") == "not json"


# Accepted drafts per verify of the simulated H200 node's chains (accept length - 1).
H200 = {1: 0.68, 2: 1.013, 3: 1.136, 5: 1.18, 7: 1.185}


@pytest.mark.parametrize(
    ("candidates", "start", "accepted", "zero", "expected"),
    [
        ((3,), 3, H200, True, 3),
        ((2, 3), 3, H200, True, 2),  # 1.136 <= 2 - 0.5 - 0.25: down to 2, and it stays
        ((1, 3, 5, 7), 3, H200, True, 3),  # SGLang 0.5.23's default slot "1"
        ((1, 3, 5, 7), 1, H200, True, 3),  # 0.68 > 1 - 0.5: up to 3, not beyond
        ((0, 1), 1, H200, True, 1),  # 0.68 > 0.5 - 0.25: one step stays
        ((0, 1), 1, {1: 0.2}, True, None),  # drops to 0, probes 1, drops again
        ((0,), 1, H200, True, 0),
        ((2, 3), 3, {2: 1.0}, True, None),  # the acceptance of 3 steps is unknown
        ((1, 3), 1, {1: 0.68, 3: 2.6}, False, 3),
    ],
)
def test_settle(
    candidates: tuple[int, ...],
    start: int,
    accepted: dict[int, float],
    zero: bool,
    expected: int | None,
) -> None:
    assert settle(candidates, start=start, accepted=accepted, zero_step=zero) == expected


@pytest.mark.parametrize(
    ("candidates", "start", "accepted", "version"),
    [
        ((2, 3), 3, H200, "0.5.23"),
        ((1, 3, 5, 7), 1, H200, "0.5.23"),
        ((1, 2, 3, 5, 7), 7, H200, "0.5.13"),
        ((0, 1, 3), 3, H200, "0.5.17"),
        ((1, 3), 1, {1: 0.68, 3: 2.6}, "0.5.13"),
        ((0, 2), 2, {2: 0.9}, "0.5.17"),
    ],
)
def test_settle_agrees_with_the_simulated_nodes_controller(
    candidates: tuple[int, ...], start: int, accepted: dict[int, float], version: str
) -> None:
    """The simulator's slot, fed each chain's acceptance for 400 batches, ends where `settle`
    says (two independent readings of SGLang's `AdaptiveStepSlot`)."""
    rules = sim_adaptive.adaptive_rules(version)
    config = json.loads(json.dumps({"candidate_steps": list(candidates)}))
    slot = sim_adaptive.AdaptiveStepSlot(start, config, rules)
    for _ in range(400):
        steps = slot.current_steps
        drafts = accepted.get(steps, 0.0) if steps else 0.0
        slot.update([drafts])
    predicted = settle(candidates, start=start, accepted=accepted, zero_step=rules.zero_step)
    assert predicted == slot.current_steps
