"""What "better" means (core.objective.Objective): value, direction, speed-up, constraints."""

from __future__ import annotations

import math
from pathlib import Path

from harness import make_spec

from spec_sweep.core.objective import Objective


def test_a_maximised_objective(tmp_path: Path) -> None:
    o = Objective.of(make_spec(tmp_path))
    assert (o.metric, o.mode, o.sign, o.direction) == ("output_throughput", "max", 1.0, "maximize")
    assert o.value({"output_throughput": 80}) == 80.0
    assert o.value({"output_throughput": math.nan}) is None
    assert o.value({}) is None
    assert o.better(90.0, 80.0)
    assert not o.better(80.0, 90.0)
    assert o.better(1.0, None)
    assert sorted([80.0, 95.0, 88.0], key=o.key) == [95.0, 88.0, 80.0]
    assert o.speedup(90.0, 80.0) == 1.125
    assert o.speedup(90.0, None) is None
    assert o.speedup_metrics({"output_throughput": 90.0}, 80.0) == {"speedup_vs_baseline": 1.125}
    assert o.speedup_metrics({}, 80.0) == {}


def test_a_minimised_objective_is_better_lower_and_speeds_up_above_one(tmp_path: Path) -> None:
    o = Objective.of(make_spec(tmp_path, objective={"metric": "ttft_p99_ms", "mode": "min"}))
    assert (o.sign, o.direction) == (-1.0, "minimize")
    assert o.better(700.0, 900.0)
    assert sorted([900.0, 700.0], key=o.key) == [700.0, 900.0]
    assert o.speedup(450.0, 900.0) == 2.0


def test_constraints(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        objective={
            "metric": "output_throughput",
            "constraints": {"ttft_p99_ms": {"max": 2000}, "output_throughput": {"min": 50}},
        },
    )
    o = Objective.of(spec)
    ok = {"output_throughput": 80.0, "ttft_p99_ms": 1000.0}
    assert o.meets(ok)
    assert o.broken(ok) == []
    slow = {"output_throughput": 80.0, "ttft_p99_ms": 2500.0}
    assert o.broken(slow) == ["ttft_p99_ms"]
    assert o.violations(slow)["ttft_p99_ms"] > 0
    # A constraint on a metric that was not measured is violated.
    assert o.violations({"output_throughput": 80.0})["ttft_p99_ms"] == 1.0
