"""Tests for spec_sweep.manifest: the shipped SGLang flag manifests and the parsers rebuilt."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

import pytest

from spec_sweep.manifest import (
    FlagManifest,
    ManifestError,
    Replacement,
    available_versions,
    is_bundled,
    load_manifest,
    newest_version,
    replacement,
)

NEW = "0.5.23"
OLD = "0.5.13"

VALID_ARGV = [
    "--model-path",
    "m",
    "--tp-size",
    "8",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.88",
    "--cuda-graph-max-bs-decode",
    "128",
    "--moe-a2a-backend",
    "flashinfer",
    "--enable-flashinfer-allreduce-fusion",
    "--disable-custom-all-reduce",
]


@pytest.fixture(scope="module")
def new() -> FlagManifest:
    return load_manifest(NEW)


@pytest.fixture(scope="module")
def old() -> FlagManifest:
    return load_manifest(OLD)


def _exit_code_and_stderr(
    parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[object, str]:
    with pytest.raises(SystemExit) as excinfo:
        parser.parse_args(argv)
    return excinfo.value.code, capsys.readouterr().err


def test_available_versions_lists_shipped_files() -> None:
    versions = available_versions()
    assert NEW in versions
    assert OLD in versions
    assert versions.index(OLD) < versions.index(NEW)


def test_unknown_version_raises_with_available_versions() -> None:
    with pytest.raises(ManifestError, match=r"0\.5\.13.*0\.5\.23"):
        load_manifest("0.0.1")


def test_load_is_cached(new: FlagManifest) -> None:
    assert load_manifest(NEW) is new
    assert new.sglang_version == NEW


def test_manifest_files_are_generated_and_stable() -> None:
    for version in (NEW, OLD):
        text = (
            resources.files("spec_sweep")
            .joinpath("manifests", f"sglang-{version}.json")
            .read_text(encoding="utf-8")
        )
        raw = json.loads(text)
        assert raw["generator"] == "scripts/gen_sglang_manifest.py"
        assert raw["sglang_version"] == version
        assert text == json.dumps(raw, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_new_version_has_split_cuda_graph_max_bs(new: FlagManifest) -> None:
    decode = new.lookup("cuda-graph-max-bs-decode")
    assert decode is not None
    assert decode.type == "int"
    assert decode.takes_value
    assert new.lookup("--cuda-graph-max-bs-prefill") is not None
    assert new.lookup("cuda-graph-max-bs") is None
    assert new.lookup("--cuda-graph-max-bs") is None


def test_suggest_names_extensions_first(new: FlagManifest) -> None:
    hints = new.suggest("cuda-graph-max-bs")
    assert hints[:2] == ["cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill"]
    assert new.suggest("--mem-fraction-statc")[0] == "mem-fraction-static"
    assert new.suggest("mem_fraction_static")[0] == "mem-fraction-static"
    assert new.suggest("") == []


def test_old_version_has_cuda_graph_max_bs(old: FlagManifest) -> None:
    flag = old.lookup("cuda-graph-max-bs")
    assert flag is not None
    assert flag.type == "int"
    assert not flag.deprecated
    assert old.lookup("cuda-graph-max-bs-decode") is None


def test_lookup_is_exact_and_knows_aliases(new: FlagManifest) -> None:
    tp = new.lookup("tensor-parallel-size")
    assert tp is not None
    assert tp.name == "tp-size"
    assert tp.dest == "tp_size"
    assert "--tp-size" in tp.option_strings
    assert new.lookup("mem-fraction") is None  # a prefix is not a flag
    assert new.lookup("mem_fraction_static") is None


def test_choices_are_exposed(new: FlagManifest) -> None:
    a2a = new.lookup("moe-a2a-backend")
    assert a2a is not None
    assert a2a.choices is not None
    assert {"none", "deepep", "flashinfer"} <= set(a2a.choices)
    attention = new.lookup("attention-backend")
    assert attention is not None
    assert attention.choices is not None
    assert "flashinfer" in attention.choices


def test_bare_flags_take_no_value(new: FlagManifest) -> None:
    fusion = new.lookup("enable-flashinfer-allreduce-fusion")
    assert fusion is not None
    assert not fusion.takes_value
    assert fusion.action == "store_true"
    assert fusion.deprecated  # 0.5.23 points to --flashinfer-allreduce-fusion-backend


def test_parser_accepts_a_valid_command_line(new: FlagManifest) -> None:
    args = new.build_parser().parse_args(VALID_ARGV)
    assert args.model_path == "m"
    assert args.tp_size == 8
    assert args.speculative_algorithm == "EAGLE3"
    assert args.speculative_num_steps == 3
    assert args.mem_fraction_static == pytest.approx(0.88)
    assert args.cuda_graph_max_bs_decode == 128
    assert args.enable_flashinfer_allreduce_fusion is True
    assert args.disable_custom_all_reduce is True
    assert args.enable_torch_symm_mem is False


def test_parser_rejects_unknown_flag(new: FlagManifest, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit_code_and_stderr(
        new.build_parser(), ["--model-path", "m", "--no-such-flag", "1"], capsys
    )
    assert code == 2
    assert "error: unrecognized arguments: --no-such-flag" in err
    assert err.startswith("usage: sglang serve")


def test_parser_rejects_invalid_choice(
    new: FlagManifest, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit_code_and_stderr(
        new.build_parser(), ["--model-path", "m", "--moe-a2a-backend", "bogus"], capsys
    )
    assert code == 2
    assert "invalid choice: 'bogus'" in err


def test_parser_rejects_bad_int(new: FlagManifest, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _exit_code_and_stderr(
        new.build_parser(), ["--model-path", "m", "--tp-size", "eight"], capsys
    )
    assert code == 2
    assert "invalid int value: 'eight'" in err


def test_retired_flag_is_ambiguous_like_sglang(
    new: FlagManifest, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _exit_code_and_stderr(
        new.build_parser(), ["--model-path", "m", "--cuda-graph-max-bs", "128"], capsys
    )
    assert code == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in err


def test_old_parser_accepts_cuda_graph_max_bs(old: FlagManifest) -> None:
    args = old.build_parser().parse_args(["--model-path", "m", "--cuda-graph-max-bs", "128"])
    assert args.cuda_graph_max_bs == 128


def test_extra_flags_and_prog(new: FlagManifest) -> None:
    def add_sim_flags(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sim-profile", required=True)

    parser = new.build_parser(prog="sim-sglang", extra=add_sim_flags)
    args = parser.parse_args([*VALID_ARGV, "--sim-profile", "h200"])
    assert args.sim_profile == "h200"
    assert parser.prog == "sim-sglang"


def test_every_flag_round_trips_through_the_parser(new: FlagManifest, old: FlagManifest) -> None:
    for manifest in (new, old):
        parser = manifest.build_parser()
        rebuilt = {o for a in parser._actions for o in a.option_strings}
        recorded = {o for f in manifest.flags for o in f.option_strings}
        assert rebuilt == recorded


# -- renamed flags ----------------------------------------------------------------------------


def test_a_flag_gone_from_a_version_is_replaced_as_an_older_manifest_says() -> None:
    # deprecated from 0.5.14 (an alias of -decode), gone from 0.5.20
    gone = replacement("cuda-graph-max-bs", load_manifest("0.5.23"))
    assert gone == Replacement("cuda-graph-max-bs", "cuda-graph-max-bs-decode", None, "0.5.18")
    deprecated = replacement("cuda-graph-max-bs", load_manifest("0.5.17"))
    assert deprecated is not None
    assert deprecated.new == "cuda-graph-max-bs-decode"
    assert deprecated.source == "0.5.17"
    # the flag itself in 0.5.13
    flag = load_manifest("0.5.13").lookup("cuda-graph-max-bs")
    assert flag is not None
    assert not flag.deprecated


def test_a_bare_flag_that_became_a_value_of_another_carries_the_value() -> None:
    value = replacement("disable-piecewise-cuda-graph", load_manifest("0.5.23"))
    assert value is not None
    assert (value.new, value.value) == ("cuda-graph-backend-prefill", "disabled")


def test_no_replacement_where_sglang_names_no_single_flag() -> None:
    # "Use --cuda-graph-backend-{decode,prefill}=disabled": two flags, no rename
    assert replacement("disable-cuda-graph", load_manifest("0.5.23")) is None
    # "Use --attn-dp-size <dp-size> instead of ...": a bare flag for a valued one
    assert replacement("enable-dp-attention", load_manifest("0.5.23")) is None
    assert replacement("no-such-flag", load_manifest("0.5.23")) is None


def test_manifests_kept_in_a_folder_are_read_after_the_bundled_ones(tmp_path: Path) -> None:
    raw = json.loads(
        resources.files("spec_sweep").joinpath("manifests", "sglang-0.5.17.json").read_text()
    )
    raw["sglang_version"] = "0.5.98"
    (tmp_path / "sglang-0.5.98.json").write_text(json.dumps(raw))
    assert not is_bundled("0.5.98")
    assert load_manifest("0.5.98", folder=tmp_path).sglang_version == "0.5.98"
    with pytest.raises(ManifestError, match="spec-sweep manifest"):
        load_manifest("0.5.98")
    assert newest_version() == available_versions()[-1]
