"""Rendering a configuration into the server's command line (node.command)."""

from __future__ import annotations

from pathlib import Path

from spec_sweep.core.config import resolve_config
from spec_sweep.node.command import build_command
from spec_sweep.spec_load import load_spec

ROOT = Path(__file__).resolve().parents[2]


def test_draft_model_only_for_algorithms_that_draft_with_a_model() -> None:
    spec = load_spec(ROOT / "tests" / "real" / "matrix.yaml")
    ngram = resolve_config(
        spec, {"speculative-algorithm": "NGRAM", "speculative-num-draft-tokens": 4}, what="test"
    )
    argv = build_command(spec, ngram, port=20000, host="127.0.0.1").argv
    assert "--speculative-draft-model-path" not in argv
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"
    eagle = resolve_config(spec, {"speculative-algorithm": "EAGLE3"}, what="test")
    argv = build_command(spec, eagle, port=20000, host="127.0.0.1").argv
    assert argv[argv.index("--speculative-draft-model-path") + 1] == spec.node.draft_model
    baseline = resolve_config(spec, dict(spec.baseline), what="test")
    assert "--speculative-draft-model-path" not in build_command(spec, baseline, port=1).argv


def test_a_searched_draft_model_is_the_trials_own() -> None:
    spec = load_spec(ROOT / "tests" / "real" / "matrix.yaml")
    node = spec.node.model_copy(update={"draft_model": ("/m/a", "/m/b")})
    spec = spec.model_copy(update={"node": node})
    second = resolve_config(
        spec,
        {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/m/b"},
        what="test",
    )
    argv = build_command(spec, second, port=20000).argv
    assert argv.count("--speculative-draft-model-path") == 1
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/m/b"
    first = resolve_config(spec, {"speculative-algorithm": "EAGLE3"}, what="test")
    assert first["speculative-draft-model-path"] == "/m/a"  # the default: the first listed
    argv = build_command(spec, first, port=20000).argv
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/m/a"
    baseline = resolve_config(spec, dict(spec.baseline), what="test")
    assert "speculative-draft-model-path" not in baseline
    assert "--speculative-draft-model-path" not in build_command(spec, baseline, port=1).argv


def test_local_model_paths_are_relative_to_the_spec(tmp_path: Path) -> None:
    # A trial's server runs in a Ray worker's folder: a relative model path must not depend on
    # the folder the user ran the command from (seen on a real GPU: every trial failed to load).
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    text = (ROOT / "sweeps" / "real_h200.yaml").read_text()
    (sweeps / "s.yaml").write_text(text)
    spec = load_spec(sweeps / "s.yaml")
    assert spec.node.model == str((tmp_path / ".models" / "llama-1b").resolve())
    assert spec.node.draft_model == str((tmp_path / ".models" / "llama-1b-eagle3").resolve())
    hub = load_spec(ROOT / "sweeps" / "eagle3_h200.yaml")
    assert hub.node.model == "deepseek-ai/DeepSeek-V3"  # a hub id is left alone
