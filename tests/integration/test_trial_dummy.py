"""`spec-sweep trial --dummy-weights` as a user runs it, against the simulated node.

Every test runs the `spec-sweep` command as a subprocess with `--simulate`: the real launcher
starts `python -m spec_sweep.sim` (time scale 0 at boot, the profile's pace when decoding) as
SGLang 0.5.17, whose dummy-weight boots the simulated node imitates as that version behaved on an
H100 (benchmarks/real/fidelity-0.5.17/). A configuration is booted with real and with dummy
weights, and the two results compared as docs/evidence/two-fidelity.md compared them: the dummy
command carries the load-format flags, the decode cycle with the first token taken out is the
real boot's, the acceptance is left out, the quality gate does not judge, a failing
configuration fails the same way; bad combinations stop before anything starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import ROOT, write_spec
from mlflow.tracking import MlflowClient

from spec_sweep.core.names import TAG_FIDELITY

NAME = "dummy-trial"
#: An EAGLE-3 chain the simulated PCIe node serves (`sweeps/allreduce.yaml`'s tree knobs).
EAGLE = [
    "speculative-algorithm=EAGLE3",
    "speculative-num-steps=3",
    "speculative-eagle-topk=1",
    "speculative-num-draft-tokens=4",
]
EAGLE_SETS = [arg for item in EAGLE for arg in ("--set", item)]
SECTIONS: dict[str, Any] = {
    "name": NAME,
    "node": {
        "sglang_version": "0.5.17",
        "server_args": {"tp-size": 8, "trust-remote-code": True},
    },
    "search_space": {
        "include": ["speculative.yaml"],
        "params": {
            "mem-fraction-static": {"float": [0.70, 0.99], "step": 0.01, "default": 0.88},
            "cuda-graph-max-bs-decode": {"choices": [32, 64, 128], "default": 32},
        },
    },
    "workload": {"output_len": 24, "num_prompts": 3, "warmup_prompts": 1},
    "quality": {"num_prompts": 2, "tokens": 8},
}


def _spec(tmp_path: Path, **sections: Any) -> Path:
    merged = {**SECTIONS, **sections}
    return write_spec(tmp_path, **merged)


def _trial(tmp_path: Path, spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "spec-sweep"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "spec_sweep"]
    env = dict(os.environ, SPEC_SWEEP_PROJECT_DIR=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("SPEC_SWEEP_SIM_FAULT", None)
    return subprocess.run(
        [*command, "trial", str(spec), "--simulate", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=180,
        check=False,
    )


def _json_trial(tmp_path: Path, spec: Path, *args: str) -> dict[str, Any]:
    done = _trial(tmp_path, spec, "--json", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    payload: dict[str, Any] = json.loads(done.stdout)
    return payload


def _flag(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


@pytest.mark.parametrize(
    ("sets", "drafting"),
    [pytest.param([], False, id="plain"), pytest.param(EAGLE, True, id="eagle3")],
)
def test_a_dummy_trial_tells_the_real_decode_cycle_and_nothing_of_acceptance_or_quality(
    tmp_path: Path, sets: list[str], drafting: bool
) -> None:
    spec = _spec(tmp_path)
    setting = [arg for item in sets for arg in ("--set", item)]
    real = _json_trial(tmp_path, spec, *setting)
    dummy = _json_trial(tmp_path, spec, *setting, "--dummy-weights")

    assert real["fidelity"] == "real"
    assert dummy["fidelity"] == "dummy"
    assert real["failure_mode"] == dummy["failure_mode"] == "none", dummy["reason"]
    # the command: the dummy boot's load formats, and nothing else changed
    assert _flag(real["command"], "--load-format") is None
    assert _flag(dummy["command"], "--load-format") == "dummy"
    draft_format = _flag(dummy["command"], "--speculative-draft-load-format")
    assert draft_format == ("dummy" if drafting else None)
    assert ("--speculative-draft-model-path" in dummy["command"]) is drafting
    stripped = [a for a in dummy["command"] if a not in ("--load-format", "dummy")]
    stripped = [a for a in stripped if a != "--speculative-draft-load-format"]
    port = real["command"].index("--port") + 1
    assert (
        stripped[:port] + stripped[port + 1 :]
        == real["command"][:port] + (real["command"][port + 1 :])
    )
    # the decode cycle with the first token taken out is the real boot's (the simulated node
    # draws another boot's noise and the host adds its own: a generous tolerance)
    assert dummy["metrics"]["decode_cycle_ms"] == pytest.approx(
        real["metrics"]["decode_cycle_ms"], rel=0.25
    )
    assert dummy["metrics"]["ttft_p50_ms"] == pytest.approx(real["metrics"]["ttft_p50_ms"], rel=0.5)
    # acceptance is not reported for a dummy boot (a dummy draft accepts nothing)
    if drafting:
        assert real["metrics"]["accept_length"] > 1.5
    assert not [name for name in dummy["metrics"] if name.startswith("accept_length")]
    # the quality gate judges the real boot when it can, a dummy boot never
    assert real["quality"] is not None
    assert real["quality"]["reason"] != "not judged: dummy weights"
    assert dummy["quality"]["judged"] is False
    assert dummy["quality"]["reason"] == "not judged: dummy weights"
    assert not [name for name in dummy["metrics"] if name.startswith("quality_")]


def test_the_terminal_says_what_a_dummy_boot_tells(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    done = _trial(tmp_path, spec, *EAGLE_SETS, "--dummy-weights")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "quality: not judged: dummy weights" in lines
    tells = [line for line in lines if line.startswith("dummy weights: this boot tells")]
    assert len(tells) == 1
    for said in ("boots", "decode cycle", "time to first token", "not its acceptance"):
        assert said in tells[0]
    assert "output quality" in tells[0]
    assert "throughput of a speculative configuration" in tells[0]
    assert "decode_cycle_ms" in done.stdout
    assert "accept_length" not in done.stdout


def test_an_oom_configuration_fails_the_same_at_both_fidelities(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ends = []
    for fidelity in ([], ["--dummy-weights"]):
        payload = _json_trial(tmp_path, spec, "--set", "mem-fraction-static=0.97", *fidelity)
        assert "OutOfMemoryError" in payload["log_excerpt"]
        ends.append((payload["failure_mode"], payload["reason"]))
    assert ends[0] == ends[1]
    assert ends[0][0] == "oom"


def test_a_dummy_trial_recorded_to_a_store_says_its_fidelity(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for fidelity in ([], ["--dummy-weights"]):
        _json_trial(tmp_path, spec, "--tracking-uri", uri, *EAGLE_SETS, *fidelity)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(NAME)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    by_fidelity = {run.data.tags[TAG_FIDELITY]: run for run in runs}
    assert set(by_fidelity) == {"real", "dummy"}
    dummy, real = by_fidelity["dummy"], by_fidelity["real"]
    assert dummy.info.run_name.startswith("manual dummy-weights ")
    assert real.info.run_name.startswith("manual ")
    assert "accept_length" in real.data.metrics
    assert "accept_length" not in dummy.data.metrics
    assert "decode_cycle_ms" in dummy.data.metrics
    # like every manual trial: no parent run and no node fingerprint (no sweep ranks or reuses)
    for run in runs:
        assert "mlflow.parentRunId" not in run.data.tags
        assert "spec_sweep.node_fingerprint" not in run.data.tags


@pytest.mark.parametrize(
    ("sections", "args", "expected"),
    [
        pytest.param(
            {},
            ["--state-dir", "state"],
            "--dummy-weights with --state-dir state: a dummy-weight boot is never judged",
            id="state-dir",
        ),
        pytest.param(
            {},
            ["--replay", "trials.csv"],
            "--dummy-weights with --replay trials.csv: a replayed trial boots nothing",
            id="replay",
        ),
        pytest.param(
            {"node": {**SECTIONS["node"], "server_args": {"load-format": "safetensors"}}},
            [],
            "--dummy-weights: node.server_args.load-format is set",
            id="load-format-in-server-args",
        ),
    ],
)
def test_bad_combinations_stop_with_one_line_and_launch_nothing(
    tmp_path: Path, sections: dict[str, Any], args: list[str], expected: str
) -> None:
    spec = _spec(tmp_path, **sections)
    (tmp_path / "trials.csv").write_text("speculative-algorithm,failure_mode\nnull,none\n")
    done = _trial(tmp_path, spec, "--dummy-weights", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"spec-sweep: error: {expected}"), lines[0]
    assert done.stdout == ""
    # nothing started: no trial folder, here or in the named state folder
    assert not list(tmp_path.rglob("manual"))
