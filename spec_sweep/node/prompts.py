"""The prompts of a trial's benchmark: random token ids, the built-in set, or a file of texts.

This module owns `load_prompts` (docs/design.md, "Spec format", `workload.dataset`): random token
ids of exactly `input_len` tokens (drawn from the model's vocabulary when its `config.json` or
tokenizer says how large it is, else from a range valid for any vocabulary), the built-in text
prompt set shipped in the package, or a JSON/JSONL file of text prompts (ShareGPT layout
accepted). Sampling is seeded by `workload.seed`. A file that holds no usable prompt is a
`SpecError`.
"""

from __future__ import annotations

import json
import random
from importlib import resources
from pathlib import Path
from typing import Any, TypeAlias

from spec_sweep.errors import SpecError
from spec_sweep.spec import WorkloadSpec

__all__ = ["CONSERVATIVE_ID_RANGE", "Prompt", "load_prompts"]

#: A prompt: text (sent as `text`) or token ids (sent as `input_ids`).
Prompt: TypeAlias = str | list[int]

#: Token ids drawn when the model's vocabulary size is unknown: valid for any vocabulary of at
#: least 30,000 entries, and above the low ids where most tokenizers keep their special tokens.
CONSERVATIVE_ID_RANGE: tuple[int, int] = (100, 30000)

_BUILTIN_RESOURCE = ("data", "prompts.jsonl")
_HUMAN_ROLES = frozenset({"human", "user"})


def load_prompts(workload: WorkloadSpec, *, model_path: str) -> tuple[list[Prompt], str]:
    """The prompts of a workload, deterministic from `workload.seed`, and where they came from.

    For `dataset: random`, one distinct list of exactly `input_len` token ids per request the
    benchmark sends (`warmup_prompts + num_prompts * len(concurrency)`), so that no prompt
    repeats and prefix caching cannot flatter later levels. Ids are drawn from
    `[0, vocab_size)` when `model_path` is a readable directory whose `config.json` (or
    `tokenizer.json`) gives the vocabulary size, else from `CONSERVATIVE_ID_RANGE`; the returned
    description says which. For text datasets (`builtin` or a JSON/JSONL file), every usable
    prompt of the set, shuffled with the seed; the benchmark cycles through them.

    Args:
        workload: The workload spec.
        model_path: The served model's `--model-path` (a local directory, or anything else).

    Returns:
        The prompts and a one-line description of their source for the trial record.

    Raises:
        SpecError: the dataset file is unreadable or holds no usable prompt.
    """
    rng = random.Random(workload.seed)
    if workload.dataset == "random":
        lo, hi, why = _id_range(model_path)
        count = workload.warmup_prompts + workload.num_prompts * len(workload.concurrency)
        population = range(lo, hi)
        prompts: list[Prompt] = [
            rng.choices(population, k=workload.input_len) for _ in range(count)
        ]
        return prompts, f"random ids in [{lo}, {hi}) ({why})"
    if workload.dataset == "builtin":
        resource = resources.files("spec_sweep").joinpath(*_BUILTIN_RESOURCE)
        texts = _parse_dataset(resource.read_text(encoding="utf-8"), "builtin prompt set")
        source = f"builtin text prompts ({len(texts)})"
    else:
        path = Path(workload.dataset)
        try:
            raw = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(
                f"workload.dataset: cannot read {str(path)!r} ({exc}): check the path"
            ) from exc
        texts = _parse_dataset(raw, str(path))
        source = f"text prompts from {path} ({len(texts)})"
    text_prompts: list[Prompt] = list(texts)
    rng.shuffle(text_prompts)
    return text_prompts, source


def _id_range(model_path: str) -> tuple[int, int, str]:
    """The token-id range for random prompts and the reason for it."""
    lo, hi = CONSERVATIVE_ID_RANGE
    directory = Path(model_path)
    if not directory.is_dir():
        return lo, hi, "model path unreadable: conservative range"
    config = directory / "config.json"
    vocab = _config_vocab(config)
    if vocab is not None:
        return 0, vocab, f"vocab_size from {config}"
    tokenizer = directory / "tokenizer.json"
    vocab = _tokenizer_vocab(tokenizer)
    if vocab is not None:
        return 0, vocab, f"vocabulary size from {tokenizer}"
    return lo, hi, f"no vocab_size in {config}: conservative range"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _config_vocab(path: Path) -> int | None:
    """`vocab_size` of a Hugging Face config, top level or in a multimodal model's text config."""
    config = _read_json(path)
    if not isinstance(config, dict):
        return None
    candidates = [config]
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, dict):
            candidates.append(nested)
    for candidate in candidates:
        vocab = candidate.get("vocab_size")
        if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
            return vocab
    return None


def _tokenizer_vocab(path: Path) -> int | None:
    """One past the largest token id of a `tokenizers` JSON file (base and added tokens)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    ids: list[int] = []
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids.extend(v for v in vocab.values() if isinstance(v, int))
    elif isinstance(vocab, list):  # Unigram: a list of [piece, score]
        ids.append(len(vocab) - 1)
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids.extend(t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int))
    return max(ids) + 1 if ids else None


def _parse_dataset(raw: str, name: str) -> list[str]:
    """Text prompts of a JSON list or JSONL file (strings, text/prompt objects or ShareGPT)."""
    items: list[Any]
    try:
        whole = json.loads(raw)
    except ValueError:
        items = []
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise SpecError(
                    f"workload.dataset: {name}: line {number} is not JSON ({exc.args[0]}): "
                    "give a JSON list or one JSON value per line"
                ) from exc
    else:
        if isinstance(whole, list):
            items = whole
        elif isinstance(whole, dict | str):
            items = [whole]  # a JSONL file with a single line
        else:
            raise SpecError(
                f"workload.dataset: {name}: expected a list of prompts, got "
                f"{type(whole).__name__}: give a JSON list or one JSON value per line"
            )
    texts = [text for text in map(_prompt_text, items) if text]
    if not texts:
        raise SpecError(
            f"workload.dataset: {name}: no usable prompt among {len(items)} entries: give "
            "strings, objects with 'text' or 'prompt', or ShareGPT 'conversations' with a "
            "human turn"
        )
    return texts


def _prompt_text(item: Any) -> str | None:
    if isinstance(item, str):
        return item if item.strip() else None
    if not isinstance(item, dict):
        return None
    for key in ("text", "prompt"):
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return value
    turns = item.get("conversations")
    if isinstance(turns, list):
        for turn in turns:
            if not isinstance(turn, dict):
                continue
            role = turn.get("from", turn.get("role"))
            value = turn.get("value", turn.get("content"))
            if role in _HUMAN_ROLES:
                return value if isinstance(value, str) and value.strip() else None
    return None


# ---------------------------------------------------------------------------------------------
# Benchmark
