"""Train a small EAGLE-3 draft head for a Hugging Face Llama target, offline, in SGLang's format.

The real test checkpoint (SmolLM2-135M-Instruct, see `scripts/make_real_model.py`) has no
published draft head and the GPU machine has no package index, so this script makes one from
the target alone, with only torch + transformers + safetensors:

1. **Data from the target itself.** Training prompts come from two sources, `--prompt-mix`
   (default 0.75) of them from the first: a seeded, templated set written in the style of user
   requests (`scripts/draft_prompts.py`: concepts, programming tasks, creative writing,
   practical advice; about 5,000 requests, each in `--prompt-variants` wordings, 3 by default:
   about 13,900 prompts; sampled without replacement), as SpecForge trains on
   real chat data; the rest the target's own sampled user turns, each started by one of the
   openers below (`_OPENERS`) and continued by the target (T=0.8), which often read unlike a
   real request. Both are wrapped in the target's chat template (as production sends them); the
   responses are the target's greedy continuations with EOS ignored (as `spec_sweep` benchmarks
   with `ignore_eos`). The evaluation prompts (by default the 50 builtin prompts,
   `spec_sweep/data/prompts.jsonl`, the ones the sweeps measure on) are never trained on: no
   templated prompt is made from a topic that occurs in one of them (nor in the builtin set),
   and no self-generated prompt equals one; tune on one set, report on another. The held-out
   validation sequences (`--val-seqs`) hold both sources in proportion and are also scored per
   source. On the H200 (2026-12-02) half templated prompts lifted the builtin prompts' accept
   at (3, 1, 4) from 1.73 to 1.94 offline, and used up the 5,012 single wordings; hence three
   wordings and three quarters.
2. **EAGLE-3 with training-time test**, the recipe of SpecForge's `OnlineEagle3Model`
   (sgl-project/SpecForge `specforge/algorithms/eagle3/model.py`): the target's hidden states
   after three decoder layers are concatenated and projected by `fc`; one decoder layer takes
   `[norm(embed(next token)), norm(hidden)]`; the draft is unrolled `--ttt-length` steps, each
   step feeding its own pre-norm hidden state back and attending to the first step's keys
   (causally) plus its own earlier steps' keys at the same position; the loss at each step is
   the cross-entropy against the target's next-token distribution renormalised over the draft
   vocabulary, weighted 0.8**step, on response tokens whose target argmax is in that vocabulary.
   The draft vocabulary is the `--draft-vocab` most frequent tokens of the training responses.
3. **The format SGLang 0.5.17 loads** (`sglang/srt/models/llama_eagle3.py`,
   `LlamaForCausalLMEagle3`): `config.json` (the target's config with `architectures =
   ["LlamaForCausalLMEagle3"]`, `num_hidden_layers = 1`, `tie_word_embeddings = false`,
   `draft_vocab_size`, and `eagle_config.eagle_aux_hidden_state_layer_ids`) and safetensors
   holding `fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight` (draft vocabulary rows),
   `d2t` (draft id -> target id offset, int64) and `t2d` (bool mask over the target vocabulary).
   No `embed_tokens`: SGLang gives an EAGLE-3 draft the target's embedding (`set_embed`). The
   weights are split into shards below `--shard-mib` with a `model.safetensors.index.json` when
   they would not fit in one file (the GPU machine returns files of at most 16 MiB).
4. **An offline accept length**: on the evaluation prompts, the target's greedy output is
   simulated through SGLang's chain speculation (draft proposes `steps` tokens from the
   verified prefix, the longest prefix agreeing with the target's greedy tokens is accepted,
   plus the target's bonus token), for chains of 1 to `--ttt-length` steps; (3, 1, 4) is the
   acceptance criterion of issue 26. A JSON summary goes to stdout and `train_summary.json`.

Usage (GPU machine, target folder from `scripts/make_real_model.py`; about 8 minutes on one
H200, most of it the `--max-train-seconds` training budget)::

    python scripts/train_test_draft.py --target .models/smollm2-135m \\
        --out .models/smollm2-135m-eagle3 --data .models/smollm2-135m-draft-data.json

and serve with `--speculative-algorithm EAGLE3 --speculative-draft-model-path
.models/smollm2-135m-eagle3 --speculative-num-steps 3 --speculative-eagle-topk 1
--speculative-num-draft-tokens 4`. `scripts/check_draft_sglang.py` loads the folder with
SGLang's own model class first, if wanted. `--data` caches the generated token sequences (a few
MB of JSON) so a later run retrains without regenerating. Sizes are flags (`--train-seqs`,
`--gen-len`, `--steps`, `--batch-size`, `--max-train-seconds`, `--draft-vocab`). `--init-from
DIR` continues training a head saved earlier (its draft vocabulary kept), so sessions of a few
device-minutes each add up; give it a new `--seed` for new self-generated prompts. On a CPU,
`--device cpu --train-seqs 16 --gen-len 24 --steps 6 --batch-size 4` is a smoke run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_PROMPTS = ROOT / "spec_sweep" / "data" / "prompts.jsonl"


def _load_sibling(name: str) -> ModuleType:
    """A module next to this script (importable without torch, so its tests need none)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name(name))
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


draft_prompts = _load_sibling("draft_prompts.py")

