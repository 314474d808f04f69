"""`scripts/train_test_draft.py`: the draft it writes is what SGLang 0.5.17 loads, and its
training-time test computes what SGLang's chain of draft decodes computes.

The expected checkpoint is read off SGLang 0.5.17's source (`sglang-0.5.17` wheel,
`sglang/srt/models/llama_eagle3.py`, cited by line as `eagle3.py:N`; `models/llama.py` as
`llama.py:N`): `LlamaForCausalLMEagle3.load_weights` silently skips any name it does not know
(eagle3.py:359-367 look a name up and do nothing when it is missing), so the test pins the exact
set of names, their shapes and dtypes, not just their presence. Needs torch, transformers and
safetensors (skipped without them).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "train_test_draft.py"

# The tiny target: Llama, 8 layers so that SGLang's default capture (llama.py:891-892, before
# layers 2, L // 2 and L - 3) names three real layers.
HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 64, 8, 4, 2, 96, 320
HEAD_DIM = HIDDEN // HEADS
DRAFT_VOCAB = 128
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _expected_tensors(draft_vocab: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor SGLang 0.5.17's `LlamaForCausalLMEagle3.load_weights` consumes.

    - `fc.weight` -> `model.fc` (eagle3.py:361 adds `model.`): Linear(hidden * num_aux ->
      hidden), eagle3.py:155-159, num_aux = len(eagle_aux_hidden_state_layer_ids) = 3
      (eagle3.py:148-153).
    - `midlayer.` -> `layers.0.` (legacy map, eagle3.py:327-337). Its q/k/v_proj are stacked into
      `qkv_proj` (eagle3.py:317-324, 347-358) whose input is 2 x hidden for layer 0
      (eagle3.py:54-67): q (heads * head_dim, 2h), k and v (kv_heads * head_dim, 2h); `o_proj`
      (hidden, heads * head_dim) and the two layernorms come from SGLang's `LlamaDecoderLayer`
      (llama.py); `hidden_norm` (eagle3.py:78); the MLP is `LlamaMLP(hidden, intermediate)`
      (eagle3.py:74-76), gate/up stacked into `gate_up_proj` (eagle3.py:322-323).
    - `norm.weight` -> `model.norm` (eagle3.py:197).
    - `lm_head.weight`: ParallelLMHead(draft_vocab_size, hidden) when tie_word_embeddings is
      false (eagle3.py:291-303).
    - `d2t`: int64, hot_token_id = d2t + arange (eagle3.py:339-342); `t2d` is read and skipped
      (eagle3.py:344-345), kept for SpecForge's layout.
    - No `embed_tokens`: the EAGLE-3 worker gives the draft the target's embedding
      (`speculative/eagle_worker_v2.py:290-300` `set_embed`, llama.py:866-878).
    """
    two_h = 2 * HIDDEN
    return {
        "fc.weight": ((HIDDEN, 3 * HIDDEN), "bfloat16"),
        "midlayer.self_attn.q_proj.weight": ((HEADS * HEAD_DIM, two_h), "bfloat16"),
        "midlayer.self_attn.k_proj.weight": ((KV_HEADS * HEAD_DIM, two_h), "bfloat16"),
        "midlayer.self_attn.v_proj.weight": ((KV_HEADS * HEAD_DIM, two_h), "bfloat16"),
        "midlayer.self_attn.o_proj.weight": ((HIDDEN, HEADS * HEAD_DIM), "bfloat16"),
        "midlayer.mlp.gate_proj.weight": ((INTER, HIDDEN), "bfloat16"),
        "midlayer.mlp.up_proj.weight": ((INTER, HIDDEN), "bfloat16"),
        "midlayer.mlp.down_proj.weight": ((HIDDEN, INTER), "bfloat16"),
        "midlayer.input_layernorm.weight": ((HIDDEN,), "bfloat16"),
        "midlayer.hidden_norm.weight": ((HIDDEN,), "bfloat16"),
        "midlayer.post_attention_layernorm.weight": ((HIDDEN,), "bfloat16"),
        "norm.weight": ((HIDDEN,), "bfloat16"),
        "lm_head.weight": ((draft_vocab, HIDDEN), "bfloat16"),
        "d2t": ((draft_vocab,), "int64"),
        "t2d": ((VOCAB,), "bool"),
    }


