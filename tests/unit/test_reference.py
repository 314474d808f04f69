"""The generated reference pages (present.reference) and `spec-sweep docs`: the committed pages
are what the code generates, and they name every spec field, CLI option and MLflow name."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from spec_sweep import spec_metrics
from spec_sweep.cli import _parser, main
from spec_sweep.core import names
from spec_sweep.present.reference import reference_pages
from spec_sweep.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def test_the_committed_reference_pages_and_schema_are_what_the_code_generates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["docs", "--check"])
    assert code == 0, capsys.readouterr().err


def test_check_names_each_stale_file_and_the_command_that_regenerates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, schema = tmp_path / "reference", tmp_path / "sweep.schema.json"
    args = ["docs", "--out", str(out), "--schema-file", str(schema)]
    assert main([*args, "--check"]) == 1  # nothing there yet
    assert main(args) == 0
    assert "wrote 5 of 5 generated files" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in REFERENCE.iterdir())
    assert main([*args, "--check"]) == 0
    with (out / "cli.md").open("a") as page:
        page.write("| `--colour` |  | an option the parser does not have |\n")
    schema.write_text(schema.read_text() + "\n")
    capsys.readouterr()
    assert main([*args, "--check"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{out / 'cli.md'}, {schema}: not what the code generates" in err
    assert "run spec-sweep docs" in err
    assert "spec.md" not in err
    assert main(args) == 0  # regenerates the two
    assert "wrote 2 of 5 generated files" in capsys.readouterr().out
    assert main([*args, "--check"]) == 0


def test_docs_outside_the_repository_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["docs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "spec-sweep: error: --out: docs is not a folder here: run spec-sweep docs in the "
        "repository's root, or pass --out"
    )
    assert not (tmp_path / "docs").exists()


def _fields(model: Any, path: str) -> list[str]:
    """Every key path of the spec, walked from the models (not from the schema the page uses)."""
    found = []
    for name, info in model.model_fields.items():
        if (info.description or "").startswith("Set by"):
            continue  # filled in by spec_sweep, never written in a spec
        key = f"{path}.{info.alias or name}" if path else info.alias or name
        found.append(key)
        for inner in _models_in(info.annotation):
            mapping = "dict" in str(info.annotation)
            found += _fields(inner, f"{key}.<name>" if mapping else key)
    return found


def _models_in(annotation: Any) -> list[Any]:
    if hasattr(annotation, "model_fields"):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def test_the_spec_page_lists_every_field_of_the_models() -> None:
    page = reference_pages(_parser())["spec.md"]
    keys = _fields(SweepSpec, "")
    assert {"node.gpus", "search_space.params.<name>.int", "workload.goodput.min_concurrency"} <= {
        *keys
    }
    missing = [key for key in keys if f"| `{key}` |" not in page]
    assert not missing
    assert "`source`" not in page  # load_spec sets it


def test_the_cli_page_lists_every_command_and_option() -> None:
    parser = _parser()
    page = reference_pages(parser)["cli.md"]
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"run", "trial", "validate", "report", "export", "ui", "docs", "schema"} <= {*commands}
    for name, sub in commands.items():
        assert f"## `spec-sweep {name}`" in page
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page or f", {option}" in page, (name, option)


def test_the_names_page_lists_every_mlflow_name_and_metric() -> None:
    page = reference_pages(_parser())["mlflow-names.md"]
    constants = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    assert len(constants) > 40
    for constant, value in constants.items():
        assert f"| `{value}` | `{constant}` |" in page
    for metric in (*spec_metrics.LEVEL_METRICS, *spec_metrics.BASE_METRICS, "goodput_throughput"):
        assert f"`{metric}`" in page
    assert "| `best_<objective>` | `best_metric()` |" in page
