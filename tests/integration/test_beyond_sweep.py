"""A whole simulated sweep with a node price, two concurrency levels and the quality gate on.

The simulated node corrupts greedy outputs whenever EAGLE-3 is on (`SPEC_SWEEP_SIM_CORRUPT_OUTPUT`
in `node.env`, the simulator's own fault): every speculative trial must end as `wrong_output`
(recorded with its `quality.json` and its confident share in MLflow), never be the winner, and
the baseline must win; cost per token is recorded per measured trial; the report and the summary
show cost against a grid, the winner per level and the quality gate's verdicts.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from harness import make_spec
from mlflow.tracking import MlflowClient
from rich.console import Console

from spec_sweep import cli
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.backends import make_backend
from spec_sweep.orchestrate.driver import sweep
from spec_sweep.present.report.build import build_report
from spec_sweep.present.terminal import print_summary

pytestmark = pytest.mark.usefixtures("ray_cluster")

ROOT = Path(__file__).resolve().parents[2]


def test_corrupting_speculative_trials_end_wrong_output_and_cost_and_loads_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    (tmp_path / "sweeps").mkdir()
    spec = make_spec(
        tmp_path / "sweeps",
        name="beyond",
        node={
            "cost_per_hour": 40.0,
            "env": {"SPEC_SWEEP_SIM_CORRUPT_OUTPUT": "speculative-algorithm=EAGLE3"},
        },
        workload={"concurrency": [1, 4], "warmup_prompts": 0},
        objective={"metric": "output_throughput_c1"},
        quality={"num_prompts": 4, "tokens": 8},
        budget={"trials": 3},
    )
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    outcome = sweep(
        spec,
        backend=make_backend(spec, simulate=True, grace_s=2.0),
        state_dir=tmp_path / ".spec_sweep",
        tracking_uri=uri,
        report=False,
    )
    finished = outcome.history.done
    modes = {r.trial_id: r.failure_mode for r in finished}
    assert modes["t0000"] is FailureMode.NONE
    speculative = [r for r in finished if r.config.get("speculative-algorithm") == "EAGLE3"]
    # A speculative trial that booted and answered is wrong_output (some trees fail at boot).
    assert not [r for r in speculative if r.failure_mode is FailureMode.NONE], modes
    wrong = [r for r in speculative if r.failure_mode is FailureMode.WRONG_OUTPUT]
    assert wrong, modes
    best = outcome.history.best
    assert best is not None
    assert best.trial_id == "t0000"
    price = best.metrics["usd_per_million_tokens"]
    assert price == pytest.approx(40.0 / (best.metrics["output_throughput_c1"] * 3600) * 1e6)

    client = MlflowClient(uri)
    artifacts = {a.path for a in client.list_artifacts(wrong[0].run_id)}
    assert "quality.json" in artifacts
    quality = json.loads(
        Path(client.download_artifacts(wrong[0].run_id, "quality.json", str(tmp_path))).read_text()
    )
    assert quality["passed"] is False
    assert quality["first_diverging"]["verdict"] == "confident"
    assert quality["quality_class"] == "wrong"
    assert quality["first_diverging"]["baseline_text"] != quality["first_diverging"]["trial_text"]
    assert client.get_run(wrong[0].run_id).data.metrics["quality_confident_share"] > 0
    assert outcome.history.baseline is not None
    base_metrics = client.get_run(outcome.history.baseline.run_id).data.metrics
    assert base_metrics["quality_confident_share"] == 0.0
    assert base_metrics["quality_first_divergence"] == 8.0

    report = build_report(outcome.history, out_dir=tmp_path / "report")
    html = report.html.read_text()
    assert "Winner per concurrency level" in html
    assert "a full grid of 113 configurations" in html
    assert "per million output tokens" in html
    assert (
        'id="quality">quality gate (4 prompts x 8 tokens; equivalent up to a deficit of 0.003 '
        "nats/token, lossy rejected)" in html
    )
    buffer = io.StringIO()
    print_summary(Console(file=buffer, width=200), outcome)
    text = buffer.getvalue()
    assert "winner per concurrency level (output_throughput):" in text
    assert "GPU-hours" in text
    assert "wrong_output" in text
    words = " ".join(text.split())
    assert "reference t0000 (the baseline); " in words
    assert f"{len(wrong)} wrong_output first wrong_output, {wrong[0].trial_id}: " in words

    # `spec-sweep trial` against the sweep's state folder is judged by the sweep's baseline
    reference = tmp_path / ".spec_sweep" / "beyond" / "trials" / "t0000" / "attempt1"
    changed = [
        f"--set={k}={json.dumps(v)}"
        for k, v in wrong[0].config.items()
        if v != outcome.history.baseline.config.get(k)
    ]
    for sets, mode in ((changed, "wrong_output"), ([], "none")):
        argv = ["trial", str(spec.source), *sets, "--simulate", "--json"]
        assert cli.main([*argv, "--state-dir", str(tmp_path / ".spec_sweep")]) == 0
        manual = json.loads(capsys.readouterr().out)
        assert manual["failure_mode"] == mode, manual["reason"]
        assert manual["quality"]["judged"] is True, manual["quality"]
        assert manual["quality"]["reference"] == str(reference / "quality.json")
        expected = "wrong" if mode == "wrong_output" else "identical"
        assert manual["quality"]["quality_class"] == expected, manual["quality"]
        assert Path(manual["trial_dir"]).parent == reference.parents[2] / "manual"
