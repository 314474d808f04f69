"""The output-quality gate's requests and record: greedy outputs, the baseline's reference.

This module owns how the quality gate (docs/concepts/quality-gate.md) runs in a trial: after the
benchmark, in the same boot, the first `quality.num_prompts` prompts of the builtin set (fixed
order, the same for every trial, formatted as the workload formats its prompts) are decoded
greedily (temperature 0, `quality.tokens` new tokens, EOS ignored) in one batch `/generate`. The
baseline (`t0000`) also asks for the top log-probabilities of every output position
(`return_logprob`, `top_logprobs_num` 5) and writes outputs and log-probabilities to its folder
(`<state>/trials/t0000/attempt<N>/quality.json`) as the reference; the other trials ask for the
outputs alone (a server that cannot return log-probabilities is never judged by that), read the
newest reference of their sweep's state folder (`baseline_reference`, the one place every path that
measures a trial finds it, `spec-sweep trial` included), and are judged by `node.divergence`'s
rule; each writes its verdict per prompt and every diverging prompt with both continuations to its
own `quality.json`. A trial that finishes before the reference exists is not judged (its reason
says so).

Asking for log-probabilities could change the baseline's kernels only by rounding, which can flip a
near tie, which costs the deficit nothing at an exact tie and little near one (on a real 0.5.17
server the plain and the log-probability answers of one prompt were identical). A flipped prompt is
not re-anchored (asking the trial's server to continue from the baseline's prefix through the
flip): the simulated node keys a greedy path by the prompt as sent, so an extended prompt is
another path there; on real SGLang it would need the prompts' token ids (they are sent as text, and
the product has no tokenizer), and the continuation would be prefilled, not decoded: other numerics
than those being judged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from spec_sweep.core.ids import BASELINE_ID
from spec_sweep.node.divergence import (
    Divergence,
    PromptVerdict,
    QualityCheck,
    Top,
    judge_outputs,
    parse_top_logprobs,
)
from spec_sweep.node.prompts import load_prompts
from spec_sweep.spec import QualitySpec, WorkloadSpec
from spec_sweep.store.paths import sweep_trials_dir

__all__ = [
    "QUALITY_NAME",
    "TOP_LOGPROBS",
    "GreedyOutput",
    "QualityCheck",
    "Reference",
    "baseline_reference",
    "check_quality",
    "greedy_outputs",
    "quality_prompts",
    "reference_folder",
]

#: The file (in a trial's folder and its MLflow run) holding its greedy outputs and verdict.
QUALITY_NAME = "quality.json"
#: Top log-probabilities the baseline asks for per output position (as measured on the H200).
TOP_LOGPROBS = 5


@dataclass(frozen=True)
class GreedyOutput:
    """One batch of greedy outputs.

    Attributes:
        prompts: The prompts, in the fixed order.
        ids: The output token ids per prompt.
        texts: The output texts per prompt.
        top: Per prompt, per output position, the top log-probabilities (None where the
            server reported none; the whole field None when they were not asked for).
    """

    prompts: list[str]
    ids: list[list[int]]
    texts: list[str]
    top: list[list[Top | None]] | None = field(default=None)


def quality_prompts(quality: QualitySpec, workload: WorkloadSpec, *, model_path: str) -> list[str]:
    """The fixed prompt set: the first `num_prompts` of the builtin set in its seed-0 order.

    Formatted as the benchmark's prompts are (the workload's `chat_template` setting).
    """
    fixed = workload.model_copy(
        update={"dataset": "builtin", "num_prompts": quality.num_prompts, "seed": 0}
    )
    prompts, _ = load_prompts(fixed, model_path=model_path)
    texts = [p for p in prompts if isinstance(p, str)]
    return [texts[i % len(texts)] for i in range(quality.num_prompts)]


def greedy_outputs(
    base_url: str,
    quality: QualitySpec,
    *,
    workload: WorkloadSpec,
    model_path: str,
    request_timeout_s: float,
    top_logprobs: int = 0,
    headers: Mapping[str, str] | None = None,
) -> GreedyOutput:
    """Decode the fixed prompts greedily in one batch `/generate` request.

    Args:
        base_url: The server.
        quality: The gate's settings.
        workload: The workload (how prompts are formatted).
        model_path: The served model (its chat template).
        request_timeout_s: Timeout of the request.
        top_logprobs: Also ask for this many top log-probabilities per output position (0: no).
        headers: Sent with the request (the server's API key).

    Raises:
        httpx.HTTPError: the request failed.
        ValueError: the answer has no `output_ids` per prompt.
    """
    prompts = quality_prompts(quality, workload, model_path=model_path)
    body: dict[str, Any] = {
        "text": prompts,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": quality.tokens,
            "ignore_eos": True,
        },
    }
    if top_logprobs > 0:
        # Output positions only (`logprob_start_len` -1), as scripts/real_quality.py asked
        # SGLang 0.5.13 and 0.5.17 on the H200.
        body.update(return_logprob=True, top_logprobs_num=top_logprobs, logprob_start_len=-1)
    # SGLang answers a non-streaming batch with one JSON list of {"text", "output_ids",
    # "meta_info"} per prompt (http_server.generate_request returns the gathered outputs of
    # TokenizerManager._handle_batch_request; read in 0.5.13's source, recorded from 0.5.17 in
    # tests/fixtures/sglang/0.5.17/streams/base-generate_batch_logprobs.json).
    auth = dict(headers or {})
    with httpx.Client(
        base_url=base_url, headers=auth, timeout=request_timeout_s, trust_env=False
    ) as client:
        r = client.post("/generate", json=body)
        r.raise_for_status()
        data = r.json()
    if not isinstance(data, list) or len(data) != len(prompts):
        raise ValueError(
            f"expected {len(prompts)} outputs from a batch /generate, got {data!r:.200}"
        )
    return _parse_batch(prompts, data, logprobs=top_logprobs > 0)


def _parse_batch(prompts: list[str], data: list[Any], *, logprobs: bool) -> GreedyOutput:
    ids: list[list[int]] = []
    texts: list[str] = []
    tops: list[list[Top | None]] = []
    for item in data:
        out = item.get("output_ids") if isinstance(item, dict) else None
        if not isinstance(out, list):
            raise ValueError("the /generate answer has no output_ids: cannot compare tokens")
        ids.append([int(t) for t in out])
        texts.append(str(item.get("text", "")))
        tops.append(parse_top_logprobs(item.get("meta_info")) or [])
    has_top = logprobs and any(tops)
    return GreedyOutput(prompts, ids, texts, tops if has_top else None)


@dataclass(frozen=True)
class Reference:
    """The baseline's saved greedy outputs, the reference every other trial is judged against.

    Attributes:
        path: The baseline's `quality.json`.
        data: Its contents (`prompts`, `ids`, `texts`, `top_logprobs`).
    """

    path: Path
    data: dict[str, Any]


def reference_folder(state_dir: Path) -> Path:
    """Where a sweep's baseline saves its reference: `<state>/trials/t0000/`."""
    return sweep_trials_dir(state_dir) / BASELINE_ID


def baseline_reference(state_dir: Path) -> Reference | None:
    """The quality reference of the sweep whose state folder is `state_dir`, if it exists.

    The baseline's `quality.json` of its newest attempt that saved one
    (`<state>/trials/t0000/attempt<N>/`). Every path that measures a trial finds its reference
    here: the sweep's trials, their retries and confirmation boots, and `spec-sweep trial`
    against the same state folder.
    """
    found = reference_folder(state_dir).glob(f"attempt*/{QUALITY_NAME}")
    newest_first = sorted(found, key=lambda p: _attempt_number(p.parent.name), reverse=True)
    for path in newest_first:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("ids"), list):
            return Reference(path, data)
    return None


