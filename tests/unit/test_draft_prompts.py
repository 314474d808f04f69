"""`scripts/draft_prompts.py`: the templated training prompts of `scripts/train_test_draft.py`.

Deterministic for a seed, distinct, several thousand, all four kinds, and none made from a topic
that occurs in an evaluation prompt (the builtin set, `spec_sweep/data/prompts.jsonl`). No torch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ROOT / "spec_sweep" / "data" / "prompts.jsonl"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "draft_prompts", ROOT / "scripts" / "draft_prompts.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dp = _load()
EVAL = [json.loads(line)["text"] for line in BUILTIN.read_text().splitlines() if line.strip()]


def _topics() -> set[str]:
    """Every topic string a prompt can be made from."""
    topics = {t for ts in dp.CONCEPTS.values() for t in ts}
    topics |= {*dp.CODE_TASKS, *dp.SCRIPTING_TASKS, *dp.SHELL_TASKS, *dp.SQL_TASKS}
    return topics | {*dp.CREATIVE_SUBJECTS, *dp.PRODUCTS, *dp.PRACTICAL_TASKS}


@pytest.fixture(scope="module")
def prompt_set():
    return dp.build_prompt_set(EVAL, seed=0)


def test_same_seed_same_prompts_and_other_seed_other_order(prompt_set) -> None:
    again = dp.build_prompt_set(EVAL, seed=0)
    assert again.prompts == prompt_set.prompts
    assert again.kinds == prompt_set.kinds
    other = dp.build_prompt_set(EVAL, seed=1)
    assert other.prompts != prompt_set.prompts
    assert other.stats["dropped_eval_topic"] == prompt_set.stats["dropped_eval_topic"]


def test_prompts_are_distinct_many_and_varied(prompt_set) -> None:
    prompts = prompt_set.prompts
    assert len(prompts) == len(set(prompts)) == prompt_set.stats["prompts"]
    assert len(prompts) >= 3000
    assert set(prompt_set.kinds) == {"concept", "code", "creative", "practical"}
    assert min(prompt_set.stats["by_kind"].values()) >= 300
    lengths = sorted(len(p) for p in prompts)
    assert lengths[len(lengths) // 10] < 60 < lengths[-len(lengths) // 10]
    assert not set(prompts) & set(EVAL)
    stats = prompt_set.stats
    assert (
        stats["candidates"]
        == stats["prompts"] + stats["dropped_eval_topic"] + stats["dropped_duplicate"]
    )


def test_no_prompt_is_made_from_an_eval_prompts_topic(prompt_set) -> None:
    lowered = [e.lower() for e in EVAL]
    in_eval = {t for t in _topics() if any(t.lower() in e for e in lowered)}
    assert in_eval  # the builtin prompts share some topics: the filter has work to do
    assert set(prompt_set.stats["dropped_eval_topics"]) == in_eval
    assert prompt_set.stats["dropped_eval_topic"] > 0
    for prompt in prompt_set.prompts:
        assert not any(t.lower() in prompt.lower() for t in in_eval), prompt


def test_an_exclusion_drops_exactly_the_prompts_of_that_topic() -> None:
    full = dp.build_prompt_set([], seed=3)
    assert full.stats["dropped_eval_topic"] == 0
    fewer = dp.build_prompt_set(["Tell me all about THE NORTHERN LIGHTS, please."], seed=3)
    gone = set(full.prompts) - set(fewer.prompts)
    assert len(gone) == len(dp.CREATIVE_TEMPLATES) == fewer.stats["dropped_eval_topic"]
    assert all("the northern lights" in p for p in gone)
    assert set(fewer.prompts) <= set(full.prompts)


def test_variants_word_each_request_again() -> None:
    one = dp.build_prompt_set(EVAL, seed=0)
    three = dp.build_prompt_set(EVAL, seed=0, variants=3)
    stats = three.stats
    assert stats["candidates"] == 3 * one.stats["candidates"]
    assert stats["candidates"] == (
        stats["prompts"] + stats["dropped_eval_topic"] + stats["dropped_duplicate"]
    )
    # a variant repeats another's constraint now and then (a duplicate, dropped): most are new
    assert len(three.prompts) > 2.4 * len(one.prompts)
    assert len(set(three.prompts)) == len(three.prompts)
    assert stats["dropped_eval_topic"] == 3 * one.stats["dropped_eval_topic"]
