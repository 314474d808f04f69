"""The report of a real small sweep against the simulated node, checked against the MLflow runs.

One sweep per hardware profile (module-scoped: real Ray, the real simulator, a real MLflow
store under a temp dir). The search space forces several EAGLE-3 trials: 2 plain
configurations and 5 EAGLE-3 ones, 7 trials. Every figure the report states is recomputed here
from the child runs read back with `Tracker.trials`, and the write-up's diagnosis must show:
on the PCIe node EAGLE-3's measured accept length sits below the break-even accept length, on
the H200 NVLink node above it.
"""

from __future__ import annotations

import csv
import html
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import DROP, make_spec, write_spec

from spec_sweep.cli import main
from spec_sweep.core.config import normalize_config
from spec_sweep.core.history import History
from spec_sweep.core.names import ranked_metric
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.node.backends import SimBackend
from spec_sweep.node.command import build_command
from spec_sweep.orchestrate.driver import sweep
from spec_sweep.present.report import build_report
from spec_sweep.spec import SweepSpec, parse_value
from spec_sweep.spec_load import load_spec
from spec_sweep.store.replay import export_columns
from spec_sweep.store.sweeps import budget_in_force
from spec_sweep.store.tracker import Tracker

PCIE = "rtx-pro-6000-pcie-x8"
H200 = "h200-nvlink-x8"
MODELS = {PCIE: "moonshotai/Kimi-K2.5", H200: "deepseek-ai/DeepSeek-V3"}


def test_the_report_counts_against_the_budget_the_sweep_ran_with(tmp_path: Path) -> None:
    """`spec-sweep run --trials 4` of a spec whose file says 10, then `spec-sweep report` of
    that file: the report's budget is the 4 in force (a real store, recorded as the driver
    records a sweep; no Ray)."""
    sweep_file = write_spec(
        tmp_path,
        name="budget",
        search_space={
            "include": [],
            "params": {"cuda-graph-max-bs": {"choices": [64, 128, 256, 512], "default": 512}},
        },
        baseline=DROP,
        budget={"trials": 10},
    )
    spec = load_spec(sweep_file)
    ran = spec.model_copy(update={"budget": spec.budget.model_copy(update={"trials": 4})})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, spec.experiment)
    parent, _ = tracker.start_sweep(ran, state_id="budget", simulate=True)
    for i, graph in enumerate([512, 256, 128, 64]):
        run = tracker.start_trial(parent, trial_id=f"t{i:04d}", config={"cuda-graph-max-bs": graph})
        metrics = {"output_throughput": 80.0 + i}
        tracker.finish_trial(
            run, failure_mode=FailureMode.NONE, metrics=metrics, reason="ok", elapsed_s=1.0
        )
    out = tmp_path / "report"
    argv = ["report", str(sweep_file), "--tracking-uri", uri, "--state-dir", str(tmp_path)]

    assert main([*argv, "-o", str(out)]) == 0

    assert "4 trials finished of a budget of 4 (" in (out / "report.html").read_text()
    # a resumed run with another budget is reported against that one
    tracker.start_sweep(
        ran.model_copy(update={"budget": spec.budget}), state_id="budget", simulate=True
    )
    assert budget_in_force(spec, tracker, parent).budget.trials == 10


@dataclass(frozen=True)
class Swept:
    """A finished sweep and where it lives."""

    profile: str
    spec: SweepSpec
    root: Path
    state_root: Path
    uri: str
    parent_run_id: str

    def records(self) -> list[TrialRecord]:
        """The child runs, read back from the store."""
        return Tracker(self.uri, self.spec.experiment).trials(self.parent_run_id)


