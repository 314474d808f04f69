"""What a configuration and a sweep cost: dollars per million tokens, the grid size (core.cost)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import harness
import pytest

from spec_sweep.core.cost import cost_metrics, grid_size, objective_throughput_metric
from spec_sweep.errors import SpecError
from spec_sweep.spec import ParamSpec


def test_cost_per_million_tokens_comes_from_the_node_price_and_the_objective_levels_throughput(
    tmp_path: Path,
) -> None:
    spec = harness.make_spec(
        tmp_path,
        node={"cost_per_hour": 98.32},
        workload={"concurrency": [1, 32]},
        objective={"metric": "output_throughput_c32"},
    )
    assert objective_throughput_metric(spec) == "output_throughput_c32"
    metrics = {"output_throughput_c1": 80.0, "output_throughput_c32": 1000.0}
    # 98.32 $/h over 1000 tok/s x 3600 s/h = 3.6 M tok/h -> 27.311 $/M tokens
    assert cost_metrics(spec, metrics) == {"usd_per_million_tokens": pytest.approx(27.311111)}
    assert cost_metrics(spec, {"output_throughput_c1": 80.0}) == {}
    unpriced = harness.make_spec(tmp_path)
    assert cost_metrics(unpriced, {"output_throughput": 80.0}) == {}


@pytest.mark.parametrize("bad", [-1, 0, "cheap", ".inf"])
def test_a_bad_node_cost_is_a_one_line_spec_error(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(SpecError) as err:
        harness.make_spec(tmp_path, node={"cost_per_hour": bad})
    text = str(err.value)
    assert "node.cost_per_hour" in text
    assert "\n" not in text.strip()


def test_grid_size_counts_conditional_parameters_only_where_active(tmp_path: Path) -> None:
    spec = harness.make_spec(tmp_path)  # search_spaces/speculative.yaml
    params = spec.params
    brute = set()
    keys = list(params)
    for combo in itertools.product(*(params[k].values() for k in keys)):
        config = dict(zip(keys, combo, strict=True))
        if config["speculative-algorithm"] is None:
            config = {"speculative-algorithm": None}
        brute.add(tuple(sorted((k, repr(v)) for k, v in config.items())))
    assert grid_size(params) == len(brute) == 1 + 7 * 4 * 4
    assert grid_size({"x": ParamSpec.model_validate({"float": [0.1, 0.9]})}) is None
