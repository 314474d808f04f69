"""SGLang's tree rules (spec_sweep.tree_rules), as read from SGLang 0.5.13 / 0.5.23 sources."""

from __future__ import annotations

from spec_sweep.search.tree_rules import check_tree, tree_capacity

ALGO, STEPS, TOPK, DRAFT = (
    "speculative-algorithm",
    "speculative-num-steps",
    "speculative-eagle-topk",
    "speculative-num-draft-tokens",
)


def tree(steps: int | None, topk: int | None, draft: int | None, **extra: object) -> dict:
    config = {ALGO: "EAGLE3", STEPS: steps, TOPK: topk, DRAFT: draft, **extra}
    return {k: v for k, v in config.items() if v is not None or k == ALGO}


def test_no_speculation_is_left_alone() -> None:
    check = check_tree({ALGO: None, "mem-fraction-static": 0.9})
    assert check.runs
    assert not check.rewrites


def test_topk_one_rewrites_draft_tokens_to_steps_plus_one() -> None:
    check = check_tree(tree(3, 1, 8))
    assert check.runs
    assert check.config[DRAFT] == 4
    assert check.rewrites
    assert "8 -> 4" in check.rewrites[0]
    assert not check_tree(tree(3, 1, 4)).rewrites


def test_more_draft_tokens_than_the_tree_holds_is_rejected() -> None:
    assert tree_capacity(2, 2) == 2 + 1 * 4 + 1
    assert check_tree(tree(2, 2, 7)).runs
    rejected = check_tree(tree(2, 2, 8))
    assert not rejected.runs
    assert "organize_draft_results" in (rejected.rejected or "")
    assert not check_tree(tree(1, 4, 6)).runs  # one step of top-4 holds 4 + 1


def test_argument_errors() -> None:
    assert "AssertionError" in (check_tree(tree(None, 2, 4)).rejected or "")
    assert check_tree(tree(None, None, None)).runs  # all three auto-chosen
    trt = check_tree(tree(2, 2, 4, **{"attention-backend": "trtllm_mha"}))
    assert "trtllm_mha" in (trt.rejected or "")
    assert check_tree(tree(2, 1, 3, **{"attention-backend": "trtllm_mha"})).runs
    paged = tree(2, 2, 4, **{"page-size": 64, "attention-backend": "flashmla"})
    assert "page_size" in (check_tree(paged).rejected or "")
    assert check_tree({**paged, "attention-backend": "fa3"}).runs
    fixed = check_tree(tree(2, 2, 4), server_args={"attention-backend": "trtllm_mha"})
    assert not fixed.runs  # the node's fixed server arguments count


def test_sglang_0_5_17_crashes_on_a_tree_shorter_than_its_accepted_path() -> None:
    # the real table's t0025: (5, 2, 4) booted on 0.5.17 and crashed on the first request
    crash = check_tree(tree(5, 2, 4), version="0.5.17")
    assert "_compact_accept_to_front" in (crash.rejected or "")
    assert not check_tree(tree(5, 4, 4), version="0.5.17").runs
    assert check_tree(tree(3, 4, 4), version="0.5.17").runs  # 4 draft tokens hold 3 + 1
    assert check_tree(tree(2, 2, 4), version="0.5.17").runs  # ran in the real table
    assert check_tree(tree(5, 1, 4), version="0.5.17").runs  # top-k 1: rewritten to 6, runs
    # other versions were not read for it
    assert check_tree(tree(5, 2, 4), version="0.5.23").runs
    assert check_tree(tree(5, 2, 4)).runs
