"""The adaptive configuration built from per-level results (`core.adaptive`), the spec's rules
for it (`spec_load` through `core.adaptive.spec_problems`), and how a trial writes and launches
it (`node.adaptive`, `node.command`, `core.config.normalize_config`, `present.names`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from harness import make_spec, record

from spec_sweep.core.adaptive import (
    adaptive_text,
    build_adaptive,
    chain_steps,
    mix_score,
    slot_key,
    spec_candidates_text,
)
from spec_sweep.core.config import normalize_config
from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.errors import SpecError
from spec_sweep.node.adaptive import adaptive_verdict, write_config
from spec_sweep.node.command import build_command
from spec_sweep.present.names import config_summary, run_name

#: The simulated H200 node's chains (its profile's model figures): tok/s at 1 / 8 / 32 and the
#: accept length.
H200 = {
    0: (30, 228, 760, None),
    1: (45, 341, 1132, 1.68),
    2: (53, 387, 1200, 2.01),
    3: (55, 390, 1141, 2.14),
    5: (53, 362, 966, 2.18),
}
EAGLE = {"speculative-algorithm": "EAGLE3"}


def _spec(tmp_path: Path, version: str = "0.5.23", **sections: Any) -> Any:
    params = {
        "speculative-algorithm": {"choices": [None, "EAGLE3"]},
        "speculative-num-steps": {
            "choices": [1, 2, 3, 5],
            "default": 3,
            "when": {"speculative-algorithm": "EAGLE3"},
        },
    }
    base: dict[str, Any] = {
        "node": {"sglang_version": version, "sim_profile": "h200-nvlink-x8"},
        "search_space": {"include": [], "params": params},
        "workload": {"concurrency": [1, 8, 32], "num_prompts": 32},
        "objective": {"metric": "output_throughput_c1"},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return make_spec(tmp_path, **base)


def _records(table: Mapping[int, tuple[Any, ...]], extra: Mapping[str, Any] | None = None) -> list:
    out = []
    for i, (steps, (c1, c8, c32, accept)) in enumerate(table.items()):
        plain = {"speculative-algorithm": None}
        config = {**EAGLE, "speculative-num-steps": steps} if steps else plain
        config |= dict(extra or {}) if steps else {}
        metrics = {"output_throughput_c8": c8, "output_throughput_c32": c32}
        if accept:
            metrics |= {f"accept_length_c{c}": accept for c in (1, 8, 32)}
        out.append(record(f"t{i:04d}", config, c1, metric="output_throughput_c1", **metrics))
    return out


def test_the_h200_crossover_gives_a_slot_per_level(tmp_path: Path) -> None:
    spec = _spec(tmp_path, workload={"mix": {1: 0.2, 8: 0.5, 32: 0.3}})
    build = build_adaptive(History(spec, _records(H200)))
    assert build.ok, build.reason
    assert build.text == (
        '{"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [2, 3]}, '
        '"17": {"candidate_steps": [2]}}'
    )
    # 3 steps win at 1 and 8 (2 steps within 2% at 8), 2 steps at 32; SGLang's controller
    # walks 8's slot down to 2 (1.14 accepted drafts <= 2 - 0.5 - 0.25).
    assert [(p.winner, p.candidates, p.settles) for p in build.levels] == [
        (3, (3,), 3),
        (3, (2, 3), 2),
        (2, (2,), 2),
    ]
    assert [p.best_id for p in build.levels] == ["t0003", "t0003", "t0002"]
    # Started from the heaviest level's winner (c8: 3 steps), system knobs of the best chain
    # over the mix (2 steps: 0.989 of the per-level best against 0.985 for 3 steps).
    assert (build.initial_steps, build.base_id) == (3, "t0002")
    assert build.config == {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 3,
        "speculative-adaptive": True,
        "speculative-adaptive-config": build.text,
    }


def test_a_wider_margin_adds_close_chains(tmp_path: Path) -> None:
    spec = _spec(tmp_path, adaptive={"close": 0.05})
    build = build_adaptive(History(spec, _records(H200)))
    assert [p.candidates for p in build.levels] == [(2, 3, 5), (2, 3), (2, 3)]


def test_plain_winning_a_level_is_candidate_zero_from_0_5_14(tmp_path: Path) -> None:
    table = {**H200, 1: (45, 341, 1250, 1.68), 2: (53, 300, 1000, 2.01), 3: (55, 320, 900, 2.14)}
    table[0] = (30, 228, 1300, None)  # plain decoding wins at 32
    build = build_adaptive(History(_spec(tmp_path, "0.5.17"), _records(table)))
    assert build.ok
    assert json.loads(build.text or "")["17"] == {"candidate_steps": [0]}
    assert build.levels[2].settles == 0
    # 0.5.13 has no candidate 0: the best chain runs there, and the plan says so.
    build13 = build_adaptive(History(_spec(tmp_path / "13", "0.5.13"), _records(table)))
    assert json.loads(build13.text or "")["17"] == {"candidate_steps": [1]}
    assert "has no candidate 0 (from 0.5.14)" in build13.levels[2].notes[0]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"workload": {"concurrency": [1]}, "objective": {"metric": "output_throughput"}},
            "one concurrency level",
        ),
        ({"table": {0: (60, 400, 1300, None)}}, "speculative decoding won at no level"),
        ({"table": {3: (55, 400, 1300, 2.14)}}, "the same chain (3 steps) won at every level"),
        (
            {"node": {"server_args": {"tp-size": 8, "enable-dp-attention": True}}},
            "SGLang would turn adaptive mode off: enable_dp_attention=True",
        ),
    ],
)
def test_no_configuration_and_why(tmp_path: Path, change: dict[str, Any], why: str) -> None:
    table = {**H200, **change.pop("table", {})}
    version = "0.5.13" if "node" in change else "0.5.23"
    spec = _spec(tmp_path, version, **change)
    records = _records(table)
    if not spec.workload.multi_level:
        records = [record(r.trial_id, r.config, r.metrics["output_throughput_c1"]) for r in records]
    build = build_adaptive(History(spec, records))
    assert not build.ok
    assert why in build.reason


def test_trees_and_failed_trials_are_not_chains(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        search_space={
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {"choices": [1, 2, 3, 5], "default": 3},
                "speculative-eagle-topk": {"choices": [1, 2], "default": 1},
                "speculative-num-draft-tokens": {"choices": [2, 4, 6], "default": 4},
            }
        },
    )
    tree = {**EAGLE, "speculative-num-steps": 3, "speculative-eagle-topk": 2}
    assert chain_steps(spec, tree) is None
    assert chain_steps(spec, {**EAGLE, "speculative-num-steps": 2}) == 2
    assert chain_steps(spec, {"speculative-algorithm": None}) == 0
    on = {**EAGLE, "speculative-num-steps": 2, "speculative-adaptive": True}
    assert chain_steps(spec, on) is None
    records = _records(H200, extra={"speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4})
    records.append(
        record("t0009", tree, 60, metric="output_throughput_c1", output_throughput_c8=380,
               output_throughput_c32=900)
    )  # fmt: skip
    oom = record("t0010", {**EAGLE, "speculative-num-steps": 5}, None, mode=FailureMode.OOM)
    records.append(oom)
    build = build_adaptive(History(spec, records))
    assert build.ok
    assert build.levels[0].best_id == "t0009"
    assert "a tree (top-k 2), which an adaptive slot cannot run" in build.levels[0].notes[0]
    # top-k and draft tokens are parameters here: forced to 1 and steps + 1.
    assert build.config is not None
    assert build.config["speculative-eagle-topk"] == 1
    assert build.config["speculative-num-draft-tokens"] == build.config["speculative-num-steps"] + 1


def test_slots_are_keyed_at_the_lower_edge_of_each_levels_batches(tmp_path: Path) -> None:
    # Levels 1, 8, 32: a load of 8 runs at batches below 8 as requests finish and start, so
    # its slot starts above the geometric mean of 1 and 8 (a key at 8 itself made SGLang 0.5.17
    # switch steps a dozen times a second on the H200).
    spec = _spec(tmp_path)
    assert [slot_key(spec, c) for c in (1, 8, 32)] == [1, 3, 17]
    spec = _spec(
        tmp_path / "b",
        workload={"concurrency": [4, 8, 64]},
        objective={"metric": "output_throughput_c4"},
    )
    assert [slot_key(spec, c) for c in (4, 8, 64)] == [1, 6, 17]  # 64 counts as 32 prompts
    # With fewer prompts than a level, the level counts as num_prompts: two levels share a key.
    spec = _spec(tmp_path / "c", workload={"num_prompts": 8})
    build = build_adaptive(History(spec, _records(H200)))
    assert [p.key for p in build.levels] == [1, 3, 3]
    assert set(json.loads(build.text or "")) == {"1", "3"}
    assert "the batch of a lower level" in build.levels[0].notes[-1]


def test_mix_weights_and_score(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert spec.workload.mix_weights == pytest.approx({1: 1 / 3, 8: 1 / 3, 32: 1 / 3})
    spec = _spec(tmp_path / "b", workload={"mix": {1: 1, 32: 3}})
    assert spec.workload.mix_weights == {1: 0.25, 8: 0.0, 32: 0.75}
    best = {1: 55.0, 8: 390.0, 32: 1200.0}
    assert mix_score(spec, {1: 55.0, 32: 1200.0}, best) == pytest.approx(1.0)
    assert mix_score(spec, {1: 44.0, 32: 1200.0}, best) == pytest.approx(0.95)
    assert mix_score(spec, {1: 55.0}, best) is None


def test_before_per_level_results_the_config_offers_the_spaces_steps(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        node={"sglang_version": "0.5.23", "sim_profile": "h200-nvlink-x8"},
        search_space={"include": ["speculative_adaptive.yaml"]},
        workload={"concurrency": [1, 8, 32], "num_prompts": 16},
        objective={"metric": "output_throughput_c1"},
    )
    text = spec_candidates_text(spec)
    steps = [1, 2, 3, 4, 5, 6, 7]
    assert json.loads(text or "") == {k: {"candidate_steps": steps} for k in ("1", "3", "12")}
    on = {**EAGLE, "speculative-adaptive": True, "speculative-num-steps": 3}
    assert adaptive_text(spec, on) == text
    given = '{"1": {"candidate_steps": [3]}}'
    assert adaptive_text(spec, {**on, "speculative-adaptive-config": given}) == given
    assert adaptive_text(spec, {**EAGLE, "speculative-adaptive": False}) is None
    # The space's fragment keeps the tree knobs out while adaptive mode is on.
    cfg = {**on, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 8}
    assert normalize_config(spec, cfg) == on


def test_normalize_keeps_spec_sweeps_own_adaptive_keys(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    text = '{"1": {"candidate_steps": [3]}}'
    cfg = {**EAGLE, "speculative-num-steps": 3, "speculative-adaptive": True}
    assert normalize_config(spec, {**cfg, "speculative-adaptive-config": text}) == {
        **cfg,
        "speculative-adaptive-config": text,
    }
    off = {**EAGLE, "speculative-num-steps": 3, "speculative-adaptive-config": text}
    assert normalize_config(spec, off) == {**EAGLE, "speculative-num-steps": 3}


def test_a_trial_writes_its_config_and_launches_the_path(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    text = '{"1": {"candidate_steps": [3]}, "32": {"candidate_steps": [2]}}'
    cfg = {**EAGLE, "speculative-num-steps": 3, "speculative-adaptive": True,
           "speculative-adaptive-config": text}  # fmt: skip
    path = write_config(spec, cfg, tmp_path)
    assert path == str((tmp_path / "adaptive-config.json").resolve())
    assert (tmp_path / "adaptive-config.json").read_text() == text + "\n"
    argv = build_command(spec, cfg, adaptive_path=path).argv
    assert argv[-3:] == ("--speculative-adaptive", "--speculative-adaptive-config", path)
    assert text not in " ".join(argv)
    assert "adaptive-config.json" in build_command(spec, cfg).shell()
    assert write_config(spec, {**EAGLE, "speculative-num-steps": 3}, tmp_path / "x") is None
    assert run_name("adaptive.r1", cfg, {"speculative-algorithm": None}) == (
        "adaptive.r1 EAGLE3 s3 adaptive 1:[3]/32:[2]"
    )
    assert config_summary(cfg, width=200).endswith("adaptive 1:[3]/32:[2]")


def test_a_trial_sglang_ran_static_is_invalid_args(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    cfg = {**EAGLE, "speculative-num-steps": 3, "speculative-adaptive": True}
    log = (
        "speculative_adaptive disabled: speculative_eagle_topk=2 (only topk=1 is supported). "
        "Falling back to static speculative params.\n"
    )
    mode, reason = adaptive_verdict(spec, cfg, FailureMode.NONE, "ok", log)
    assert mode is FailureMode.INVALID_ARGS
    assert "SGLang turned adaptive speculative decoding off (speculative_eagle_topk=2" in reason
    assert adaptive_verdict(spec, cfg, FailureMode.NONE, "ok", "fine\n") == (FailureMode.NONE, "ok")
    static = {**EAGLE, "speculative-num-steps": 3}
    assert adaptive_verdict(spec, static, FailureMode.NONE, "ok", log)[0] is FailureMode.NONE


@pytest.mark.parametrize(
    ("params", "server_args", "message"),
    [
        (
            {"speculative-adaptive-config": {"choices": [None, "a.json"]}},
            {},
            "search_space.params.speculative-adaptive-config: spec_sweep writes the adaptive",
        ),
        (
            {},
            {"speculative-adaptive-config": "a.json"},
            "node.server_args.speculative-adaptive-config: spec_sweep writes",
        ),
        (
            {"speculative-adaptive": {"choices": [False, True]}},
            {},
            "it can be on with speculative-algorithm=None",
        ),
        (
            {
                "speculative-adaptive": {
                    "choices": [False, True],
                    "when": {"speculative-algorithm": "EAGLE3"},
                },
                "speculative-eagle-topk": {
                    "choices": [1, 2],
                    "when": {"speculative-algorithm": "EAGLE3"},
                },
            },
            {},
            "speculative-eagle-topk: it can be 2 while speculative-adaptive is on",
        ),
    ],
)
def test_the_spec_keeps_sglang_from_turning_adaptive_off(
    tmp_path: Path, params: dict[str, Any], server_args: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[")):
        make_spec(
            tmp_path,
            node={"sglang_version": "0.5.23", "server_args": {"tp-size": 8, **server_args}},
            search_space={"include": ["speculative.yaml"], "params": params},
        )


def test_the_mix_names_measured_levels(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"workload.mix: level 4 is not in concurrency \[1, 8\]"):
        make_spec(tmp_path, workload={"concurrency": [1, 8], "mix": {4: 1.0}},
                  objective={"metric": "output_throughput_c1"})  # fmt: skip
    with pytest.raises(SpecError, match=r"workload\.mix: the weight of level 8 is 0\.0"):
        make_spec(tmp_path, workload={"concurrency": [1, 8], "mix": {1: 1, 8: 0}},
                  objective={"metric": "output_throughput_c1"})  # fmt: skip
