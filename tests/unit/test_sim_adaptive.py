"""Unit tests of the simulated node's adaptive speculative decoding (``spec_sweep.sim.adaptive``).

The controller's sequences are computed by hand from SGLang's rules (adaptive_spec_params.py of
the 0.5.13, 0.5.17 and 0.5.23 wheels): EMA with ``ema_alpha``, ``warmup_batches`` batches without
a decision, then one every ``update_interval`` batches, down/up thresholds with hysteresis, the
zero-step floor and probe (0.5.14+), routing by padded batch size. The disable cases are checked
by their exact warning texts, and the resolution (steps, top-k, draft tokens) and the config
errors through ``plan_node``, as the server would meet them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spec_sweep.sim import adaptive
from spec_sweep.sim.adaptive import (
    AdaptiveConfigError,
    AdaptiveController,
    AdaptivePolicy,
    AdaptiveStepSlot,
    adaptive_rules,
    parse_config,
    unsupported_reason,
)
from spec_sweep.sim.cli import parse_command_line
from spec_sweep.sim.model import (
    AdaptiveRequest,
    NodeConfig,
    NodePlan,
    SpecSettings,
    capture_batch_sizes,
    plan_node,
)
from spec_sweep.sim.perf import PerfModel
from spec_sweep.sim.profiles import Profile, load_profile

NEW = adaptive_rules("0.5.23")
MID = adaptive_rules("0.5.17")
OLD = adaptive_rules("0.5.13")
#: alpha 1 (the EMA is the last batch's mean), no warm-up, a decision every batch.
CRISP = {"ema_alpha": 1.0, "warmup_batches": 0, "update_interval": 1}


@pytest.fixture(scope="module")
def h200() -> Profile:
    return load_profile("h200-nvlink-x8")


def _slot(
    cands: list[int], initial: int, rules: adaptive.AdaptiveRules, **kw: float
) -> AdaptiveStepSlot:
    return AdaptiveStepSlot(initial, {"candidate_steps": cands, **kw}, rules)


# -- versions ----------------------------------------------------------------------------------
def test_rules_follow_the_versions_read() -> None:
    assert not OLD.zero_step
    assert not OLD.resolve_first
    assert MID.zero_step
    assert MID.resolve_first
    assert adaptive_rules("0.5.14").zero_step
    assert OLD.default_config["1"]["candidate_steps"] == [1, 3, 7]
    assert OLD.default_config["8"]["candidate_steps"] == [1, 3]
    assert "64" not in OLD.default_config
    assert MID.default_config["1"]["candidate_steps"] == [1, 3, 7]
    assert MID.default_config["64"]["candidate_steps"] == [0]
    assert NEW.default_config["1"]["candidate_steps"] == [1, 3, 5, 7]
    assert NEW.default_config["32"]["candidate_steps"] == [0, 1]
    with pytest.raises(ValueError, match=r"from 0\.5\.13 on"):
        adaptive_rules("0.5.12")


# -- the slot: EMA, warm-up, interval, hysteresis ------------------------------------------------
def test_ema_warmup_and_update_interval_by_hand() -> None:
    # Defaults: alpha 0.2, warm-up 10, interval 5, down -0.25, up 0. Start at 3: EMA = 2.0.
    slot = _slot([1, 3, 5, 7], 3, NEW)
    assert slot.ema_accept_len == 2.0
    lines = [slot.update([0]) for _ in range(15)]
    # EMA_n = 2 * 0.8^n; no decision in batches 1-10 (warm-up) nor 11-14 (interval).
    assert lines[:14] == [None] * 14
    assert slot.ema_accept_len == pytest.approx(2 * 0.8**15)  # 0.0704
    # Batch 15: 0.07 <= 1 - 0.5 - 0.25 -> down to 1; 0.07 > 0.5 is false -> no way up.
    assert lines[14] == "Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.07)"
    assert slot.current_steps == 1
    # Batches 16-19 decide nothing; 20 keeps 1 (nothing below, 0.02 is not above 0.5).
    assert [slot.update([0]) for _ in range(5)] == [None] * 5


def test_rise_walks_up_while_above_each_threshold() -> None:
    slot = _slot([1, 3, 5, 7], 3, NEW)
    lines = [slot.update([4]) for _ in range(15)]
    # EMA = 4 - 2 * 0.8^15 = 3.93 > 3 - 0.5 -> 5; not > 5 - 0.5 -> stop at 5.
    assert lines[-1] == "Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=3.93)"


def test_down_hysteresis_keeps_a_step_that_a_flat_threshold_drops() -> None:
    # Batch mean 0.4: with -0.25 the threshold to leave 3 for 1 is 0.25 (stay), with 0 it is 0.5.
    sticky = _slot([1, 3], 3, NEW, **CRISP, down_hysteresis=-0.25)
    flat = _slot([1, 3], 3, NEW, **CRISP, down_hysteresis=0.0)
    assert sticky.update([0, 1, 0, 1, 0]) is None
    assert flat.update([0, 1, 0, 1, 0]) == (
        "Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.40)"
    )


def test_no_rise_after_a_drop_from_0_5_14_on() -> None:
    # EMA 2.2 at 5: 2.2 <= 3 - 0.5 -> down to 3. 0.5.13 then rises again (2.2 > 3 - 0.5 - 0.5)
    # and ends where it started; 0.5.14+ stops after moving down.
    cfg = {**CRISP, "down_hysteresis": 0.0, "up_hysteresis": -0.5}
    old = AdaptiveStepSlot(5, {"candidate_steps": [1, 3, 5], **cfg}, OLD)
    new = AdaptiveStepSlot(5, {"candidate_steps": [1, 3, 5], **cfg}, NEW)
    mean_2_2 = [2, 2, 2, 2, 3]
    assert old.update(mean_2_2) is None
    assert old.current_steps == 5
    assert (
        new.update(mean_2_2) == "Adaptive spec params updated: steps 5 -> 3 (ema_accept_len=2.20)"
    )


def test_ema_ceiling_caps_only_downwards() -> None:
    # A down hysteresis of -10 keeps 7 (1.1 is not <= 5 - 0.5 - 10); the ceiling,
    # ceil(1.1 * 2) = 3, then caps the kept step at the largest candidate <= 3.
    slot = _slot([1, 3, 7], 7, NEW, **CRISP, down_hysteresis=-10.0, ceiling_coeff=2)
    assert slot.update([1] * 9 + [2]) == (
        "Adaptive spec params updated: steps 7 -> 3 (ema_accept_len=1.10)"
    )


def test_initial_steps_outside_a_slot_take_its_middle_candidate() -> None:
    assert _slot([0, 1], 3, NEW).current_steps == 1
    assert _slot([1, 3, 5, 7], 3, NEW).current_steps == 3
    assert _slot([0], 3, NEW).current_steps == 0
    assert _slot([0], 3, NEW).ema_accept_len == -1.0


# -- zero steps (0.5.14+) ------------------------------------------------------------------------
def test_zero_floor_and_the_probe_back_up() -> None:
    slot = _slot([0, 1, 3], 3, NEW, **CRISP, down_hysteresis=0.0)
    # EMA 0: <= 1 - 0.5 -> 1; <= 0.5 (the floor's threshold) -> 0.
    assert slot.update([0, 0]) == "Adaptive spec params updated: steps 3 -> 0 (ema_accept_len=0.00)"
    # At 0 steps nothing is drafted: the EMA does not move, the next decision probes 1.
    assert slot.update([5, 5]) == "Adaptive spec params updated: steps 0 -> 1 (ema_accept_len=0.00)"
    assert slot.ema_accept_len == 0.0


def test_a_slot_born_at_zero_probes_from_a_neutral_ema() -> None:
    slot = _slot([0, 2], 0, NEW, **CRISP)
    assert slot.ema_accept_len == -1.0
    assert slot.update([3]) == "Adaptive spec params updated: steps 0 -> 2 (ema_accept_len=1.00)"
    assert slot.ema_accept_len == 1.0


def test_zero_candidates_are_refused_by_0_5_13() -> None:
    text = json.dumps({"8": {"candidate_steps": [0, 1, 3]}})
    with pytest.raises(AdaptiveConfigError) as exc:
        parse_config(text, OLD)
    assert exc.value.exception == (
        "ValueError: BS 8: candidate_steps must be a list of positive ints, got [0, 1, 3]"
    )
    assert parse_config(text, NEW).candidate_steps == [0, 1, 3]
    with pytest.raises(AdaptiveConfigError) as exc:
        parse_config(json.dumps({"8": {"candidate_steps": [-1]}}), NEW)
    assert "must be a list of non-negative ints, got [-1]" in exc.value.exception


# -- routing -------------------------------------------------------------------------------------
def test_batches_route_by_padded_size_to_the_largest_key_below() -> None:
    cfg = parse_config(None, NEW)  # keys 1, 8, 32, 64
    policy = AdaptivePolicy(3, cfg, NEW)
    policy.set_cuda_graph_bs(capture_batch_sizes(48, speculative=True))
    assert [policy.slot_key(b) for b in (1, 7, 8, 9, 30, 31, 32, 33, 48, 64, 100)] == [
        1, 1, 8, 8, 8, 32, 32, 32, 32, 64, 64,
    ]  # fmt: skip
    # 31 pads to the captured 32; without graphs it stays 31 (slot 8).
    policy.set_cuda_graph_bs(None)
    assert policy.slot_key(31) == 8
    assert policy.initialized_line() == (
        "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]"
    )


def test_each_state_captures_only_the_batch_sizes_that_can_pick_it() -> None:
    policy = AdaptivePolicy(3, parse_config(None, NEW), NEW)
    policy.set_cuda_graph_bs(capture_batch_sizes(48, speculative=True))
    assert policy.cuda_graph_bs_for_step(7) == [1, 2, 3, 4, 5, 6, 7]
    assert policy.cuda_graph_bs_for_step(3) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20,
                                                22, 24, 26, 28, 30]  # fmt: skip
    assert policy.cuda_graph_bs_for_step(0) == [8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32,
                                                40, 44, 48]  # fmt: skip


def test_controller_switches_per_batch_and_per_decision() -> None:
    text = json.dumps({**CRISP, "1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [1]}})
    policy = AdaptivePolicy(3, parse_config(text, NEW), NEW)
    policy.set_cuda_graph_bs([1, 2, 4, 8])
    ctl = AdaptiveController(policy=policy, steps=3)
    assert ctl.activate_for_batch(1) == []
    assert ctl.activate_for_batch(8) == [
        "Switch adaptive runtime state: steps 3 -> 1, draft_tokens 4 -> 2"
    ]
    assert ctl.activate_for_batch(2) == [
        "Switch adaptive runtime state: steps 1 -> 3, draft_tokens 2 -> 4"
    ]
    assert ctl.on_verify_complete([0, 0], 2) == [
        "Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.00)",
        "Switch adaptive runtime state: steps 3 -> 1, draft_tokens 4 -> 2",
    ]
    assert ctl.steps == 1
    assert ctl.history == [(2, 1)]


# -- turning itself off ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rules", "kwargs", "reason"),
    [
        (NEW, {"algorithm": None}, "speculative_algorithm=None (only EAGLE/EAGLE3 are supported)"),
        (NEW, {"algorithm": "STANDALONE"},
         "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
        (NEW, {"topk": 4}, "speculative_eagle_topk=4 (only topk=1 is supported)"),
        (OLD, {"topk": None}, "speculative_eagle_topk=None (only topk=1 is supported)"),
        (NEW, {"attention_dp": True},
         "attention DP is not supported (adaptive tier decisions are not synchronized across DP "
         "ranks)"),
        (MID, {"attention_dp": True},
         "enable_dp_attention=True is not supported (adaptive tier decisions are not synchronized "
         "across DP ranks)"),
        (NEW, {"multi_layer_eagle": True},
         "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not "
         "implement adaptive)"),
        (NEW, {"two_batch_overlap": True},
         "enable_two_batch_overlap=True is not supported (adaptive state swap would discard the "
         "TboAttnBackend wrapper)"),
        (NEW, {"pdmux": True},
         "enable_pdmux=True is not supported (adaptive state swap does not update "
         "decode_attn_backend_group)"),
    ],
)  # fmt: skip
def test_unsupported_reasons_are_sglangs(
    rules: adaptive.AdaptiveRules, kwargs: dict[str, object], reason: str
) -> None:
    args: dict[str, object] = {"algorithm": "EAGLE3", "topk": None, "attention_dp": False}
    args.update(kwargs)
    assert unsupported_reason(rules, **args) == reason  # type: ignore[arg-type]
    assert unsupported_reason(NEW, algorithm="EAGLE", topk=1, attention_dp=False) is None


def _config(version: str, spec: SpecSettings | None, **kw: object) -> NodeConfig:
    return NodeConfig(
        flavor="old" if version == "0.5.13" else "new",
        model_path="deepseek-ai/DeepSeek-V3",
        tp_size=8,
        spec=spec,
        sglang_version=version,
        **kw,  # type: ignore[arg-type]
    )


def _eagle(
    steps: int | None = None, topk: int | None = None, tokens: int | None = None
) -> SpecSettings:
    return SpecSettings("EAGLE3", steps, topk, tokens, None)


WARN = "speculative_adaptive disabled: {}. Falling back to static speculative params."


@pytest.mark.parametrize(
    ("version", "spec", "kw", "reason"),
    [
        ("0.5.23", None, {}, "speculative_algorithm=None (only EAGLE/EAGLE3 are supported)"),
        ("0.5.23", SpecSettings("STANDALONE", 3, 1, 4, "d"), {},
         "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
        ("0.5.23", _eagle(3, 4, 8), {}, "speculative_eagle_topk=4 (only topk=1 is supported)"),
        ("0.5.13", _eagle(3, 4, 8), {}, "speculative_eagle_topk=4 (only topk=1 is supported)"),
        ("0.5.23", _eagle(), {"attn_dp_size": 8},
         "attention DP is not supported (adaptive tier decisions are not synchronized across DP "
         "ranks)"),
        ("0.5.23", _eagle(), {"enable_dp_attention": True, "dp_size": 8},
         "attention DP is not supported (adaptive tier decisions are not synchronized across DP "
         "ranks)"),
        ("0.5.13", _eagle(), {"enable_dp_attention": True, "dp_size": 8},
         "enable_dp_attention=True is not supported (adaptive tier decisions are not "
         "synchronized across DP ranks)"),
        ("0.5.23", _eagle(), {"enable_two_batch_overlap": True},
         "enable_two_batch_overlap=True is not supported (adaptive state swap would discard the "
         "TboAttnBackend wrapper)"),
    ],
)  # fmt: skip
def test_plan_turns_adaptive_off_with_sglangs_warning(
    h200: Profile, version: str, spec: SpecSettings | None, kw: dict[str, object], reason: str
) -> None:
    plan = plan_node(h200, _config(version, spec, adaptive=AdaptiveRequest(), **kw))
    assert WARN.format(reason) in plan.main_warnings
    assert plan.adaptive is None
    if plan.failure is None and spec is not None and spec.steps is not None:
        assert plan.spec is not None
        assert plan.spec.steps == spec.steps  # the static parameters as given


def _adaptive_plan(
    h200: Profile, version: str, spec: SpecSettings, text: str | None = None
) -> NodePlan:
    return plan_node(h200, _config(version, spec, adaptive=AdaptiveRequest(text=text)))


def test_0_5_14_on_forces_topk_1_middle_steps_and_steps_plus_one_tokens(h200: Profile) -> None:
    plan = _adaptive_plan(h200, "0.5.23", _eagle())
    assert plan.failure is None
    assert plan.spec == SpecSettings("EAGLE3", 3, 1, 4, "deepseek-ai/DeepSeek-V3")
    assert plan.adaptive is not None
    assert plan.adaptive.config.candidate_steps == [0, 1, 3, 5, 7]  # 3 is the middle one
    # Draft tokens given: replaced by steps + 1 without the static path's warning.
    forced = _adaptive_plan(h200, "0.5.23", _eagle(5, 1, 9))
    assert forced.spec is not None
    assert forced.spec.draft_tokens == 6
    assert not any("adjusted" in w for w in forced.main_warnings)


def test_0_5_13_applies_the_eagle_defaults_then_checks_the_steps(h200: Profile) -> None:
    plan = _adaptive_plan(h200, "0.5.13", _eagle())
    assert plan.failure is None
    assert plan.spec is not None
    assert (plan.spec.steps, plan.spec.topk, plan.spec.draft_tokens) == (3, 1, 4)
    bad = _adaptive_plan(h200, "0.5.13", _eagle(2))
    assert bad.failure is not None
    assert bad.failure.where == "main"
    assert bad.failure.text.endswith(
        "ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps "
        "[1, 3, 7]. Pass one of those values.\n"
    )
    assert "validate_adaptive_initial_steps" in bad.failure.text


def test_steps_outside_the_candidates_fail_in_the_main_process(h200: Profile) -> None:
    plan = _adaptive_plan(h200, "0.5.23", _eagle(2))
    assert plan.failure is not None
    assert plan.failure.text.endswith(
        "ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps "
        "[0, 1, 3, 5, 7]. Pass one of those values.\n"
    )
    assert "_init_adaptive_speculative_params\n    raise ValueError(" in plan.failure.text


@pytest.mark.parametrize(
    ("text", "last"),
    [
        ("not json", "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
        ('{"1": {candidate', "json.decoder.JSONDecodeError: Expecting property name enclosed in "
         "double quotes: line 1 column 8 (char 7)"),
        ('{"ema_alpha": 0.3}', 'ValueError: speculative_adaptive_config must contain at least one '
         'integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: '
         "['ema_alpha']"),
        ('{"1": {"candidate_steps": []}}',
         "ValueError: BS 1: candidate_steps must be a list of non-negative ints, got []"),
        ("[1, 3]", "AttributeError: 'list' object has no attribute 'items'"),
        ('{"1": [1, 3]}', "AttributeError: 'list' object has no attribute 'get'"),
    ],
)  # fmt: skip
def test_config_errors_are_sglangs_exceptions(h200: Profile, text: str, last: str) -> None:
    plan = _adaptive_plan(h200, "0.5.23", _eagle(), text)
    assert plan.failure is not None
    assert plan.failure.where == "main"
    assert plan.failure.text.endswith(last + "\n")
    assert "_load_adaptive_config" in plan.failure.text


def test_the_flag_takes_a_path_and_inline_json_is_a_missing_file(tmp_path: Path) -> None:
    good = tmp_path / "adaptive.json"
    good.write_text('{"1": {"candidate_steps": [1, 3]}}')
    base = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-adaptive"]
    _, config = parse_command_line([*base, "--speculative-adaptive-config", str(good)], {})
    assert config.adaptive == AdaptiveRequest(str(good), good.read_text(), "")
    _, inline = parse_command_line(
        [*base, "--speculative-adaptive-config", '{"1": {"candidate_steps": [1]}}'], {}
    )
    assert inline.adaptive is not None
    assert inline.adaptive.open_error == (
        "FileNotFoundError: [Errno 2] No such file or directory: "
        '\'{"1": {"candidate_steps": [1]}}\''
    )
    plan = plan_node(load_profile("h200-nvlink-x8"), inline)
    assert plan.failure is not None
    assert "with open(cfg_path) as f:" in plan.failure.text
    # Without --speculative-adaptive the config is not read at all.
    _, off = parse_command_line(
        ["--model-path", "m", "--speculative-adaptive-config", "/nonexistent.json"], {}
    )
    assert off.adaptive is None


# -- the performance model follows the steps -----------------------------------------------------
def test_each_state_times_and_accepts_like_the_static_chain(h200: Profile) -> None:
    plan = _adaptive_plan(h200, "0.5.23", _eagle())
    perf = PerfModel(h200, plan)
    for steps in (1, 3, 5):
        static = PerfModel(h200, plan_node(h200, _config("0.5.23", _eagle(steps, 1, steps + 1))))
        for batch in (1, 8, 32):
            assert perf.spec_cycle_ms(batch, steps) == pytest.approx(static.spec_cycle_ms(batch))
        assert perf.expected_accept_length(steps=steps) == pytest.approx(
            static.expected_accept_length()
        )
    # 0 steps: one token per request, a decode-sized target forward plus the draft extend.
    assert perf.expected_accept_length(steps=0) == 1.0
    base = PerfModel(h200, plan_node(h200, _config("0.5.23", None)))
    assert base.decode_step_ms(32) < perf.spec_cycle_ms(32, 0) < base.decode_step_ms(32) + 5.0


def test_the_h200_profile_has_the_crossover_the_adaptive_tests_build_on(h200: Profile) -> None:
    """Per request: 3 steps fastest at 1, one step within 1% of the best at 32, seven a third
    behind it there.

    (What the simulated server's adaptive test relies on, from the model without wall time:
    54.6 / 45.3 / 50.5 tok/s at 1 for 3 / 1 / 7 steps; 1,132 aggregate at 32 for one step, 1,141
    for three, 825 for seven.)
    """
    perf = PerfModel(h200, _adaptive_plan(h200, "0.5.23", _eagle()))
    at_1 = {s: perf.expected_decode_tok_s(1, steps=s) for s in (1, 3, 7)}
    at_32 = {s: perf.expected_decode_tok_s(32, steps=s) for s in (1, 3, 7)}
    assert max(at_1, key=at_1.__getitem__) == 3
    assert at_1[3] > 1.05 * at_1[1]
    assert at_1[7] > 1.05 * at_1[1]
    assert at_32[1] > 0.99 * max(at_32.values())
    assert at_32[1] > 1.2 * at_32[7]
