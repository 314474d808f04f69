"""The real adaptive check: spec_sweep's adaptive config on real SGLang with a trained draft.

Run on one H200 (docs/evidence/real-gpus.md, "SGLang's adaptive mode"). On the
real SmolLM2-135M checkpoint with the EAGLE-3 head `scripts/train_test_draft.py` trains (skipped
without its `train_summary.json`), on the SGLang version real_harness.py chooses (0.5.17 in
`scripts/real_session.sh`'s `adaptive-0.5.17` job):

1. plain decoding and the 1-, 3- and 5-step chains are measured at 1, 8 and 32 concurrent
   requests, one `spec-sweep trial --json` each (`tests/real/adaptive.yaml`, rendered);
2. the adaptive configuration is built from those four results by the product's own builder
   (`core.adaptive.build_adaptive`, the one a sweep uses after its search); where the builder
   declines (one chain wins everywhere, or speculation nowhere), a schedule is forced from the
   measured per-level winners (0 where plain wins) so that the boot still exercises SGLang's
   switches, and the results say so;
3. that config is written to a file and booted with `--speculative-adaptive
   --speculative-adaptive-config FILE` through `spec-sweep trial --set ...=FILE`, and measured at
   the same three levels.

Checked: SGLang accepts the file (no "speculative_adaptive disabled" warning, the trial is
measured), its controller logs its initialization, the steps switch where the slots differ, and
every level is measured. Written to `$SPEC_SWEEP_REAL_OUT/results/adaptive-summary.json`: per
level the static chains, plain and the adaptive configuration, the config and how it was built;
that table is what docs/evidence/real-gpus.md shows beside the static configurations.

With `SPEC_SWEEP_REAL_ADAPTIVE_SWEEP=1`, a second test runs the same spec as a whole sweep
(`python -m spec_sweep.run`: the four configurations searched, then the adaptive phase through Ray
Tune) and checks the sweep recorded its adaptive judgement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from real_harness import ROOT, draft_path, render_spec, run_trial_cli, sglang_version, version_tuple

from spec_sweep.core.adaptive import build_adaptive, level_objective, slot_key
from spec_sweep.core.adaptive_rules import Slot, adaptive_version, config_text
from spec_sweep.core.config import resolve_config
from spec_sweep.core.history import History
from spec_sweep.core.outcome import FailureMode
from spec_sweep.core.record import TrialRecord
from spec_sweep.spec_load import load_spec

LEVELS = (1, 8, 32)
CHAINS = (1, 3, 5)
TEMPLATE = ROOT / "tests" / "real" / "adaptive.yaml"


def _needs_trained_draft() -> None:
    if not (draft_path() / "train_summary.json").is_file():
        pytest.skip(f"no trained draft in {draft_path()} (scripts/train_test_draft.py)")
    if version_tuple(sglang_version()) < (0, 5, 13):
        pytest.skip("per-batch-size adaptive configs need SGLang 0.5.13 or later")


def _ok(result: dict[str, Any]) -> None:
    assert result["failure_mode"] == "none", (
        f"{result['name']}: {result['failure_mode']}: {result['reason']}\n{result['log_excerpt']}"
    )


def _record(spec: Any, index: int, sets: dict[str, Any], result: dict[str, Any]) -> TrialRecord:
    config = resolve_config(spec, {**spec.baseline, **sets}, what="the real check")
    return TrialRecord(
        run_id=result["name"],
        trial_id=f"t{index:04d}",
        status="FINISHED",
        config=config,
        failure_mode=FailureMode(result["failure_mode"]),
        metrics=dict(result["metrics"]),
        start_time=index,
    )


def _forced(spec: Any, records: list[TrialRecord]) -> tuple[str, int]:
    """A schedule from the measured per-level winners (0 where plain wins), made to switch."""
    rules = adaptive_version(spec.node.sglang_version)
    assert rules is not None
    metric = level_objective(spec).metric
    slots = []
    for level in LEVELS:
        name = f"{metric}_c{level}"
        best = max(records, key=lambda r: r.metrics.get(name, 0.0))
        steps = int(best.config.get("speculative-num-steps") or 0)
        if steps == 0 and not rules.zero_step:
            steps = 1
        slots.append(Slot(slot_key(spec, level), (steps,)))  # the product's keys
    if len({s.candidates for s in slots}) == 1:  # one winner everywhere: make it switch anyway
        slots = [Slot(slot_key(spec, c), (s,)) for c, s in zip(LEVELS, (5, 3, 1), strict=True)]
    initial = next((s.candidates[0] for s in slots if s.candidates[0] > 0), 3)
    return config_text(slots, rules), initial


def test_adaptive_config_is_accepted_switches_and_is_measured_at_three_levels(
    model: Path, out_dir: Path
) -> None:
    del model  # made first (conftest)
    _needs_trained_draft()
    spec_path = render_spec(TEMPLATE, out_dir / "specs" / f"adaptive-{sglang_version()}.yaml")
    spec = load_spec(spec_path)
    runs: dict[str, dict[str, Any]] = {}
    records = []
    configs: list[tuple[str, dict[str, Any]]] = [("plain", {})]
    configs += [(f"s{s}", {"speculative-algorithm": "EAGLE3", "speculative-num-steps": s})
                for s in CHAINS]  # fmt: skip
    for index, (name, sets) in enumerate(configs):
        result = run_trial_cli(f"adaptive-static-{name}", sets, out_dir, spec=spec_path)
        _ok(result)
        runs[name] = result
        records.append(_record(spec, index, sets, result))

    build = build_adaptive(History(spec, records))
    if build.ok:
        assert build.text is not None
        assert build.initial_steps is not None
        text, initial, how = build.text, build.initial_steps, f"built: {build.reason}"
    else:
        text, initial = _forced(spec, records)
        how = f"not built ({build.reason}); forced from the measured per-level winners"
    config_file = out_dir / "results" / "adaptive-config.json"
    config_file.write_text(text + "\n")
    sets = {
        "speculative-algorithm": "EAGLE3",
        "speculative-num-steps": initial,
        "speculative-adaptive": True,
        "speculative-adaptive-config": str(config_file),
    }
    adaptive = run_trial_cli("adaptive-boot", sets, out_dir, spec=spec_path)
    log = adaptive.get("server_log", "")
    lines = [line for line in log.splitlines() if "daptive" in line]
    assert "speculative_adaptive disabled" not in log, "\n".join(lines[-20:])
    _ok(adaptive)
    assert "AdaptiveSpeculativeParams initialized" in log, "\n".join(lines[-20:])
    slots = json.loads(text)
    if len({json.dumps(v) for v in slots.values()}) > 1:
        switched = "Switch adaptive runtime state" in log or "Adaptive spec params updated" in log
        assert switched, "\n".join(lines[-20:])
    metric = level_objective(spec).metric
    table = {
        f"c{level}": {
            **{name: r["metrics"].get(f"{metric}_c{level}") for name, r in runs.items()},
            "adaptive": adaptive["metrics"].get(f"{metric}_c{level}"),
            "adaptive_accept_length": adaptive["metrics"].get(f"accept_length_c{level}"),
        }
        for level in LEVELS
    }
    for level in LEVELS:
        assert (table[f"c{level}"]["adaptive"] or 0) > 0
    summary = {
        "sglang_version": sglang_version(),
        "config": slots,
        "initial_steps": initial,
        "how": how,
        "levels": table,
        "log_lines": lines[-40:],
    }
    (out_dir / "results" / "adaptive-summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "log_lines"}, indent=1))


@pytest.mark.skipif(
    os.environ.get("SPEC_SWEEP_REAL_ADAPTIVE_SWEEP") != "1",
    reason="the whole sweep with the adaptive phase: set SPEC_SWEEP_REAL_ADAPTIVE_SWEEP=1",
)
def test_real_sweep_with_the_adaptive_phase(model: Path, out_dir: Path, tmp_path: Path) -> None:
    del model
    _needs_trained_draft()
    spec_path = render_spec(TEMPLATE, out_dir / "specs" / f"adaptive-sweep-{sglang_version()}.yaml")
    store = tmp_path / "mlruns"
    uri = f"sqlite:///{store / 'mlflow.db'}"
    command = [
        sys.executable, "-m", "spec_sweep.run", str(spec_path),
        "--tracking-uri", uri, "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    store.mkdir()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    (out_dir / "logs" / "adaptive-sweep.txt").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "one configuration for every load" in done.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(load_spec(spec_path).experiment)
    assert experiment is not None
    sweeps = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`spec_sweep.kind` = 'sweep'"
    )
    tags = sweeps[0].data.tags
    assert "spec_sweep.adaptive" in tags
    (out_dir / "results" / "adaptive-sweep.json").write_text(
        json.dumps({k: v for k, v in tags.items() if k.startswith("spec_sweep.")}, indent=1)
    )
    if tags["spec_sweep.adaptive"] != "not built":
        boots = client.search_runs(
            [experiment.experiment_id], filter_string="tags.`spec_sweep.confirms` = 'adaptive'"
        )
        assert boots
        for run in boots:
            assert run.data.tags["failure_mode"] == "none", run.data.tags.get("spec_sweep.reason")
