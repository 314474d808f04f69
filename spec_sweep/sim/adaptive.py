"""SGLang's adaptive speculative decoding, as the simulated node runs it.

This module owns ``--speculative-adaptive`` / ``--speculative-adaptive-config``: which SGLang
versions take them and how (:func:`adaptive_rules`), when SGLang turns the mode off with a
warning (:func:`unsupported_reason`), reading the config the way SGLang does (:func:`parse_config`,
with SGLang's own exceptions as :class:`AdaptiveConfigError`), and the controller itself: the
per-batch-size :class:`AdaptiveStepSlot` (EMA of accepted drafts, warm-up, update interval,
hysteresis, EMA ceiling, the zero-step probe), the router :class:`AdaptivePolicy` (pad a batch to
the captured CUDA-graph size, take the largest config key at or below it) and the runtime-state
switcher :class:`AdaptiveController`, with the log lines SGLang prints. Pure and deterministic; the
engine feeds it verify results and prints what it returns.

Sources (wheels from PyPI, read line by line; ``adaptive_spec_params.py`` and
``adaptive_runtime_state.py`` are under ``sglang/srt/speculative/``):

- 0.5.10: no adaptive mode. 0.5.11 and 0.5.12: one global slot, ``candidate_steps`` default
  ``[1, 3, 7]``; 0.5.11 also refuses the overlap scheduler. Not modelled (no flag manifest exists
  for these versions, so the simulator cannot be started as one of them).
- 0.5.13: per-batch-size slots (``AdaptiveSpeculativeParams._route``, adaptive_spec_params.py:
  309-325), candidates must be positive (:102-106), ``validate_adaptive_initial_steps``
  (:129-139) runs after ``_handle_eagle_family`` (arg_groups/speculative_hook.py:116, 120-130),
  so top-k and the draft tokens come from the EAGLE defaults first.
- 0.5.14 (checked also in 0.5.16 and 0.5.17): a candidate of 0 means no drafting
  (adaptive_spec_params.py 0.5.17:112, :183 no EMA update at 0 steps, :207-214 the probe,
  :221-222 the floor threshold, :228-229 no rise after a drop); the mode is resolved before the
  EAGLE defaults (arg_groups/speculative_hook.py 0.5.17:138-141,
  ``_init_adaptive_speculative_params`` :770-791: top-k 1, steps = the middle candidate, draft
  tokens = steps + 1).
- 0.5.23: default slot "1" has ``[1, 3, 5, 7]`` (adaptive_spec_params.py:28-53); attention DP is
  named as such (:80-84; 0.5.17 said ``enable_dp_attention=True``, :67-71). Versions between
  0.5.17 and 0.5.23 were not read; they are taken as 0.5.17.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BUILT_LINE",
    "DISABLED_WARNING",
    "INITIALIZED_LINE",
    "SWITCH_LINE",
    "UPDATED_LINE",
    "AdaptiveConfig",
    "AdaptiveConfigError",
    "AdaptiveController",
    "AdaptivePolicy",
    "AdaptiveRules",
    "AdaptiveStepSlot",
    "adaptive_rules",
    "parse_config",
    "unsupported_reason",
    "version_key",
]

# -- log texts ---------------------------------------------------------------------------------
#: arg_groups/speculative_hook.py ``_maybe_disable_adaptive`` (0.5.13:458, 0.5.17:764,
#: 0.5.23:1382), a main-process ``logger.warning``.
DISABLED_WARNING = (
    "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
)
#: adaptive_spec_params.py ``AdaptiveSpeculativeParams.__init__`` (0.5.13:267, 0.5.23:300),
#: ``log_info_on_rank0`` in the scheduler.
INITIALIZED_LINE = "AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={cands}"
#: adaptive_spec_params.py ``_recompute_params`` (0.5.13:235) / ``_apply_target_steps``
#: (0.5.17:255, 0.5.23:268).
UPDATED_LINE = "Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"
#: eagle_worker_v2.py ``apply_runtime_state`` (0.5.13:1078, 0.5.17:1384, 0.5.23:1868).
SWITCH_LINE = (
    "Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old_dt} -> {new_dt}"
)
#: eagle_worker_v2.py ``build_adaptive_runtime_state`` (0.5.13:1064, 0.5.17:1370, 0.5.23:1854).
BUILT_LINE = "Built adaptive runtime state steps={steps}: elapsed={elapsed:.2f}s, mem={mem:.2f}GB"

# -- per-version defaults ----------------------------------------------------------------------
_SLOT_FLAT = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
_DEFAULT_0_5_13: dict[str, dict[str, Any]] = {  # adaptive_spec_params.py 0.5.13:23-42
    "1": {
        "candidate_steps": [1, 3, 7],
        "up_hysteresis": 0.0,
        "down_hysteresis": -0.25,
        "ceiling_coeff": 0,
    },
    "8": {"candidate_steps": [1, 3], **_SLOT_FLAT},
    "32": {"candidate_steps": [1], **_SLOT_FLAT},
}
_DEFAULT_0_5_14: dict[str, dict[str, Any]] = {  # adaptive_spec_params.py 0.5.17:22-47
    "1": {
        "candidate_steps": [1, 3, 7],
        "up_hysteresis": 0.0,
        "down_hysteresis": -0.25,
        "ceiling_coeff": 0,
    },
    "8": {"candidate_steps": [0, 1, 3], **_SLOT_FLAT},
    "32": {"candidate_steps": [0, 1], **_SLOT_FLAT},
    "64": {"candidate_steps": [0], **_SLOT_FLAT},
}
_DEFAULT_0_5_23: dict[str, dict[str, Any]] = {  # adaptive_spec_params.py 0.5.23:28-53
    **_DEFAULT_0_5_14,
    "1": {
        "candidate_steps": [1, 3, 5, 7],
        "up_hysteresis": 0.0,
        "down_hysteresis": -0.25,
        "ceiling_coeff": 0,
    },
}


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.13"`` -> ``(0, 5, 13)`` (suffixes such as ``.post1`` are ignored)."""
    parts = []
    for piece in version.split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class AdaptiveRules:
    """What one SGLang version does with ``--speculative-adaptive``.

    Attributes:
        version: The SGLang version.
        zero_step: A candidate of 0 (no drafting) is allowed (0.5.14+).
        resolve_first: The mode is resolved before the EAGLE defaults and forces top-k 1, the
            middle candidate as the initial steps and draft tokens = steps + 1 (0.5.14+); in
            0.5.13 the EAGLE defaults come first and the initial steps are only validated.
        attention_dp_reason: The reason SGLang prints for attention DP.
        default_config: The config used without ``--speculative-adaptive-config``.
    """

    version: str
    zero_step: bool
    resolve_first: bool
    attention_dp_reason: str
    default_config: Mapping[str, Mapping[str, Any]]


