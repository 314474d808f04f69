"""scripts/gpu_bundle.py on CPU: which SGLang it builds by default, what its install says it
holds, and the `spec-sweep` command its install provides.

The packing and the generated `install.sh` run for real on a tiny site folder (tar, xz,
sha256sum, bash); the installed `spec-sweep` command runs this interpreter's spec_sweep.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bundle = _load()


def test_the_default_is_the_newest_version_the_real_matrix_passed() -> None:
    assert bundle.REAL_PASSED == ("0.5.13", "0.5.17")
    for version in bundle.REAL_PASSED:
        assert (ROOT / "scripts" / "bundle" / f"sglang-{version}.lock").is_file()
    shown = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_bundle.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "default 0.5.17, the newest the real matrix passed" in " ".join(shown.stdout.split())


def _install(tmp_path: Path, *, command: bool) -> Path:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    out = tmp_path / "out"
    bundle.pack(site, out, part_mb=1, holds="SGLang 0.5.17 + spec_sweep runtime", command=command)
    dest = tmp_path / "dest"
    done = subprocess.run(
        ["bash", str(out / "install.sh"), str(dest)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "installed SGLang 0.5.17 + spec_sweep runtime into" in done.stdout
    assert (dest / "pkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert (dest / "spec_sweep_bundle.txt").read_text() == "SGLang 0.5.17 + spec_sweep runtime\n"
    return dest


def test_the_install_provides_the_spec_sweep_command(tmp_path: Path) -> None:
    dest = _install(tmp_path, command=True)
    command = dest / "bin" / "spec-sweep"
    env = {**os.environ, "SPEC_SWEEP_PYTHON": sys.executable}
    shown = subprocess.run(
        [str(command), "validate", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "usage: spec-sweep validate" in shown.stdout
    # the bundle's folder is on the command's PYTHONPATH
    probe = dest / "bin" / "probe"
    probe.write_text(
        (command.read_text()).replace('-m spec_sweep "$@"', '-c "import pkg; print(pkg.VALUE)"')
    )
    probe.chmod(0o755)
    seen = subprocess.run([str(probe)], capture_output=True, text=True, env=env, timeout=60)
    assert seen.stdout.strip() == "1", seen.stderr


def test_an_sglang_only_bundle_has_no_command(tmp_path: Path) -> None:
    dest = _install(tmp_path, command=False)
    assert not (dest / "bin").exists()
