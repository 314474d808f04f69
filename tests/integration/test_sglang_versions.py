"""A sweep on an SGLang version spec_sweep has never seen, and a server of another version.

The node's SGLang is the stand-in package of an unreleased version (tests/fixtures/
sglang_standin, 0.5.99): its `sglang.srt.server_args` parser adds and removes flags against
the bundled manifests, and its `python -m sglang.launch_server` parses the command line with
that parser, then serves as the simulated node, reporting 0.5.99 in `/server_info`. It reaches
the trial's launch environment through `node.env` (PYTHONPATH), so the session's Ray node is
asked which SGLang it runs, as every node of a cluster is. Sweeps run in-process on the
session's Ray cluster with the node's own backend (not `--simulate`); the command line runs in
a subprocess.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import DROP, ROOT, write_spec
from mlflow.tracking import MlflowClient

from spec_sweep.errors import SpecError
from spec_sweep.node.backends import make_backend
from spec_sweep.orchestrate.driver import SweepOutcome, sweep
from spec_sweep.spec_load import load_spec

pytestmark = pytest.mark.usefixtures("ray_cluster")

STANDIN = ROOT / "tests" / "fixtures" / "sglang_standin"


def standin_spec(project: Path, *, name: str, **node: Any) -> Path:
    """A two-trial sweep whose flags the stand-in has (one only it has: decode-graph-budget)."""
    return write_spec(
        project,
        name=name,
        node={
            "draft_model": DROP,
            "sglang_version": DROP,
            "gpus": 0,
            "env": {"PYTHONPATH": str(STANDIN), "SPEC_SWEEP_SIM_PROFILE": "rtx-pro-6000-pcie-x8"},
            "server_args": {"tp-size": 8, "decode-graph-budget": 64},
            **node,
        },
        search_space={
            "include": DROP,
            "params": {
                "cuda-graph-max-bs-decode": {"choices": [128, 256, 512], "default": 512},
                "mem-fraction-static": {"float": [0.80, 0.90], "default": 0.88},
            },
        },
        baseline={"speculative-algorithm": DROP},
        budget={"trials": 2},
        searcher={"kind": "random"},
    )


def run(project: Path, path: Path) -> SweepOutcome:
    # the driver asks the node (as on a joined cluster: `run --address`)
    spec = load_spec(path, state_dir=project / ".spec_sweep", defer_flags=True)
    return sweep(
        spec,
        backend=make_backend(spec, grace_s=2.0),
        state_dir=project / ".spec_sweep",
        tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}",
    )


def test_a_version_never_seen_runs_a_sweep_against_its_own_flags(project_dir: Path) -> None:
    path = standin_spec(project_dir, name="unseen")
    outcome = run(project_dir, path)
    assert outcome.environment is None
    assert [r.failure_mode.value for r in outcome.history.done] == ["none", "none"]
    # its manifest was read on the node, from its own parser, into the sweep's state folder
    assert (outcome.state.path / "manifests" / "sglang-0.5.99.json").is_file()
    commands = sorted(outcome.state.path.glob("trials/*/attempt*/command.txt"))
    assert "--decode-graph-budget 64" in commands[0].read_text()
    client = MlflowClient(tracking_uri=f"sqlite:///{project_dir / 'mlruns' / 'mlflow.db'}")
    parent = client.get_run(outcome.parent_run_id).data
    assert parent.params["node.sglang_version"] == "0.5.99"
    assert parent.params["node.sglang_version_source"] == "node"
    assert parent.tags["spec_sweep.sglang_version"].startswith("SGLang 0.5.99 (auto: ")


def test_a_node_without_sglang_is_refused_before_any_trial(project_dir: Path) -> None:
    path = standin_spec(
        project_dir,
        name="nosglang",
        env={"SPEC_SWEEP_SIM_PROFILE": "rtx-pro-6000-pcie-x8"},
        server_args={"tp-size": 8},
    )
    with pytest.raises(SpecError) as refused:
        run(project_dir, path)
    assert "node.launch: no SGLang is installed where" in str(refused.value)
    assert "on node(s) " in str(refused.value)
    assert not (project_dir / ".spec_sweep" / "nosglang").exists()  # refused: no trace left


def test_a_wrapper_launching_another_version_stops_on_the_first_boot(project_dir: Path) -> None:
    """A docker-style prefix cannot be asked before it boots: the server's own report is
    compared on the baseline's boot, and nothing is measured under the wrong version."""
    wrapper = project_dir / "run-sglang.sh"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH={STANDIN} exec {sys.executable} -m sglang.launch_server "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    path = standin_spec(
        project_dir,
        name="wrapped",
        launch=[str(wrapper)],
        sglang_version="0.5.23",
        env={"SPEC_SWEEP_SIM_PROFILE": "rtx-pro-6000-pcie-x8"},
        server_args={"tp-size": 8},
    )
    outcome = run(project_dir, path)
    assert outcome.environment is not None
    assert "t0000" in outcome.environment
    assert "the server reports SGLang 0.5.99, and the spec was checked against 0.5.23" in (
        outcome.environment
    )
    assert len(list(outcome.state.path.glob("trials/*/attempt*/command.txt"))) == 1
    assert not list(outcome.state.path.glob("trials/*/attempt*/bench.json"))


