"""Replay tables (docs/design.md, "Replay table"): reading, lookup, missing configurations, seeded
noise."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from spec_sweep.errors import SpecError
from spec_sweep.failures import FailureMode
from spec_sweep.replay import load_replay, replay_result
from spec_sweep.spec import SweepSpec
from spec_sweep.spec_load import load_spec

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
    assert fields["failure_mode"] is FailureMode.INVALID_ARGS
    assert '"speculative-num-steps": 1' in fields["reason"]
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
    assert a["metrics"] == b["metrics"]
    assert a["metrics"]["output_throughput"] != 50.0
    assert a["metrics"]["output_throughput"] != c["metrics"]["output_throughput"]
    assert a["metrics"]["accept_length"] == 2.1


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