def adaptive_rules(version: str) -> AdaptiveRules:
    """The adaptive rules of an SGLang version.

    Args:
        version: An SGLang version (``"0.5.23"``).

    Returns:
        The rules (versions between the checked ones take the nearest older checked one).

    Raises:
        ValueError: A version before 0.5.13 (0.5.11 and 0.5.12 have a different, global
            controller that the simulator does not model).
    """
    key = version_key(version)
    if key < (0, 5, 13):
        raise ValueError(
            f"the simulated node models SGLang's adaptive speculative decoding from 0.5.13 on "
            f"(per-batch-size slots); {version} is older"
        )
    if key < (0, 5, 14):
        return AdaptiveRules(
            version=version,
            zero_step=False,
            resolve_first=False,
            attention_dp_reason="enable_dp_attention=True is not supported",
            default_config=_DEFAULT_0_5_13,
        )
    if key < (0, 5, 23):
        return AdaptiveRules(
            version=version,
            zero_step=True,
            resolve_first=True,
            attention_dp_reason="enable_dp_attention=True is not supported",
            default_config=_DEFAULT_0_5_14,
        )
    return AdaptiveRules(
        version=version,
        zero_step=True,
        resolve_first=True,
        attention_dp_reason="attention DP is not supported",
        default_config=_DEFAULT_0_5_23,
    )