def _cli(*args: str, cwd: Path, standin: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if standin:
        env["PYTHONPATH"] = str(STANDIN)
    return subprocess.run(
        [sys.executable, "-m", "spec_sweep.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_validate_says_which_version_it_used_and_why(tmp_path: Path) -> None:
    path = write_spec(
        tmp_path,
        name="said",
        node={"draft_model": DROP, "sglang_version": DROP, "gpus": 0, "env": DROP},
        search_space={
            "include": DROP,
            "params": {"cuda-graph-max-bs-decode": {"choices": [128, 512], "default": 512}},
        },
        baseline={"speculative-algorithm": DROP},
    )
    found = _cli("validate", str(path), cwd=tmp_path, standin=True)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[1] == (
        "flags checked against SGLang 0.5.99 (auto: the version installed where node.launch runs)"
    )
    assert lines[2].startswith("note: SGLang 0.5.99 is newer than any version spec_sweep knows")
    none = _cli("validate", str(path), cwd=tmp_path, standin=False)
    assert none.returncode == 0, none.stderr
    assert "(auto, and no SGLang is installed here: the newest bundled manifest)" in none.stdout
    written = path.read_text().replace("node:\n", 'node:\n  sglang_version: "0.5.17"\n', 1)
    path.write_text(written)
    refused = _cli("validate", str(path), cwd=tmp_path, standin=True)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "'0.5.17' is written, but the node runs SGLang 0.5.99" in refused.stderr


def test_validate_fix_rewrites_the_spec_and_shows_the_diff(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text((ROOT / "tests" / "fixtures" / "specs_old_flags.yaml").read_text())
    before = _cli("validate", str(path), cwd=tmp_path, standin=False)
    assert before.returncode == 0  # written for 0.5.13, no SGLang here: checked as written
    fixed = _cli(
        "validate", str(path), "--fix", "--sglang-version", "0.5.23", cwd=tmp_path, standin=False
    )
    assert fixed.returncode == 0, fixed.stderr
    assert '-  sglang_version: "0.5.13"' in fixed.stdout
    assert '+  sglang_version: "0.5.23"' in fixed.stdout
    assert "+    cuda-graph-max-bs-decode: {choices: [128, 256, 512], default: 512}" in fixed.stdout
    assert "rewritten for SGLang 0.5.23" in fixed.stdout
    assert "flags checked against SGLang 0.5.23 (node.sglang_version)" in fixed.stdout
    assert 'sglang_version: "0.5.23"' in path.read_text()


def test_manifest_command(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    made = _cli("manifest", "-o", str(out), cwd=tmp_path, standin=True)
    assert made.returncode == 0, made.stderr
    assert '"sglang_version": "0.5.99"' in out.read_text()
    missing = _cli("manifest", cwd=tmp_path, standin=False)
    assert missing.returncode == 2
    assert "has no SGLang installed" in missing.stderr
    bundled = _cli("manifest", "--version", "0.5.13", cwd=tmp_path, standin=False)
    assert bundled.returncode == 0
    assert '"sglang_version": "0.5.13"' in bundled.stdout