@pytest.fixture(scope="module", params=[PCIE, H200])
def swept(
    request: pytest.FixtureRequest, ray_cluster: str, tmp_path_factory: pytest.TempPathFactory
) -> Swept:
    """A real 7-trial sweep against the simulated node of one hardware profile."""
    profile: str = request.param
    root = tmp_path_factory.mktemp(profile)
    eagle = {"speculative-algorithm": "EAGLE3"}
    spec = make_spec(
        root,
        file="sweep.yaml",
        name=f"report-{profile}",
        description=f"report integration test on {profile}",
        node={
            "model": MODELS[profile],
            "draft_model": "eagle3-draft",
            "server_args": {"tp-size": 8, "trust-remote-code": True, "cuda-graph-max-bs": 128},
            "boot_timeout_s": 120,
            "request_timeout_s": 60,
            "sim_profile": profile,
        },
        search_space={
            "include": DROP,
            "params": {
                "speculative-algorithm": {"choices": [None, "EAGLE3"]},
                "enable-flashinfer-allreduce-fusion": {
                    "choices": [False, True],
                    "default": False,
                    "when": {"speculative-algorithm": None},
                },
                "speculative-num-steps": {"int": [1, 5], "default": 3, "when": eagle},
                "speculative-eagle-topk": {"choices": [1], "default": 1, "when": eagle},
            },
        },
        workload={"output_len": 16, "warmup_prompts": 0, "seed": 0},
        budget={"trials": 7, "max_concurrent": 1, "trial_timeout_s": 300},
        searcher={"kind": "random"},
    )
    uri = f"sqlite:///{root}/mlflow.db"
    outcome = sweep(
        spec,
        backend=SimBackend(spec, extra_env={"SPEC_SWEEP_SIM_TIME_SCALE": "0"}, grace_s=2.0),
        state_dir=root / "state",
        tracking_uri=uri,
        address=ray_cluster,
        report=False,  # the tests build it (and `spec-sweep report` must log it by itself)
    )
    outcome.state.close()
    return Swept(profile, spec, root, root / "state", uri, outcome.parent_run_id)


def _finished(records: list[TrialRecord]) -> dict[str, TrialRecord]:
    out: dict[str, TrialRecord] = {}
    for record in records:
        if record.finished:
            out.setdefault(record.trial_id, record)
    return out


def test_sweep_ran_the_whole_space(swept: Swept) -> None:
    finished = _finished(swept.records())
    assert len(finished) == 7
    eagle = [r for r in finished.values() if r.config.get("speculative-algorithm") == "EAGLE3"]
    assert len(eagle) == 5
    assert all(r.failure_mode is FailureMode.NONE for r in eagle)


def test_report_matches_the_mlflow_runs(swept: Swept, tmp_path: Path) -> None:
    records = swept.records()
    result = build_report(
        History(swept.spec, records), out_dir=tmp_path / "report", parent_run_id=swept.parent_run_id
    )
    finished = _finished(records)
    measured = [r for r in finished.values() if r.failure_mode is FailureMode.NONE]

    # The best configuration, recomputed from the runs.
    best = max(measured, key=lambda r: r.metrics["output_throughput"])
    assert result.best_trial_id == best.trial_id
    text = result.html.read_text()
    assert html.escape(build_command(swept.spec, best.config).shell()) in text
    base = finished["t0000"]
    assert base.failure_mode is FailureMode.NONE
    up = best.metrics["output_throughput"] / base.metrics["output_throughput"]
    assert f"x{up:.3f}" in text

    # The break-even figures, recomputed from the runs.
    base_speed = base.metrics["decode_speed_p50"]
    eagle = [r for r in measured if r.config.get("speculative-algorithm") == "EAGLE3"]
    assert [d.trial_id for d in result.diagnosis] == [r.trial_id for r in eagle]
    for diag, record in zip(result.diagnosis, eagle, strict=True):
        accept = record.metrics["accept_length"]
        speed = record.metrics["decode_speed_p50"]
        assert diag.baseline_trial_id == "t0000"
        assert diag.accept_length == pytest.approx(accept)
        assert diag.decode_speed == pytest.approx(speed)
        assert diag.baseline_decode_speed == pytest.approx(base_speed)
        assert diag.cycle_ms == pytest.approx(1000.0 * accept / speed)
        assert diag.break_even_accept_length == pytest.approx(base_speed * accept / speed)
        assert f"{diag.break_even_accept_length:.3f}" in text
        assert diag.max_accept_length == record.config["speculative-num-steps"] + 1

    # The write-up's diagnosis, in numbers.
    if swept.profile == PCIE:
        for diag in result.diagnosis:
            assert diag.accept_length < diag.break_even_accept_length, diag
            assert diag.decode_speed < diag.baseline_decode_speed
        assert best.config.get("speculative-algorithm") is None
        assert "loses on this node" in text
        # FlashInfer all-reduce fusion is not supported on SM120: a failure with its excerpt.
        assert any(r.failure_mode is FailureMode.UNSUPPORTED for r in finished.values())
        assert 'id="mode-unsupported"' in text
        assert "failures.png" in {p.name for p in result.figures}
    else:
        for diag in result.diagnosis:
            assert diag.accept_length > diag.break_even_accept_length, diag
            assert diag.decode_speed > diag.baseline_decode_speed
        assert best.config.get("speculative-algorithm") == "EAGLE3"
        assert "wins on this node" in text
    names = {p.name for p in result.figures}
    assert {"progress.png", "effects.png", "speculative.png", "latency.png"} <= names
    assert "importance.png" in names


