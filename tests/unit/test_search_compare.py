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


def test_family_landscapes_are_cached_under_their_generators_sources(tmp_path: Path) -> None:
    """A cached landscape reads back as generated; its key follows the generator's own sources
    and what they import (the tree rules), never the search's (`spec_guide`), so a change of
    the search keeps the cache and a change of the family regenerates it."""
    cache = tmp_path / "cache"
    cache.mkdir()
    descriptions: dict[str, str] = {}
    [built] = se.family_tables([3], tmp_path, family="b", descriptions=descriptions, cache=cache)
    [kept] = list(cache.iterdir())
    again: dict[str, str] = {}
    [read] = se.family_tables([3], tmp_path, family="b", descriptions=again, cache=cache)
    assert list(cache.iterdir()) == [kept]
    assert again == descriptions
    assert (read.name, read.best, read.best_config) == (built.name, built.best, built.best_config)
    assert read.replay.rows == built.replay.rows


def test_the_landscape_cache_key_follows_the_generators_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key reads the generator, the repository modules it imports (transitively) and the
    benchmarks' data, and nothing else: a change of the search (`spec_guide`) keeps it."""
    files = {
        "benchmarks/gen.py": "import helper\nfrom spec_sweep.search.spec_model import f\n",
        "benchmarks/helper.py": "X = 1\n",
        "benchmarks/data/fits.csv": "a,b\n",
        "spec_sweep/__init__.py": "",
        "spec_sweep/search/__init__.py": "",
        "spec_sweep/search/spec_model.py": "from spec_sweep import errors\n",
        "spec_sweep/errors.py": "E = 1\n",
        "spec_sweep/search/spec_guide.py": "G = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(se, "ROOT", tmp_path)
    gen = tmp_path / "benchmarks" / "gen.py"
    first = se._source_digest(gen)
    (tmp_path / "spec_sweep/search/spec_guide.py").write_text("G = 2\n")
    assert se._source_digest(gen) == first
    for name in ("benchmarks/helper.py", "spec_sweep/errors.py", "benchmarks/data/fits.csv"):
        (tmp_path / name).write_text((tmp_path / name).read_text() + "# changed\n")
        assert se._source_digest(gen) != first, name
        first = se._source_digest(gen)