def _sglang_param_name(name: str) -> str:
    """The parameter a checkpoint name lands in, by eagle3.py:317-367's renaming rules."""
    name = name.replace("midlayer", "layers.0")
    for weight_name, param_name in (
        (".q_proj", ".qkv_proj"),
        (".k_proj", ".qkv_proj"),
        (".v_proj", ".qkv_proj"),
        (".gate_proj", ".gate_up_proj"),
        (".up_proj", ".gate_up_proj"),
    ):
        if weight_name in name:
            name = name.replace(weight_name, param_name)
            break
    return name if name == "lm_head.weight" else f"model.{name}"


#: `dict(LlamaForCausalLMEagle3.named_parameters())` for a one-layer draft with untied head
#: (eagle3.py:136-197 and 281-303); `model.embed_tokens.weight` is filled by `set_embed`.
SGLANG_PARAMS = {
    "model.embed_tokens.weight",
    "model.fc.weight",
    "model.layers.0.self_attn.qkv_proj.weight",
    "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.mlp.gate_up_proj.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.0.input_layernorm.weight",
    "model.layers.0.hidden_norm.weight",
    "model.layers.0.post_attention_layernorm.weight",
    "model.norm.weight",
    "lm_head.weight",
}


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_test_draft", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_test_draft"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _load_script()


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 8-layer Llama (hidden 64) with a byte-level BPE tokenizer and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny-target")
    prompts = ROOT / "spec_sweep" / "data" / "prompts.jsonl"
    corpus = [json.loads(line)["text"] for line in prompts.read_text().splitlines() if line]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    assert backend.get_vocab_size() <= VOCAB
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def _train(script: ModuleType, target: Path, out: Path, *extra: str) -> dict[str, object]:
    argv = [
        "--target", str(target), "--out", str(out), "--device", "cpu",
        "--train-seqs", "6", "--prompt-tokens", "6", "--gen-len", "10", "--eval-len", "12",
        "--max-eval-prompts", "3", "--gen-batch", "4", "--steps", "3", "--batch-size", "3",
        "--ttt-length", "4", "--draft-vocab", str(DRAFT_VOCAB), "--log-every", "1",
        *extra,
    ]  # fmt: skip
    assert script.main(argv) == 0
    return json.loads((out / "train_summary.json").read_text())


