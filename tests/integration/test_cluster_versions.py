"""A Ray cluster whose nodes launch different SGLang versions is refused before any trial.

Two worker "nodes" on this host (each its own `ray start`, raylet and temp dir, as in
test_cluster.py), each with a different stand-in SGLang (tests/fixtures/sglang_standin, copied
and relabelled 0.5.99 and 0.5.98) on its PYTHONPATH: the worker processes of a node inherit its
raylet's environment, so the trial's launch environment really differs per node and the driver
(whose own environment has no SGLang) can only learn the versions by asking each node. The
driver is `python -m spec_sweep.run --address ...` in a subprocess; it must stop with one line
naming both nodes and their versions, exit 2, and launch no server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from harness import DROP, ROOT, free_port, ray_port_args, write_spec

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).parent / "ray")
STANDIN = ROOT / "tests" / "fixtures" / "sglang_standin"


def _standin(root: Path, version: str) -> Path:
    target = root / f"sglang-{version}"
    shutil.copytree(STANDIN, target)
    meta = target / "sglang-0.5.99.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.99", f"Version: {version}"))
    (target / "sglang-0.5.99.dist-info").rename(target / f"sglang-{version}.dist-info")
    return target


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {(proc.stdout + proc.stderr)[-3000:]}")


def _stop(root: Path) -> None:
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    procs: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(root) in " ".join(proc.info["cmdline"] or []) and proc.pid not in spared:
                procs[proc.pid] = proc
                for child in proc.children(recursive=True):
                    procs[child.pid] = child
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=3)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def two_versions() -> Iterator[str]:
    """A head without trial resources and two trial nodes: SGLang 0.5.99 and 0.5.98."""
    root = Path(tempfile.mkdtemp(prefix="ssv", dir="/tmp"))  # short: Ray's socket paths
    try:
        port = free_port()
        head = [RAY, "start", "--head", f"--port={port}", "--num-cpus=1", "--num-gpus=0"]
        head += ["--include-dashboard=false", "--disable-usage-stats"]
        head += ["--object-store-memory=80000000", *ray_port_args(port), f"--temp-dir={root / 'h'}"]
        _run(head, _env())
        address = f"127.0.0.1:{port}"
        for index, version in enumerate(("0.5.99", "0.5.98"), start=1):
            lo = 21000 + 1000 * index + (os.getpid() % 10) * 100
            worker = [RAY, "start", f"--address={address}", "--num-cpus=1", "--num-gpus=8"]
            worker += [f"--resources={json.dumps({'spec_sweep_node': 1})}"]
            worker += ["--disable-usage-stats", "--object-store-memory=80000000"]
            worker += [f"--min-worker-port={lo}", f"--max-worker-port={lo + 99}"]
            worker += [*ray_port_args(), f"--temp-dir={root / f'w{index}'}"]
            _run(worker, _env(PYTHONPATH=str(_standin(root, version))))
        yield address
    finally:
        _stop(root)


def test_nodes_with_different_sglang_versions_are_refused(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    spec = write_spec(
        project,
        name="versions",
        node={
            "draft_model": DROP,
            "sglang_version": DROP,
            "gpus": 1,
            "server_args": {"tp-size": 1},
        },
        search_space={
            "include": DROP,
            "params": {"mem-fraction-static": {"float": [0.80, 0.90], "default": 0.88}},
        },
        baseline={"speculative-algorithm": DROP},
        workload={"dataset": "random", "input_len": 16, "output_len": 4},
        budget={"trials": 2},
    )
    with two_versions() as address:
        argv = [sys.executable, "-m", "spec_sweep.run", str(spec), "--address", address]
        argv += ["--state-dir", str(project / ".spec_sweep")]
        argv += ["--tracking-uri", f"sqlite:///{project / 'mlflow.db'}"]
        proc = subprocess.run(
            argv,
            cwd=project,
            env=_env(SPEC_SWEEP_PROJECT_DIR=str(project)),
            capture_output=True,
            text=True,
            timeout=300,
        )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    errors = [line for line in out.splitlines() if "error" in line]
    assert len(errors) == 1, out
    assert "the nodes of the Ray cluster run different SGLang versions" in errors[0]
    assert ": 0.5.99" in errors[0]
    assert ": 0.5.98" in errors[0]
    # nothing launched, no trace left
    assert not list(project.rglob("server.log"))
    assert not (project / ".spec_sweep" / "versions" / "trials").exists()
