"""The prompts of a trial's benchmark: random token ids, the built-in set, or a file of texts.

This module owns `load_prompts` (docs/design.md, "Spec format", `workload.dataset`): random token
ids of exactly `input_len` tokens (drawn from the model's vocabulary when its `config.json` or
tokenizer says how large it is, else from a range valid for any vocabulary), the built-in text
prompt set shipped in the package, or a JSON/JSONL file of text prompts (ShareGPT layout
accepted). Sampling is seeded by `workload.seed`. A file that holds no usable prompt is a
`SpecError`.

Text prompts go through the model's chat template when `workload.chat_template` asks for it
(`auto`: when the model is a local folder whose tokenizer has one), as SGLang's own
`bench_serving --apply-chat-template` and production chat clients send them: one user turn, the
generation prompt added. The template is the tokenizer's own Jinja (`chat_template.jinja` or
`tokenizer_config.json`'s `chat_template`), rendered the way Hugging Face's
`apply_chat_template` renders it (a sandboxed, immutable Jinja2 environment with
`trim_blocks`/`lstrip_blocks`, `raise_exception`, `tojson` and the tokenizer's special tokens),
so the product needs no tokenizer library.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeAlias

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from spec_sweep.errors import SpecError
from spec_sweep.spec import WorkloadSpec

__all__ = [
    "CONSERVATIVE_ID_RANGE",
    "ChatTemplate",
    "Prompt",
    "builtin_texts",
    "find_chat_template",
    "load_prompts",
    "prompt_format",
]

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
        texts = builtin_texts()
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
    template, how = prompt_format(workload, model_path=model_path)
    if template is not None:
        texts = [template.render(text) for text in texts]
    text_prompts: list[Prompt] = list(texts)
    rng.shuffle(text_prompts)
    return text_prompts, f"{source}, {how}"


def builtin_texts() -> list[str]:
    """The builtin prompt set, in its file's order."""
    resource = resources.files("spec_sweep").joinpath(*_BUILTIN_RESOURCE)
    return _parse_dataset(resource.read_text(encoding="utf-8"), "builtin prompt set")


@dataclass(frozen=True)
class ChatTemplate:
    """A tokenizer's chat template, ready to turn a user's text into the model's prompt."""

    source: str
    template: jinja2.Template
    special: tuple[tuple[str, str], ...]

    def render(self, text: str) -> str:
        """One user turn, with the generation prompt (the assistant's turn begun)."""
        return self.template.render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            **dict(self.special),
        )


def prompt_format(workload: WorkloadSpec, *, model_path: str) -> tuple[ChatTemplate | None, str]:
    """The chat template text prompts go through (None: raw text), and a note saying which.

    Raises:
        SpecError: `chat_template: true` and the model has no chat template.
    """
    if workload.chat_template is False:
        return None, "raw text (chat_template: false)"
    template = find_chat_template(model_path)
    if template is None:
        if workload.chat_template is True:
            raise SpecError(
                f"workload.chat_template: true, but {model_path!r} has no chat template "
                "(a local model folder with chat_template.jinja or a tokenizer_config.json "
                "with 'chat_template'): point node.model at such a folder, or set "
                "chat_template: false"
            )
        return None, "raw text (no chat template found in the model folder)"
    return template, f"chat template of {template.source}"


def find_chat_template(model_path: str) -> ChatTemplate | None:
    """The chat template of a local model folder's tokenizer, or None."""
    if not model_path:
        return None
    return _chat_template(str(Path(model_path).expanduser()))


def _chat_template(folder: str) -> ChatTemplate | None:
    directory = Path(folder)
    if not directory.is_dir():
        return None
    config = _read_json(directory / "tokenizer_config.json")
    config = config if isinstance(config, dict) else {}
    source = directory / "chat_template.jinja"
    try:
        text: Any = source.read_text(encoding="utf-8")
    except OSError:
        text, source = config.get("chat_template"), directory / "tokenizer_config.json"
    if isinstance(text, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in text if isinstance(t, dict)}
        text = named.get("default")
    if not isinstance(text, str) or not text.strip():
        return None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent)
    env.globals["raise_exception"] = _raise_template_error
    try:
        template = env.from_string(text)
    except jinja2.TemplateError as exc:
        raise SpecError(
            f"workload.chat_template: the chat template in {source} does not parse ({exc}): "
            "fix the model's tokenizer files, or set chat_template: false"
        ) from exc
    special = tuple(
        (name, token)
        for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        if (token := _token_text(config.get(name))) is not None
    )
    return ChatTemplate(source=str(source), template=template, special=special)


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _raise_template_error(message: str) -> None:
    raise jinja2.TemplateError(message)


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
