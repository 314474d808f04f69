"""SGLang's rules for adaptive speculative decoding, as the product applies them (pure).

This module owns what spec_sweep must know about `--speculative-adaptive` and
`--speculative-adaptive-config` before it launches anything: which SGLang versions take which
config format (`adaptive_version`), the config file itself (`config_text` writes it in the
version's format, `parse_config_text` reads one as SGLang does and refuses what SGLang refuses),
the cases where SGLang turns the mode off with a warning and runs the static parameters
(`off_reason`, and `disabled_in_log` for the warning itself), the `ValueError`s SGLang raises
while it builds its arguments (`launch_problem`), and where SGLang's controller settles on a
slot given each chain's measured acceptance (`settle`).

Read in the SGLang wheels from PyPI (`sglang/srt/speculative/adaptive_spec_params.py`,
`arg_groups/speculative_hook.py`; line numbers in `spec_sweep/sim/adaptive.py`, the simulated
node's own, independent copy of the controller):

- 0.5.11 and 0.5.12: one global slot. Not supported here (no flag manifest exists for them).
- 0.5.13: per-batch-size slots: a batch is padded to its CUDA-graph size and served by the
  largest integer key at or below it (the smallest key when none is); candidates must be
  positive; the EAGLE defaults are applied first and the initial `--speculative-num-steps` must
  then be one of the config's candidates.
- 0.5.14 and later (read in 0.5.14, 0.5.16, 0.5.17, 0.5.23): a candidate of 0 means no drafting;
  the mode is resolved before the EAGLE defaults and forces top-k 1 and draft tokens = steps + 1;
  a given `--speculative-num-steps` must be a candidate (else the middle candidate is used).
- Every version turns the mode off ("speculative_adaptive disabled: ... Falling back to static
  speculative params.") for algorithms other than EAGLE/EAGLE3 (NEXTN is EAGLE), top-k > 1,
  attention data parallelism, multi-layer EAGLE, two-batch overlap and PD multiplexing.

Standard library and the spec only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADAPTIVE",
    "ADAPTIVE_CONFIG",
    "ALGORITHM",
    "CONFIG_FILE",
    "DRAFT_TOKENS",
    "STEPS",
    "TOPK",
    "AdaptiveVersion",
    "Slot",
    "adaptive_on",
    "adaptive_version",
    "config_text",
    "describe_slots",
    "disabled_in_log",
    "launch_problem",
    "off_reason",
    "parse_config_text",
    "settle",
]

#: The switch and its config file (a path: SGLang opens it).
ADAPTIVE = "speculative-adaptive"
ADAPTIVE_CONFIG = "speculative-adaptive-config"
#: The name the config file gets in a trial folder, the report folder and a launch command.
CONFIG_FILE = "adaptive-config.json"
ALGORITHM = "speculative-algorithm"
STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT_TOKENS = "speculative-num-draft-tokens"

#: SGLang's slot defaults when an entry does not set them (`AdaptiveStepSlot.__init__`).
DEFAULT_DOWN_HYSTERESIS = -0.25
DEFAULT_UP_HYSTERESIS = 0.0

_DISABLED = re.compile(r"speculative_adaptive disabled: (.*?)\. Falling back to static")


@dataclass(frozen=True)
class AdaptiveVersion:
    """What one SGLang version does with `--speculative-adaptive`.

    Attributes:
        version: The SGLang version.
        per_batch_size: The config has one slot per batch-size key (0.5.13+).
        zero_step: A candidate of 0 (no drafting) is allowed (0.5.14+).
        resolve_first: The mode is resolved before the EAGLE defaults: top-k forced to 1, draft
            tokens to steps + 1, and the middle candidate when no steps are given (0.5.14+).
    """

    version: str
    per_batch_size: bool
    zero_step: bool
    resolve_first: bool

    @property
    def floor(self) -> int:
        """The smallest candidate the version accepts."""
        return 0 if self.zero_step else 1


def _version_key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        match = re.match(r"\d+", piece)
        parts.append(int(match.group()) if match else 0)
    return tuple(parts)


def adaptive_version(version: str) -> AdaptiveVersion | None:
    """The adaptive rules of an SGLang version (None: the version has no adaptive mode)."""
    key = _version_key(version)
    if key < (0, 5, 11):
        return None
    return AdaptiveVersion(
        version=version,
        per_batch_size=key >= (0, 5, 13),
        zero_step=key >= (0, 5, 14),
        resolve_first=key >= (0, 5, 14),
    )


def adaptive_on(config: Mapping[str, Any], server_args: Mapping[str, Any] | None = None) -> bool:
    """Whether a configuration (with the node's fixed flags) turns adaptive mode on."""
    value = config.get(ADAPTIVE, (server_args or {}).get(ADAPTIVE))
    return value is True


# -- when SGLang turns the mode off ------------------------------------------------------------
def _flag(config: Mapping[str, Any], server_args: Mapping[str, Any], key: str) -> Any:
    return config[key] if key in config else server_args.get(key)


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def off_reason(
    rules: AdaptiveVersion,
    config: Mapping[str, Any],
    server_args: Mapping[str, Any] | None = None,
) -> str | None:
    """Why SGLang would turn adaptive mode off for this configuration, in its words (None: on).

    `_maybe_disable_adaptive` / `adaptive_unsupported_reason`, checked in SGLang's order. The
    top-k is the one SGLang sees: unset is 1 in every version (0.5.13 applies the EAGLE defaults
    first, 0.5.14+ forces 1).
    """
    fixed = server_args or {}
    algorithm = _flag(config, fixed, ALGORITHM)
    name = str(algorithm).upper() if algorithm else None
    if name == "NEXTN":
        name = "EAGLE"
    if name not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={name} (only EAGLE/EAGLE3 are supported)"
    topk = _int(_flag(config, fixed, TOPK))
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    dp = _int(_flag(config, fixed, "dp-size")) or 1
    attn_dp = _int(_flag(config, fixed, "attn-dp-size")) or 1
    dp_attention = _flag(config, fixed, "enable-dp-attention") is True
    if attn_dp > 1 or (dp_attention and (dp > 1 or not rules.resolve_first)):
        what = (
            "attention DP is not supported"
            if _version_key(rules.version) >= (0, 5, 23)
            else "enable_dp_attention=True is not supported"
        )
        return f"{what} (adaptive tier decisions are not synchronized across DP ranks)"
    for flag, why in (
        ("enable-multi-layer-eagle", "MultiLayerEagleWorkerV2 does not implement adaptive"),
        (
            "enable-two-batch-overlap",
            "adaptive state swap would discard the TboAttnBackend wrapper",
        ),
        ("enable-pdmux", "adaptive state swap does not update decode_attn_backend_group"),
    ):
        if _flag(config, fixed, flag) is True:
            return f"{flag.replace('-', '_')}=True is not supported ({why})"
    return None


def disabled_in_log(log_text: str) -> str | None:
    """The reason of SGLang's "speculative_adaptive disabled" warning in a server log, if any."""
    match = _DISABLED.search(log_text)
    return match.group(1) if match else None


# -- the config file ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    """One batch-size slot of an adaptive config.

    Attributes:
        key: The batch size the slot starts at (a batch is served by the largest key at or
            below its padded size).
        candidates: The steps the controller may pick from, ascending.
    """

    key: int
    candidates: tuple[int, ...]


def config_text(slots: Sequence[Slot], rules: AdaptiveVersion) -> str:
    """The config file's contents in the version's format: one JSON line, slots by batch size.

    Raises:
        ValueError: the version has no per-batch-size slots (before 0.5.13), a slot is empty or
            has a candidate the version refuses (0 before 0.5.14), or two slots share a key.
    """
    if not rules.per_batch_size:
        raise ValueError(
            f"SGLang {rules.version} has one global adaptive slot; per-batch-size candidates "
            "need 0.5.13 or later"
        )
    keys = [s.key for s in slots]
    if len(set(keys)) != len(keys) or not slots:
        raise ValueError(f"adaptive slots need distinct batch-size keys, got {keys}")
    out: dict[str, Any] = {}
    for slot in sorted(slots, key=lambda s: s.key):
        steps = sorted(set(slot.candidates))
        if not steps or steps[0] < rules.floor:
            raise ValueError(
                f"batch size {slot.key}: candidate steps {steps} are not all >= {rules.floor} "
                f"(SGLang {rules.version})"
            )
        out[str(slot.key)] = {"candidate_steps": steps}
    return json.dumps(out)


def parse_config_text(text: str, rules: AdaptiveVersion) -> tuple[dict[str, Any], list[Slot]]:
    """Read a config as SGLang's `_load_adaptive_config` does.

    Returns:
        The whole mapping (global knobs included) and its slots, by batch size.

    Raises:
        ValueError: what SGLang raises (bad JSON, an entry that is not a mapping, candidates that
            are not a non-empty list of ints >= the version's floor, no integer key).
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the adaptive config is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("the adaptive config must be a JSON object of batch-size keys")
    slots: list[Slot] = []
    for key, entry in raw.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
            or min(steps) < rules.floor
        ):
            kind = "non-negative" if rules.zero_step else "positive"
            raise ValueError(
                f"BS {key}: candidate_steps must be a list of {kind} ints, got {steps!r} "
                f"(SGLang {rules.version})"
            )
        slots.append(Slot(int(key), tuple(sorted(set(steps)))))
    if not slots:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(raw)}'
        )
    return raw, sorted(slots, key=lambda s: s.key)


