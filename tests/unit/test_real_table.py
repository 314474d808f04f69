"""benchmarks/real_table.py on a table written here over the real table's grid.

The table's numbers follow the speculative model's own law (accept length by depth and width,
cycle cost by steps and draft tokens) with known constants, so what the script reads back is
known: the grid's rejected and rewritten trees filled in by SGLang's rules, the repeats' spread,
a model fitted on a few trees that predicts the others, and a break-even verdict that agrees
with the throughput verdict whenever per-request decode speed moves with throughput.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from spec_sweep.core.config import normalize_config
from spec_sweep.search.spec_model import accept_length, depth_widths
from spec_sweep.search.tree_rules import check_tree
from spec_sweep.spec_load import load_spec
from spec_sweep.store.replay import load_replay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import real_table
import sim_grid

A, R, G = 0.60, 0.91, 0.20  # on the model's fitting grid
COST = (1.0, 0.12, 0.03)
PLAIN = 600.0


def _row(config: dict, level: int) -> dict[str, float]:
    algorithm = config.get("speculative-algorithm")
    eager = level > config["cuda-graph-max-bs-decode"]
    slow = 4.0 if eager else 1.0
    if algorithm is None:
        speed = PLAIN / slow
        return {f"output_throughput_c{level}": speed * level, f"decode_speed_p50_c{level}": speed}
    if algorithm == "NGRAM":
        length = 1.2
        cost = COST[0] + COST[2] * config["speculative-num-draft-tokens"]
    else:
        steps, topk, draft = (
            config["speculative-num-steps"],
            config["speculative-eagle-topk"],
            config["speculative-num-draft-tokens"],
        )
        length = accept_length(A, R, G, depth_widths(steps, topk, draft))
        cost = COST[0] + COST[1] * steps * (1 + 0.08 * (topk - 1)) + COST[2] * draft
    speed = PLAIN / 1.4 * length / cost / slow
    return {
        f"output_throughput_c{level}": speed * level,
        f"decode_speed_p50_c{level}": speed,
        f"accept_length_c{level}": length,
    }


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    spec = load_spec(real_table.DEFAULT_SPEC)
    keys = list(spec.params)
    metrics = sorted(
        {k for c in spec.workload.concurrency for k in _row({"cuda-graph-max-bs-decode": 32}, c)}
        | {f"accept_length_c{c}" for c in spec.workload.concurrency}
    )
    rows = []
    seen = set()
    for config in sim_grid.grid_configs(spec):
        check = check_tree(
            config, server_args=spec.node.server_args, version=spec.node.sglang_version
        )
        effective = normalize_config(spec, check.config)
        key = tuple(sorted(effective.items(), key=lambda kv: kv[0]))
        if not check.runs or key in seen:
            continue  # as the grid search skips them
        seen.add(key)
        values: dict[str, float] = {}
        for level in spec.workload.concurrency:
            values.update(_row(dict(effective), level))
        rows.append({**config, **values, "failure_mode": "none"})  # launched as given
    # two repeat boots of the first plain configuration, 10% apart at c1
    repeat = dict(rows[0])
    repeat["output_throughput_c1"] = rows[0]["output_throughput_c1"] * 1.1
    rows.append(repeat)
    path = tmp_path_factory.mktemp("real") / "table.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*keys, *metrics, "failure_mode"])
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    k: ("null" if row.get(k) is None and k in keys else row.get(k, ""))
                    for k in writer.fieldnames
                }
            )
    return path, spec


def test_the_grid_is_completed_by_sglangs_rules(table: tuple[Path, object]) -> None:
    path, spec = table
    replay = load_replay(path, spec)
    completed, coverage = real_table.complete(spec, replay)
    # 0.5.17's short trees ((5, 2, 4), (5, 4, 4): the real t0025) are among the rejected
    assert (coverage.measured, coverage.rejected, coverage.rewritten) == (68, 24, 16)
    assert coverage.missing == []
    assert len(completed.rows) == sim_grid.grid_size(spec) == 108
    spread = real_table.repeat_spread(real_table.read_boots(path, spec), ["output_throughput_c1"])
    assert spread["output_throughput_c1"] == [pytest.approx(0.1 / 1.05)]


def test_the_model_fitted_on_a_few_trees_predicts_the_others(table: tuple[Path, object]) -> None:
    path, spec = table
    completed, _ = real_table.complete(spec, load_replay(path, spec))
    fitted, predictions = real_table.model_check(spec, completed, level=1, first_k=4, budget=40)
    assert len(fitted) == 4
    assert len(predictions) >= 5
    for p in predictions:
        assert p.accept[0] == pytest.approx(p.accept[1], abs=0.02), p
        assert p.throughput[0] == pytest.approx(p.throughput[1], rel=0.10), p


def test_efficiency_and_the_diagnosis_read_the_table(table: tuple[Path, object]) -> None:
    path, spec = table
    completed, _ = real_table.complete(spec, load_replay(path, spec))
    readings, tab, below = real_table.efficiency(
        real_table.with_objective(spec, "output_throughput_c1"),
        completed,
        budgets=[10, 20],
        seeds=2,
    )
    # the optimum is over first measurements: the repeat boot's x1.1 is not the plain row's value
    measured = [r.metrics["output_throughput_c1"] for r in completed.rows.values() if r.metrics]
    assert tab.best == max(measured)
    assert {r.label for r in readings} >= {"random search", "auto_benchmark tier 2 plan"}
    assert all(0 < x <= 1.0 + 1e-9 for r in readings for x in r.ratios)
    assert len(below) == 2
    # one boot cannot tell apart what reads within the boots' spread of the optimum
    leveled = real_table.with_objective(spec, "output_throughput_c1")
    replay = load_replay(path, spec)
    firsts = [r.metrics["output_throughput_c1"] for r in replay.rows.values() if r.metrics]
    assert tab.best == max(firsts)
    for spread in (0.0, 0.1, 10.0):
        near = sum(1 for v in firsts if v >= tab.best / (1 + spread))
        line = real_table.within_noise(leveled, replay, tab.best, spread)
        assert f": {near} of the {len(firsts)} measured configurations" in line
    assert ": 68 of the 68 " in real_table.within_noise(leveled, replay, tab.best, 10.0)
    agree, total, notes = real_table.diagnosis_agreement(spec, load_replay(path, spec), level=1)
    assert total > 0
    assert agree == total, notes


def test_the_command_prints_every_part(
    table: tuple[Path, object], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = table
    assert (
        real_table.main([str(path), "--seeds", "2", "--budgets", "10", "20", "--levels", "1"]) == 0
    )
    out = capsys.readouterr().out
    assert "68 measured, 24 rejected and 16 rewritten" in out
    assert "boot-to-boot spread" in out
    assert "within the median boot spread (9.5%) of the optimum: " in out
    assert "search efficiency, objective output_throughput_c1" in out
    assert "speculative model fitted on" in out
    assert "break-even diagnosis agrees with the measured verdict on 64/64" in out  # measured
    assert "simulator's acceptance law fitted to 14 measured trees" in out
    print(out)


def test_an_unfinished_table_is_read_with_partial_only(
    table: tuple[Path, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = table
    lines = path.read_text().splitlines()
    partial = tmp_path / "partial.csv"
    partial.write_text("\n".join(lines[:41]) + "\n")  # the header and 40 configurations
    assert real_table.main([str(partial), "--levels", "1"]) == 1
    out = capsys.readouterr().out
    assert "configurations of the grid have no row yet" in out
    assert "finish the table" in out
    assert "speculative model fitted on" not in out
    assert real_table.main([str(partial), "--levels", "1", "--partial"]) == 0
    out = capsys.readouterr().out
    assert "search efficiency, objective" not in out  # a search needs every configuration
    assert "fitted on the first measured EAGLE-3 rows in the order they were measured" in out
    fitted = out.split("speculative model fitted on ")[1].split(", predicting ")
    assert fitted[0].count("(") == 4  # the first four EAGLE-3 trees of the file
    assert int(fitted[1].split()[0]) >= 1
    # the model's own law with its constants: accept lengths come back nearly exactly
    maes = [float(x.split(",")[0]) for x in out.split("accept length MAE ")[1:]]
    assert maes, out
    assert max(maes) < 0.05, out
    assert "break-even diagnosis agrees with the measured verdict on" in out


def test_the_simulators_acceptance_law_is_recovered_from_accept_lengths() -> None:
    # accept lengths that follow the simulator's law with known constants, on the real grid's
    # trees: the fit gives the constants back, and each tree left out is predicted
    from spec_sweep.sim.perf import accept_length as sim_accept_length
    from spec_sweep.sim.perf import tree_acceptance

    rates, gain = [0.70, 0.55, 0.45, 0.40, 0.35], 0.25
    trees = [
        (1, 1, 2), (1, 4, 4), (2, 1, 3), (2, 2, 4), (2, 4, 8), (3, 1, 4), (3, 2, 4),
        (3, 2, 8), (3, 4, 4), (3, 4, 8), (5, 1, 6), (5, 2, 8), (5, 4, 8),
    ]  # fmt: skip
    measured = {
        (s, k, d): sim_accept_length(tree_acceptance(rates, gain, steps=s, topk=k, draft_tokens=d))
        for s, k, d in trees
    }
    fit = real_table.law_fit(measured)
    assert fit.gain == pytest.approx(gain, abs=0.01)
    assert fit.rates[:3] == pytest.approx(rates[:3], abs=0.02)  # depths 4-5 only as a product
    assert max(abs(law - value) for law, value in fit.fitted.values()) < 0.005
    assert max(abs(fit.left_out[t] - v) for t, v in measured.items()) < 0.02
    # and a law it cannot follow (a width that helps nothing at depth 1) leaves an error
    measured[(1, 4, 4)] = measured[(1, 1, 2)]
    assert real_table.law_fit(measured).left_out[(1, 4, 4)] > measured[(1, 1, 2)] + 0.05


def test_pairs_differing_in_one_knob_show_its_effect_and_not_the_repeats(
    table: tuple[Path, object],
) -> None:
    path, spec = table
    boots = real_table.read_boots(path, spec)
    at_c1 = {p.knob: p for p in real_table.knob_pairs(boots, spec, "output_throughput_c1")}
    at_c32 = {p.knob: p for p in real_table.knob_pairs(boots, spec, "output_throughput_c32")}
    # the static fraction changes nothing in this table; the repeat boot (10% up) is not a pair
    fraction = at_c1["mem-fraction-static"]
    assert (fraction.low, fraction.high) == ("0.8", "0.9")
    assert len(fraction.ratios) > 20
    assert all(r == pytest.approx(1.0) for r in fraction.ratios)
    # decode graphs to 32 against 16: four times as fast at c32 (eager beyond 16), equal at c1
    assert all(r == pytest.approx(4.0) for r in at_c32["cuda-graph-max-bs-decode"].ratios)
    assert all(r == pytest.approx(1.0) for r in at_c1["cuda-graph-max-bs-decode"].ratios)
    line = at_c32["cuda-graph-max-bs-decode"].line("output_throughput_c32")
    n = len(at_c32["cuda-graph-max-bs-decode"].ratios)
    assert f"median 4.00x apart, 32 the higher in {n}" in line
    assert "speculative-algorithm" not in at_c1  # three choices: not a pair knob