def test_report_command_logs_to_the_parent_run(swept: Swept) -> None:
    sweep_file = str(swept.root / "sweep.yaml")
    args = ["--tracking-uri", swept.uri, "--state-dir", str(swept.state_root)]
    assert main(["report", sweep_file, *args]) == 0
    folder = swept.state_root / swept.spec.name / "report"
    assert (folder / "report.html").is_file()
    client = Tracker(swept.uri, swept.spec.experiment).client
    logged = {Path(a.path).name for a in client.list_artifacts(swept.parent_run_id, "report")}
    assert {"report.html", "progress.png", "speculative.png", "trials.csv"} <= logged


def test_cli_report_and_export_find_the_newest_sweep(
    swept: Swept, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the state folder, `report` and `export` use the experiment's newest sweep run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPEC_SWEEP_PROJECT_DIR", str(tmp_path))
    sweep_file = str(swept.root / "sweep.yaml")
    out = tmp_path / "rep"
    assert main(["report", sweep_file, "--tracking-uri", swept.uri, "-o", str(out)]) == 0
    assert (out / "report.html").is_file()
    table = tmp_path / "results.csv"
    assert main(["export", sweep_file, "--tracking-uri", swept.uri, "-o", str(table)]) == 0
    assert table.is_file()


def test_export_replays_every_trial(swept: Swept, tmp_path: Path) -> None:
    table = tmp_path / "results.csv"
    sweep_file = str(swept.root / "sweep.yaml")
    args = ["--tracking-uri", swept.uri, "--state-dir", str(swept.state_root), "-o", str(table)]
    assert main(["export", sweep_file, *args]) == 0
    with table.open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == export_columns(swept.spec)
        rows = list(reader)
    finished = _finished(swept.records())
    assert len(rows) == len(finished)
    by_config = {
        str(sorted(normalize_config(swept.spec, r.config).items())): r for r in finished.values()
    }
    for row in rows:
        config = normalize_config(swept.spec, {k: parse_value(row[k]) for k in swept.spec.params})
        record = by_config[str(sorted(config.items()))]
        assert row["failure_mode"] == (record.failure_mode or FailureMode.CRASH).value
        for name, value in record.metrics.items():
            if name == ranked_metric(swept.spec.objective.metric):
                continue  # the trials view's sort key, not a measurement: not replayed
            assert float(row[name]) == value


def test_missing_sweep_is_one_clear_error(
    swept: Swept, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_file = str(swept.root / "sweep.yaml")
    empty = f"sqlite:///{tmp_path}/empty.db"
    assert main(["report", sweep_file, "--tracking-uri", empty, "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "run the sweep first" in err
