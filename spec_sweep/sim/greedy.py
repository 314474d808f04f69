"""Greedy decoding on the simulated node: which token wins, by how much, and when numerics flip it.

This module owns the simulated node's stand-in for a model's greedy choices, so the output-quality
gate meets what it meets on a real checkpoint (docs/concepts/quality-gate.md). Measured on a real
135M checkpoint (SGLang 0.5.13, one H200): the baseline agreed with itself exactly across boots,
and so did flags that leave the arithmetic alone (`--cuda-graph-max-bs`,
`--mem-fraction-static`), while NGRAM, lossless in exact arithmetic, diverged on 3 of 8 prompts
within 32 tokens: near-ties between the top two tokens that other verify numerics decide the
other way. The rules:

* A greedy path is a function of the prompt: at each position the two leading tokens and the
  margin between their log-probabilities (nats; exponential, mean `MEAN_MARGIN`) are drawn from
  the path's own generator.
* Below `NEAR_TIE` the winner depends on the configuration's numerics: the flags in
  `NUMERICS_DESTS` (speculative decoding and its tree, attention backend, dtypes, quantization,
  parallelism and reductions). Configurations with the same numerics make the same choices, so a
  repeat boot of the same configuration, or a memory or CUDA-graph flag, changes nothing; other
  numerics decide each near-tie independently (half the time the other way). Once a path took
  another token its continuation is another text.
* Lossy numerics (`lossy_numerics`: an fp8 or other quantized KV cache, quantized weights) decide
  every position within `LOSSY_TIE` of a tie by their own rounding, half the time the other way:
  measured on an H100 (SGLang 0.5.13 and 0.5.17, the same checkpoint), fp8 KV caches and fp8
  weights left 0-1 of 16 prompts identical over 64 tokens and took tokens mostly 0.125-0.75
  nats below the baseline's, where lossless configurations took only exact ties and 0.0625-0.25.
* `--sim-corrupt-output` (a kernel bug): from position `corrupt_after` the path is another
  text whatever the margin, so it usually diverges where the model was confident.
* Dummy weights (`--load-format dummy`, `dummy`): the model is random, and its greedy text a
  short loop of tokens (random weights repeat themselves, which is why NGRAM accepts every draft
  token on them, as measured in benchmarks/real/fidelity-0.5.17/): a function of the prompt,
  another text than the real model's from the first token, the same on every dummy boot.
* The log-probabilities the server reports are its own: the token it chose first, the runner-up
  one margin below, then lower ones, as SGLang's `meta_info.output_top_logprobs` lists them.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DUMMY_LOOP",
    "LOSSY_TIE",
    "MEAN_MARGIN",
    "NEAR_TIE",
    "NUMERICS_DESTS",
    "GreedyPath",
    "lossy_numerics",
    "numerics_key",
]

#: The longest loop of tokens a model with dummy (random) weights repeats.
DUMMY_LOOP = 4
#: Mean margin (nats) between the top two tokens of a greedy position.
MEAN_MARGIN = 2.0
#: Below this margin (nats) the configuration's numerics decide which of the two wins.
NEAR_TIE = 0.05
#: Below this margin (nats) lossy numerics (`lossy_numerics`) decide which of the two wins.
LOSSY_TIE = 0.5
#: KV-cache dtypes that keep the model's own precision.
_EXACT_KV = frozenset({None, "", "auto", "bfloat16", "bf16", "float16", "fp16", "float32"})
#: Probability mass of the tokens after the top two.
_REST = 0.2
#: SGLang flags (argparse dests) that change the arithmetic of a forward pass or of verification.
NUMERICS_DESTS = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "speculative_adaptive",
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "sampling_backend",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "tp_size",
    "dp_size",
    "ep_size",
    "moe_a2a_backend",
    "disable_custom_all_reduce",
    "enable_torch_symm_mem",
    "enable_flashinfer_allreduce_fusion",
    "enable_dp_attention",
)
#: Environment variables that change reduction order.
_NUMERICS_ENV = ("NCCL_ALGO", "NCCL_PROTO")


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def numerics_key(server_args: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """A key equal for two configurations exactly when their arithmetic is the same."""
    picked = {dest: server_args.get(dest) for dest in NUMERICS_DESTS}
    picked.update({name: env.get(name) for name in _NUMERICS_ENV})
    return json.dumps(picked, sort_keys=True, default=str)


def lossy_numerics(server_args: Mapping[str, Any]) -> bool:
    """Whether a configuration changes outputs beyond rounding: a quantized KV cache or weights."""
    quantization = server_args.get("quantization")
    kv = server_args.get("kv_cache_dtype")
    return (quantization not in (None, "", "none")) or kv not in _EXACT_KV


@dataclass
class GreedyPath:
    """The greedy continuation of one prompt under one configuration's numerics.

    Args:
        key: The prompt (its text, or its token ids as JSON).
        numerics: `numerics_key` of the configuration.
        vocab: Vocabulary size.
        corrupt_after: Position from which a corrupting configuration goes wrong (None: never).
        lossy: The configuration's numerics are lossy (`lossy_numerics`): ties up to
            `LOSSY_TIE` are its own to decide.
        dummy: The weights are random (`--load-format dummy`): the path is a loop of
            `DUMMY_LOOP` tokens at most, drawn from the prompt.
    """

    key: str
    numerics: str
    vocab: int
    corrupt_after: int | None = None
    lossy: bool = False
    dummy: bool = False
    position: int = 0
    _rng: random.Random = field(init=False)
    _loop: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(_seed(self.key))
        if self.dummy:
            self._rng = random.Random(_seed(f"dummy:{self.key}"))
            period = self._rng.randint(1, DUMMY_LOOP)
            self._loop = [self._rng.randrange(self.vocab) for _ in range(period)]

    def step(self, top_n: int) -> tuple[int, list[tuple[float, int]]]:
        """The next token and the server's top `top_n` (logprob, token id), best first."""
        rng = self._rng
        if self._loop:
            pos = self.position
            chosen = self._loop[pos % len(self._loop)]
            other = (chosen + 1 + rng.randrange(self.vocab - 1)) % self.vocab
            margin = rng.expovariate(1.0 / MEAN_MARGIN)
            self.position += 1
            top = _top(chosen, other, margin, top_n, self.vocab, _seed(f"{self.key}|{pos}"))
            return chosen, top
        first = rng.randrange(self.vocab)
        second = (first + 1 + rng.randrange(self.vocab - 1)) % self.vocab
        margin = rng.expovariate(1.0 / MEAN_MARGIN)
        pos = self.position
        chosen, other = first, second
        if self.corrupt_after is not None and pos >= self.corrupt_after:
            if pos == self.corrupt_after:
                self._rng = random.Random(_seed(f"corrupt:{self.key}"))
            chosen = self._rng.randrange(self.vocab)
            other = first if chosen != first else second
        elif (
            margin < (LOSSY_TIE if self.lossy else NEAR_TIE)
            and _seed(f"{self.numerics}|{self.key}|{pos}") % 2 == 1
        ):
            chosen, other = second, first
            self._rng = random.Random(_seed(f"{self.key}|{pos}|{chosen}"))
        self.position += 1
        return chosen, _top(chosen, other, margin, top_n, self.vocab, _seed(f"{self.key}|{pos}"))


def _top(
    chosen: int, other: int, margin: float, top_n: int, vocab: int, seed: int
) -> list[tuple[float, int]]:
    """The reported top list: chosen, runner-up `margin` nats below, then smaller ones."""
    p1 = (1.0 - _REST) / (1.0 + math.exp(-margin))
    if top_n <= 1:
        return [(math.log(p1), chosen)]
    out = [(math.log(p1), chosen), (math.log(p1) - margin, other)]
    rng = random.Random(seed)
    prob, rest = math.exp(out[-1][0]), _REST  # each further token: below the last, within rest
    seen = {chosen, other}
    while len(out) < top_n and len(seen) < vocab:
        token = rng.randrange(vocab)
        if token in seen:
            continue
        seen.add(token)
        prob = min(prob, rest) * (0.3 + 0.4 * rng.random())
        rest -= prob
        out.append((math.log(prob), token))
    return out[:top_n]
