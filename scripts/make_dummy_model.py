"""Make a model folder that SGLang can serve with `--load-format dummy`: no weights to download.

SGLang's dummy load format builds the model from `config.json` and fills every parameter with
random values, so a trial exercises the real engine (kernels, CUDA graphs, memory pool,
speculative workers, NCCL) without a checkpoint. The folder still needs a tokenizer: this
script trains a small byte-level BPE tokenizer on the prompts shipped with spec_sweep (and any
text files given), and sets the model's vocabulary to exactly the tokenizer's size, so every id
the random model emits decodes. Usage::

    python scripts/make_dummy_model.py .models/llama-1b            # target (Llama, ~1.1B)
    python scripts/make_dummy_model.py .models/llama-1b --eagle3   # also .models/llama-1b-eagle3

`--eagle3` writes a one-layer EAGLE-3 draft (`LlamaForCausalLMEagle3`) beside the target, sharing
its tokenizer and hidden size, with `draft_vocab_size` equal to the vocabulary (no hot-token map,
which a dummy checkpoint could not fill). Sizes are flags: `--layers`, `--hidden`, `--heads`.

Needs the `tokenizers` package (part of the GPU bundle and of any transformers install).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "spec_sweep" / "data" / "prompts.jsonl"
SPECIALS = ["<unk>", "<s>", "</s>"]


def _corpus(extra: list[Path]) -> list[str]:
    texts = [json.loads(line)["text"] for line in PROMPTS.read_text().splitlines() if line]
    for path in extra:
        texts += path.read_text().splitlines()
    # Repeat with light variation so merges have counts to learn from.
    return [f"{t} {i}" for i in range(20) for t in texts]


def train_tokenizer(out: Path, *, vocab_size: int, extra: list[Path]) -> int:
    """Train and save `tokenizer.json` + `tokenizer_config.json`; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(extra), trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 4096,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=2)
    )
    return int(tokenizer.get_vocab_size())


def llama_config(
    *, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int
) -> dict[str, object]:
    """A Llama config SGLang's `LlamaForCausalLM` serves."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": hidden * 11 // 4,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="model folder to create")
    parser.add_argument("--vocab", type=int, default=8192, help="tokenizer vocabulary (at most)")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--eagle3", action="store_true", help="also write an EAGLE-3 draft")
    parser.add_argument("--text", type=Path, action="append", default=[], help="extra corpus")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(args.out, vocab_size=args.vocab, extra=args.text)
    config = llama_config(
        vocab=vocab, hidden=args.hidden, layers=args.layers, heads=args.heads,
        kv_heads=args.kv_heads,
    )  # fmt: skip
    (args.out / "config.json").write_text(json.dumps(config, indent=2))
    (args.out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=2)
    )
    print(f"{args.out}: Llama, {args.layers} layers, hidden {args.hidden}, vocabulary {vocab}")
    if args.eagle3:
        draft = args.out.with_name(args.out.name + "-eagle3")
        draft.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            (draft / name).write_text((args.out / name).read_text())
        eagle = dict(config, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1)
        eagle["draft_vocab_size"] = vocab
        (draft / "config.json").write_text(json.dumps(eagle, indent=2))
        print(f"{draft}: EAGLE-3 draft, 1 layer, draft vocabulary {vocab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