def unsupported_reason(
    rules: AdaptiveRules,
    *,
    algorithm: str | None,
    topk: int | None,
    attention_dp: bool,
    multi_layer_eagle: bool = False,
    two_batch_overlap: bool = False,
    pdmux: bool = False,
) -> str | None:
    """Why SGLang turns adaptive speculative decoding off, or None when it keeps it.

    ``adaptive_unsupported_reason`` (adaptive_spec_params.py 0.5.13:45-77, 0.5.23:56-100),
    checked in this order. 0.5.23 also refuses out-of-tree platform workers (not a CUDA node).

    Args:
        rules: The version's rules.
        algorithm: ``speculative_algorithm`` after SGLang's alias (NEXTN -> EAGLE), or None.
        topk: ``speculative_eagle_topk`` as SGLang sees it at that point (0.5.13: after the
            EAGLE defaults; 0.5.14+: as given, None allowed).
        attention_dp: Attention data parallelism is on.
        multi_layer_eagle: ``--enable-multi-layer-eagle``.
        two_batch_overlap: ``--enable-two-batch-overlap``.
        pdmux: ``--enable-pdmux``.

    Returns:
        The reason, as printed inside :data:`DISABLED_WARNING`.
    """
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    topk_bad = topk != 1 if not rules.resolve_first else (topk is not None and topk != 1)
    if topk_bad:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if attention_dp:
        return (
            f"{rules.attention_dp_reason} "
            "(adaptive tier decisions are not synchronized across DP ranks)"
        )
    if multi_layer_eagle:
        return (
            "enable_multi_layer_eagle=True is not supported "
            "(MultiLayerEagleWorkerV2 does not implement adaptive)"
        )
    if two_batch_overlap:
        return (
            "enable_two_batch_overlap=True is not supported "
            "(adaptive state swap would discard the TboAttnBackend wrapper)"
        )
    if pdmux:
        return (
            "enable_pdmux=True is not supported "
            "(adaptive state swap does not update decode_attn_backend_group)"
        )
    return None


# -- config ------------------------------------------------------------------------------------
class AdaptiveConfigError(Exception):
    """SGLang's exception while reading the adaptive config.

    Args:
        exception: The traceback's last line (``"ValueError: BS 8: candidate_steps ..."``).
        where: Which line of ``_load_adaptive_config`` raised: ``"open"``, ``"json"``,
            ``"items"``, ``"entry"``, ``"candidates"`` or ``"no_keys"``.
        json_error: For ``"json"``, the decoder's message (``"Expecting value"`` is raised by
            the pure-Python decoder itself, the others by the scanner: a different frame).
    """

    def __init__(self, exception: str, where: str, *, json_error: str = "") -> None:
        super().__init__(exception)
        self.exception = exception
        self.where = where
        self.json_error = json_error


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """A parsed adaptive config: the whole mapping and its batch-size entries.

    Attributes:
        raw: The top-level mapping (global knobs such as ``ema_alpha`` and the entries).
        entries: Batch size -> its entry, for every all-digit key.
    """

    raw: Mapping[str, Any]
    entries: Mapping[int, Mapping[str, Any]]

    @property
    def candidate_steps(self) -> list[int]:
        """Union of every entry's candidates (``resolve_candidate_steps_from_config``)."""
        steps: set[int] = set()
        for entry in self.entries.values():
            steps.update(entry["candidate_steps"])
        return sorted(steps)


def parse_config(text: str | None, rules: AdaptiveRules, *, open_error: str = "") -> AdaptiveConfig:
    """Read an adaptive config as SGLang's ``_load_adaptive_config`` does.

    The flag takes a file path only (``open(cfg_path)`` in every version; inline JSON is taken
    for a file name and fails with ``FileNotFoundError``). The caller reads the file.

    Args:
        text: The file's contents, or None for no ``--speculative-adaptive-config`` (the
            version's default config).
        rules: The version's rules.
        open_error: When the file could not be opened: the exception line
            (``"FileNotFoundError: [Errno 2] No such file or directory: 'x'"``).

    Returns:
        The config.

    Raises:
        AdaptiveConfigError: SGLang's exception, with its text.
    """
    if open_error:
        raise AdaptiveConfigError(open_error, "open")
    if text is None:
        cfg: Any = {k: dict(v) for k, v in rules.default_config.items()}
    else:
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AdaptiveConfigError(
                f"json.decoder.JSONDecodeError: {exc}", "json", json_error=exc.msg
            ) from None
    if not isinstance(cfg, dict):
        raise AdaptiveConfigError(
            f"AttributeError: '{type(cfg).__name__}' object has no attribute 'items'", "items"
        )
    entries: dict[int, Mapping[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise AdaptiveConfigError(
                f"AttributeError: '{type(entry).__name__}' object has no attribute 'get'", "entry"
            )
        steps = entry.get("candidate_steps")
        floor = 0 if rules.zero_step else 1
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and s >= floor for s in steps)
        ):
            kind = "non-negative ints, " if rules.zero_step else "positive ints, "
            # 0.5.13:104-106, 0.5.17:114-117, 0.5.23:127-130
            raise AdaptiveConfigError(
                f"ValueError: BS {key}: candidate_steps must be a list of {kind}got {steps!r}",
                "candidates",
            )
        entries[int(key)] = entry
    if not entries:
        raise AdaptiveConfigError(
            "ValueError: speculative_adaptive_config must contain at least one integer-string "
            'BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(cfg.keys())}",
            "no_keys",
        )
    return AdaptiveConfig(raw=cfg, entries=entries)


