"""One ranking, rendered everywhere the same: the terminal summary, the HTML report's top table
and the MLflow trials view agree on rank 1 (present.sweep_view, store.ui_view).

A replayed sweep (real Ray, real MLflow store, the real recording path) over a table built so
that every shortcut ranks differently: the fastest measured trial breaks the TTFT constraint, a
trial that failed the quality gate (`wrong_output`) measured the highest throughput of all, and
the best configuration is booted again by confirmation. Rank 1 must be the best search trial
that was measured and meets the constraints, in all three renderings.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from harness import DROP, make_spec
from mlflow.tracking import MlflowClient
from rich.console import Console

from spec_sweep.core import names
from spec_sweep.node.backends import make_backend
from spec_sweep.orchestrate.driver import sweep
from spec_sweep.present.terminal import print_summary
from spec_sweep.store.ui_view import view_key

pytestmark = pytest.mark.usefixtures("ray_cluster")

ROOT = Path(__file__).resolve().parents[2]
# (cuda-graph-max-bs, mem-fraction-static) -> output_throughput, ttft_p99_ms, failure_mode
TABLE = {
    (512, 0.88): (80.0, 900.0, "none"),  # the baseline
    (256, 0.88): (95.0, 2500.0, "none"),  # the fastest measured, breaks ttft_p99_ms <= 2000
    (128, 0.88): (88.0, 1200.0, "none"),  # the best that meets the constraint
    (64, 0.88): (99.0, 1000.0, "wrong_output"),  # measured, then failed the quality gate
    (512, 0.8): (70.0, 800.0, "none"),
    (256, 0.8): (None, None, "oom"),
    (128, 0.8): (86.0, 1100.0, "none"),
    (64, 0.8): (87.5, 1500.0, "none"),
}


def _table(path: Path) -> Path:
    lines = ["cuda-graph-max-bs,mem-fraction-static,output_throughput,ttft_p99_ms,failure_mode"]
    for (cgbs, mem), (thr, ttft, mode) in TABLE.items():
        cells = ["" if v is None else repr(v) for v in (thr, ttft)]
        lines.append(f"{cgbs},{mem},{cells[0]},{cells[1]},{mode}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_terminal_report_and_mlflow_view_agree_on_rank_one(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    spec = make_spec(
        tmp_path / "sweeps",
        name="agree",
        search_space={
            "include": [],
            "params": {
                "cuda-graph-max-bs": {"choices": [64, 128, 256, 512], "default": 512},
                "mem-fraction-static": {"choices": [0.8, 0.88], "default": 0.88},
            },
        },
        baseline=DROP,
        objective={"metric": "output_throughput", "constraints": {"ttft_p99_ms": {"max": 2000}}},
        budget={"trials": 8, "confirm": 2, "confirm_repeats": 2},
        searcher={"kind": "grid", "seed": 0},
    )
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    outcome = sweep(
        spec,
        backend=make_backend(spec, replay=_table(tmp_path / "table.csv")),
        state_dir=tmp_path / ".spec_sweep",
        tracking_uri=uri,
    )
    outcome.state.close()
    best = outcome.history.best
    assert best is not None
    assert best.config == {"cuda-graph-max-bs": 128, "mem-fraction-static": 0.88}
    assert any(r.trial_id.startswith(f"{best.trial_id}.r") for r in outcome.history.records)

    # The terminal summary's ranking table.
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=240, color_system=None), outcome)
    rows = [line for line in buffer.getvalue().splitlines() if re.match(r"^\W\s*1\s+\W", line)]
    assert re.findall(r"t\d{4}", rows[0]) == [best.trial_id]

    # The HTML report's top table.
    assert outcome.report is not None
    html = outcome.report.read_text()
    top = html[html.index("<h2>Top ") :]
    first = re.search(r"<tr><td>1</td><td>(t\d{4})</td>", top)
    assert first is not None
    assert first.group(1) == best.trial_id
    # The report's headline names what the summary says to launch: the recommendation.
    pick = outcome.view.pick
    assert pick is not None
    assert pick.recommended
    headline = f'<p class="big">Recommended (confirmed by its repeat boots): {pick.trial_id},'
    assert headline in html

    # The MLflow trials view, as the UI queries it.
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(spec.experiment)
    assert experiment is not None
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{view_key(outcome.parent_run_id)}"])
    direction = "ASC" if view["orderByAsc"] else "DESC"
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=view["searchFilter"],
        order_by=[f"{view['orderByKey']} {direction}"],
    )
    assert runs[0].data.tags[names.TAG_TRIAL_ID] == best.trial_id
    # Without the ranking metric, the objective alone would have put another trial first.
    by_objective = max(runs, key=lambda r: r.data.metrics.get("output_throughput", 0.0))
    assert by_objective.data.tags[names.TAG_TRIAL_ID] != best.trial_id
