"""The sweep spec's JSON Schema (present.schema): valid, shipped, named by every example sweep,
accepts every example and rejects each held bad spec that the loader rejects for its shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError
from test_spec import BAD, GOOD, write

from spec_sweep.cli import main
from spec_sweep.errors import SpecError
from spec_sweep.manifest import available_versions, load_manifest
from spec_sweep.present.schema import schema_text, shipped_schema_text, sweep_schema
from spec_sweep.spec_load import load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "sweeps").glob("*.yaml"))
SPECS = [*EXAMPLES, ROOT / "tests/real/matrix.yaml", ROOT / "tests/real/adaptive.yaml"]
#: Pydantic error types that are about the file's shape: a key, a type, an allowed value, a bound.
STRUCTURAL = ("extra_forbidden", "missing", "literal_error", "enum", "greater_than", "less_than")


def _validator() -> jsonschema.Draft202012Validator:
    schema = sweep_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _as_editor_reads(path: Path) -> Any:
    """The YAML as a language server checks it: JSON data (mapping keys are strings)."""
    return json.loads(json.dumps(yaml.safe_load(path.read_text())))


def test_the_package_ships_the_schema_the_models_generate() -> None:
    assert shipped_schema_text() == schema_text(), "stale: run spec-sweep docs"
    schema = json.loads(schema_text())
    assert schema == sweep_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["description"].startswith("A sweep spec (spec-sweep run SWEEP.yaml)")
    assert "source" not in schema["properties"]  # load_spec sets it


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_example_sweep_is_valid_under_the_schema(path: Path) -> None:
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _validator().iter_errors(_as_editor_reads(path))
    ]
    assert not errors


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_sweep_names_the_shipped_schema_on_its_first_line(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    target = (path.parent / first.removeprefix(prefix)).resolve()
    assert target == ROOT / "spec_sweep" / "data" / "sweep.schema.json"
    assert target.read_text() == schema_text()


def _structural(exc: SpecError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, ValidationError) and any(
        e["type"].startswith(STRUCTURAL) or e["type"].endswith(("_type", "_parsing"))
        for e in cause.errors()
    )


def test_the_schema_rejects_each_bad_spec_the_loader_rejects_for_its_shape(
    tmp_path: Path,
) -> None:
    validator = _validator()
    assert not list(validator.iter_errors(_as_editor_reads(write(tmp_path, GOOD))))
    checked = []
    edit: Callable[[str], str]
    for description, edit, fragment, _, _ in BAD:
        if fragment is not None:
            continue  # the fault is in the fragment file, which the sweep's schema does not see
        path = write(tmp_path, edit(GOOD))
        try:
            load_spec(path)
        except SpecError as exc:
            if not _structural(exc):
                continue
        else:
            pytest.fail(f"{description}: the loader accepts it")
        assert list(validator.iter_errors(_as_editor_reads(path))), description
        checked.append(description)
    assert {
        "unknown top-level key",
        "unknown nested key",
        "wrong type",
        "missing required key",
        "bad mode",
        "unknown searcher",
        "non-positive budget",
    } <= set(checked)


def test_the_flags_of_every_bundled_version_are_offered_with_their_help() -> None:
    schema = sweep_schema()
    params = schema["$defs"]["SearchSpaceSpec"]["properties"]["params"]
    server_args = schema["$defs"]["NodeSpec"]["properties"]["server_args"]
    for version in available_versions():
        for flag in load_manifest(version).flags:
            if flag.name in ("model-path", "host", "port", "speculative-draft-model-path"):
                assert flag.name not in params["properties"]
                continue
            assert flag.name in params["properties"], (version, flag.name)
            assert flag.name in server_args["properties"], (version, flag.name)
            entry = schema["$defs"][params["properties"][flag.name]["$ref"].split("/")[-1]]
            assert entry["description"].startswith(f"--{flag.name}")
    # a flag the manifests do not know (a newer SGLang's) is still a parameter
    validator = _validator()
    spec = {"name": "s", "node": {"model": "m"}, "search_space": {"params": {}}}
    spec["search_space"]["params"] = {"some-future-flag": {"choices": [1, 2]}}
    assert not list(validator.iter_errors(spec))
    spec["search_space"]["params"] = {"mem-fraction-static": {"choices": [1], "colour": 1}}
    assert list(validator.iter_errors(spec))


def test_schema_prints_the_schema_or_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == schema_text()
    out = tmp_path / "sweep.schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    assert out.read_text() == schema_text()
    assert main(["schema", "-o", str(tmp_path / "no" / "such" / "folder.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spec-sweep: error: -o ")
    assert "cannot write there" in err