def steps_not_a_candidate(steps: int, candidates: Sequence[int]) -> str:
    """The ``ValueError`` line when the initial steps are not a candidate (0.5.13
    ``validate_adaptive_initial_steps``:136, 0.5.17 speculative_hook.py:786, 0.5.23 :1417)."""
    return (
        f"ValueError: --speculative-num-steps={steps} is not in the adaptive config "
        f"candidate_steps {list(candidates)}. Pass one of those values."
    )


# -- the controller ----------------------------------------------------------------------------
class AdaptiveStepSlot:
    """One batch-size slot: an EMA of accepted drafts that picks the number of steps.

    ``AdaptiveStepSlot`` (adaptive_spec_params.py 0.5.13:142-239, 0.5.23:153-272). Every verify
    of a batch routed here feeds ``update``: the EMA moves by ``ema_alpha`` towards the batch's
    mean accepted drafts (not while at 0 steps, 0.5.14+); after ``warmup_batches`` batches,
    every ``update_interval``-th batch recomputes the steps: walk down while the EMA is at or
    below ``prev - 0.5 + down_hysteresis`` (0.5 for a 0 candidate), else walk up while it is
    above ``cur - 0.5 + up_hysteresis``; from 0 steps, probe the next candidate (0.5.14+).

    Args:
        initial_steps: The worker's ``speculative_num_steps``.
        cfg: The global knobs merged with this slot's entry (``{**cfg, **entry}``).
        rules: The version's rules.
    """

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any], rules: AdaptiveRules) -> None:
        candidates = sorted(set(cfg["candidate_steps"]))
        self.candidate_steps: list[int] = candidates
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        self.zero_step = rules.zero_step
        if initial_steps in candidates:
            self.current_steps = initial_steps
        else:
            self.current_steps = candidates[len(candidates) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self.batch_count = 0

    def update(self, num_correct_drafts_per_req: Sequence[int]) -> str | None:
        """Feed one verify's accepted drafts per request.

        Args:
            num_correct_drafts_per_req: Accepted draft tokens of each request of the batch.

        Returns:
            The "Adaptive spec params updated" line when the steps change, else None.
        """
        if not num_correct_drafts_per_req:
            return None
        if not self.zero_step or self.current_steps > 0:
            batch_avg = sum(num_correct_drafts_per_req) / len(num_correct_drafts_per_req)
            self.ema_accept_len = (
                1 - self.ema_alpha
            ) * self.ema_accept_len + self.ema_alpha * batch_avg
        self.batch_count += 1
        if self.batch_count <= self.warmup_batches:
            return None
        if (self.batch_count - self.warmup_batches) % self.update_interval != 0:
            return None
        return self._recompute()

    def _recompute(self) -> str | None:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if self.zero_step and old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            threshold = 0.5 if (self.zero_step and prev == 0) else prev - 0.5
            if self.ema_accept_len <= threshold + self.down_hysteresis:
                idx -= 1
            else:
                break
        if not (self.zero_step and idx < old_idx):
            while idx < len(self.candidate_steps) - 1:
                cur = self.candidate_steps[idx]
                if self.ema_accept_len > cur - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if old >= target > ceiling:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> str | None:
        if target == old:
            return None
        self.current_steps = target
        return UPDATED_LINE.format(old=old, new=target, ema=self.ema_accept_len)


class AdaptivePolicy:
    """Routes a batch size to its slot (``AdaptiveSpeculativeParams``).

    A batch is padded to the smallest captured CUDA-graph batch size at or above it (itself
    when larger than all, or when graphs are off), then served by the largest config key at or
    below that (the smallest key when none is).

    Args:
        initial_steps: The worker's ``speculative_num_steps``.
        config: The parsed config.
        rules: The version's rules.
    """

    def __init__(self, initial_steps: int, config: AdaptiveConfig, rules: AdaptiveRules) -> None:
        self.bs_list: list[int] = sorted(config.entries)
        self.slots: dict[int, AdaptiveStepSlot] = {
            bs: AdaptiveStepSlot(initial_steps, {**config.raw, **config.entries[bs]}, rules)
            for bs in self.bs_list
        }
        self.cuda_graph_bs: list[int] | None = None

    @property
    def candidate_steps(self) -> list[int]:
        """Union of all slots' candidates."""
        return sorted({s for slot in self.slots.values() for s in slot.candidate_steps})

    def initialized_line(self) -> str:
        """The line SGLang logs when the policy is built (about the smallest slot)."""
        first = self.slots[self.bs_list[0]]
        return INITIALIZED_LINE.format(steps=first.current_steps, cands=first.candidate_steps)

    def set_cuda_graph_bs(self, cuda_graph_bs: Sequence[int] | None) -> None:
        """Record the captured decode batch sizes (None: CUDA graphs off)."""
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def slot_key(self, batch_size: int) -> int:
        """The config key that serves a batch of this size."""
        padded = batch_size
        if self.cuda_graph_bs is not None:
            idx = bisect.bisect_left(self.cuda_graph_bs, batch_size)
            if idx < len(self.cuda_graph_bs):
                padded = self.cuda_graph_bs[idx]
        idx = bisect.bisect_right(self.bs_list, padded) - 1
        return self.bs_list[max(0, idx)]

    def slot(self, batch_size: int) -> AdaptiveStepSlot:
        """The slot that serves a batch of this size."""
        return self.slots[self.slot_key(batch_size)]

    def cuda_graph_bs_for_step(self, step: int) -> list[int] | None:
        """Captured batch sizes whose slot can run ``step`` (None when graphs are off)."""
        if self.cuda_graph_bs is None:
            return None
        return [
            bs for bs in self.cuda_graph_bs if step in self.slots[self._closest(bs)].candidate_steps
        ]

    def _closest(self, target: int) -> int:
        idx = bisect.bisect_right(self.bs_list, target) - 1
        return self.bs_list[max(0, idx)]


@dataclass
class AdaptiveController:
    """The worker's runtime state: which steps it runs now, switched per batch and per EMA.

    ``AdaptiveController`` (adaptive_runtime_state.py) with ``EAGLEWorkerV2``'s
    ``activate_step_by_batch`` (before each decode forward) and ``on_verify_complete_cpu`` (after
    each verify, with ``len(batch.reqs)``). Top-k is 1, so a state of ``s`` steps verifies
    ``s + 1`` tokens per request.

    Attributes:
        policy: The slots.
        steps: The steps the worker runs now.
        switches: How many runtime-state switches happened.
        history: (batch size, new steps) of every EMA-driven change, oldest first.
    """

    policy: AdaptivePolicy
    steps: int
    switches: int = 0
    history: list[tuple[int, int]] = field(default_factory=list)

    def _activate(self, target: int) -> list[str]:
        if target == self.steps:
            return []
        line = SWITCH_LINE.format(
            old=self.steps, new=target, old_dt=self.steps + 1, new_dt=target + 1
        )
        self.steps = target
        self.switches += 1
        return [line]

    def activate_for_batch(self, batch_size: int) -> list[str]:
        """Switch to the steps of the slot serving this batch (before its forward).

        Returns:
            Log lines (a "Switch adaptive runtime state" line, or none).
        """
        return self._activate(self.policy.slot(batch_size).current_steps)

    def on_verify_complete(
        self, num_correct_drafts_per_req: Sequence[int], batch_size: int
    ) -> list[str]:
        """Feed one verify's accepted drafts to the batch's slot; switch if it asks to.

        Returns:
            Log lines ("Adaptive spec params updated" then "Switch adaptive runtime state").
        """
        line = self.policy.slot(batch_size).update(num_correct_drafts_per_req)
        if line is None:
            return []
        slot_steps = self.policy.slot(batch_size).current_steps
        self.history.append((batch_size, slot_steps))
        return [line, *self._activate(slot_steps)]
