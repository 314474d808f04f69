"""Text prompts through the model's chat template (workload.chat_template), as production does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import make_spec, write_spec

from spec_sweep.errors import SpecError
from spec_sweep.node.prompts import find_chat_template, load_prompts
from spec_sweep.spec import WorkloadSpec
from spec_sweep.spec_load import load_spec

# SmolLM2-135M-Instruct's template (its GGUF metadata / tokenizer_config.json).
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _model(tmp_path: Path, template: str | None = SMOLLM2, *, jinja_file: bool = False) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    config: dict[str, object] = {
        "bos_token": "<|im_start|>",
        "eos_token": {"content": "<|im_end|>"},
    }
    if template is not None and not jinja_file:
        config["chat_template"] = template
    if template is not None and jinja_file:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _texts(tmp_path: Path, model: Path | str, chat: object) -> tuple[list[str], str]:
    workload = WorkloadSpec(dataset="builtin", num_prompts=4, chat_template=chat)  # type: ignore[arg-type]
    prompts, source = load_prompts(workload, model_path=str(model))
    return [p for p in prompts if isinstance(p, str)], source


@pytest.mark.parametrize("jinja_file", [False, True])
def test_auto_applies_the_models_template_like_hugging_face(
    tmp_path: Path, jinja_file: bool
) -> None:
    model = _model(tmp_path, jinja_file=jinja_file)
    raw, _ = _texts(tmp_path, model, False)
    chat, source = _texts(tmp_path, model, "auto")
    assert len(chat) == len(raw)
    for text, prompt in zip(raw, chat, strict=True):
        assert prompt == (
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            f"Face<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        )
    name = "chat_template.jinja" if jinja_file else "tokenizer_config.json"
    assert source.endswith(f"chat template of {model / name}")


def test_special_tokens_reach_the_template(tmp_path: Path) -> None:
    model = _model(tmp_path, "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}")
    template = find_chat_template(str(model))
    assert template is not None
    assert template.render("hi") == "<|im_start|>hi<|im_end|>"


def test_auto_without_a_template_sends_raw_text_and_says_so(tmp_path: Path) -> None:
    for model in (_model(tmp_path, None), "moonshotai/Kimi-K2.5", ""):
        prompts, source = _texts(tmp_path, model, "auto")
        assert not any(p.startswith("<|im_start|>") for p in prompts)
        assert source.endswith("raw text (no chat template found in the model folder)")


def test_false_sends_raw_text_even_with_a_template(tmp_path: Path) -> None:
    _, source = _texts(tmp_path, _model(tmp_path), False)
    assert source.endswith("raw text (chat_template: false)")


def test_required_template_missing_is_a_spec_error_before_anything_launches(
    tmp_path: Path,
) -> None:
    model = _model(tmp_path, None)
    path = write_spec(tmp_path, node={"model": str(model)}, workload={"chat_template": True})
    with pytest.raises(SpecError) as err:
        load_spec(path)
    message = str(err.value)
    assert message.startswith(f"{path}: workload.chat_template: true, but ")
    assert "set chat_template: false" in message
    assert "\n" not in message
    ok = make_spec(
        tmp_path, node={"model": str(_model(tmp_path))}, workload={"chat_template": True}
    )
    assert ok.workload.chat_template is True


def test_random_token_prompts_are_never_templated(tmp_path: Path) -> None:
    workload = WorkloadSpec(dataset="random", input_len=8, num_prompts=2, chat_template=True)
    prompts, source = load_prompts(workload, model_path=str(_model(tmp_path)))
    assert all(isinstance(p, list) for p in prompts)
    assert source.startswith("random ids")