def describe_slots(text: str) -> str:
    """A short reading of a config's slots: `1:[3] 8:[2,3] 32:[2]` (the text when unreadable)."""
    try:
        raw = json.loads(text)
        parts = [
            f"{key}:[{','.join(str(s) for s in entry['candidate_steps'])}]"
            for key, entry in sorted(
                ((k, v) for k, v in raw.items() if k.isdigit()), key=lambda kv: int(kv[0])
            )
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return text
    return " ".join(parts) or text


def launch_problem(
    rules: AdaptiveVersion,
    config: Mapping[str, Any],
    server_args: Mapping[str, Any] | None,
    text: str,
) -> str | None:
    """The `ValueError` SGLang raises while building its arguments for this configuration.

    The config must read (`parse_config_text`); the initial `--speculative-num-steps` must be
    one of its candidates: given or not in 0.5.13 (the EAGLE defaults pick one), given in
    0.5.14+ (else SGLang takes the middle candidate).
    """
    try:
        _, slots = parse_config_text(text, rules)
    except ValueError as exc:
        return str(exc)
    union = sorted({s for slot in slots for s in slot.candidates})
    steps = _int(_flag(config, server_args or {}, STEPS))
    if steps is None and rules.resolve_first:
        return None
    if steps is None or steps not in union:
        shown = "unset (SGLang's EAGLE defaults choose it)" if steps is None else str(steps)
        return (
            f"--speculative-num-steps={shown} is not in the adaptive config candidate_steps "
            f"{union}. Pass one of those values."
        )
    return None


# -- where the controller settles --------------------------------------------------------------
def _recompute(
    candidates: Sequence[int],
    current: int,
    ema: float,
    *,
    zero_step: bool,
    down: float,
    up: float,
) -> int:
    """One decision of `AdaptiveStepSlot._recompute` (walk down, else up; the zero probe)."""
    idx = candidates.index(current)
    if zero_step and current == 0:
        return candidates[min(idx + 1, len(candidates) - 1)]
    start = idx
    while idx > 0:
        prev = candidates[idx - 1]
        threshold = 0.5 if (zero_step and prev == 0) else prev - 0.5
        if ema <= threshold + down:
            idx -= 1
        else:
            break
    if not (zero_step and idx < start):
        while idx < len(candidates) - 1 and ema > candidates[idx] - 0.5 + up:
            idx += 1
    return candidates[idx]


def settle(
    candidates: Sequence[int],
    *,
    start: int,
    accepted: Mapping[int, float],
    zero_step: bool,
    down: float = DEFAULT_DOWN_HYSTERESIS,
    up: float = DEFAULT_UP_HYSTERESIS,
) -> int | None:
    """The steps SGLang's controller settles on in one slot, fed each chain's acceptance.

    The slot starts at `start` when it is a candidate, else at the middle candidate; at each
    decision its EMA is taken as the accepted drafts per verify of the chain it runs (measured
    accept length - 1), so this is the fixed point the controller reaches on steady traffic. A
    slot with one candidate runs it from the first batch.

    Args:
        candidates: The slot's candidate steps.
        start: The worker's initial steps.
        accepted: Steps -> mean accepted drafts per verify of that chain.
        zero_step: The version allows 0 (no drafting; from 0 SGLang probes the next one up).
        down: The slot's down hysteresis.
        up: The slot's up hysteresis.

    Returns:
        The settled steps; None when an acceptance it needs is unknown or the controller keeps
        moving (from 0 it probes up and drops back whenever the chain above accepts too little).
    """
    cands = sorted(set(candidates))
    current = start if start in cands else cands[len(cands) // 2]
    if len(cands) == 1:
        return current
    visited: list[int] = []
    ema = accepted.get(current, 0.0) if current else 0.0
    while current not in visited:
        visited.append(current)
        if current and current not in accepted:
            return None
        if current:
            ema = accepted[current]
        target = _recompute(cands, current, ema, zero_step=zero_step, down=down, up=up)
        if target == current:
            return current
        current = target
    return None
