"""Spec parsing: valid specs load; each kind of bad spec is one clear SpecError line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from spec_sweep.cli import main
from spec_sweep.errors import SpecError
from spec_sweep.spec import spec_metric_names
from spec_sweep.spec_load import load_spec
from spec_sweep.spec_metrics import metric_names

GOOD = """\
name: t1
description: a small sweep
node:
  backend: sglang
  model: /models/target
  draft_model: /models/draft
  gpus: 8
  sglang_version: "0.5.23"
  server_args: {tp-size: 8, trust-remote-code: true}
  env: {NCCL_DEBUG: WARN}
  sim_profile: rtx-pro-6000-pcie-x8
search_space:
  include: [spec.yaml]
  params:
    env.NCCL_ALGO: {choices: [null, Ring, Tree]}
    mem-fraction-static: {float: [0.7, 0.9], step: 0.01, default: 0.85}
baseline: {speculative-algorithm: null}
workload: {dataset: builtin, output_len: 16, num_prompts: 2, concurrency: [1, 8]}
objective: {metric: output_throughput_c1, mode: max,
            constraints: {ttft_p99_ms_c8: {max: 2000}}}
budget: {trials: 5, max_concurrent: 1}
searcher: {kind: tpe, seed: 0}
"""

FRAGMENT = """\
params:
  speculative-algorithm: {choices: [null, EAGLE3]}
  speculative-num-steps: {int: [1, 7], default: 3, when: {speculative-algorithm: EAGLE3}}
  speculative-eagle-topk: {choices: [1, 2, 4, 8], default: 1,
                           when: {speculative-algorithm: EAGLE3}}
