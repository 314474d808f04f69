"""The real-GPU session's scripts, on CPU: checkpoint conversion, quality probe, spec rendering.

`scripts/make_real_model.py` (its numpy parts: q/k un-permutation, bf16 rounding, the safetensors
writer, tensor names), `scripts/real_quality.py` (flag merging, per-version configurations, the
first divergence) and `tests/real/real_harness.py`'s `render_spec` (every rendered spec passes
`spec-sweep validate`'s checks against its SGLang version's manifest).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from harness import load_script

from spec_sweep.spec_load import load_spec

ROOT = Path(__file__).resolve().parents[2]


mrm = load_script(ROOT / "scripts" / "make_real_model.py", "make_real_model")
rq = load_script(ROOT / "scripts" / "real_quality.py", "real_quality")
sys.path.insert(0, str(ROOT / "tests" / "real"))
harness = load_script(ROOT / "tests" / "real" / "real_harness.py", "real_harness_for_unit")


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py `permute` (the operation being undone)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


@pytest.mark.parametrize("heads", [9, 3])
def test_unpermute_undoes_llama_cpp_permute(heads: int) -> None:
    w = np.arange(heads * 64 * 5, dtype=np.float32).reshape(heads * 64, 5)
    assert np.array_equal(mrm.unpermute_rotary(_llama_cpp_permute(w, heads), heads), w)


def test_bf16_rounds_to_nearest_even() -> None:
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e-3], dtype=np.float32)
    got = np.frombuffer(mrm.to_dtype_bytes(values, "bfloat16"), dtype="<u2")
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    widened = (got.astype(np.uint32) << 16).view(np.float32)
    assert list(widened[:3]) == [1.0, 1.0, 1.015625]
    assert widened[3] == -2.5
    assert abs(widened[4] - 3.0e-3) < 3.0e-3 / 128
    fp16 = np.frombuffer(mrm.to_dtype_bytes(values, "float16"), dtype="<f2")
    assert np.array_equal(fp16, values.astype(np.float16))


def test_non_finite_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        mrm.to_dtype_bytes(np.array([np.nan], dtype=np.float32), "bfloat16")


def test_safetensors_writer_layout(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensors = {
        "b.weight": ("F16", [2, 3], a.astype("<f2").tobytes()),
        "a.weight": ("BF16", [3], mrm.to_dtype_bytes(np.ones(3, np.float32), "bfloat16")),
    }
    path = tmp_path / "m.safetensors"
    mrm.write_safetensors(path, tensors)
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    assert size % 8 == 0
    header = json.loads(raw[8 : 8 + size])
    assert header["__metadata__"] == {"format": "pt"}
    assert header["a.weight"]["data_offsets"] == [0, 6]
    assert header["b.weight"]["data_offsets"] == [6, 18]
    body = raw[8 + size :]
    assert np.array_equal(np.frombuffer(body[6:18], "<f2").reshape(2, 3), a.astype(np.float16))
    mrm.write_safetensors(tmp_path / "again.safetensors", dict(reversed(tensors.items())))
    assert (tmp_path / "again.safetensors").read_bytes() == raw  # order-independent bytes


def test_tensor_names() -> None:
    assert mrm.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert mrm.hf_name("blk.29.ffn_down.weight") == "model.layers.29.mlp.down_proj.weight"
    assert mrm.hf_name("blk.0.attn_k.weight") == "model.layers.0.self_attn.k_proj.weight"
    with pytest.raises(ValueError, match="unexpected tensor"):
        mrm.hf_name("blk.0.ssm_a")


def test_expected_checksums_cover_every_file_of_both_dtypes() -> None:
    files = {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert set(mrm.EXPECTED) == {"bfloat16", "float16"}
    for sums in mrm.EXPECTED.values():
        assert set(sums) == files
        assert all(len(d) == 64 for d in sums.values())


def test_split_parts_join_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = tmp_path / mrm.GGUF_NAME
    blob.write_bytes(bytes(range(256)) * 9000)
    digest = mrm.sha256_file(blob)
    monkeypatch.setattr(mrm, "GGUF_SHA256", digest)
    parts = mrm.split_gguf(blob, tmp_path / "parts", part_mb=1)
    assert len(parts) == 3
    work = tmp_path / "work"
    work.mkdir()
    assert mrm.find_gguf(tmp_path / "parts", work).read_bytes() == blob.read_bytes()
    parts[1].write_bytes(b"corrupt")
    with pytest.raises(SystemExit, match="checksum differs"):
        mrm.find_gguf(tmp_path / "parts", work)


def test_quality_flags_follow_the_version() -> None:
    model = Path("/m/smollm2-135m")
    old, new = rq.configs("0.5.13", model), rq.configs("0.5.17", model)
    assert old["cgbs-8"] == ["--cuda-graph-max-bs", "8"]
    assert new["cgbs-8"] == ["--cuda-graph-max-bs-decode", "8"]
    assert old["no-decode-graph"] == ["--disable-cuda-graph"]
    assert "--disable-piecewise-cuda-graph" in rq.common_flags("0.5.13", model)
    assert "--cuda-graph-backend-prefill" in rq.common_flags("0.5.17", model)
    assert "/m/smollm2-135m-eagle3" in new["eagle3-s3-k1-d4"]
    assert len(new) >= 10
    assert sum(n.startswith("base-") for n in new) == 3


def test_merge_replaces_named_flags_only() -> None:
    common = ["--model-path", "m", "--attention-backend", "triton", "--skip-server-warmup"]
    merged = rq._merge(common, ["--attention-backend", "torch_native", "--x"])
    assert merged == ["--model-path", "m", "--skip-server-warmup", "--attention-backend",
                      "torch_native", "--x"]  # fmt: skip


def test_first_divergence_reports_the_reference_margin() -> None:
    tops = [[[-0.1, 5], [-3.0, 6]], [[-0.7, 7], [-0.8, 8]]]
    ref = {"output_ids": [5, 7, 9], "output_top_logprobs": tops}
    assert rq.first_divergence(ref, {"output_ids": [5, 7, 9]}) == (None, None, None)
    pos, margin, top1 = rq.first_divergence(ref, {"output_ids": [5, 8, 1]})
    assert (pos, top1) == (1, -0.7)
    assert margin == pytest.approx(0.1)


@pytest.mark.parametrize("version", ["0.5.13", "0.5.17"])
@pytest.mark.parametrize("kind", ["smollm2", "dummy"])
@pytest.mark.parametrize("template", ["tests/real/matrix.yaml", "sweeps/real_h200_smollm2.yaml"])
def test_rendered_specs_pass_the_manifest_of_their_version(
    version: str, kind: str, template: str, tmp_path: Path
) -> None:
    out = harness.render_spec(
        ROOT / template, tmp_path / "spec.yaml", version=version, kind=kind,
        budget={"trials": 2, "confirm": 0, "remeasure_baseline": False},
    )  # fmt: skip
    spec = load_spec(out)
    assert spec.node.sglang_version == version
    params = set(spec.params)
    key = "cuda-graph-max-bs-decode" if version == "0.5.17" else "cuda-graph-max-bs"
    assert key in params
    args = spec.node.server_args
    if kind == "smollm2":
        assert "load-format" not in args
        assert ("cuda-graph-backend-prefill" in args) == (version == "0.5.17")
    else:
        assert args["load-format"] == "dummy"


@pytest.mark.parametrize("version", ["0.5.13", "0.5.17"])
def test_the_real_adaptive_spec_renders_for_its_versions(version: str, tmp_path: Path) -> None:
    """tests/real/adaptive.yaml: three levels with a mix, top-k 1 fixed, graphs up to 32."""
    out = harness.render_spec(
        ROOT / "tests/real/adaptive.yaml", tmp_path / "spec.yaml", version=version, kind="smollm2"
    )
    spec = load_spec(out)
    assert spec.workload.concurrency == (1, 8, 32)
    assert spec.workload.mix_weights == {1: 0.2, 8: 0.5, 32: 0.3}
    key = "cuda-graph-max-bs-decode" if version == "0.5.17" else "cuda-graph-max-bs"
    assert spec.node.server_args[key] == 32
    assert spec.node.server_args["speculative-eagle-topk"] == 1
