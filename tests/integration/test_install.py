"""Installing spec_sweep's `sglang` extra keeps an SGLang that is already there (issue: a pin
downgraded the official container's SGLang and torch).

A fresh virtual environment gets a stand-in `sglang` 0.5.99 (a wheel built here from
tests/fixtures/sglang_standin, no index); pip then resolves the extra's requirements exactly as
pyproject.toml declares them, offline (`--no-index`, `--dry-run --report`): nothing may be
installed, and the stand-in's version and files stay as they were. The same resolution of a pin
to another version would have to replace it, which is what the floor avoids.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from harness import ROOT

pytestmark = pytest.mark.slow

STANDIN = ROOT / "tests" / "fixtures" / "sglang_standin"


def _standin_wheel(folder: Path) -> Path:
    """A wheel of the stand-in package (sglang 0.5.99, pure Python), written with zipfile."""
    wheel = folder / "sglang-0.5.99-py3-none-any.whl"
    dist = "sglang-0.5.99.dist-info"
    files: dict[str, bytes] = {
        str(path.relative_to(STANDIN)): path.read_bytes()
        for path in sorted((STANDIN / "sglang").rglob("*.py"))
    }
    files[f"{dist}/METADATA"] = (STANDIN / dist / "METADATA").read_bytes()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: spec_sweep-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    files[f"{dist}/top_level.txt"] = b"sglang\n"
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"},
    )


def _installed(python: Path) -> dict[str, str]:
    out = _pip(python, "list", "--format=json")
    assert out.returncode == 0, out.stderr
    return {p["name"].lower(): p["version"] for p in json.loads(out.stdout)}


def _standin_files(python: Path) -> dict[str, str]:
    probe = (
        "import sglang, pathlib, hashlib, json; root = pathlib.Path(sglang.__file__).parent; "
        "print(json.dumps({str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()"
        " for p in sorted(root.rglob('*.py'))}))"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def test_the_sglang_extra_keeps_a_newer_sglang(tmp_path: Path) -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["sglang"]
    assert extra, "the sglang extra is empty"
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    standin = _standin_wheel(wheels)
    done = _pip(python, "install", "--no-index", str(standin))
    assert done.returncode == 0, done.stderr
    before = (_installed(python), _standin_files(python))
    assert before[0]["sglang"] == "0.5.99"

    report = tmp_path / "report.json"
    resolved = _pip(
        python,
        "install",
        "--dry-run",
        "--no-index",
        "--find-links",
        str(wheels),
        "--report",
        str(report),
        *extra,
    )
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(report.read_text())["install"] == []  # nothing to install or replace
    assert (_installed(python), _standin_files(python)) == before

    # the check can fail: a pin to another version would have to replace the stand-in
    pinned = _pip(
        python, "install", "--dry-run", "--no-index", "--find-links", str(wheels), "sglang==0.5.17"
    )
    assert pinned.returncode != 0
    assert "sglang==0.5.17" in pinned.stderr
