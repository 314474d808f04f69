"""search_efficiency.py's boot noise (`--boot-noise`): a fresh factor per boot, judged by truth.

On the real H200 table (`benchmarks/real/table-0.5.17/rows.csv`, its first boots, the grid's
rejected and rewritten trees filled in as `real_table.py` does):
noise off changes nothing, noise on draws a fresh lognormal factor on the objective per boot
(deterministic per stream), and a run is read by the true value of what it measured best, so
no noisy run can read above the table's optimum.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

from spec_sweep.core.config import baseline_config
from spec_sweep.spec_load import load_spec
from spec_sweep.store.replay import load_replay

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import real_table
import search_efficiency as se

ROOT = Path(__file__).resolve().parents[2]
METRIC = "output_throughput_c1"


@pytest.fixture(scope="module")
def table() -> se.Table:
    spec = load_spec(ROOT / "sweeps" / "real_table_smollm2.yaml")
    replay = load_replay(ROOT / "benchmarks" / "real" / "table-0.5.17" / "rows.csv", spec)
    whole, coverage = real_table.complete(spec, replay)  # the grid's rejected trees filled in
    assert not coverage.missing
    return se.table_from("real", spec, whole)


def test_no_noise_is_the_table(table: se.Table) -> None:
    assert table.noisy(0.0, "x") is table
    config = baseline_config(table.spec)
    _, metrics = se._trial(table, config)
    assert metrics[METRIC] == table.replay.lookup(config).metrics[METRIC]
    run = se.Run(hit=None, best=[1.0], configs=[config])
    assert se.judged(table, run) is run


def test_each_boot_draws_a_fresh_factor(table: se.Table) -> None:
    config = baseline_config(table.spec)
    truth = table.true_value(config)
    assert truth is not None
    noisy = table.noisy(0.2, "stream")
    logs = [math.log(se._trial(noisy, config)[1][METRIC] / truth) for _ in range(2000)]
    assert len(set(logs)) == 2000
    assert abs(statistics.fmean(logs)) < 0.02
    assert statistics.stdev(logs) == pytest.approx(0.2, abs=0.015)
    again = table.noisy(0.2, "stream")
    assert math.log(se._trial(again, config)[1][METRIC] / truth) == logs[0]
    other = table.noisy(0.2, "another stream")
    assert math.log(se._trial(other, config)[1][METRIC] / truth) != logs[0]


def test_a_run_is_read_by_the_truth_of_what_it_measured_best(table: se.Table) -> None:
    noisy = table.noisy(0.2, "judge")
    first = baseline_config(noisy.spec)
    second = dict(noisy.best_config)
    run = se.Run(hit=None, best=[9e9, 9e9, 9e9], configs=[first, None, second])
    run.tried = [first, second, first]  # the optimum measured second, reported third
    read = se.judged(noisy, run)
    assert read.best == [noisy.true_value(first), noisy.true_value(first), noisy.best]
    assert read.found == [noisy.true_value(first), noisy.best, noisy.best]


def test_noisy_runs_never_read_above_the_optimum(table: se.Table) -> None:
    cells = se.run_family(
        [table], budgets=[10, 20], strategies=["random", "ours"], search_seeds=3, boot_noise=0.5
    )
    ratios = [r for cell in cells for values in cell.ratios.values() for r in values]
    assert len(ratios) == 12
    assert max(ratios) <= 1.0
    found = [r for cell in cells for values in cell.found.values() for r in values]
    assert len(found) == 12
    assert all(a <= b <= 1.0 for a, b in zip(ratios, found, strict=True))
    noiseless = se.run_family([table], budgets=[10, 20], strategies=["random"], search_seeds=3)
    assert max(r for values in noiseless[0].ratios.values() for r in values) <= 1.0
