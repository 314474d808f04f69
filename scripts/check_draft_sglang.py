"""Load a draft folder with SGLang's own `LlamaForCausalLMEagle3` and check every weight landed.

SGLang's `load_weights` skips names it does not know without a word, so a draft with a wrong
name boots and accepts nothing. This builds SGLang's EAGLE-3 model class from the draft's
`config.json` (one process, TP 1, gloo, no GPU needed), fills every parameter with NaN, feeds it
the draft's safetensors through `load_weights`, and checks that each parameter equals the
checkpoint (q/k/v stacked into `qkv_proj`, gate/up into `gate_up_proj`) and that
`hot_token_id == d2t + arange`. Only `model.embed_tokens.weight` may stay unset: SGLang gives an
EAGLE-3 draft the target's embedding (`set_embed`). Prints a JSON verdict; exit 1 on a miss.

    PYTHONPATH=<folder with sglang> python scripts/check_draft_sglang.py \\
        --target .models/smollm2-135m --draft .models/smollm2-135m-eagle3

On a machine without SGLang's CUDA kernels (a CPU box with the wheel unpacked), pass `--cpu`:
it stands in for torchvision (whose CUDA build cannot load there; SGLang imports it for
multimodal code only), skips transformers' image-processor registrations and selects SGLang's
torch-native RoPE. Checked with SGLang 0.5.17 and transformers 5.12.1 (its pin).
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path
from typing import Any


def _cpu_workarounds() -> None:
    """Let SGLang's model modules import on a CPU machine without torchvision/vllm kernels."""
    import transformers
    import transformers.models.llama.modeling_llama  # resolved before the stand-in

    class _Anything:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def __call__(self, *args: object, **kwargs: object) -> _Anything:
            return _Anything()

        def __getattr__(self, name: str) -> _Anything:
            return _Anything()

        def __mro_entries__(self, bases: tuple[type, ...]) -> tuple[type, ...]:
            return (object,)

    class _StubModule(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return _Anything()

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name: str, path: object, target: object = None) -> Any:
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            module = _StubModule(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module: types.ModuleType) -> None:
            return None

    sys.meta_path.insert(0, _Finder())

    class _NoProcessors:
        @staticmethod
        def register(*args: object, **kwargs: object) -> None:
            return None

    for name in ("AutoImageProcessor", "AutoVideoProcessor", "AutoProcessor"):
        setattr(transformers, name, _NoProcessors)


def check(target: Path, draft: Path, *, cpu: bool, port: int) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    if cpu:
        _cpu_workarounds()
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(
        model_path=str(target),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        device="cpu" if cpu else "cuda",
    )
    get_context().set_server_args(args)
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    initialize_model_parallel(1, 1)
    if cpu:
        import sglang.srt.layers.rotary_embedding.base as rope_base

        rope_base._is_cpu = True
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

    model = LlamaForCausalLMEagle3(AutoConfig.from_pretrained(draft))
    params = dict(model.named_parameters())
    for param in params.values():
        param.data.fill_(float("nan"))
    state: dict[str, torch.Tensor] = {}
    for path in sorted(draft.glob("*.safetensors")):
        state.update(load_file(str(path)))
    model.load_weights(iter(state.items()))

    missing: list[str] = []

    def cat(*names: str) -> torch.Tensor | None:
        absent = [n for n in names if n not in state]
        missing.extend(absent)
        return None if absent else torch.cat([state[n].float() for n in names])

    layer = "midlayer."
    expected = {
        "model.fc.weight": cat("fc.weight"),
        "model.layers.0.self_attn.qkv_proj.weight": cat(
            *(f"{layer}self_attn.{p}_proj.weight" for p in "qkv")
        ),
        "model.layers.0.self_attn.o_proj.weight": cat(f"{layer}self_attn.o_proj.weight"),
        "model.layers.0.mlp.gate_up_proj.weight": cat(
            f"{layer}mlp.gate_proj.weight", f"{layer}mlp.up_proj.weight"
        ),
        "model.layers.0.mlp.down_proj.weight": cat(f"{layer}mlp.down_proj.weight"),
        "model.layers.0.input_layernorm.weight": cat(f"{layer}input_layernorm.weight"),
        "model.layers.0.hidden_norm.weight": cat(f"{layer}hidden_norm.weight"),
        "model.layers.0.post_attention_layernorm.weight": cat(
            f"{layer}post_attention_layernorm.weight"
        ),
        "model.norm.weight": cat("norm.weight"),
        "lm_head.weight": cat("lm_head.weight"),
    }
    problems = [f"{name}: not in the checkpoint" for name in missing]
    for name, param in params.items():
        if name == "model.embed_tokens.weight":
            continue
        if name not in expected:
            problems.append(f"{name}: SGLang parameter with no expected checkpoint tensor")
        elif expected[name] is None or not torch.equal(param.detach().float(), expected[name]):
            problems.append(f"{name}: not filled from the checkpoint")
    d2t = state.get("d2t", torch.zeros(0, dtype=torch.long))
    hot = d2t + torch.arange(len(d2t))
    if model.hot_token_id is None or not torch.equal(model.hot_token_id, hot):
        problems.append("hot_token_id is not d2t + arange")
    if model.lm_head is model.model.embed_tokens:
        problems.append("lm_head is the embedding: tie_word_embeddings must be false")
    return {
        "sglang_params": {n: list(p.shape) for n, p in params.items()},
        "checked": sorted(expected),
        "num_aux_hidden_states": model.model.num_aux_hidden_states,
        "draft_vocab": int(model.lm_head.weight.shape[0]),
        "problems": problems,
        "ok": not problems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", type=Path, required=True, help="the target model folder")
    parser.add_argument("--draft", type=Path, required=True, help="the draft folder to check")
    parser.add_argument("--cpu", action="store_true", help="CPU machine workarounds (see top)")
    parser.add_argument("--port", type=int, default=29517, help="local port for gloo's rendezvous")
    args = parser.parse_args(argv)
    verdict = check(args.target, args.draft, cpu=args.cpu, port=args.port)
    print(json.dumps(verdict, indent=2))
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
