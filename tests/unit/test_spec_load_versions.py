"""Tests for spec_sweep.spec_load's SGLang version handling: `auto` resolved from the node, a
written version checked against it, a version never seen validated against its own parser, renamed
flags named and rewritten (`fix_spec`), and the example sweeps on every bundled version.

The node's SGLang is the stand-in package of an unreleased version (tests/fixtures/
sglang_standin, 0.5.99) on the launch environment's PYTHONPATH (`node.env`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import DROP, ROOT, write_spec

from spec_sweep.errors import SpecError
from spec_sweep.manifest import available_versions, newest_version
from spec_sweep.spec_load import fix_spec, load_spec

STANDIN = ROOT / "tests" / "fixtures" / "sglang_standin"


def standin_spec(tmp_path: Path, **node: Any) -> Path:
    """A spec for the stand-in's flags (no GPU: the launcher is asked, nothing boots)."""
    return write_spec(
        tmp_path,
        node={
            "draft_model": DROP,
            "sglang_version": DROP,
            "gpus": 0,
            "env": {"PYTHONPATH": str(STANDIN)},
            "server_args": {"tp-size": 8, "decode-graph-budget": 64},
            **node,
        },
        search_space={
            "include": DROP,
            "params": {
                "cuda-graph-max-bs-decode": {"choices": [64, 128], "default": 128},
                "mem-fraction-static": {"float": [0.8, 0.9], "default": 0.88},
            },
        },
        baseline={"speculative-algorithm": DROP},
    )


def test_auto_takes_the_nodes_version_and_its_own_flags(tmp_path: Path) -> None:
    path = standin_spec(tmp_path)
    spec = load_spec(path, detect=True, state_dir=tmp_path / "state")
    assert spec.node.sglang_version == "0.5.99"
    assert spec.node.sglang_version_source == "node"
    # the manifest was read from the stand-in's own parser and kept beside the sweep's state
    assert (tmp_path / "state" / spec.name / "manifests" / "sglang-0.5.99.json").is_file()
    # without asking the node, auto is the newest bundled version, which lacks the new flag
    with pytest.raises(
        SpecError,
        match=rf"'decode-graph-budget' is not a launch_server flag of SGLang {newest_version()}",
    ):
        load_spec(path, state_dir=tmp_path / "state")


def test_a_written_version_the_node_does_not_run_is_refused_naming_both(tmp_path: Path) -> None:
    path = standin_spec(tmp_path, sglang_version="0.5.17", server_args={"tp-size": 8})
    with pytest.raises(SpecError) as refused:
        load_spec(path, detect=True, state_dir=tmp_path / "state")
    line = str(refused.value)
    assert "\n" not in line
    assert "node.sglang_version: '0.5.17' is written, but the node runs SGLang 0.5.99" in line
    assert "write auto (or 0.5.99)" in line
    # as the nodes of a cluster report it
    with pytest.raises(SpecError, match=r"runs SGLang 0\.5\.13 \(the nodes of the Ray cluster\)"):
        load_spec(path, node_version="0.5.13", state_dir=tmp_path / "state")
    # the node's own version, written: fine
    same = standin_spec(tmp_path, sglang_version="0.5.99")
    assert (
        load_spec(same, detect=True, state_dir=tmp_path / "state").node.sglang_version_source
        == "spec"
    )


def test_a_renamed_flag_is_named_with_its_replacement(tmp_path: Path) -> None:
    path = standin_spec(
        tmp_path,
        server_args={"tp-size": 8, "cuda-graph-max-bs": 64},
    )
    path.write_text(path.read_text().replace("cuda-graph-max-bs-decode:", "chunked-prefill-size:"))
    with pytest.raises(SpecError) as refused:
        load_spec(path, detect=True, state_dir=tmp_path / "state")
    assert (
        "node.server_args.cuda-graph-max-bs: 'cuda-graph-max-bs' is deprecated in SGLang 0.5.99; "
        "its replacement is 'cuda-graph-max-bs-decode' (spec-sweep validate --fix"
    ) in str(refused.value)


