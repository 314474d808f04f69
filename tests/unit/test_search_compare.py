"""search_efficiency.py's paired comparison (`--runs-out`, `--compare`): runs matched by key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import search_efficiency as se


def _run(node: str, seed: int, ratio: float, random: float | None = 0.95) -> dict[str, object]:
    return {
        "family": "A",
        "strategy": "ours",
        "node": node,
        "seed": seed,
        "budget": 40,
        "ratio": ratio,
        "random": random,
    }


def test_compare_pairs_runs_by_node_and_seed() -> None:
    before = [_run("n1", 1, 0.90), _run("n2", 2, 1.00), _run("n3", 3, 0.97), _run("n9", 9, 0.5)]
    after = [_run("n2", 2, 0.99), _run("n1", 1, 0.96), _run("n3", 3, 0.97)]  # n9 not rerun
    header, row = se.compare_runs(before, after)
    assert "mean change" in header
    cols = row.split()
    assert cols[:3] == ["A", "40", "3"]  # n9 has no pair
    assert float(cols[3]) == pytest.approx((0.06 - 0.01 + 0.0) / 3, abs=1e-4)
    assert cols[5:7] == ["1", "1"]  # n1 rose, n2 fell, n3 unchanged
    # below random's median (0.95): n1 before only; within 1%: n2 before, n2 after
    assert "1 / 0" in row
    assert row.rstrip().endswith("1 / 1")


def test_compare_cli_reads_two_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(json.dumps(_run("n1", 1, 0.9)) + "\n")
    new.write_text(json.dumps(_run("n1", 1, 0.8)) + "\n")
    assert se.main(["--compare", str(old), str(new)]) == 0
    assert "-0.1000" in capsys.readouterr().out


def test_compare_a_missing_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        se.main(["--compare", str(tmp_path / "old.jsonl"), str(tmp_path / "new.jsonl")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "old.jsonl: no such file; write one with --runs-out" in err


def test_compare_names_the_strategy_when_there_are_several() -> None:
    ours, rnd = _run("n1", 1, 0.9), _run("n1", 1, 0.8) | {"strategy": "random search"}
    lines = se.compare_runs([ours, rnd], [ours | {"ratio": 0.95}, rnd])
    assert len(lines) == 3
    assert lines[1].rstrip().endswith("ours")
    assert lines[2].rstrip().endswith("random search")
    assert se.compare_runs([ours], [rnd | {"node": "n2"}]) == [
        "no run of AFTER has a run of BEFORE with its family, strategy, node, seed and budget"
    ]


def test_goals_without_a_40_trial_budget_read_the_budgets_run() -> None:
    cell = se.FamilyCell("ours", ratios={20: [0.95, 0.97]}, failed={20: [0.0, 0.1]})
    cell.below[20] = [False, True]
    assert se.family_goals([cell]) == [
        "PASS median best/optimum at 20 >= 0.90",
        "FAIL never below random search's median at 20 (below on 1 of 2 nodes)",
    ]
