"""Tests for spec_sweep.node.sglang_env: the node's SGLang asked before a boot, its manifest read
from its own parser, and a server that reports another version.

The node's SGLang is the stand-in package of an unreleased version (tests/fixtures/
sglang_standin, 0.5.99), put on the launch environment's PYTHONPATH through `node.env` exactly as
a user's bundle or container path would be: the probe and the parser reader run in a real child
interpreter.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from spec_sweep.errors import SpecError
from spec_sweep.manifest import load_manifest, newest_version
from spec_sweep.node.sglang_env import (
    build_manifest,
    find_sglang,
    launch_python,
    server_version,
    version_mismatch,
    write_manifest,
)
from spec_sweep.spec import NodeSpec

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_standin"


def standin_copy(tmp_path: Path, version: str) -> Path:
    """The stand-in package under `tmp_path`, reporting `version`."""
    target = tmp_path / f"sglang-{version}"
    shutil.copytree(STANDIN, target)
    dist = target / "sglang-0.5.99.dist-info"
    meta = dist / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.99", f"Version: {version}"))
    dist.rename(target / f"sglang-{version}.dist-info")
    return target


def node(**fields: object) -> NodeSpec:
    return NodeSpec.model_validate({"model": "m", **fields})


def test_auto_holds_the_newest_bundled_version_until_the_node_says() -> None:
    plain = node()
    assert plain.sglang_version == newest_version()
    assert plain.sglang_version_source == "auto"
    written = node(sglang_version="0.5.17")
    assert (written.sglang_version, written.sglang_version_source) == ("0.5.17", "spec")
    with pytest.raises(ValueError, match="not a version: write auto"):
        node(sglang_version="latest")


def test_the_default_launcher_is_asked_in_the_trials_environment() -> None:
    found = find_sglang(node(env={"PYTHONPATH": str(STANDIN)}))
    assert (found.version, found.askable, found.where) == ("0.5.99", True, sys.executable)
    # this test environment has no SGLang of its own
    assert find_sglang(node()).version is None
    assert launch_python(node(launch=["/opt/py/bin/python3", "-m", "sglang.launch_server"])) == (
        "/opt/py/bin/python3"
    )


def test_a_custom_prefix_is_not_asked_before_it_boots() -> None:
    docker = node(launch=["docker", "run", "--gpus", "all", "img", "python3", "-m", "sglang"])
    found = find_sglang(docker)
    assert (found.version, found.askable) == (None, False)
    assert found.where.startswith("docker run")


def test_a_launch_interpreter_that_does_not_exist_is_named() -> None:
    missing = node(launch=["/nonexistent/python3", "-m", "sglang.launch_server"])
    with pytest.raises(SpecError, match="'/nonexistent/python3' cannot be run"):
        find_sglang(missing)


def test_the_manifest_is_read_from_the_installed_parser(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    out = build_manifest(node(env={"PYTHONPATH": str(STANDIN)}), folder / "sglang-0.5.99.json")
    raw = json.loads(out.read_text())
    assert raw["sglang_version"] == "0.5.99"
    assert raw["generator"] == "spec_sweep.node.sglang_parser"
    manifest = load_manifest("0.5.99", folder=folder)
    assert manifest.lookup("decode-graph-budget") is not None
    assert manifest.lookup("tensor-parallel-size") is None
    names = {f["option_strings"][0] for f in raw["flags"]}
    assert "--decode-graph-budget" in names  # added by this version
    assert "--disable-piecewise-cuda-graph" not in names  # removed
    alias = next(f for f in raw["flags"] if f["option_strings"] == ["--cuda-graph-max-bs"])
    assert alias["deprecated"] is True
    assert alias["action"] == "other:DeprecatedAliasStoreAction"


def test_a_manifest_of_another_version_than_asked_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"SGLang 0\.5\.99 is installed here, not 0\.5\.98"):
        build_manifest(
            node(env={"PYTHONPATH": str(STANDIN)}), tmp_path / "x.json", version="0.5.98"
        )


def test_write_manifest_bundled_or_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundled = json.loads(write_manifest("0.5.17", python=None, out=tmp_path / "b.json"))
    assert bundled["sglang_version"] == "0.5.17"
    assert json.loads((tmp_path / "b.json").read_text()) == bundled
    with pytest.raises(SpecError, match="has no SGLang installed"):
        write_manifest(None, python=None, out=None)
    monkeypatch.setenv("PYTHONPATH", str(standin_copy(tmp_path, "0.6.1")))
    assert json.loads(write_manifest(None, python=None, out=None))["sglang_version"] == "0.6.1"
    with pytest.raises(SpecError, match=r"--version: 0\.5\.99 was asked for.*SGLang 0\.6\.1"):
        write_manifest("0.5.99", python=None, out=None)


def test_a_server_of_another_version_stops_the_sweep_naming_both() -> None:
    assert server_version({"version": "0.5.17", "status": "ready"}) == "0.5.17"
    assert server_version({"status": "ready"}) is None
    assert server_version(None) is None
    written = node(sglang_version="0.5.13")
    assert version_mismatch(written, "0.5.13") is None
    assert version_mismatch(written, None) is None
    why = version_mismatch(written, "0.5.17")
    assert why is not None
    assert "reports SGLang 0.5.17" in why
    assert "checked against 0.5.13" in why
    auto = version_mismatch(node(launch=["./run-in-docker.sh"]), "0.5.17")
    assert auto is not None
    assert "write node.sglang_version: 0.5.17" in auto
