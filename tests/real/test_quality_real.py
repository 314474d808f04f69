"""The quality gate on a real GPU: the baseline and benign flags pass it through the trial path.

The gate's defaults (`quality.max_equivalent_deficit` 0.003 nats per token) were set from
`scripts/real_quality.py`'s measurements (docs/concepts/quality-gate.md). This test
runs the gate as a sweep does, 16 prompts x 64 tokens: the baseline (which records its top
log-probabilities), then the baseline in a fresh boot and benign flags that change kernels (a
smaller CUDA-graph batch, no custom all-reduce), each judged against it. It writes each one's
quality metrics to `results/quality-agreement.json` under `$SPEC_SWEEP_REAL_OUT` and asserts what
must hold for the gate to be usable: every benign configuration is identical or equivalent. It
runs on real SGLang and a GPU (the `real_sglang` marker of tests/real/conftest.py), on the model
real_harness.py chooses (the real SmolLM2 checkpoint by default; with dummy weights it measures
kernel determinism only).
"""

from __future__ import annotations

import json
from pathlib import Path

from real_harness import cgbs_key

from spec_sweep.core.config import resolve_config
from spec_sweep.core.outcome import FailureMode
from spec_sweep.node.trial import run_trial
from spec_sweep.spec import QualitySpec
from spec_sweep.spec_load import load_spec


def _benign() -> dict[str, dict[str, object]]:
    return {
        "baseline-again": {},
        "graph-bs-4": {cgbs_key(): 4},
        "no-custom-allreduce": {"disable-custom-all-reduce": True},
    }


def test_baseline_agrees_with_itself_across_boots_and_benign_flags(
    matrix: Path, out_dir: Path, tmp_path: Path
) -> None:
    spec = load_spec(matrix)
    spec = spec.model_copy(update={"quality": QualitySpec(num_prompts=16, tokens=64)})
    trials = tmp_path / "trials"
    base = run_trial(
        spec,
        resolve_config(spec, {}, what="baseline"),
        trial_dir=trials / "t0000" / "attempt1",
        trial_id="t0000",
    )
    assert base.failure_mode is FailureMode.NONE, base.reason
    found: dict[str, dict[str, float]] = {}
    for i, (name, sets) in enumerate(_benign().items(), start=1):
        trial_id = f"t{i:04d}"
        result = run_trial(
            spec,
            resolve_config(spec, sets, what=name),
            trial_dir=trials / trial_id / "attempt1",
            trial_id=trial_id,
            state_dir=tmp_path,
        )
        found[name] = {k: v for k, v in result.metrics.items() if k.startswith("quality_")}
        print(f"{name}: {found[name]} ({result.failure_mode.value}: {result.reason})")
        assert result.failure_mode is FailureMode.NONE, result.reason
    (out_dir / "results" / "quality-agreement.json").write_text(json.dumps(found, indent=1))
    bound = QualitySpec().max_equivalent_deficit
    assert all(v.get("quality_deficit", 1.0) <= bound for v in found.values()), found
    assert all(v.get("quality_lossy") == 0.0 for v in found.values()), found
