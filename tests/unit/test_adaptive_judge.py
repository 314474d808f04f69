"""The adaptive phase's boots and their judgement (`core.adaptive_judge`), and how the summary
and the report read it (`present.adaptive_view`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from harness import DROP, make_spec, record
from rich.console import Console, Group

from spec_sweep.core import names
from spec_sweep.core.adaptive import build_adaptive
from spec_sweep.core.adaptive_judge import (
    adaptive_metrics,
    adaptive_tags,
    judge_adaptive,
    plan_adaptive,
)
from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.verdict import verdict
from spec_sweep.present.adaptive_view import adaptive_lines, adaptive_section
from spec_sweep.present.sweep_view import SweepView

EAGLE = {"speculative-algorithm": "EAGLE3"}
#: The simulated H200 node's chains: tok/s at 1 / 8 / 32 and the accept length.
H200 = {
    0: (30, 228, 760, None),
    1: (45, 341, 1132, 1.68),
    2: (53, 387, 1200, 2.01),
    3: (55, 390, 1141, 2.14),
    5: (53, 362, 966, 2.18),
}
JITTER = (1.0, 1.012, 0.99)  # three boots


def _spec(tmp_path: Path, **budget: Any) -> Any:
    return make_spec(
        tmp_path,
        node={"sglang_version": "0.5.23", "sim_profile": "h200-nvlink-x8"},
        search_space={
            "include": [],
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "speculative-num-steps": {
                    "choices": [1, 2, 3, 5],
                    "default": 3,
                    "when": {"speculative-algorithm": "EAGLE3"},
                },
            },
        },
        workload={"concurrency": [1, 8, 32], "num_prompts": 32, "mix": {1: 0.2, 8: 0.5, 32: 0.3}},
        objective={"metric": "output_throughput_c1"},
        budget={"trials": 5, "confirm_repeats": 3, **budget},
    )


def _boot(trial_id: str, config: dict[str, Any], values: Sequence[float], start: int, **extra: Any):
    c1, c8, c32 = values
    return record(
        trial_id, config, c1, start=start, metric="output_throughput_c1",
        output_throughput_c8=c8, output_throughput_c32=c32, **extra,
    )  # fmt: skip


def _search() -> list[Any]:
    out = []
    for i, (steps, (c1, c8, c32, accept)) in enumerate(H200.items()):
        plain = {"speculative-algorithm": None}
        config = {**EAGLE, "speculative-num-steps": steps} if steps else plain
        extra = {f"accept_length_c{c}": accept for c in (1, 8, 32)} if accept else {}
        out.append(_boot(f"t{i:04d}", config, (c1, c8, c32), i, **extra))
    return out


def _judged(spec: Any, adaptive: Sequence[float], accept32: float = 2.01) -> History:
    """The search, then three boots each of the adaptive configuration and the statics."""
    search = _search()
    history = History(spec, search)
    build = build_adaptive(history)
    assert build.config is not None
    configs = {"t0003": search[3].config, "t0002": search[2].config}
    boots = []
    start = 100
    for k, jitter in enumerate(JITTER, start=1):
        values = [v * jitter for v in adaptive]
        accept = {"accept_length_c1": 2.14, "accept_length_c8": 2.01, "accept_length_c32": accept32}
        boots.append(_boot(f"adaptive.r{k}", build.config, values, start, **accept))
        start += 1
        for tid, steps in (("t0003", 3), ("t0002", 2)):
            base = [v * jitter for v in H200[steps][:3]]
            boots.append(_boot(f"{tid}.r{k}", configs[tid], base, start))
            start += 1
    return History(spec, [*search, *boots])


def test_the_plan_interleaves_the_adaptive_boots_with_the_static_ones(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    history = History(spec, _search())
    boots = plan_adaptive(history)
    # The statics: the best at c1 and c8 (t0003, 3 steps) and at c32 (t0002, 2 steps), which
    # is also the best single boot over the mix.
    assert [b.trial_id for b in boots] == [
        "adaptive.r1", "t0003.r1", "t0002.r1",
        "adaptive.r2", "t0003.r2", "t0002.r2",
        "adaptive.r3", "t0003.r3", "t0002.r3",
    ]  # fmt: skip
    assert boots[0].config == build_adaptive(history).config
    assert boots[0].params == boots[0].config
    assert all(b.attempt == 1 for b in boots)
    # What finished is not planned again; an interrupted boot runs as its next attempt.
    done = _boot("adaptive.r1", boots[0].config, (55, 390, 1200), 50)
    lost = record(
        "t0003.r1", boots[1].config, None, start=51, status="KILLED", mode=FailureMode.NODE_LOST
    )
    later = plan_adaptive(History(spec, [*history.records, done, lost]))
    assert [b.trial_id for b in later][:2] == ["t0003.r1", "t0002.r1"]
    assert later[0].attempt == 2


def test_no_plan_when_disabled_or_nothing_to_build(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path / "off",
        node={"sglang_version": "0.5.23"},
        search_space={"include": ["speculative.yaml"]},
        workload={"concurrency": [1, 8, 32], "num_prompts": 32},
        objective={"metric": "output_throughput_c1"},
        adaptive={"enabled": False},
    )
    assert plan_adaptive(History(spec, _search())) == []
    assert judge_adaptive(History(spec, _search())) is None
    spec = _spec(tmp_path / "plain")
    plain_wins = [r for r in _search() if r.trial_id in ("t0000", "t0001")]
    assert plan_adaptive(History(spec, plain_wins)) == []


def test_a_grown_search_builds_and_boots_another_adaptive_configuration(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    history = _judged(spec, (55, 389, 1198))
    faster = _boot("t0005", {**EAGLE, "speculative-num-steps": 5}, (70, 300, 900), 60)
    grown = History(spec, [*history.records, faster])
    boots = plan_adaptive(grown)
    assert boots[0].trial_id == "adaptive2.r1"
    assert '"1": {"candidate_steps": [5]}' in str(boots[0].config["speculative-adaptive-config"])


def test_within_noise_everywhere_and_better_over_the_mix_is_recommended(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    answer = judge_adaptive(_judged(spec, (55, 389, 1198)))
    assert answer is not None
    assert answer.judged
    assert [(j.concurrency, j.best_id, j.verdict) for j in answer.levels] == [
        (1, "t0003", "within noise"),
        (8, "t0003", "within noise"),
        (32, "t0002", "within noise"),
    ]
    assert [row.trial_id for row in answer.mix] == ["adaptive", "t0002", "t0003"]
    assert answer.mix[0].mean == pytest.approx(0.998, abs=0.001)
    assert answer.passes
    assert answer.recommended == "adaptive"
    assert answer.recommended_config == answer.build.config
    assert answer.reason.startswith("adaptive is within noise of the best static configuration")
    assert "it scores 0.998 against 0.989 for the best static configuration t0002, +0.9%" in (
        answer.reason
    )
    assert adaptive_metrics(answer)[names.ADAPTIVE_MIX] == pytest.approx(answer.mix[0].mean)
    diff32 = adaptive_metrics(answer)[f"{names.ADAPTIVE_DIFF}_c32"]
    assert diff32 == pytest.approx(-0.0017, abs=1e-3)
    tags = adaptive_tags(answer)
    assert tags[names.TAG_ADAPTIVE] == "adaptive recommended"
    assert tags[names.TAG_OVERALL] == "adaptive"
    assert tags[names.TAG_ADAPTIVE_CONFIG] == answer.build.text
    # The adaptive boots are not a confirmation of the top configurations: no verdict of it.
    assert verdict(_judged(_spec(tmp_path / "c0", confirm=0), (55, 389, 1198))) is None


def test_a_losing_level_is_named_with_why(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    answer = judge_adaptive(_judged(spec, (55, 389, 1100), accept32=2.14))
    assert answer is not None
    assert [j.verdict for j in answer.levels] == ["within noise", "within noise", "worse"]
    assert not answer.passes
    assert answer.recommended == "t0002"
    why = answer.levels[2].why
    assert "accepted 2.14 tokens per cycle there against 2.01 for the 2-step chain" in why
    assert "it loses at c32: -8.3% against t0002, beyond the" in answer.reason
    assert answer.reason.startswith("t0002 is recommended for every load, not adaptive")


def test_failed_adaptive_boots_are_not_judged(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    search = _search()
    config = build_adaptive(History(spec, search)).config
    assert config is not None
    oom = record("adaptive.r1", config, None, start=50, mode=FailureMode.OOM)
    answer = judge_adaptive(History(spec, [*search, oom]))
    assert answer is not None
    assert not answer.judged
    assert answer.reason.startswith("not judged: its boots failed (oom")


def test_the_summary_and_the_report_show_the_answer(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    view = SweepView.of(_judged(spec, (55, 389, 1198)))
    section = adaptive_section(view, config_path="/state/adaptive-config.json")
    assert section is not None
    assert section["label"] == "adaptive recommended"
    assert [s["candidates"] for s in section["slots"]] == [[3], [2, 3], [2]]
    assert section["levels"][2]["best"] == "t0002"
    assert section["command"].endswith(
        "--speculative-num-steps 3 --speculative-adaptive --speculative-adaptive-config "
        "/state/adaptive-config.json"
    )
    buffer = io.StringIO()
    Console(file=buffer, width=250, color_system=None).print(Group(*adaptive_lines(view)))
    text = buffer.getvalue()
    assert "c8 (batches from 3): candidate steps [2, 3], settles at 2" in text
    mix = "over the mix (c1: 0.2, c8: 0.5, c32: 0.3): adaptive 0.998; t0002 0.989; t0003 0.985"
    assert mix in text
    assert "recommended for every load: adaptive; launch it with:" in text
    assert 'adaptive-config.json: {"1": {"candidate_steps": [3]}' in text


def test_adaptive_search_trials_are_not_static_configurations(tmp_path: Path) -> None:
    """A trial the searcher ran with the switch on may measure best at a level; the adaptive
    configuration is judged against static ones all the same."""
    spec = _spec(tmp_path)
    searched = _boot(
        "t0005",
        {**EAGLE, "speculative-num-steps": 3, "speculative-adaptive": True},
        (60, 400, 1300),
        5,
    )
    history = History(spec, [*_search(), searched])
    assert [p.best_id for p in build_adaptive(history).levels] == ["t0003", "t0003", "t0002"]
    assert {b.trial_id.split(".r")[0] for b in plan_adaptive(history)} == {
        "adaptive",
        "t0003",
        "t0002",
    }


def test_a_sweep_that_cannot_speculate_has_no_adaptive_phase(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        search_space={"include": ["memory.yaml"]},
        baseline=DROP,
        workload={"concurrency": [1, 8]},
        objective={"metric": "output_throughput_c1"},
    )
    records = [
        record("t0000", {"cuda-graph-max-bs": 512}, 80, start=0, metric="output_throughput_c1")
    ]
    assert judge_adaptive(History(spec, records)) is None
    assert plan_adaptive(History(spec, records)) == []