#: Step weights of the training-time-test loss, as SpecForge (`ploss_weight = 0.8**i`).
STEP_DECAY = 0.8
#: Tokenizer files copied next to the draft weights (SGLang reads the target's; harmless).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
#: Config keys of the target that must not describe the draft.
_DROPPED_CONFIG_KEYS = (
    "_name_or_path",
    "_model_name_or_path",
    "quantization_config",
    "auto_map",
    "layer_types",
    "transformers_version",
    "architectures",
)
#: How self-generated training prompts start; the target writes the rest of each user turn.
_OPENERS = (
    "Explain",
    "Explain in simple terms how",
    "Write a Python function that",
    "Write a JavaScript function that",
    "Write a SQL query that",
    "Write a bash command that",
    "Write a short story about",
    "Write a poem about",
    "Write a short email to",
    "Write a product description for",
    "What is",
    "What are the main differences between",
    "What are the benefits of",
    "What happens when",
    "How does",
    "How do I",
    "How can I improve",
    "Why do",
    "Why is it important to",
    "Describe",
    "Describe the history of",
    "Compare",
    "Summarize",
    "Give me a list of",
    "Give three tips for",
    "List the steps to",
    "Tell me about",
    "Create a recipe for",
    "Help me plan",
    "Outline an essay about",
    "Define",
    "Can you recommend",
    "Translate into French:",
    "Solve this math problem:",
    "Write a haiku about",
    "What should I know about",
    "Suggest a name for",
    "Write a cover letter for",
    "What would happen if",
    "Teach me",
)


# --------------------------------------------------------------------------------------------
# The draft model: the arithmetic of SGLang's `LlamaForCausalLMEagle3`, unrolled for training.
# --------------------------------------------------------------------------------------------


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class _Attention(nn.Module):
    """Grouped-query attention over `[embeds, hidden]` (input width 2 x hidden)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // self.heads
        self.q_proj = nn.Linear(2 * hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """One training-time-test step; `cache` holds the keys/values of the earlier steps.

        Step 0 attends causally over its own keys; step k attends to step 0's keys at positions
        <= t and to the keys of steps 1..k at position t only (the draft tokens it descends
        from), which is what a chain of draft decodes sees in SGLang's KV cache.
        """
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        cache.append((k, v))
        scale = 1.0 / math.sqrt(self.head_dim)
        k0, v0 = cache[0]
        scores = torch.matmul(q, k0.transpose(-1, -2)).float() * scale
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        extra = [(q * ki).sum(-1, keepdim=True).float() * scale for ki, _ in cache[1:]]
        weights = torch.softmax(torch.cat([scores, *extra], dim=-1), dim=-1).to(q.dtype)
        out = torch.matmul(weights[..., :length], v0)
        for i, (_, vi) in enumerate(cache[1:]):
            out = out + weights[..., length + i : length + i + 1] * vi
        out = out.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        return self.o_proj(out)


class _MLP(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    """SGLang's EAGLE-3 input layer (`llama_eagle3.py` `LlamaDecoderLayer`, layer_id 0)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.self_attn = _Attention(config)
        self.mlp = _MLP(config)
        self.input_layernorm = _RMSNorm(config.hidden_size, eps)
        self.hidden_norm = _RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = _RMSNorm(config.hidden_size, eps)

    def forward(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        hidden = hidden + self.self_attn(x, cos, sin, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class EagleDraft(nn.Module):
    """A one-layer EAGLE-3 draft whose state dict uses SGLang's checkpoint names.

    `embed_tokens` is the target's embedding, frozen and never saved (SGLang shares the
    target's). `forward` returns the pre-norm hidden state (what SGLang feeds to the next draft
    step) and `logits` maps it to draft-vocabulary logits through `norm` and `lm_head`.
    """

    def __init__(
        self, config: Any, *, embed: torch.Tensor, draft_ids: torch.Tensor, num_aux: int
    ) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding.from_pretrained(embed.detach().clone(), freeze=True)
        self.fc = nn.Linear(num_aux * hidden, hidden, bias=False)
        self.midlayer = _MidLayer(config)
        self.norm = _RMSNorm(hidden, config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, len(draft_ids), bias=False)
        self.rotary = LlamaRotaryEmbedding(config)
        vocab = embed.shape[0]
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[draft_ids] = True
        self.register_buffer("d2t", draft_ids - torch.arange(len(draft_ids)))
        self.register_buffer("t2d", t2d)
        self.register_buffer("draft_ids", draft_ids.clone(), persistent=False)

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        return self.fc(aux)

    def step(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids).to(hidden.dtype)
        cos, sin = self.rotary(hidden, positions)
        return self.midlayer(embeds, hidden, cos, sin, cache)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))

    def to_target_ids(self, draft_token_ids: torch.Tensor) -> torch.Tensor:
        return draft_token_ids + self.d2t[draft_token_ids]

    def serving_state(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The tensors SGLang's `load_weights` reads, under its names (no `embed_tokens`)."""
        state: dict[str, torch.Tensor] = {}
        for name, tensor in self.state_dict().items():
            if name.startswith("embed_tokens.") or name.startswith("rotary."):
                continue
            value = tensor.detach().cpu()
            state[name] = value.to(dtype) if value.is_floating_point() else value
        return {name: state[name].contiguous() for name in sorted(state)}


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# --------------------------------------------------------------------------------------------
# Data: prompts, generation, target features.
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class TokenSequence:
    """One token sequence: the chat-templated prompt followed by the target's response."""

    ids: list[int]
    prompt_len: int
    source: str = "self"  # "templated" (`draft_prompts`) or "self" (`self_generated_prompts`)


@dataclass(slots=True)
class Batch:
    """Target features of a right-padded batch, shifted for the draft (see `_batch`)."""

    aux: torch.Tensor  # (B, T, num_aux * hidden): target hidden states at position t
    input_ids: torch.Tensor  # (B, T + extra): token t + 1 + k is step k's input at t
    target_p: torch.Tensor  # (B, T + extra, Vd): target's next-token dist over the draft vocab
    target_ids: torch.Tensor  # (B, T + extra): target's argmax (target vocabulary ids)
    valid: torch.Tensor  # (B, T + extra): response positions whose argmax is in the draft vocab
    scored: torch.Tensor  # (B, T + extra): response positions (for accept simulation)


def _chat_parts(tokenizer: Any, *, use_template: bool) -> tuple[str, str] | None:
    """The chat template's text before and after a user message, or None without a template."""
    if not use_template or not getattr(tokenizer, "chat_template", None):
        return None
    sentinel = "\u2063SENTINEL\u2063"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": sentinel}], add_generation_prompt=True, tokenize=False
    )
    before, _, after = text.partition(sentinel)
    return before, after