def test_fix_renames_every_mention_and_the_result_validates(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    text = (ROOT / "tests" / "fixtures" / "specs_old_flags.yaml").read_text()
    path.write_text(text)
    fixed = fix_spec(path, detect=False, version="0.5.23", state_dir=tmp_path / "state")
    assert fixed.before == text
    assert "# kept: this comment" in fixed.after
    assert "cuda-graph-max-bs:" not in fixed.after
    assert fixed.after.count("cuda-graph-max-bs-decode") == 3  # param, when, baseline
    assert "cuda-graph-backend-prefill: disabled" in fixed.after
    assert 'sglang_version: "0.5.23"' in fixed.after
    assert fixed.changes == (
        "node.server_args.disable-piecewise-cuda-graph: true -> cuda-graph-backend-prefill: "
        "disabled",
        "search_space.params.cuda-graph-max-bs -> cuda-graph-max-bs-decode",
        "node.sglang_version: 0.5.13 -> 0.5.23",
    )
    assert fixed.left == ()
    assert fixed.diff().startswith(f"--- {path} (before)\n+++ {path} (SGLang 0.5.23)\n")
    path.write_text(fixed.after)
    assert load_spec(path).node.sglang_version == "0.5.23"
    # nothing left to rewrite
    again = fix_spec(path, detect=False, version="0.5.23")
    assert again.after == again.before


def test_fix_for_the_nodes_version_found_at_run_time(tmp_path: Path) -> None:
    path = standin_spec(tmp_path, server_args={"tp-size": 8, "cuda-graph-max-bs": 64})
    path.write_text(path.read_text().replace("cuda-graph-max-bs-decode:", "chunked-prefill-size:"))
    fixed = fix_spec(path, state_dir=tmp_path / "state")
    assert fixed.version == "0.5.99"
    assert fixed.changes == ("node.server_args.cuda-graph-max-bs -> cuda-graph-max-bs-decode",)
    path.write_text(fixed.after)
    assert (
        load_spec(path, detect=True, state_dir=tmp_path / "state").node.sglang_version == "0.5.99"
    )


def test_fix_names_what_comes_from_a_fragment(tmp_path: Path) -> None:
    fixed = fix_spec(ROOT / "sweeps" / "allreduce.yaml", detect=False, version="0.5.23")
    assert "baseline.cuda-graph-max-bs -> cuda-graph-max-bs-decode" in fixed.changes
    assert any(
        line.startswith(
            "search_space.include: 'cuda-graph-max-bs' (now 'cuda-graph-max-bs-decode')"
        )
        for line in fixed.left
    )


# -- the example sweeps -------------------------------------------------------------------------

_KEY = re.compile(r": (?:node\.server_args|search_space\.params|baseline)\.([A-Za-z0-9-]+)")


def _comments(text: str) -> str:
    """The header (comments before `name:`) and the comments around `sglang_version:`."""
    lines = text.splitlines()
    header = []
    for line in lines:
        if line.startswith("name:"):
            break
        header.append(line)
    for i, line in enumerate(lines):
        if line.strip().startswith("sglang_version:"):
            header += [c for c in lines[max(0, i - 3) : i + 1] if c.strip().startswith("#")]
    return "\n".join(c for c in header if c.lstrip().startswith("#"))


@pytest.mark.parametrize("sweep", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_example_sweeps_validate_on_every_version_or_say_which_they_need(
    sweep: Path, tmp_path: Path
) -> None:
    text = sweep.read_text()
    written = yaml.safe_load(text)["node"].get("sglang_version")
    failures: dict[str, str] = {}
    for version in available_versions():
        copy = sweep.parent / f".test-{version}-{sweep.name}"
        if written is None:
            body = text.replace("\nnode:\n", f'\nnode:\n  sglang_version: "{version}"\n', 1)
        else:
            body = re.sub(r"^(\s*sglang_version:\s*).*$", rf'\g<1>"{version}"', text, flags=re.M)
        copy.write_text(body)
        try:
            load_spec(copy, state_dir=tmp_path)
        except SpecError as exc:
            failures[version] = str(exc)
        finally:
            copy.unlink()
    if not failures:
        return
    assert written is not None, (
        f"{sweep.name} fails on {sorted(failures)}: write the version it needs"
    )
    comments = _comments(text)
    assert str(written) in comments, f"{sweep.name}: its header must name SGLang {written}"
    for version, error in failures.items():
        match = _KEY.search(error)
        assert match is not None, error
        assert match.group(1) in comments, (
            f"{sweep.name}: fails on {version} ({error}); its header must say why "
            f"(name {match.group(1)})"
        )


def test_reading_a_record_keeps_the_written_version(tmp_path: Path) -> None:
    """report, export and ui read what a sweep recorded: a written version stays although this
    machine's SGLang is another, and flags are not checked against this machine's version."""
    path = standin_spec(tmp_path, sglang_version="0.5.17", server_args={"tp-size": 8})
    spec = load_spec(
        path, detect=True, state_dir=tmp_path / "s", defer_flags=True, refuse_mismatch=False
    )
    assert (spec.node.sglang_version, spec.node.sglang_version_source) == ("0.5.17", "spec")
