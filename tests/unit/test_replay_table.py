"""Replay tables (docs/design.md, "Replay table"): reading, lookup, missing configurations, seeded
noise."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from spec_sweep.core.outcome import FailureMode, TrialResult
from spec_sweep.errors import SpecError
from spec_sweep.node.backends import ReplayBackend
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec
from spec_sweep.store.replay import ReplayTable, load_replay

SPEC = """\
name: r
node: {model: m, draft_model: d, sglang_version: "0.5.13", sim_profile: rtx-pro-6000-pcie-x8}
search_space:
  params:
    speculative-algorithm: {choices: [null, EAGLE3]}
    speculative-num-steps: {int: [1, 3], default: 1, when: {speculative-algorithm: EAGLE3}}
    disable-custom-all-reduce: {choices: [false, true], default: false}
"""

TABLE = """\
speculative-algorithm,speculative-num-steps,disable-custom-all-reduce,output_throughput,accept_length,failure_mode
null,,false,80.0,,none
EAGLE3,2,false,50.0,2.1,none
EAGLE3,3,true,,,oom
null,,true,81.0,,
"""


@pytest.fixture
def spec(tmp_path: Path) -> SweepSpec:
    path = tmp_path / "r.yaml"
    path.write_text(SPEC)
    return load_spec(path)


def replay_result(
    spec: SweepSpec,
    config: dict[str, object],
    replay: ReplayTable,
    *,
    trial_dir: Path,
    noise: float = 0.0,
    seed: int = 0,
) -> TrialResult:
    """One trial answered by the replay backend (searcher seed `seed`)."""
    seeded = spec.model_copy(update={"searcher": spec.searcher.model_copy(update={"seed": seed})})
    return ReplayBackend(seeded, replay, noise=noise).run(config, trial_dir=trial_dir)


def table(tmp_path: Path, text: str = TABLE) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(textwrap.dedent(text))
    return path


def test_rows_are_indexed_by_configuration(tmp_path: Path, spec: SweepSpec) -> None:
    replay = load_replay(table(tmp_path), spec)
    assert len(replay) == 4
    row = replay.lookup(
        {
            "speculative-algorithm": "EAGLE3",
            "speculative-num-steps": 2,
            "disable-custom-all-reduce": False,
        }
    )
    assert row is not None
    assert row.metrics == {"output_throughput": 50.0, "accept_length": 2.1}
    assert row.line == 3
    empty_mode = replay.lookup({"speculative-algorithm": None, "disable-custom-all-reduce": True})
    assert empty_mode is not None
    assert empty_mode.failure_mode is FailureMode.NONE  # empty cell = success


def test_missing_configuration_is_invalid_args_naming_it(tmp_path: Path, spec: SweepSpec) -> None:
    replay = load_replay(table(tmp_path), spec)
    config = {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 1,
        "disable-custom-all-reduce": True,
    }
    fields = replay_result(spec, config, replay, trial_dir=tmp_path / "trial")
    assert fields.failure_mode is FailureMode.INVALID_ARGS
    assert '"speculative-num-steps": 1' in fields.reason
    assert (tmp_path / "trial" / "command.txt").read_text().startswith("python -m sglang")


def test_noise_is_seeded_and_spares_accept_length(tmp_path: Path, spec: SweepSpec) -> None:
    replay = load_replay(table(tmp_path), spec)
    config = {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": 2,
        "disable-custom-all-reduce": False,
    }
    a = replay_result(spec, config, replay, trial_dir=tmp_path / "a", noise=0.05, seed=1)
    b = replay_result(spec, config, replay, trial_dir=tmp_path / "b", noise=0.05, seed=1)
    c = replay_result(spec, config, replay, trial_dir=tmp_path / "c", noise=0.05, seed=2)
    assert a.metrics == b.metrics
    assert a.metrics["output_throughput"] != 50.0
    assert a.metrics["output_throughput"] != c.metrics["output_throughput"]
    assert a.metrics["accept_length"] == 2.1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "speculative-algorithm,output_throughput,failure_mode\nnull,1,none\n",
            "no column for parameter 'speculative-num-steps'",
        ),
        (
            "speculative-algorithm,speculative-num-steps,disable-custom-all-reduce,output_throughput\n",
            "no 'failure_mode' column",
        ),
        (
            "speculative-algorithm,speculative-num-steps,disable-custom-all-reduce,output_throughput,"
            "failure_mode\nnull,,false,fast,none\n",
            "line 2: output_throughput = 'fast'",
        ),
        (
            "speculative-algorithm,speculative-num-steps,disable-custom-all-reduce,output_throughput,"
            "failure_mode\nnull,,false,1,exploded\n",
            "line 2: failure_mode 'exploded'",
        ),
    ],
)
def test_bad_table_is_one_clear_error(
    tmp_path: Path, spec: SweepSpec, text: str, words: str
) -> None:
    with pytest.raises(SpecError, match=words.replace("(", r"\(")) as info:
        load_replay(table(tmp_path, text), spec)
    assert "\n" not in str(info.value)


def test_missing_file_is_a_spec_error(tmp_path: Path, spec: SweepSpec) -> None:
    with pytest.raises(SpecError, match="cannot read it"):
        load_replay(tmp_path / "nope.csv", spec)


def test_blank_cells_replay_exactly_like_explicit_nulls(tmp_path: Path) -> None:
    """A blank null-able categorical is null; a blank inactive parameter matches."""
    path = tmp_path / "b.yaml"
    path.write_text(
        SPEC
        + "    env.NCCL_ALGO: {choices: [null, Ring]}\n"
        + "    speculative-eagle-topk: {choices: [1, 2], default: 1,"
        + " when: {speculative-algorithm: EAGLE3}}\n"
    )
    spec = load_spec(path)
    header = (
        "speculative-algorithm,speculative-num-steps,disable-custom-all-reduce,env.NCCL_ALGO,"
        "speculative-eagle-topk,output_throughput,failure_mode\n"
    )
    explicit = header + (
        "null,,false,null,,80.0,none\n"
        "null,,true,Ring,,81.0,none\n"
        "EAGLE3,2,false,null,2,50.0,none\n"
        "EAGLE3,3,true,Ring,1,,oom\n"
    )
    blank = header + (
        ",,false,,,80.0,none\n"  # algorithm and NCCL_ALGO blank: null; tree columns inactive
        ",3,true,Ring,2,81.0,none\n"  # values in inactive cells are ignored too
        "EAGLE3,2,false,,2,50.0,none\n"
        "EAGLE3,3,true,Ring,1,,oom\n"
    )
    (tmp_path / "a.csv").write_text(explicit)
    (tmp_path / "b.csv").write_text(blank)
    a = load_replay(tmp_path / "a.csv", spec)
    b = load_replay(tmp_path / "b.csv", spec)
    assert len(a) == len(b) == 4
    assert {k: (r.config, r.failure_mode, r.metrics) for k, r in a.rows.items()} == {
        k: (r.config, r.failure_mode, r.metrics) for k, r in b.rows.items()
    }
    base = {
        "speculative-algorithm": None,
        "disable-custom-all-reduce": False,
        "env.NCCL_ALGO": None,
    }
    for replay in (a, b):
        row = replay.lookup(base)
        assert row is not None
        assert row.metrics == {"output_throughput": 80.0}
    ra = replay_result(spec, base, a, trial_dir=tmp_path / "x1", noise=0.02, seed=3)
    rb = replay_result(spec, base, b, trial_dir=tmp_path / "x2", noise=0.02, seed=3)
    assert ra.failure_mode is rb.failure_mode is FailureMode.NONE
    assert ra.metrics == rb.metrics