@pytest.fixture(scope="module")
def trained(script: ModuleType, tiny_target: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("draft")
    data = out.parent / "draft-data.json"
    summary = _train(script, tiny_target, out, "--data", str(data))
    return out, summary, data


def test_checkpoint_holds_exactly_what_sglang_loads(trained) -> None:
    out, _, _ = trained
    from safetensors import safe_open

    files = sorted(out.glob("*.safetensors"))
    assert [f.name for f in files] == ["model.safetensors"]
    found = {}
    with safe_open(str(files[0]), framework="pt") as handle:
        for name in handle.keys():  # noqa: SIM118 (safe_open has no __iter__)
            tensor = handle.get_tensor(name)
            found[name] = (tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
    assert found == _expected_tensors(DRAFT_VOCAB)
    landed = {_sglang_param_name(n) for n in found if n not in ("d2t", "t2d")}
    assert landed == SGLANG_PARAMS - {"model.embed_tokens.weight"}


def test_vocab_maps_are_consistent(trained) -> None:
    out, summary, _ = trained
    state = safetensors_torch.load_file(str(out / "model.safetensors"))
    hot = state["d2t"] + torch.arange(DRAFT_VOCAB)  # SGLang's hot_token_id (eagle3.py:341)
    assert torch.all(hot[1:] > hot[:-1])
    assert int(hot.min()) >= 0
    assert int(hot.max()) < VOCAB
    assert int(state["t2d"].sum()) == DRAFT_VOCAB
    assert bool(state["t2d"][hot].all())
    assert summary["draft_vocab_size"] == DRAFT_VOCAB


def test_config_describes_the_draft_for_sglang(trained, tiny_target: Path, script) -> None:
    from transformers import AutoConfig

    out, _, _ = trained
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]  # EntryClass, eagle3.py:376
    assert config["num_hidden_layers"] == 1  # one layer, the input layer (eagle3.py:55, 190)
    assert config["tie_word_embeddings"] is False  # else lm_head = embed_tokens (eagle3.py:292)
    assert config["draft_vocab_size"] == DRAFT_VOCAB  # eagle3.py:295-309
    assert config["vocab_size"] == VOCAB  # the target's embedding is shared (set_embed)
    assert config["hidden_size"] == HIDDEN
    assert config["intermediate_size"] == INTER
    ids = config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # SGLang captures before layer id + 1 (llama.py:894-897); the default is 2, L // 2, L - 3
    # (llama.py:891-892): written explicitly, the same three layers.
    assert [i + 1 for i in ids] == [2, LAYERS // 2, LAYERS - 3]
    assert script.default_layer_ids(30) == [1, 14, 26]
    assert "quantization_config" not in config
    target = json.loads((tiny_target / "config.json").read_text())
    assert config.get("rope_parameters") == target.get("rope_parameters")
    loaded = AutoConfig.from_pretrained(out)
    assert loaded.draft_vocab_size == DRAFT_VOCAB
    assert loaded.eagle_config["eagle_aux_hidden_state_layer_ids"] == ids


def test_summary_reports_chains_on_held_out_prompts(trained) -> None:
    _, summary, data = trained
    chains = summary["eval"]["chains"]
    assert [(c["steps"], c["topk"], c["draft_tokens"]) for c in chains] == [
        (s, 1, s + 1) for s in range(1, 5)
    ]
    assert all(1.0 <= c["accept_length"] <= c["draft_tokens"] for c in chains)
    assert summary["accept_length_3_1_4"] == chains[2]["accept_length"]
    assert summary["eval"]["prompts"] == 3
    cached = json.loads(data.read_text())
    builtin = ROOT / "spec_sweep" / "data" / "prompts.jsonl"
    held_out = {json.loads(line)["text"] for line in builtin.read_text().splitlines() if line}
    assert not held_out & set(summary["data"]["train_prompt_examples"])
    assert len(cached["train"]) == 6
    assert len(cached["eval"]) == 3


def test_cached_data_gives_the_same_draft_and_shards_stay_under_the_limit(
    script, tiny_target: Path, trained, tmp_path: Path
) -> None:
    _, first, data = trained
    out = tmp_path / "sharded"
    summary = _train(script, tiny_target, out, "--data", str(data), "--shard-mib", "0.02")
    assert summary["data"]["train_tokens"] == first["data"]["train_tokens"]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1
    assert set(index["weight_map"].values()) == {s.name for s in shards}
    assert set(index["weight_map"]) == set(_expected_tensors(DRAFT_VOCAB))
    merged = {}
    for shard in shards:
        tensors = safetensors_torch.load_file(str(shard))
        assert all(index["weight_map"][n] == shard.name for n in tensors)
        if len(tensors) > 1:
            assert shard.stat().st_size <= 0.02 * 2**20 + 4096
        merged.update(tensors)
    # seeded: the same seed and data give the same draft, generated or read from the cache
    fresh = safetensors_torch.load_file(str(trained[0] / "model.safetensors"))
    assert merged.keys() == fresh.keys()
    assert all(torch.equal(merged[n], fresh[n]) for n in fresh)


def _serving_logits(draft, aux, ids, *, t: int, k: int):
    """Draft step k's logits at position t, computed as SGLang's draft decodes do.

    Draft extend over the verified prefix: positions 0..t, target features, tokens 1..t+1, the
    draft's KV cache filled from them. Then k decodes, one token each, at positions t+1..t+k,
    each fed the previous step's pre-norm hidden state (eagle3.py:258-260) and attending to the
    prefix cache plus the earlier decodes' keys.
    """
    attn = draft.midlayer.self_attn
    keys, values = [], []

    def run(hidden, token_ids, positions):
        layer = draft.midlayer
        embeds = draft.embed_tokens(token_ids)
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        cos, sin = draft.rotary(hidden, positions[None])
        q = attn.q_proj(x).view(-1, attn.heads, attn.head_dim).transpose(0, 1)
        key = attn.k_proj(x).view(-1, attn.kv_heads, attn.head_dim).transpose(0, 1)
        value = attn.v_proj(x).view(-1, attn.kv_heads, attn.head_dim).transpose(0, 1)
        q = _rope(q, cos[0], sin[0])
        key = _rope(key, cos[0], sin[0])
        groups = attn.heads // attn.kv_heads
        keys.append(key.repeat_interleave(groups, 0))
        values.append(value.repeat_interleave(groups, 0))
        all_k, all_v = torch.cat(keys, dim=1), torch.cat(values, dim=1)
        n_new, n_all = q.shape[1], all_k.shape[1]
        scores = q @ all_k.transpose(-1, -2) / attn.head_dim**0.5
        query_pos = torch.arange(n_all - n_new, n_all)[:, None]
        scores = scores.masked_fill(torch.arange(n_all)[None, :] > query_pos, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ all_v).transpose(0, 1).reshape(n_new, -1)
        hidden = hidden + attn.o_proj(out)
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    hidden = run(draft.project(aux[0, : t + 1]), ids[0, 1 : t + 2], torch.arange(t + 1))
    hidden = hidden[-1:]
    for j in range(1, k + 1):
        hidden = run(hidden, ids[0, t + 1 + j : t + 2 + j], torch.tensor([t + j]))
    return draft.logits(hidden)[0]


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[None] + rotated * sin[None]


def test_training_time_test_matches_serving_decodes(script) -> None:
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(1)
    draft = script.EagleDraft(
        config,
        embed=torch.randn(VOCAB, HIDDEN),
        draft_ids=torch.arange(0, VOCAB, 3),
        num_aux=3,
    )
    for p in draft.parameters():
        if p.requires_grad:
            p.data.normal_(0, 0.2)
    length, steps = 12, 4
    ids = torch.randint(0, VOCAB, (1, length + steps + 1))
    aux = torch.randn(1, length, 3 * HIDDEN)
    batch = script.Batch(aux, ids, None, None, None, None)
    with torch.no_grad():
        unrolled = [logits for _, logits, _ in script.unroll(draft, batch, length=steps)]
        for t in (0, 5, length - 1):
            for k in range(steps):
                expected = _serving_logits(draft, aux, ids, t=t, k=k)
                torch.testing.assert_close(unrolled[k][0, t], expected, rtol=1e-4, atol=1e-4)


def test_chain_simulation_counts_rounds_like_the_server(script) -> None:
    # prompt of 3 tokens, 8 response tokens (indices 3..10); the prefill yields token 3.
    hits = torch.zeros(12, 3, dtype=torch.bool)
    hits[2] = torch.tensor([True, True, False])  # after token 3: accept 2 (+1 bonus) -> 6
    hits[5] = torch.tensor([True, True, True])  # after token 6: accept 3 (+1) -> 10
    rounds = script._simulate_chain(hits, prompt_len=3, length=11, steps=3)
    assert rounds == [3, 4]
    # a 1-step chain accepts at most one draft per round
    assert script._simulate_chain(hits, prompt_len=3, length=11, steps=1) == [2, 1, 2, 1, 1]


def test_training_prompts_mix_templated_and_self_generated(trained) -> None:
    _, summary, data = trained
    info = summary["data"]
    # --prompt-mix 0.5 (the default) of 6: 3 templated, 3 self-generated, in the cache too
    assert info["prompt_mix"] == 0.5
    assert info["train_prompts_by_source"] == {"templated": 3, "self": 3}
    sources = [s["source"] for s in json.loads(data.read_text())["train"]]
    assert sorted(sources) == ["self"] * 3 + ["templated"] * 3
    assert len(info["templated_prompt_examples"]) == 3
    assert info["templated_prompt_set"]["dropped_eval_topic"] > 0
    held = sum(info["val_seqs_by_source"].values())
    assert held == info["val_seqs"]
    assert set(summary["val_by_source"]) == set(info["val_seqs_by_source"])


def test_validation_holds_each_source_in_proportion(script) -> None:
    # a quarter templated, all made last: the held-out set still holds a quarter of them
    seqs = [script.TokenSequence([i], 1, "templated" if i >= 30 else "self") for i in range(40)]
    held, rest = script.split_validation(seqs, 8)
    assert [s.ids[0] for s in held] == [0, 1, 2, 3, 4, 5, 30, 31]
    assert sorted(s.ids[0] for s in held + rest) == list(range(40))
    # one source only: the first ones, as before the mix; always one left to train on
    plain = [script.TokenSequence([i], 1) for i in range(5)]
    assert script.split_validation(plain, 256) == (plain[:4], plain[4:])
    assert script.split_validation(plain, 0) == ([], plain)
