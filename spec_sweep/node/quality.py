"""The output-quality gate: greedy outputs of a trial compared with the baseline's.

This module owns the gate of README "Output quality": after the benchmark, in the same boot, the
first `quality.num_prompts` prompts of the builtin set (fixed order, the same for every trial)
are decoded greedily (temperature 0, `quality.tokens` new tokens, EOS ignored) in one batch
request, and the output token ids are compared with the baseline trial's. A prompt's agreement is
the length of the common prefix of the two outputs over the first N tokens, divided by N (after
the first different token greedy decoding follows another path, so later positions say nothing);
the trial's agreement is the mean over prompts. Below `quality.min_agreement` the trial ends as
`wrong_output`. The baseline's outputs are the reference: the baseline trial writes them to its
folder (`<state>/trials/t0000/attempt<N>/quality.json`), later trials read the newest one there.
A trial that finishes before the baseline's outputs exist is not judged (said in its reason).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from spec_sweep.node.prompts import load_prompts
from spec_sweep.spec import QualitySpec, WorkloadSpec

__all__ = [
    "QUALITY_NAME",
    "QualityCheck",
    "agreement",
    "check_quality",
    "greedy_outputs",
    "quality_prompts",
]

#: The file (in a trial's folder and its MLflow run) holding its greedy outputs and verdict.
QUALITY_NAME = "quality.json"
#: The baseline's trial id (`search.objective.BASELINE_ID`, which this layer may not import).
_BASELINE_ID = "t0000"


@dataclass(frozen=True)
class QualityCheck:
    """The gate's verdict on one trial.

    Attributes:
        agreement: Mean token agreement with the baseline (None: no reference to compare with).
        passed: Whether the trial may count (True when not judged).
        reason: One line: the agreement and the first diverging prompt, or why not judged.
        diverging: The first diverging prompt with both continuations (token ids and text).
    """

    agreement: float | None
    passed: bool
    reason: str
    diverging: dict[str, Any] | None = None


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
) -> tuple[list[str], list[list[int]], list[str]]:
    """Decode the fixed prompts greedily in one batch `/generate` request.

    Returns:
        The prompts, the output token ids and the output texts, one per prompt.

    Raises:
        httpx.HTTPError: the request failed.
        ValueError: the answer has no `output_ids` per prompt.
    """
    prompts = quality_prompts(quality, workload, model_path=model_path)
    body = {
        "text": prompts,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": quality.tokens,
            "ignore_eos": True,
        },
    }
    # SGLang 0.5.13 answers a non-streaming batch with one JSON list of
    # {"text", "output_ids", "meta_info"} per prompt (http_server.generate_request returns the
    # first item of TokenizerManager._handle_batch_request: the gathered finished outputs, whose
    # "output_ids" is a copy of the request state's ids); read in the 0.5.13 wheel's source.
    with httpx.Client(base_url=base_url, timeout=request_timeout_s, trust_env=False) as client:
        r = client.post("/generate", json=body)
        r.raise_for_status()
        data = r.json()
    if not isinstance(data, list) or len(data) != len(prompts):
        raise ValueError(
            f"expected {len(prompts)} outputs from a batch /generate, got {data!r:.200}"
        )
    ids: list[list[int]] = []
    texts: list[str] = []
    for item in data:
        out = item.get("output_ids") if isinstance(item, dict) else None
        if not isinstance(out, list):
            raise ValueError("the /generate answer has no output_ids: cannot compare tokens")
        ids.append([int(t) for t in out])
        texts.append(str(item.get("text", "")))
    return prompts, ids, texts


def agreement(
    reference: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *, tokens: int
) -> tuple[float, int | None]:
    """Mean common-prefix agreement over the first `tokens` tokens, and the first diverging prompt.

    Args:
        reference: The baseline's output ids per prompt.
        outputs: The trial's output ids per prompt (same prompts, same order).
        tokens: N, the tokens compared per prompt.

    Returns:
        (mean over prompts of common prefix / N, index of the first prompt that differs or None).

    Raises:
        ValueError: different prompt counts, or no prompt.
    """
    if len(reference) != len(outputs) or not reference:
        raise ValueError(f"{len(reference)} reference outputs but {len(outputs)} outputs")
    scores: list[float] = []
    first: int | None = None
    for i, (ref, out) in enumerate(zip(reference, outputs, strict=True)):
        ref_n, out_n = list(ref[:tokens]), list(out[:tokens])
        same = 0
        for a, b in zip(ref_n, out_n, strict=False):
            if a != b:
                break
            same += 1
        scores.append(same / tokens)
        if first is None and (same < tokens or ref_n != out_n):
            first = i
    return sum(scores) / len(scores), first


def _reference(trial_dir: Path) -> dict[str, Any] | None:
    """The baseline's saved outputs (newest attempt), if any."""
    base = trial_dir.parent.parent / _BASELINE_ID
    for path in sorted(base.glob(f"attempt*/{QUALITY_NAME}"), reverse=True):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("ids"), list):
            return data
    return None


def check_quality(
    base_url: str,
    quality: QualitySpec,
    *,
    workload: WorkloadSpec,
    model_path: str,
    trial_dir: Path,
    trial_id: str,
    request_timeout_s: float,
) -> QualityCheck:
    """Decode the fixed prompts, save them to `trial_dir/quality.json`, and judge them.

    The baseline (`t0000`) is the reference and always passes. A request that fails is reported
    as not judged (the benchmark's own classification decides such a trial).
    """
    try:
        prompts, ids, texts = greedy_outputs(
            base_url,
            quality,
            workload=workload,
            model_path=model_path,
            request_timeout_s=request_timeout_s,
        )
    except (httpx.HTTPError, ValueError) as exc:
        return QualityCheck(None, True, f"quality not checked: {type(exc).__name__}: {exc}")
    record: dict[str, Any] = {"prompts": prompts, "ids": ids, "texts": texts}
    check: QualityCheck
    if trial_id == _BASELINE_ID:
        check = QualityCheck(1.0, True, "the baseline's greedy outputs are the reference")
    else:
        ref = _reference(trial_dir)
        if ref is None or len(ref["ids"]) != len(ids) or ref.get("prompts") != prompts:
            check = QualityCheck(
                None, True, "quality not checked: no baseline outputs for these prompts yet"
            )
        else:
            score, first = agreement(ref["ids"], ids, tokens=quality.tokens)
            diverging = None
            if first is not None:
                diverging = {
                    "prompt_index": first,
                    "prompt": prompts[first],
                    "baseline_ids": ref["ids"][first][: quality.tokens],
                    "trial_ids": ids[first][: quality.tokens],
                    "baseline_text": ref.get("texts", [""] * len(ids))[first],
                    "trial_text": texts[first],
                }
            passed = score >= quality.min_agreement
            reason = (
                f"token agreement with the baseline {score:.3f} "
                f"{'>=' if passed else '<'} quality.min_agreement {quality.min_agreement}"
            )
            if first is not None:
                reason += f"; first diverging prompt #{first}: {prompts[first][:60]!r}"
            check = QualityCheck(score, passed, reason, diverging)
    record.update({"agreement": check.agreement, "passed": check.passed, "reason": check.reason})
    if check.diverging is not None:
        record["first_diverging"] = check.diverging
    (trial_dir / QUALITY_NAME).write_text(json.dumps(record, indent=1))
    return check
