"""SGLang's own rules for EAGLE draft trees, applied to a configuration before it is launched.

This module owns what SGLang does with the speculative tree flags of a configuration, read from
the sources of each supported version (0.5.13 and 0.5.23 agree on all of it):

* `python/sglang/srt/arg_groups/speculative_hook.py`, `_handle_eagle_family` (EAGLE, EAGLE3,
  NEXTN, STANDALONE):
  - `--speculative-num-steps` unset with `--speculative-eagle-topk` or
    `--speculative-num-draft-tokens` set fails an `assert` (unless 0.5.23's
    `--speculative-adaptive` is on); all three unset are auto-chosen (nothing to check here);
  - top-k > 1 with the `trtllm_mha` attention backend (`--attention-backend`, or the decode or
    prefill one) is a `ValueError`;
  - top-k == 1 silently rewrites `--speculative-num-draft-tokens` to num-steps + 1 (a warning);
  - top-k > 1 with `--page-size` > 1 on an attention backend other than flashinfer, fa3 or
    triton is a `ValueError`.
* `python/sglang/srt/speculative/eagle_utils.py`, `organize_draft_results`: the draft worker
  keeps the `num_draft_tokens - 1` best of `topk + (num_steps - 1) * topk**2` scored
  candidates (`torch.topk`); more draft tokens than that fail at the first draft step (or its
  CUDA-graph capture), and zero steps concatenate nothing. An unset top-k or draft-token count
  with the steps set is left to the trial (what later code does with it is not read here).

* 0.5.17 only (`python/sglang/srt/speculative/eagle_worker_common.py`,
  `_compact_accept_to_front`, which the default v2 worker runs for top-k > 1): the accepted path,
  `num_steps + 1` nodes, is copied into the first `num_draft_tokens` slots of each request's
  block, so top-k > 1 with fewer draft tokens than `num_steps + 1` raises a `RuntimeError` at the
  first verify, the first request: SGLang boots, then crashes (the real table's t0025, (5, 2, 4)
  on the H200, 2026-12-02). Other versions were not read for it, so it is not applied to them.

`check_tree` says, for one configuration, whether SGLang rejects it (and why, in its words) and
which configuration actually runs when SGLang rewrites a flag. The searcher
(`spec_sweep.search.searcher`) never spends a trial on a rejected tree and treats a rewritten
one as the configuration that actually runs; `benchmarks/landscapes.py` builds its nodes on the
same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec_sweep.spec import Scalar

__all__ = ["EAGLE_FAMILY", "TreeCheck", "check_tree", "tree_capacity"]

#: Speculative algorithms whose flags `_handle_eagle_family` resolves (NEXTN is EAGLE).
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
ALGORITHM = "speculative-algorithm"
STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT_TOKENS = "speculative-num-draft-tokens"
#: Attention backends that implement top-k > 1 trees with paged KV (`_PAGE_TREE_SPEC_BACKENDS`).
_PAGE_TREE_BACKENDS = ("flashinfer", "fa3", "triton")
_ATTENTION_FLAGS = ("attention-backend", "decode-attention-backend", "prefill-attention-backend")


@dataclass(frozen=True)
class TreeCheck:
    """What SGLang does with a configuration's speculative flags.

    Attributes:
        config: The configuration that actually runs (rewrites applied; flags SGLang leaves
            alone as given).
        rejected: Why SGLang refuses to run it (None: the rules let it boot).
        rewrites: One line per silently rewritten flag: flag, old and new value, and why.
    """

    config: dict[str, Scalar]
    rejected: str | None = None
    rewrites: tuple[str, ...] = field(default_factory=tuple)

    @property
    def runs(self) -> bool:
        """Whether SGLang's rules let the configuration boot."""
        return self.rejected is None


def tree_capacity(steps: int, topk: int) -> int:
    """How many draft tokens (root included) a tree of `steps` and `topk` can hold."""
    if steps < 1 or topk < 1:
        return 0
    return topk + (steps - 1) * topk * topk + 1


def _as_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