"""


def write(tmp_path: Path, text: str, fragment: str = FRAGMENT) -> Path:
    (tmp_path / "search_spaces").mkdir(exist_ok=True)
    (tmp_path / "search_spaces" / "spec.yaml").write_text(fragment)
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.name == "t1"
    assert list(spec.params) == [
        "speculative-algorithm",
        "speculative-num-steps",
        "speculative-eagle-topk",
        "env.NCCL_ALGO",
        "mem-fraction-static",
    ]
    assert spec.workload.concurrency == (1, 8)
    assert spec.objective.constraints["ttft_p99_ms_c8"].max == 2000
    assert spec.experiment == "t1"
    assert spec.source == str((tmp_path / "sweep.yaml").resolve())


def test_several_draft_models_are_a_searched_parameter(tmp_path: Path) -> None:
    text = GOOD.replace("draft_model: /models/draft", "draft_model: [/m/a, ./m/b]")
    spec = load_spec(write(tmp_path, text))
    heads = ("/m/a", str((tmp_path / "m" / "b").resolve()))
    assert spec.node.draft_models == heads
    assert list(spec.params)[:2] == ["speculative-algorithm", "speculative-draft-model-path"]
    head = spec.params["speculative-draft-model-path"]
    assert head.choices == heads
    assert head.default == "/m/a"
    assert head.when == {"speculative-algorithm": "EAGLE3"}
    assert "speculative-draft-model-path" not in spec.search_space.params
    one = load_spec(write(tmp_path, GOOD.replace("/models/draft", "[/models/draft]")))
    assert "speculative-draft-model-path" not in one.params
    assert one.node.draft_models == ("/models/draft",)


def test_spec_is_frozen(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    with pytest.raises(ValueError, match="frozen"):
        spec.name = "x"  # type: ignore[misc]


def test_params_override_fragment(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    env.NCCL_ALGO:",
        "    speculative-num-steps: {int: [2, 4], default: 2, "
        "when: {speculative-algorithm: EAGLE3}}\n    env.NCCL_ALGO:",
    )
    spec = load_spec(write(tmp_path, text))
    assert spec.params["speculative-num-steps"].int_range == (2, 4)


def test_metric_names_suffixed_per_level(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD))
    names = metric_names(spec.workload)
    assert "output_throughput_c1" in names
    assert "ttft_p99_ms_c8" in names
    assert "output_throughput" not in names
    assert "boot_s" in names


def test_quality_gate_defaults_metrics_and_the_retired_threshold(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, GOOD + "quality: {}\n"))
    assert spec.quality is not None
    q = spec.quality
    assert (q.num_prompts, q.tokens, q.margin_nats) == (16, 64, 0.5)
    assert (q.max_equivalent_deficit, q.min_wrong_deficit, q.allow_lossy) == (0.003, 0.25, False)
    names = spec_metric_names(spec)
    for name in ("quality_deficit", "quality_lossy", "quality_first_divergence"):
        assert name in names
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, GOOD + "quality: {min_agreement: 0.5}\n"))
    assert "the deficit decides: max_equivalent_deficit, min_wrong_deficit, allow_lossy" in str(
        info.value
    )
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, GOOD + "quality: {max_confident_share: 0.1}\n"))
    assert "max_confident_share (0.1) is retired" in str(info.value)
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, GOOD + "quality: {min_wrong_deficit: 0.001}\n"))
    assert "min_wrong_deficit 0.001 must be above max_equivalent_deficit 0.003" in str(info.value)


def test_dataset_path_resolved_relative_to_spec(tmp_path: Path) -> None:
    (tmp_path / "prompts.jsonl").write_text('{"text": "hello"}\n')
    spec = load_spec(write(tmp_path, GOOD.replace("dataset: builtin", "dataset: prompts.jsonl")))
    assert spec.workload.dataset == str(tmp_path / "prompts.jsonl")


def test_old_manifest_accepts_cuda_graph_max_bs(tmp_path: Path) -> None:
    from spec_sweep.manifest import available_versions

    old = min(available_versions(), key=lambda v: tuple(int(p) for p in v.split(".")))
    text = GOOD.replace('"0.5.23"', f'"{old}"').replace(
        "    env.NCCL_ALGO:",
        "    cuda-graph-max-bs: {choices: [128, 512], default: 512}\n    env.NCCL_ALGO:",
    )
    spec = load_spec(write(tmp_path, text))
    assert "cuda-graph-max-bs" in spec.params


# (description, edit applied to GOOD, fragment or None, expected field path, expected words)
BAD = [
    ("unknown top-level key", lambda s: s + "colour: blue\n", None, "colour", "unknown key"),
    (
        "unknown nested key",
        lambda s: s.replace("seed: 0}", "seed: 0, sampler: tpe}"),
        None,
        "searcher.sampler",
        "unknown key",
    ),
    (
        "wrong type",
        lambda s: s.replace("output_len: 16", "output_len: lots"),
        None,
        "workload.output_len",
        "'lots'",
    ),
    (
        "empty choices",
        lambda s: s.replace("choices: [null, Ring, Tree]", "choices: []"),
        None,
        "search_space.params.env.NCCL_ALGO",
        "empty",
    ),
    (
        "lo > hi",
        lambda s: s.replace("float: [0.7, 0.9]", "float: [0.9, 0.7]"),
        None,
        "search_space.params.mem-fraction-static",
        "lo > hi",
    ),
    (
        "when names an unknown parameter",
        lambda s: s,
        FRAGMENT.replace(
            "when: {speculative-algorithm: EAGLE3}}\n  speculative-eagle",
            "when: {speculative-algo: EAGLE3}}\n  speculative-eagle",
        ),
        "search_space.params.speculative-num-steps.when.speculative-algo",
        "not a parameter",
    ),
    (
        "unknown flag",
        lambda s: s.replace("tp-size: 8", "tp-sise: 8"),
        None,
        "node.server_args.tp-sise",
        "not a launch_server flag",
    ),
    (
        "retired flag",
        lambda s: s.replace(
            "    env.NCCL_ALGO:", "    cuda-graph-max-bs: {choices: [128, 512]}\n    env.NCCL_ALGO:"
        ),
        None,
        "search_space.params.cuda-graph-max-bs",
        "cuda-graph-max-bs-decode",
    ),
    (
        "invalid choice for a flag with choices",
        lambda s: s,
        FRAGMENT + "  moe-a2a-backend: {choices: [none, flashinfer, deepepp]}\n",
        "search_space.params.moe-a2a-backend",
        "'deepepp' is not a valid choice",
    ),
    (
        "missing include file",
        lambda s: s.replace("include: [spec.yaml]", "include: [nope.yaml]"),
        None,
        "search_space.include",
        "'nope.yaml' not found",
    ),
    (
        "duplicate parameter (fixed and searched)",
        lambda s: s.replace("tp-size: 8,", "tp-size: 8, mem-fraction-static: 0.8,"),
        None,
        "node.server_args.mem-fraction-static",
        "duplicate parameter",
    ),
    (
        "duplicate key in the YAML",
        lambda s: s.replace("budget: {trials: 5", "budget: {trials: 5, trials: 6"),
        None,
        "line",
        "duplicate key 'trials'",
    ),
    (
        "non-positive budget",
        lambda s: s.replace("trials: 5", "trials: 0"),
        None,
        "budget.trials",
        "greater than 0",
    ),
    (
        "unknown objective metric",
        lambda s: s.replace("metric: output_throughput_c1", "metric: tokens_per_second"),
        None,
        "objective.metric",
        "'tokens_per_second' is not a metric",
    ),
    (
        "unsuffixed metric with several concurrency levels",
        lambda s: s.replace("metric: output_throughput_c1", "metric: output_throughput"),
        None,
        "objective.metric",
        "output_throughput_c1",
    ),
    (
        "unknown constraint metric",
        lambda s: s.replace("ttft_p99_ms_c8", "ttft_p99_ms_c4"),
        None,
        "objective.constraints.ttft_p99_ms_c4",
        "not a metric",
    ),
    (
        "baseline names an unknown parameter",
        lambda s: s.replace("baseline: {speculative-algorithm: null}", "baseline: {foo: 1}"),
        None,
        "baseline.foo",
        "not a parameter",
    ),
    (
        "baseline value outside the range",
        lambda s: s.replace(
            "baseline: {speculative-algorithm: null}",
            "baseline: {speculative-algorithm: null, mem-fraction-static: 0.99}",
        ),
        None,
        "baseline.mem-fraction-static",
        "0.99 is not a value this parameter can take: use a number in [",
    ),
    (
        "bad mode",
        lambda s: s.replace("mode: max", "mode: biggest"),
        None,
        "objective.mode",
        "'biggest'",
    ),
    (
        "unknown searcher",
        lambda s: s.replace("kind: tpe", "kind: bayes"),
        None,
        "searcher.kind",
        "'bayes'",
    ),
    (
        "wrong value type for an int flag",
        lambda s: s.replace("tp-size: 8", "tp-size: eight"),
        None,
        "node.server_args.tp-size",
        "takes an integer",
    ),
    (
        "bare flag given a value",
        lambda s: s.replace("trust-remote-code: true", "trust-remote-code: yes-please"),
        None,
        "node.server_args.trust-remote-code",
        "bare flag",
    ),
    (
        "flag written with dashes",
        lambda s: s.replace("tp-size: 8", "--tp-size: 8"),
        None,
        "node.server_args.--tp-size",
        "without leading dashes",
    ),
    (
        "reserved flag",
        lambda s: s.replace("tp-size: 8", "port: 8000"),
        None,
        "node.server_args.port",
        "set by spec_sweep",
    ),
    (
        "unknown sglang version",
        lambda s: s.replace('"0.5.23"', '"9.9.9"'),
        None,
        "node.sglang_version",
        "9.9.9",
    ),
    (
        "negative concurrency",
        lambda s: s.replace("concurrency: [1, 8]", "concurrency: [1, -8]"),
        None,
        "workload.concurrency",
        "> 0",
    ),
    (
        "missing dataset file",
        lambda s: s.replace("dataset: builtin", "dataset: nowhere.jsonl"),
        None,
        "workload.dataset",
        "nowhere.jsonl",
    ),
    (
        "missing required key",
        lambda s: s.replace("  model: /models/target\n", ""),
        None,
        "node.model",
        "required key is missing",
    ),
    (
        "bad sweep name",
        lambda s: s.replace("name: t1", "name: 'my sweep/1'"),
        None,
        "name",
        "not a usable sweep name",
    ),
    (
        "conditional cycle",
        lambda s: s,
        FRAGMENT.replace(
            "speculative-algorithm: {choices: [null, EAGLE3]}",
            "speculative-algorithm: {choices: [null, EAGLE3], when: {speculative-eagle-topk: 1}}",
        ),
        "search_space.params",
        "cycle",
    ),
    (
        "grid over a continuous range",
        lambda s: s.replace("kind: tpe", "kind: grid").replace(", step: 0.01", ""),
        None,
        "search_space.params.mem-fraction-static",
        "step",
    ),
    (
        "baseline incomplete",
        lambda s: s.replace(", default: 0.85", ""),
        None,
        "baseline",
        "mem-fraction-static",
    ),
    (
        "speculative search without a draft model",
        lambda s: s.replace("  draft_model: /models/draft\n", ""),
        None,
        "node.draft_model",
        "draft model",
    ),
    (
        "empty list of draft models",
        lambda s: s.replace("draft_model: /models/draft", "draft_model: []"),
        None,
        "node.draft_model",
        "list of draft models is empty",
    ),
    (
        "a draft model listed twice",
        lambda s: s.replace("draft_model: /models/draft", "draft_model: [/m/a, /m/b, /m/a]"),
        None,
        "node.draft_model",
        "'/m/a' is listed twice: remove the duplicate",
    ),
    (
        "draft models listed where nothing drafts with one",
        lambda s: s.replace("draft_model: /models/draft", "draft_model: [/m/a, /m/b]"),
        FRAGMENT.replace("EAGLE3", "NGRAM"),
        "node.draft_model",
        "no speculative algorithm of the search space drafts with a model",
    ),
    (
        "the draft model searched by hand",
        lambda s: s.replace(
            "    env.NCCL_ALGO:",
            "    speculative-draft-model-path: {choices: [/m/a, /m/b]}\n    env.NCCL_ALGO:",
        ),
        None,
        "search_space.params.speculative-draft-model-path",
        "list the draft models in node.draft_model",
    ),
    (
        "a baseline draft model that is not listed",
        lambda s: s.replace("draft_model: /models/draft", "draft_model: [/m/a, /m/b]").replace(
            "baseline: {speculative-algorithm: null}",
            "baseline: {speculative-algorithm: EAGLE3, speculative-draft-model-path: /m/c}",
        ),
        None,
        "baseline.speculative-draft-model-path",
        "'/m/c' is not a value",
    ),
    (
        "deprecated flag",
        lambda s: s.replace(
            "    env.NCCL_ALGO:",
            "    enable-flashinfer-allreduce-fusion: {choices: [false, true], default: false}\n"
            "    env.NCCL_ALGO:",
        ),
        None,
        "search_space.params.enable-flashinfer-allreduce-fusion",
        "flashinfer-allreduce-fusion-backend",
    ),
    (
        "the retired quality.min_agreement",
        lambda s: s + "quality: {num_prompts: 8, min_agreement: 0.9}\n",
        None,
        "quality",
        "min_agreement (0.9) is retired",
    ),
    (
        "log range with lo <= 0",
        lambda s: s.replace("float: [0.7, 0.9], step: 0.01", "float: [0.0, 0.9], log: true"),
        None,
        "search_space.params.mem-fraction-static",
        "lo > 0",
    ),
]


@pytest.mark.parametrize(
    ("edit", "fragment", "field", "words"),
    [pytest.param(e, f, fld, w, id=d) for d, e, f, fld, w in BAD],
)
def test_bad_spec_is_one_clear_line(
    tmp_path: Path, edit: object, fragment: str | None, field: str, words: str
) -> None:
    path = write(tmp_path, edit(GOOD), fragment or FRAGMENT)  # type: ignore[operator]
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert field in message
    assert words in message
    assert str(path.parent) in message  # names the file


@pytest.mark.parametrize(("edit", "fragment"), [(e, f) for _, e, f, _, _ in BAD[:6]])
def test_bad_spec_exit_code_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: object,
    fragment: str | None,
) -> None:
    path = write(tmp_path, edit(GOOD), fragment or FRAGMENT)  # type: ignore[operator]
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("spec-sweep: error: ")
    assert "Traceback" not in err


def test_a_set_value_outside_the_space_names_the_values_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD, FRAGMENT)
    argv = ["trial", str(path), "--simulate", "--set", "speculative-num-steps=9"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "spec-sweep: error: --set speculative-num-steps: 9 is not a value this parameter can "
        "take: use an integer in [1, 7]"
    )


def test_fragment_error_names_fragment_file(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, FRAGMENT.replace("int: [1, 7]", "int: [7, 1]"))
    with pytest.raises(SpecError, match=r"search_spaces/spec\.yaml: params\.speculative-num-steps"):
        load_spec(path)


def test_duplicate_parameter_across_fragments(tmp_path: Path) -> None:
    (tmp_path / "search_spaces").mkdir()
    (tmp_path / "search_spaces" / "a.yaml").write_text(FRAGMENT)
    (tmp_path / "search_spaces" / "b.yaml").write_text(
        "params:\n  speculative-algorithm: {choices: [null, EAGLE3]}\n"
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(GOOD.replace("include: [spec.yaml]", "include: [a.yaml, b.yaml]"))
    with pytest.raises(SpecError, match=r"duplicate parameter, already defined in a\.yaml"):
        load_spec(path)


@pytest.mark.parametrize("port", ["99999", "0", "http"])
def test_ui_port_outside_1_to_65535_is_refused_before_a_server_starts(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ui", "--port", port])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "argument --port: invalid port" in err
    assert port in err
    assert "use a number 1-65535" in err
