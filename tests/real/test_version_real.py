"""The SGLang on the node decides: `auto` on real SGLang, its manifest read from its own parser,
and a docker-style launch prefix whose version comes from the server.

Runs with the SGLang that imports here (the offline bundle on `PYTHONPATH`:
`eval "$(scripts/real_session.sh env 0.5.17)"`, or 0.5.13), on a GPU: every command is the
user's (`python -m spec_sweep validate|manifest|trial`) from the repository root.

- `auto` finds the installed version (`validate` says so), and a written version of another
  release is refused in one line naming both, before anything boots.
- `spec-sweep manifest` reads the installed SGLang's parser: the same flags as the bundled
  manifest of that version (what a version without a bundled manifest gets at run time).
- A wrapper script as `node.launch` (what `docker run IMAGE python -m sglang.launch_server` is
  to spec_sweep: a prefix it cannot ask before a boot) boots and is measured when the written
  version is the server's; with `auto` (the newest bundled manifest's version until the server
  says), the first boot stops with the server's version named, nothing measured.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import yaml
from real_harness import MATRIX, ROOT, render_spec, run_trial_cli

from spec_sweep.manifest import available_versions, load_manifest, newest_version


def _installed() -> str:
    return importlib.metadata.version("sglang")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spec_sweep", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _spec(out_dir: Path, name: str, **node: object) -> Path:
    """matrix.yaml rendered for the installed version, then `node` keys set (None: removed)."""
    path = render_spec(MATRIX, out_dir / "specs" / f"{name}.yaml", version=_installed())
    spec = yaml.safe_load(path.read_text())
    spec["name"] = name
    for key, value in node.items():
        if value is None:
            spec["node"].pop(key, None)
        else:
            spec["node"][key] = value
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_auto_finds_the_installed_sglang(out_dir: Path, model: Path) -> None:
    del model
    installed = _installed()
    auto = _spec(out_dir, "version-auto", sglang_version=None)
    shown = _cli("validate", str(auto))
    assert shown.returncode == 0, shown.stderr
    assert (
        f"flags checked against SGLang {installed} (auto: the version installed where "
        "node.launch runs)"
    ) in shown.stdout
    other = next(v for v in reversed(available_versions()) if v != installed)
    written = _spec(out_dir, "version-written", sglang_version=other)
    refused = _cli("validate", str(written))
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert f"{other!r} is written, but the node runs SGLang {installed}" in refused.stderr
    (out_dir / "results" / "version-auto.json").write_text(
        json.dumps({"installed": installed, "validate": shown.stdout, "refused": refused.stderr})
    )


def test_the_manifest_read_at_run_time_matches_the_bundled_one(out_dir: Path) -> None:
    installed = _installed()
    out = out_dir / "results" / f"manifest-{installed}.json"
    made = _cli("manifest", "--version", installed, "--python", sys.executable, "-o", str(out))
    assert made.returncode == 0, made.stderr
    read = json.loads(out.read_text())
    assert read["sglang_version"] == installed
    names = {f["option_strings"][0] for f in read["flags"] if f["option_strings"]}
    if installed in available_versions():
        bundled = load_manifest(installed)
        assert names == {f.option_strings[0] for f in bundled.flags if f.option_strings}


def test_a_wrapper_prefix_takes_its_version_from_the_server(out_dir: Path, model: Path) -> None:
    del model
    installed = _installed()
    wrapper = out_dir / "specs" / "sglang-in-a-box.sh"  # stands for `docker run IMAGE ...`
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m sglang.launch_server "$@"\n')
    wrapper.chmod(0o755)
    written = _spec(out_dir, "version-wrapper", launch=[str(wrapper)], sglang_version=installed)
    result = run_trial_cli("version-wrapper", {}, out_dir, spec=written)
    assert result["failure_mode"] == "none", result["reason"]
    assert result["command"][0] == str(wrapper)

    newest = newest_version()
    auto = _spec(out_dir, "version-wrapper-auto", launch=[str(wrapper)], sglang_version=None)
    if installed == newest or _cli("validate", str(auto)).returncode != 0:
        return  # the installed version's flags do not validate as the newest bundled version's
    stopped = run_trial_cli("version-wrapper-auto", {}, out_dir, spec=auto)
    assert stopped["failure_mode"] == "environment"
    assert (
        f"the server reports SGLang {installed}, and the spec was checked against {newest}"
    ) in stopped["reason"]
    assert "bench" not in stopped