#: SGLang versions whose v2 tree verify needs num_draft_tokens >= num_steps + 1 for top-k > 1
_SHORT_TREE_CRASH_VERSIONS = ("0.5.17",)


def check_tree(
    config: Mapping[str, Scalar],
    *,
    server_args: Mapping[str, Any] | None = None,
    version: str | None = None,
) -> TreeCheck:
    """Apply SGLang's tree rules to one configuration.

    Args:
        config: A configuration of the search space.
        server_args: The node's fixed server arguments (`node.server_args`), which take part.
        version: The node's SGLang version (`node.sglang_version`), for the rules of one version
            (None: only the rules every supported version shares).

    Returns:
        The configuration that runs, whether SGLang rejects it, and what it rewrites.
    """
    out: dict[str, Scalar] = dict(config)
    fixed = server_args or {}

    def get(flag: str) -> Any:
        if flag in config:
            return config[flag]
        return fixed.get(flag)

    algorithm = get(ALGORITHM)
    if not isinstance(algorithm, str) or algorithm.upper() not in EAGLE_FAMILY:
        return TreeCheck(out)
    steps, topk, draft = _as_int(get(STEPS)), _as_int(get(TOPK)), _as_int(get(DRAFT_TOKENS))
    if steps is None:
        if (topk is not None or draft is not None) and not get("speculative-adaptive"):
            return TreeCheck(
                out,
                rejected="AssertionError in _handle_eagle_family: --speculative-num-steps unset "
                "while --speculative-eagle-topk or --speculative-num-draft-tokens is set",
            )
        return TreeCheck(out)  # all three auto-chosen by SGLang
    if topk is None:
        return TreeCheck(out)  # the sources leave it to later code: not decided here
    backends = {str(get(flag)) for flag in _ATTENTION_FLAGS if get(flag) is not None}
    if topk > 1 and "trtllm_mha" in backends:
        return TreeCheck(
            out,
            rejected="ValueError: trtllm_mha backend only supports topk = 1 for speculative "
            "decoding.",
        )
    rewrites: list[str] = []
    if topk == 1 and draft != steps + 1:
        rewrites.append(
            f"{DRAFT_TOKENS} {draft} -> {steps + 1}: SGLang sets num_draft_tokens = "
            "num_steps + 1 when topk == 1"
        )
        draft = steps + 1
        if DRAFT_TOKENS in out:
            out[DRAFT_TOKENS] = draft
    page = _as_int(get("page-size")) or 1
    attention = get("attention-backend")
    # An unset backend is resolved by SGLang per GPU (to one that supports the tree): unknown.
    if topk > 1 and page > 1 and attention is not None and attention not in _PAGE_TREE_BACKENDS:
        return TreeCheck(
            out,
            rejected=f"ValueError: speculative_eagle_topk > 1 with page_size > 1 is only "
            f"supported on {_PAGE_TREE_BACKENDS}; got attention_backend={attention!r}",
            rewrites=tuple(rewrites),
        )
    if steps < 1:
        return TreeCheck(
            out,
            rejected="RuntimeError in organize_draft_results: torch.cat(): expected a "
            "non-empty list of Tensors (num_steps < 1)",
            rewrites=tuple(rewrites),
        )
    if draft is None:
        return TreeCheck(out, rewrites=tuple(rewrites))  # not decided here either
    capacity = tree_capacity(steps, topk)
    if draft > capacity:
        return TreeCheck(
            out,
            rejected=f"RuntimeError in organize_draft_results: selected index k out of range "
            f"({draft} draft tokens > {capacity} that {steps} steps of top-{topk} can hold)",
            rewrites=tuple(rewrites),
        )
    if version in _SHORT_TREE_CRASH_VERSIONS and topk > 1 and draft < steps + 1:
        return TreeCheck(
            out,
            rejected=f"RuntimeError in _compact_accept_to_front on the first request (SGLang "
            f"{version}): {draft} draft tokens cannot hold the {steps + 1}-node accepted path",
            rewrites=tuple(rewrites),
        )
    return TreeCheck(out, rewrites=tuple(rewrites))