def _attempt_number(name: str) -> int:
    """`attempt12` -> 12 (attempt folders sort by number, not as text); -1 if not one."""
    digits = name.removeprefix("attempt")
    return int(digits) if digits.isdigit() else -1


def _reference_top(ref: dict[str, Any]) -> list[list[Top | None]] | None:
    """The reference's top log-probabilities as `judge_outputs` takes them."""
    raw = ref.get("top_logprobs")
    if not isinstance(raw, list):
        return None
    return [
        [[(float(lp), int(t)) for lp, t in pos] if pos else None for pos in prompt or []]
        for prompt in raw
    ]


def _baseline_check(out: GreedyOutput, quality: QualitySpec) -> QualityCheck:
    """The baseline against itself: identical by definition. Its reason says plainly that it is
    the reference (and when its margins are missing)."""
    check = judge_outputs(out.ids, out.top, out.ids, quality=quality)
    remark = (
        "the quality gate's reference: every other trial's greedy outputs are judged against "
        "this trial's"
    )
    if out.top is None:
        remark += (
            "; its server returned no top log-probabilities, so every divergence from its "
            "greedy outputs counts as a sure one (10 nats)"
        )
    reason = remark
    return QualityCheck(
        True,
        True,
        reason,
        check.verdicts,
        check.agreement,
        quality.tokens,
        remark=remark,
        quality_class=check.quality_class,
        deficit=check.deficit,
    )


