"""The quality gate's noise floor on a real GPU: greedy agreement of the baseline with itself.

The default `quality.min_agreement` (0.5) is a conservative guess, not a measurement. This test
measures what the default should rest on: the token agreement of the baseline's greedy outputs
across fresh boots, and with benign flags that change kernels (a smaller CUDA-graph batch, no
custom all-reduce). It writes the agreements to `results/quality-agreement.json` under
`$SPEC_SWEEP_REAL_OUT` and asserts only what must hold for the gate to be usable: a benign
configuration never falls below the default. It runs on real SGLang and a GPU (the
`real_sglang` marker of tests/real/conftest.py), on the model real_harness.py chooses (the real
SmolLM2 checkpoint by default; with dummy weights it measures kernel determinism only). The
top-logprob measurements the gate's margin will come from are `scripts/real_quality.py`'s.
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
    found: dict[str, float | None] = {}
    for i, (name, sets) in enumerate(_benign().items(), start=1):
        trial_id = f"t{i:04d}"
        result = run_trial(
            spec,
            resolve_config(spec, sets, what=name),
            trial_dir=trials / trial_id / "attempt1",
            trial_id=trial_id,
        )
        found[name] = result.metrics.get("quality_agreement")
        print(f"{name}: agreement {found[name]} ({result.failure_mode.value}: {result.reason})")
        assert result.failure_mode is FailureMode.NONE, result.reason
    (out_dir / "results" / "quality-agreement.json").write_text(json.dumps(found, indent=1))
    assert all(v is not None and v >= QualitySpec().min_agreement for v in found.values()), found
