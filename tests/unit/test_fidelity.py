"""Unit tests of `node.fidelity`: the flags of a dummy-weight boot and what its result keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import make_spec

from spec_sweep.errors import SpecError
from spec_sweep.manifest import load_manifest, manifest_from_text
from spec_sweep.node.command import build_command
from spec_sweep.node.fidelity import dummy_metrics, dummy_weights_spec, speculative

PLAIN: dict[str, Any] = {"speculative-algorithm": None}
EAGLE: dict[str, Any] = {
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
}
LOAD_FORMAT_PARAM = {"choices": ["auto", "dummy"], "default": "auto"}
NGRAM_SPACE = {
    "params": {"speculative-algorithm": {"choices": [None, "NGRAM"]}},
    "include": [],
}


def _manifest_without(version: str, *names: str) -> Any:
    """The bundled manifest of `version` less the flags `names` (an SGLang that lacks them)."""
    data = json.loads(
        (Path(__file__).parents[2] / f"spec_sweep/manifests/sglang-{version}.json").read_text()
    )
    data["sglang_version"] = f"{version}-less"
    data["flags"] = [
        f for f in data["flags"] if not any(f"--{n}" in f["option_strings"] for n in names)
    ]
    return manifest_from_text(json.dumps(data))


def test_plain_configuration_gets_the_target_flag_only(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    dummy = dummy_weights_spec(spec, PLAIN, manifest=load_manifest("0.5.13"))
    argv = build_command(dummy, PLAIN).argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert "--speculative-draft-load-format" not in argv
    assert dummy.quality is None
    assert dict(spec.node.server_args) == {"tp-size": 8}  # the spec itself is unchanged


def test_draft_model_configuration_gets_both_flags(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, quality={"num_prompts": 4})
    dummy = dummy_weights_spec(spec, EAGLE, manifest=load_manifest("0.5.13"))
    argv = build_command(dummy, EAGLE).argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--speculative-draft-load-format") + 1] == "dummy"
    assert "--speculative-draft-model-path" in argv
    assert spec.quality is not None
    assert dummy.quality is None  # random weights write no text worth judging


def test_ngram_runs_no_draft_model_so_no_draft_flag(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, search_space=NGRAM_SPACE)
    config = {"speculative-algorithm": "NGRAM"}
    argv = build_command(dummy_weights_spec(spec, config, manifest=None), config).argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert "--speculative-draft-load-format" not in argv
    assert "--speculative-draft-model-path" not in argv


@pytest.mark.parametrize(
    ("sections", "where"),
    [
        pytest.param(
            {"node": {"server_args": {"load-format": "safetensors"}}},
            "node.server_args.load-format",
            id="server-args",
        ),
        pytest.param(
            {"node": {"server_args": {"speculative-draft-load-format": "auto"}}},
            "node.server_args.speculative-draft-load-format",
            id="draft-server-args",
        ),
        pytest.param(
            {"search_space": {"params": {"load-format": LOAD_FORMAT_PARAM}}},
            "search_space.params.load-format",
            id="search-space",
        ),
    ],
)
def test_a_load_format_of_the_spec_is_refused(
    tmp_path: Path, sections: dict[str, Any], where: str
) -> None:
    spec = make_spec(tmp_path, **sections)
    with pytest.raises(SpecError, match=rf"^--dummy-weights: {where} is set") as err:
        dummy_weights_spec(spec, PLAIN, manifest=load_manifest("0.5.13"))
    assert "\n" not in str(err.value)


def test_a_version_without_the_draft_flag_is_refused_for_a_draft_model(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    manifest = _manifest_without("0.5.13", "speculative-draft-load-format")
    with pytest.raises(SpecError, match=r"SGLang 0\.5\.13-less has no --speculative-draft-load"):
        dummy_weights_spec(spec, EAGLE, manifest=manifest)
    # a configuration without a draft model needs only the target's flag
    argv = build_command(dummy_weights_spec(spec, PLAIN, manifest=manifest), PLAIN).argv
    assert "--load-format" in argv


def test_a_version_without_the_load_format_flag_is_refused(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    manifest = _manifest_without("0.5.13", "load-format")
    with pytest.raises(SpecError, match=r"has no --load-format flag"):
        dummy_weights_spec(spec, PLAIN, manifest=manifest)


def test_dummy_metrics_drop_acceptance_and_quality_only() -> None:
    metrics = {
        "output_throughput_c1": 50.0,
        "accept_length_c1": 1.0,
        "accept_length_c8": 1.0,
        "decode_cycle_ms_c1": 36.0,
        "ttft_p50_ms_c1": 31.0,
        "quality_deficit": 2.0,
        "boot_s": 10.0,
    }
    assert dummy_metrics(metrics, speculative=False) == {
        "output_throughput_c1": 50.0,
        "decode_cycle_ms_c1": 36.0,
        "ttft_p50_ms_c1": 31.0,
        "boot_s": 10.0,
    }
    assert dummy_metrics({"accept_length": 1.0, "decode_cycle_ms": 36.0}, speculative=False) == {
        "decode_cycle_ms": 36.0
    }


def test_a_speculative_dummy_boot_keeps_only_what_its_acceptance_does_not_decide() -> None:
    metrics = {
        "output_throughput_c1": 50.0,
        "output_throughput_ci_low_c1": 49.0,
        "request_throughput_c1": 0.4,
        "itl_p50_ms_c1": 3.0,
        "decode_speed_p50_c1": 300.0,
        "usd_per_million_tokens": 2.0,
        "accept_length_c1": 1.0,
        "decode_cycle_ms_c1": 36.0,
        "ttft_p50_ms_c1": 31.0,
        "ttft_p99_ms_c1": 40.0,
        "boot_s": 10.0,
    }
    assert dummy_metrics(metrics, speculative=True) == {
        "decode_cycle_ms_c1": 36.0,
        "ttft_p50_ms_c1": 31.0,
        "ttft_p99_ms_c1": 40.0,
        "boot_s": 10.0,
    }


def test_speculative_reads_the_configuration_then_the_fixed_arguments(tmp_path: Path) -> None:
    spec = make_spec(tmp_path)
    assert not speculative(spec, PLAIN)
    assert speculative(spec, EAGLE)
    assert speculative(spec, {"speculative-algorithm": "EAGLE3"})
    assert not speculative(spec, {"speculative-algorithm": None})


def test_dummy_boot_spec_and_dummy_result_are_the_one_way_a_sweep_and_trial_boot_dummy(
    tmp_path: Path,
) -> None:
    from spec_sweep.core.outcome import FailureMode, TrialResult
    from spec_sweep.node.fidelity import dummy_boot_spec, dummy_result

    spec = make_spec(tmp_path, quality={"num_prompts": 4})
    # no manifest built for the node here: the bundled one of the spec's version names the flags
    dummy = dummy_boot_spec(spec, EAGLE, manifest_dir=tmp_path / "no-manifests")
    argv = build_command(dummy, EAGLE).argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--speculative-draft-load-format") + 1] == "dummy"
    assert dummy.quality is None
    measured = {"output_throughput": 300.0, "accept_length": 1.0, "decode_cycle_ms": 9.0}
    result = TrialResult(
        trial_id="t0001", config=EAGLE, failure_mode=FailureMode.NONE, reason="", metrics=measured
    )
    assert dummy_result(spec, EAGLE, result).metrics == {"decode_cycle_ms": 9.0}
    plain = dummy_result(spec, PLAIN, result).metrics
    assert plain == {"output_throughput": 300.0, "decode_cycle_ms": 9.0}


def test_a_dummy_boot_is_never_a_weight_cache_client(tmp_path: Path) -> None:
    from spec_sweep.node.weight_cache import eligible

    spec = make_spec(tmp_path, node={"sglang_version": "0.5.17", "weight_cache": True})
    assert eligible(spec, PLAIN)
    dummy = dummy_weights_spec(spec, PLAIN, manifest=load_manifest("0.5.17"))
    assert not eligible(dummy, PLAIN)