def _diverging(
    v: PromptVerdict, out: GreedyOutput, ref: dict[str, Any], tokens: int
) -> dict[str, Any]:
    """One diverging prompt with both continuations, for `quality.json`."""
    i = v.index
    ref_texts = ref.get("texts") or [""] * len(out.ids)
    return {
        **v.as_json(),
        "prompt": out.prompts[i],
        "baseline_ids": ref["ids"][i][:tokens],
        "trial_ids": out.ids[i][:tokens],
        "baseline_text": ref_texts[i],
        "trial_text": out.texts[i],
    }


def _judge_trial(
    out: GreedyOutput, ref: dict[str, Any] | None, quality: QualitySpec
) -> tuple[QualityCheck, list[dict[str, Any]]]:
    """A trial's verdict against the reference, and its diverging prompts for the record."""
    if ref is None or len(ref["ids"]) != len(out.ids) or ref.get("prompts") != out.prompts:
        reason = "quality not checked: no baseline outputs for these prompts yet"
        return QualityCheck(False, True, reason), []
    check = judge_outputs(ref["ids"], _reference_top(ref), out.ids, quality=quality)
    order = {Divergence.CONFIDENT: 0, Divergence.NEAR_TIE: 1}
    shown = sorted(
        (v for v in check.verdicts if v.divergence in order),
        key=lambda v: (order[v.divergence], v.index),
    )
    return check, [_diverging(v, out, ref, quality.tokens) for v in shown]


def check_quality(
    base_url: str,
    quality: QualitySpec,
    *,
    workload: WorkloadSpec,
    model_path: str,
    trial_dir: Path,
    trial_id: str,
    request_timeout_s: float,
    state_dir: Path | None,
    headers: Mapping[str, str] | None = None,
) -> QualityCheck:
    """Decode the fixed prompts, judge them, and save both to `trial_dir/quality.json`.

    The baseline (`t0000`) asks for top log-probabilities too, is the reference and always
    passes. Any other trial is judged against the reference of the sweep whose state folder is
    `state_dir` (`baseline_reference`); without one (None, or no baseline there yet) it is not
    judged, and its reason says where the reference was looked for. A request that fails is
    reported as not judged (the benchmark's own classification decides such a trial).
    """
    baseline = trial_id == BASELINE_ID
    try:
        out = greedy_outputs(
            base_url,
            quality,
            workload=workload,
            model_path=model_path,
            request_timeout_s=request_timeout_s,
            top_logprobs=TOP_LOGPROBS if baseline else 0,
            headers=headers,
        )
    except (httpx.HTTPError, ValueError) as exc:
        return QualityCheck(False, True, f"quality not checked: {type(exc).__name__}: {exc}")
    diverging: list[dict[str, Any]] = []
    ref: Reference | None = None
    if baseline:
        check = _baseline_check(out, quality)
    elif state_dir is None:
        check = QualityCheck(False, True, "quality not checked: no sweep state folder given")
    elif (ref := baseline_reference(state_dir)) is None:
        where = reference_folder(state_dir)
        reason = f"quality not checked: no baseline outputs in {where} yet (run the sweep first)"
        check = QualityCheck(False, True, reason)
    else:
        check, diverging = _judge_trial(out, ref.data, quality)
    record: dict[str, Any] = {"prompts": out.prompts, "ids": out.ids, "texts": out.texts}
    record.update(
        rule={
            "tokens": quality.tokens,
            "margin_nats": quality.margin_nats,
            "max_equivalent_deficit": quality.max_equivalent_deficit,
            "min_wrong_deficit": quality.min_wrong_deficit,
            "allow_lossy": quality.allow_lossy,
        },
        reference=str(ref.path) if ref is not None else None,
        judged=check.judged,
        passed=check.passed,
        quality_class=check.quality_class.value if check.quality_class else None,
        deficit=check.deficit,
        reason=check.reason,
        agreement=check.agreement,
        confident_share=check.confident_share,
        verdicts=[v.as_json() for v in check.verdicts],
        diverging=diverging,
    )
    if diverging:
        record["first_diverging"] = diverging[0]
    if baseline:  # last: the bulk of the file
        record["top_logprobs"] = (
            [[[[round(lp, 6), t] for lp, t in pos] if pos else None for pos in p] for p in out.top]
            if out.top is not None
            else None
        )
    (trial_dir / QUALITY_NAME).write_text(json.dumps(record, indent=1))
    return check