def _encode_prompt(tokenizer: Any, text: str, parts: tuple[str, str] | None) -> list[int]:
    if parts is None:
        return list(tokenizer(text).input_ids)
    return list(tokenizer(parts[0] + text + parts[1], add_special_tokens=False).input_ids)


def _left_pad(
    rows: Sequence[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def generate(
    model: Any,
    prompts: Sequence[list[int]],
    *,
    new_tokens: int,
    batch_size: int,
    pad_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Continue each prompt by exactly `new_tokens` tokens (EOS ignored), greedy by default."""
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids, mask = _left_pad([prompts[i] for i in chunk], pad_id, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        result = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        cache, logits = result.past_key_values, result.logits[:, -1]
        produced = []
        for _ in range(new_tokens):
            token = _pick(logits.float(), temperature=temperature, top_p=top_p, generator=generator)
            produced.append(token)
            mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=-1)
            positions = positions[:, -1:] + 1
            result = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = result.past_key_values, result.logits[:, -1]
        tokens = torch.stack(produced, dim=1).tolist() if produced else [[] for _ in chunk]
        for row, i in enumerate(chunk):
            out[i] = tokens[row]
    return out


def _pick(
    logits: torch.Tensor, *, temperature: float, top_p: float, generator: torch.Generator | None
) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, sorted_i = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        sorted_p = sorted_p * keep
        choice = torch.multinomial(sorted_p, 1, generator=generator)
        return sorted_i.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def self_generated_prompts(
    model: Any,
    tokenizer: Any,
    *,
    count: int,
    parts: tuple[str, str] | None,
    max_tokens: int,
    batch_size: int,
    pad_id: int,
    generator: torch.Generator,
    rng: random.Random,
    exclude: set[str],
) -> list[str]:
    """`count` distinct user prompts, each an opener the target continues (sampled, T=0.8)."""
    if parts is None:
        head = ""
        stop_ids = set(tokenizer("\n", add_special_tokens=False).input_ids[-1:])
    else:
        head = parts[0]
        stop_ids = set(tokenizer(parts[1], add_special_tokens=False).input_ids[:1])
    stop_ids |= {i for i in (tokenizer.eos_token_id,) if i is not None}
    prompts: list[str] = []
    seen = {e.strip().lower() for e in exclude}
    for _attempt in range(4):
        need = count - len(prompts)
        if need <= 0:
            break
        openers = [rng.choice(_OPENERS) for _ in range(need + need // 4 + 1)]
        inputs = [
            list(tokenizer(head + o, add_special_tokens=parts is None).input_ids) for o in openers
        ]
        continued = generate(
            model,
            inputs,
            new_tokens=max_tokens,
            batch_size=batch_size,
            pad_id=pad_id,
            temperature=0.8,
            top_p=0.95,
            generator=generator,
        )
        for opener, tokens in zip(openers, continued, strict=True):
            cut = next((i for i, t in enumerate(tokens) if t in stop_ids), len(tokens))
            rest = tokenizer.decode(tokens[:cut], skip_special_tokens=True)
            text = (opener + rest).strip()
            key = text.lower()
            if len(text) < len(opener) + 8 or key in seen:
                continue
            seen.add(key)
            prompts.append(text)
            if len(prompts) == count:
                break
    return prompts


def self_generated_data(
    model: Any,
    tokenizer: Any,
    *,
    count: int,
    parts: tuple[str, str] | None,
    prompt_tokens: int,
    gen_len: int,
    batch_size: int,
    pad_id: int,
    generator: torch.Generator,
    rng: random.Random,
    exclude: set[str],
    max_seconds: float,
    templated: Sequence[str] = (),
    mix: float = 0.0,
) -> tuple[list[str], list[TokenSequence], dict[str, Any]]:
    """Up to `count` training sequences, made in rounds of one generation batch each.

    A round takes its share (`mix`) of user turns from `templated`, sampled without
    replacement (the pool is shuffled once by `rng`; when it runs out every later turn is
    self-generated), samples the rest (`self_generated_prompts`, distinct from every earlier
    turn and from `exclude`) and answers them all greedily (`build_sequences`). The share is
    kept on the running total, so the mix holds whenever the rounds stop. A round is one
    generation batch of responses (0.8 of one when most turns are self-generated, whose
    openers are sampled with a quarter to spare in one batch). The rounds stop at `count`, or
    before one that would end past `max_seconds` (judged by the previous round's duration), so
    the amount of data adapts to the machine's speed while each round's content depends on
    the seed alone.
    """
    started = time.monotonic()
    prompts: list[str] = []
    sequences: list[TokenSequence] = []
    seen = set(exclude)
    pool = [p for p in templated if p not in seen]
    rng.shuffle(pool)
    pool.reverse()  # popped from the end: the shuffled order
    taken = 0
    rounds = 0
    last = 0.0
    stopped = "count"
    while len(sequences) < count:
        if rounds and time.monotonic() - started + last > max_seconds:
            stopped = "time"
            break
        round_started = time.monotonic()
        share = mix if pool else 0.0
        size = batch_size if share >= 0.25 else max(1, batch_size * 4 // 5)
        need = min(count - len(sequences), size)
        due = round((len(sequences) + need) * share) - taken
        new = [pool.pop() for _ in range(max(0, min(due, need, len(pool))))]
        taken += len(new)
        sources = ["templated"] * len(new)
        if need > len(new):
            made = self_generated_prompts(
                model,
                tokenizer,
                count=need - len(new),
                parts=parts,
                max_tokens=prompt_tokens,
                batch_size=batch_size,
                pad_id=pad_id,
                generator=generator,
                rng=rng,
                exclude=seen | set(new),
            )
            new += made
            sources += ["self"] * len(made)
        if not new:
            stopped = "no new prompts"
            break
        seen.update(new)
        made_seqs = build_sequences(
            model,
            tokenizer,
            new,
            parts=parts,
            gen_len=gen_len,
            batch_size=batch_size,
            pad_id=pad_id,
        )
        for seq, source in zip(made_seqs, sources, strict=True):
            seq.source = source
        sequences += made_seqs
        prompts += new
        rounds += 1
        last = time.monotonic() - round_started
        print(
            f"data: round {rounds}: {len(sequences)} sequences, {last:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    info = {
        "rounds": rounds,
        "stopped": stopped,
        "seconds": round(time.monotonic() - started, 1),
        "templated_left": len(pool),
    }
    return prompts, sequences, info


def split_validation(
    sequences: Sequence[TokenSequence], count: int
) -> tuple[list[TokenSequence], list[TokenSequence]]:
    """(held out, rest): the first sequences of each source, in proportion to the sources.

    At most `count` and always leaving one to train on; each source's quota is its share of
    `count`, rounded by largest remainder, so the held-out set measures the mixed distribution.
    """
    count = max(0, min(count, len(sequences) - 1))
    sizes = Counter(s.source for s in sequences)
    exact = {src: count * n / max(len(sequences), 1) for src, n in sizes.items()}
    quota = {src: math.floor(x) for src, x in exact.items()}
    by_remainder = sorted(exact, key=lambda src: (quota[src] - exact[src], src))
    for src in by_remainder[: count - sum(quota.values())]:
        quota[src] += 1
    held: list[TokenSequence] = []
    rest: list[TokenSequence] = []
    for seq in sequences:
        if quota[seq.source] > 0:
            quota[seq.source] -= 1
            held.append(seq)
        else:
            rest.append(seq)
    return held, rest


def load_eval_prompts(path: Path, *, limit: int | None) -> list[str]:
    """Text prompts of a JSONL file with a `text` field per line (the builtin prompt set)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SystemExit(f"--eval-prompts: cannot read {path} ({exc}); pass a JSONL file") from exc
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    return texts[:limit] if limit else texts


def build_sequences(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    parts: tuple[str, str] | None,
    gen_len: int,
    batch_size: int,
    pad_id: int,
) -> list[TokenSequence]:
    encoded = [_encode_prompt(tokenizer, p, parts) for p in prompts]
    responses = generate(model, encoded, new_tokens=gen_len, batch_size=batch_size, pad_id=pad_id)
    return [
        TokenSequence(ids=e + r, prompt_len=len(e)) for e, r in zip(encoded, responses, strict=True)
    ]


def choose_draft_vocab(
    sequences: Sequence[TokenSequence], *, size: int, vocab: int
) -> torch.Tensor:
    """The `size` most frequent response tokens (then the lowest ids), sorted by id."""
    counts: Counter[int] = Counter()
    for seq in sequences:
        counts.update(seq.ids[seq.prompt_len :])
    chosen = [t for t, _ in counts.most_common(size)]
    filler = (t for t in range(vocab) if t not in counts)
    while len(chosen) < size:
        chosen.append(next(filler))
    return torch.tensor(sorted(chosen), dtype=torch.long)


def _coverage(sequences: Sequence[TokenSequence], t2d: torch.Tensor) -> float:
    tokens = [t for s in sequences for t in s.ids[s.prompt_len :]]
    return float(t2d[torch.tensor(tokens)].float().mean()) if tokens else 0.0


@torch.no_grad()
def target_batch(
    target: Any,
    sequences: Sequence[TokenSequence],
    *,
    layer_ids: Sequence[int],
    draft: EagleDraft,
    extra: int,
) -> Batch:
    """Run the target over right-padded sequences and shift its outputs for the draft.

    Position t of the draft's step k reads the target's hidden states at t (after decoder
    layers `layer_ids`, as SGLang captures them before layer id + 1), embeds token t + 1 + k and
    is scored against the target's distribution at t + 1 + k (which predicts token t + 2 + k).
    """
    device = draft.d2t.device
    width = max(len(s.ids) for s in sequences)
    ids = torch.zeros((len(sequences), width + extra), dtype=torch.long)
    scored = torch.zeros((len(sequences), width + extra), dtype=torch.bool)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq.ids)] = torch.tensor(seq.ids)
        # target position j predicts token j + 1; score responses: j + 1 in [prompt_len, len)
        scored[i, seq.prompt_len - 1 : len(seq.ids) - 1] = True
    ids, scored = ids.to(device), scored.to(device)
    out = target(input_ids=ids[:, :width], output_hidden_states=True)
    aux = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    logits = out.logits
    target_ids = F.pad(logits.argmax(-1), (0, extra))
    draft_logits = F.pad(logits[..., draft.draft_ids].float(), (0, 0, 0, extra))
    target_p = torch.softmax(draft_logits, dim=-1)
    valid = scored & draft.t2d[target_ids]
    return Batch(aux, ids, target_p, target_ids, valid, scored)


def unroll(
    draft: EagleDraft, batch: Batch, *, length: int
) -> Iterator[tuple[int, torch.Tensor, slice]]:
    """Training-time test: yield (step, draft logits, the target columns that step predicts)."""
    width = batch.aux.shape[1]
    hidden = draft.project(batch.aux)
    positions = torch.arange(width, device=hidden.device)[None].expand(hidden.shape[0], -1)
    cache: list[tuple[torch.Tensor, torch.Tensor]] = []
    for k in range(length):
        cols = slice(1 + k, 1 + k + width)
        hidden = draft.step(hidden, batch.input_ids[:, cols], positions + k, cache)
        yield k, draft.logits(hidden), cols


# --------------------------------------------------------------------------------------------
# Training, evaluation, saving.
# --------------------------------------------------------------------------------------------


def train(
    draft: EagleDraft,
    target: Any,
    sequences: Sequence[TokenSequence],
    *,
    args: argparse.Namespace,
    layer_ids: Sequence[int],
    rng: random.Random,
) -> dict[str, Any]:
    """AdamW over the draft (embedding frozen), linear warm-up then cosine decay to 10%.

    The schedule's progress is the larger of steps done / `--steps` and seconds spent /
    `--max-train-seconds`, so a run cut short by the time limit still ends at a low rate.
    """
    device = draft.d2t.device
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, min(args.warmup, args.steps // 10))
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    order: list[int] = []
    started = time.monotonic()
    history: list[dict[str, Any]] = []
    step = elapsed = 0.0
    for step in range(args.steps):
        elapsed = time.monotonic() - started
        progress = max(step / args.steps, elapsed / args.max_train_seconds)
        if progress >= 1.0:
            print(
                f"stopping after {step} steps: --max-train-seconds {args.max_train_seconds}",
                file=sys.stderr,
            )
            break
        factor = (
            (step + 1) / warmup
            if step < warmup
            else 0.1 + 0.45 * (1 + math.cos(math.pi * progress))
        )
        for group in optimizer.param_groups:
            group["lr"] = args.lr * factor
        if not order:
            order = list(range(len(sequences)))
            rng.shuffle(order)
        chosen = [sequences[order.pop()] for _ in range(min(args.batch_size, len(order)))]
        log = step % args.log_every == 0 or step == args.steps - 1
        hits: list[torch.Tensor] = []
        with autocast:
            batch = target_batch(
                target, chosen, layer_ids=layer_ids, draft=draft, extra=args.ttt_length + 1
            )
            loss = torch.zeros((), device=device)
            for k, logits, cols in unroll(draft, batch, length=args.ttt_length):
                valid = batch.valid[:, cols]
                logp = torch.log_softmax(logits.float(), dim=-1)
                per_pos = -(batch.target_p[:, cols] * logp).sum(-1)
                loss = loss + STEP_DECAY**k * (per_pos * valid).sum() / valid.sum().clamp(min=1)
                if log:
                    with torch.no_grad():
                        hit = draft.to_target_ids(logits.argmax(-1)) == batch.target_ids[:, cols]
                        scored = batch.scored[:, cols]
                        hits.append((hit & valid).sum() / scored.sum().clamp(min=1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        optimizer.step()
        if log:
            record = {
                "step": step,
                "loss": round(float(loss.detach()), 4),
                "acc": [round(float(h), 3) for h in hits],
                "lr": round(args.lr * factor, 7),
                "s": round(time.monotonic() - started, 1),
            }
            history.append(record)
            print(json.dumps(record), file=sys.stderr, flush=True)
    else:
        step = args.steps
    return {
        "steps_run": int(step),
        "seconds": round(time.monotonic() - started, 1),
        "log": history,
    }


@torch.no_grad()
def evaluate(
    draft: EagleDraft,
    target: Any,
    sequences: Sequence[TokenSequence],
    *,
    layer_ids: Sequence[int],
    max_steps: int,
    batch_size: int,
) -> dict[str, Any]:
    """Simulated greedy chain speculation on `sequences` (prompt + target's greedy response).

    A chain of s steps proposes s draft tokens after the last verified token x_n; SGLang
    accepts the longest prefix equal to the target's greedy tokens, plus the target's own next
    token. Draft step k at position n - 1 sees the target's features up to n - 1, the verified
    token x_n and its own earlier drafts; while the drafts agree with the target they equal the
    reference tokens, so one training-time-test pass over the reference scores every chain.
    """
    device = draft.d2t.device
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    per_seq_hits: list[torch.Tensor] = []
    step_hits = [0] * max_steps
    step_total = [0] * max_steps
    for start in range(0, len(sequences), batch_size):
        chunk = list(sequences[start : start + batch_size])
        with autocast:
            batch = target_batch(
                target, chunk, layer_ids=layer_ids, draft=draft, extra=max_steps + 1
            )
            hits = []
            for k, logits, cols in unroll(draft, batch, length=max_steps):
                hit = draft.to_target_ids(logits.argmax(-1)) == batch.target_ids[:, cols]
                hit &= batch.scored[:, cols]
                step_hits[k] += int(hit.sum())
                step_total[k] += int(batch.scored[:, cols].sum())
                hits.append(hit.cpu())
        per_seq_hits.extend(torch.stack(hits, dim=-1))  # (T, max_steps) per sequence
    chains = []
    for steps in range(1, max_steps + 1):
        produced = rounds = 0
        per_prompt = []
        for seq, hits in zip(sequences, per_seq_hits, strict=True):
            accepted = _simulate_chain(
                hits, prompt_len=seq.prompt_len, length=len(seq.ids), steps=steps
            )
            produced += sum(accepted)
            rounds += len(accepted)
            per_prompt.append(sum(accepted) / max(len(accepted), 1))
        chains.append(
            {
                "steps": steps,
                "topk": 1,
                "draft_tokens": steps + 1,
                "accept_length": round(produced / max(rounds, 1), 3),
                "accept_length_prompt_mean": round(sum(per_prompt) / max(len(per_prompt), 1), 3),
                "accept_length_prompt_min": round(min(per_prompt, default=0.0), 3),
            }
        )
    coverage = _coverage(sequences, draft.t2d.cpu())
    return {
        "prompts": len(sequences),
        "response_tokens": sum(len(s.ids) - s.prompt_len for s in sequences),
        "draft_vocab_coverage": round(coverage, 4),
        "step_acc": [round(h / max(t, 1), 3) for h, t in zip(step_hits, step_total, strict=True)],
        "chains": chains,
    }


def _simulate_chain(hits: torch.Tensor, *, prompt_len: int, length: int, steps: int) -> list[int]:
    """Accept lengths of the verify rounds of one greedy response.

    `hits[t, k]`: draft step k at position t proposes the target's token t + 2 + k. The prefill
    produces token `prompt_len`; a round starting after token n drafts from position n - 1,
    accepts the leading hits (at most the tokens still to produce) plus one bonus token.
    """
    rounds = []
    n = prompt_len
    last = length - 1
    while n < last:
        limit = min(steps, last - n - 1)
        accepted = 0
        while accepted < limit and bool(hits[n - 1, accepted]):
            accepted += 1
        rounds.append(accepted + 1)
        n += accepted + 1
    return rounds


def draft_config(
    target_config: dict[str, Any], *, draft_vocab: int, layer_ids: Sequence[int], dtype: str
) -> dict[str, Any]:
    """The target's `config.json` turned into SGLang's `LlamaForCausalLMEagle3` config.

    Everything that describes the draft's shapes (hidden size, heads, head_dim, intermediate
    size, RoPE, norm epsilon, vocabulary size for the shared embedding) is the target's; one
    layer; an untied `lm_head` over `draft_vocab_size` tokens; the captured layers explicit.
    The dtype stays the target's (SGLang casts the saved bfloat16 weights on load), so target
    and draft resolve to the same dtype under `--dtype auto`.
    """
    config = {k: v for k, v in target_config.items() if k not in _DROPPED_CONFIG_KEYS}
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        num_hidden_layers=1,
        tie_word_embeddings=False,
        draft_vocab_size=draft_vocab,
        eagle_config={
            "eagle_aux_hidden_state_layer_ids": list(layer_ids),
            "use_aux_hidden_state": True,
        },
    )
    if "dtype" not in config and "torch_dtype" not in config:
        # SGLang resolves each model's dtype from its own config: keep the target's when given
        config["dtype"] = dtype
    return config


def save_draft(
    out: Path,
    state: dict[str, torch.Tensor],
    config: dict[str, Any],
    *,
    shard_bytes: int,
    target: Path,
) -> list[dict[str, Any]]:
    """Write config.json and safetensors (sharded with an index above `shard_bytes`)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.safetensors"), out / "model.safetensors.index.json"]:
        old.unlink(missing_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    metadata = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata=metadata)
    else:
        weight_map = {}
        for i, shard in enumerate(shards, start=1):
            fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(out / fname), metadata=metadata)
            weight_map.update(dict.fromkeys(shard, fname))
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    for name in _TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copyfile(target / name, out / name)
    return [{"file": p.name, "bytes": p.stat().st_size} for p in sorted(out.iterdir())]


def default_layer_ids(num_layers: int) -> list[int]:
    """SGLang's default capture (`llama.py` `set_eagle3_layers_to_capture`: before layers
    2, L // 2 and L - 3) written as `eagle_aux_hidden_state_layer_ids` (SGLang adds 1)."""
    return [1, num_layers // 2 - 1, num_layers - 4]


def _load_or_generate_data(
    args: argparse.Namespace,
    target: Any,
    tokenizer: Any,
    *,
    parts: tuple[str, str] | None,
    eval_prompts: list[str],
    generator: torch.Generator,
    rng: random.Random,
    pad_id: int,
) -> tuple[list[TokenSequence], list[TokenSequence], dict[str, Any]]:
    # held out of the templated prompts: every prompt of the eval file (not just the first
    # --max-eval-prompts) and of the builtin set, the product's default benchmark
    held_out = load_eval_prompts(args.eval_prompts, limit=None)
    if args.eval_prompts.resolve() != BUILTIN_PROMPTS.resolve():
        held_out += load_eval_prompts(BUILTIN_PROMPTS, limit=None)
    templated = draft_prompts.build_prompt_set(
        [*held_out, *eval_prompts], seed=args.seed, variants=args.prompt_variants
    )
    fingerprint = {
        "target": str(args.target.resolve()),
        "seed": args.seed,
        "train_seqs": args.train_seqs,
        "gen_len": args.gen_len,
        "eval_len": args.eval_len,
        "prompt_tokens": args.prompt_tokens,
        "gen_batch": args.gen_batch,
        "max_data_seconds": args.max_data_seconds,
        "chat_template": parts is not None,
        "eval_prompts": eval_prompts,
        "prompt_mix": args.prompt_mix,
        "prompt_variants": args.prompt_variants,
        "templated_prompts": templated.stats["sha256_16"] if args.prompt_mix > 0 else None,
    }
    if args.data is not None and args.data.is_file():
        cached = json.loads(args.data.read_text())
        if cached.get("fingerprint") == fingerprint:
            print(f"data: reusing {args.data}", file=sys.stderr)
            train_seqs = [
                TokenSequence(s["ids"], s["prompt_len"], s.get("source", "self"))
                for s in cached["train"]
            ]
            eval_seqs = [TokenSequence(s["ids"], s["prompt_len"]) for s in cached["eval"]]
            return train_seqs, eval_seqs, cached["info"]
        print(f"data: {args.data} was made with other settings; regenerating", file=sys.stderr)
    started = time.monotonic()
    prompts, train_seqs, rounds = self_generated_data(
        target,
        tokenizer,
        count=args.train_seqs,
        parts=parts,
        prompt_tokens=args.prompt_tokens,
        gen_len=args.gen_len,
        batch_size=args.gen_batch,
        pad_id=pad_id,
        generator=generator,
        rng=rng,
        exclude=set(eval_prompts),
        max_seconds=args.max_data_seconds,
        templated=templated.prompts if args.prompt_mix > 0 else (),
        mix=args.prompt_mix,
    )
    train_s = time.monotonic() - started
    eval_seqs = build_sequences(
        target,
        tokenizer,
        eval_prompts,
        parts=parts,
        gen_len=args.eval_len,
        batch_size=args.gen_batch,
        pad_id=pad_id,
    )
    by_source: dict[str, list[str]] = {"templated": [], "self": []}
    for prompt, seq in zip(prompts, train_seqs, strict=True):
        by_source[seq.source].append(prompt)
    info = {
        "train_prompts": len(prompts),
        "train_prompts_by_source": {k: len(v) for k, v in by_source.items()},
        "prompt_mix": args.prompt_mix,
        "prompt_variants": args.prompt_variants,
        "templated_prompt_set": {
            k: v for k, v in templated.stats.items() if k != "dropped_eval_topics"
        },
        **{f"train_{k}": v for k, v in rounds.items()},
        "train_seqs_per_second": round(len(train_seqs) / max(train_s, 1e-9), 1),
        "generate_seconds": round(time.monotonic() - started, 1),
        "train_prompt_examples": prompts[:5],
        "templated_prompt_examples": by_source["templated"][:5],
        "self_prompt_examples": by_source["self"][:5],
        "train_tokens": sum(len(s.ids) for s in train_seqs),
    }
    if args.data is not None:
        args.data.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "fingerprint": fingerprint,
            "info": info,
            "train": [
                {"ids": s.ids, "prompt_len": s.prompt_len, "source": s.source} for s in train_seqs
            ],
            "eval": [{"ids": s.ids, "prompt_len": s.prompt_len} for s in eval_seqs],
        }
        args.data.write_text(json.dumps(payload, separators=(",", ":")))
    return train_seqs, eval_seqs, info


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--target", type=Path, required=True, help="Hugging Face Llama folder (the target)")
    add("--out", type=Path, required=True, help="draft folder to write")
    add("--data", type=Path, help="JSON cache of the generated sequences (read if it matches)")
    add("--eval-prompts", type=Path, default=BUILTIN_PROMPTS, help="held-out JSONL prompts")
    add("--max-eval-prompts", type=int, default=None)
    add("--draft-vocab", type=int, default=16384, help="draft vocabulary size")
    add("--train-seqs", type=int, default=24576, help="most training sequences to make")
    add(
        "--prompt-mix",
        type=float,
        default=0.75,
        help="share of training prompts from the templated set (scripts/draft_prompts.py), "
        "the rest self-generated",
    )
    add(
        "--prompt-variants",
        type=int,
        default=3,
        help="wordings of each templated request (scripts/draft_prompts.py `variants`)",
    )
    add(
        "--max-data-seconds",
        type=float,
        default=120.0,
        help="stop generating training sequences (whole rounds) after this long",
    )
    add(
        "--val-seqs",
        type=int,
        default=256,
        help="generated sequences held out of training (both sources in proportion) and "
        "scored like the eval prompts",
    )
    add("--prompt-tokens", type=int, default=40, help="sampled tokens per self-generated prompt")
    add("--gen-len", type=int, default=192, help="greedy response tokens per training sequence")
    add("--eval-len", type=int, default=128, help="greedy response tokens per eval prompt")
    add("--gen-batch", type=int, default=2048, help="sequences per generation batch")
    add("--ttt-length", type=int, default=7, help="training-time-test unroll steps")
    add("--steps", type=int, default=3000, help="optimizer steps")
    add("--batch-size", type=int, default=48, help="sequences per optimizer step")
    add("--lr", type=float, default=5e-4)
    add("--warmup", type=int, default=50)
    add("--clip", type=float, default=0.5, help="gradient-norm clip")
    add("--max-train-seconds", type=float, default=330.0, help="stop training after this long")
    add("--layer-ids", type=int, nargs=3, help="target layers to capture (default SGLang's)")
    add("--seed", type=int, default=0)
    add(
        "--init-from",
        type=Path,
        help="continue training this earlier head (its draft vocabulary kept); give a new "
        "--seed for new self-generated prompts",
    )
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--shard-mib", type=float, default=15.0, help="largest safetensors file (MiB)")
    add("--raw-prompts", action="store_true", help="do not apply the chat template")
    add("--log-every", type=int, default=50)
    add("--min-accept-length", type=float, help="exit 1 if (3, 1, 4) accepts less")
    args = parser.parse_args(argv)
    if args.ttt_length < 3:
        parser.error("--ttt-length must be >= 3 to score the (3, 1, 4) chain")
    if not 0.0 <= args.prompt_mix <= 1.0:
        parser.error("--prompt-mix must be in [0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    started = time.monotonic()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = torch.device(args.device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    model_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    target_config = AutoConfig.from_pretrained(args.target)
    if getattr(target_config, "model_type", None) != "llama":
        raise SystemExit(
            f"--target {args.target}: model_type "
            f"{getattr(target_config, 'model_type', None)!r}, expected 'llama'"
        )
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=model_dtype).to(device)
    target.eval().requires_grad_(False)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    layer_ids = args.layer_ids or default_layer_ids(target_config.num_hidden_layers)
    if not all(0 <= i < target_config.num_hidden_layers - 1 for i in layer_ids):
        raise SystemExit(
            f"--layer-ids {layer_ids}: each must be in [0, {target_config.num_hidden_layers - 1})"
        )
    parts = _chat_parts(tokenizer, use_template=not args.raw_prompts)
    eval_prompts = load_eval_prompts(args.eval_prompts, limit=args.max_eval_prompts)
    load_s = time.monotonic() - started

    train_seqs, eval_seqs, data_info = _load_or_generate_data(
        args,
        target,
        tokenizer,
        parts=parts,
        eval_prompts=eval_prompts,
        generator=generator,
        rng=rng,
        pad_id=pad_id,
    )
    data_s = time.monotonic() - started - load_s
    # an in-distribution held-out set: the first generated sequences of each source in
    # proportion, never trained on
    val_seqs, train_seqs = split_validation(train_seqs, args.val_seqs)
    vocab = target.get_input_embeddings().weight.shape[0]
    earlier = load_head(args.init_from) if args.init_from else None
    if earlier is not None:
        # the earlier head's draft vocabulary: its lm_head rows mean those tokens
        draft_ids = earlier["d2t"] + torch.arange(len(earlier["d2t"]))
    else:
        draft_ids = choose_draft_vocab(train_seqs, size=min(args.draft_vocab, vocab), vocab=vocab)

    # the draft's init and batch order depend on the seed only, not on whether data was cached
    torch.manual_seed(args.seed)
    draft = EagleDraft(
        target_config,
        embed=target.get_input_embeddings().weight.float().cpu(),
        draft_ids=draft_ids,
        num_aux=len(layer_ids),
    )
    if earlier is not None:
        missing, unexpected = draft.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in earlier.items()},
            strict=False,
        )
        if unexpected or [m for m in missing if not m.startswith(("embed_tokens.", "rotary."))]:
            raise SystemExit(
                f"--init-from {args.init_from}: not a head of this shape "
                f"(missing {missing}, unexpected {unexpected})"
            )
    else:
        _init_draft(draft, target, draft_ids)
    draft.to(device)
    training = train(
        draft, target, train_seqs, args=args, layer_ids=layer_ids, rng=random.Random(args.seed)
    )
    before = _earlier_summary(args.init_from).get("steps_total") if args.init_from else None
    training["steps_total"] = training["steps_run"] + int(before or 0)
    draft.eval()
    evaluation = evaluate(
        draft,
        target,
        eval_seqs,
        layer_ids=layer_ids,
        max_steps=args.ttt_length,
        batch_size=args.batch_size,
    )

    validation = (
        evaluate(
            draft,
            target,
            val_seqs,
            layer_ids=layer_ids,
            max_steps=args.ttt_length,
            batch_size=args.batch_size,
        )
        if val_seqs
        else None
    )
    val_by_source = {}
    for source in sorted({s.source for s in val_seqs}):
        part = evaluate(
            draft,
            target,
            [s for s in val_seqs if s.source == source],
            layer_ids=layer_ids,
            max_steps=args.ttt_length,
            batch_size=args.batch_size,
        )
        val_by_source[source] = {
            "prompts": part["prompts"],
            "step_acc": part["step_acc"],
            "accept_length_3_1_4": part["chains"][2]["accept_length"],
        }

    save_dtype = "bfloat16"
    files = save_draft(
        args.out,
        draft.serving_state(torch.bfloat16),
        draft_config(
            json.loads((args.target / "config.json").read_text()),
            draft_vocab=len(draft_ids),
            layer_ids=layer_ids,
            dtype=save_dtype,
        ),
        shard_bytes=int(args.shard_mib * 2**20),
        target=args.target,
    )
    chain_314 = next(c for c in evaluation["chains"] if c["steps"] == 3)
    summary = {
        "target": str(args.target),
        "out": str(args.out),
        "seed": args.seed,
        "device": str(device),
        "torch": torch.__version__,
        "draft_vocab_size": len(draft_ids),
        "init_from": _earlier_summary(args.init_from) if args.init_from else None,
        "aux_layer_ids": layer_ids,
        "train_vocab_coverage": round(_coverage(train_seqs, draft.t2d.cpu()), 4),
        "chat_template": parts is not None,
        "data": {
            "train_seqs": len(train_seqs),
            "val_seqs": len(val_seqs),
            "train_seqs_by_source": dict(Counter(s.source for s in train_seqs)),
            "val_seqs_by_source": dict(Counter(s.source for s in val_seqs)),
            "eval_prompts": len(eval_seqs),
            "gen_len": args.gen_len,
            "eval_len": args.eval_len,
            **data_info,
        },
        "train": {
            "ttt_length": args.ttt_length,
            "batch_size": args.batch_size,
            "lr": args.lr,
            **training,
        },
        "eval": evaluation,
        "accept_length_3_1_4": chain_314["accept_length"],
        "val": validation,
        "val_accept_length_3_1_4": (
            next(c for c in validation["chains"] if c["steps"] == 3)["accept_length"]
            if validation
            else None
        ),
        "val_by_source": val_by_source,
        "files": files,
        "seconds": {
            "load": round(load_s, 1),
            "data": round(data_s, 1),
            "train": training["seconds"],
            "total": round(time.monotonic() - started, 1),
        },
        "sglang_flags": [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            str(args.out),
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ],
    }
    (args.out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    compact = {k: v for k, v in summary.items() if k != "train"}
    compact["train"] = {k: v for k, v in summary["train"].items() if k != "log"}
    compact["train"]["last"] = training["log"][-1] if training["log"] else None
    print(json.dumps(compact, indent=2))
    if args.min_accept_length is not None and chain_314["accept_length"] < args.min_accept_length:
        print(
            f"accept length {chain_314['accept_length']} at (3, 1, 4) is below "
            f"--min-accept-length {args.min_accept_length}",
            file=sys.stderr,
        )
        return 1
    return 0


def load_head(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a head this script saved (one file or shards)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"--init-from {folder}: no safetensors there")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(str(path)))
    return state


def _earlier_summary(folder: Path) -> dict[str, Any]:
    """What the head training continued from: its accept lengths and training so far."""
    try:
        earlier = json.loads((folder / "train_summary.json").read_text())
    except (OSError, ValueError):
        return {"folder": str(folder)}
    train = earlier.get("train", {})
    return {
        "folder": str(folder),
        "seed": earlier.get("seed"),
        "accept_length_3_1_4": earlier.get("accept_length_3_1_4"),
        "val_accept_length_3_1_4": earlier.get("val_accept_length_3_1_4"),
        "steps_run": train.get("steps_run"),
        "steps_total": train.get("steps_total", train.get("steps_run")),
    }


@torch.no_grad()
def _init_draft(draft: EagleDraft, target: Any, draft_ids: torch.Tensor) -> None:
    """Small normal init; `lm_head` and `norm` start as the target's own output head."""
    std = getattr(target.config, "initializer_range", 0.02)
    for module in draft.modules():
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std)
    head = target.get_output_embeddings().weight
    draft.lm_head.weight.copy_(head[draft_ids.to(head.device)].float().cpu())
    final_norm = getattr(getattr(target, "model", None), "norm", None)
    if final_norm is not None and final_norm.weight.shape == draft.norm.weight.shape:
        draft.norm.weight.copy_(final_norm.weight.float().cpu())


if __name__ == "__main__":
    raise SystemExit(main())
