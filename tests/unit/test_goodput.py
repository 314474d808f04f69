"""The goodput bisection and its SLA (node.goodput), pure."""

from __future__ import annotations

from pathlib import Path

import harness
import pytest

from spec_sweep.core.cost import objective_throughput_metric
from spec_sweep.errors import SpecError
from spec_sweep.node.goodput import bisect_highest, sla_holds


def test_goodput_needs_an_sla_and_the_sla_names_level_metrics(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="needs 'sla'"):
        harness.make_spec(tmp_path, workload={"goodput": {"max_concurrency": 8}})
    with pytest.raises(SpecError, match="not a level metric"):
        harness.make_spec(tmp_path, workload={"sla": {"itl_p95_ms": 50}})
    with pytest.raises(SpecError, match="swap them"):
        harness.make_spec(
            tmp_path,
            workload={
                "sla": {"itl_p99_ms": 50},
                "goodput": {"min_concurrency": 9, "max_concurrency": 8},
            },
        )
    spec = harness.make_spec(
        tmp_path,
        workload={"sla": {"itl_p99_ms": 50}, "goodput": {"max_concurrency": 8}},
        objective={"metric": "goodput_throughput"},
    )
    assert objective_throughput_metric(spec) == "goodput_throughput"


def test_bisect_highest_finds_the_last_level_that_holds_in_few_probes() -> None:
    for limit in range(0, 40):
        probed: list[int] = []

        def holds(c: int, limit: int = limit, probed: list[int] = probed) -> bool:
            probed.append(c)
            return c <= limit

        found = bisect_highest(1, 32, holds)
        assert found == (None if limit < 1 else min(limit, 32))
        assert len(probed) <= 7
    assert bisect_highest(4, 4, lambda c: True) == 4


def test_sla_holds_only_when_every_bound_is_measured_and_met() -> None:
    sla = {"ttft_p99_ms": 2000.0, "itl_p99_ms": 50.0}
    assert sla_holds(sla, {"ttft_p99_ms": 1999.0, "itl_p99_ms": 50.0}) == (True, "")
    ok, why = sla_holds(sla, {"ttft_p99_ms": 2500.0})
    assert not ok
    assert why == "ttft_p99_ms 2500 > 2000; itl_p99_ms not measured"
