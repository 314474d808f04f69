"""docs/troubleshooting.md lists every one-line error the CLI prints for a spec or an option.

The messages are collected from the code, where they are raised: every `SpecError`,
`ManifestError` and `argparse.ArgumentTypeError` of the package (the errors that stop a command
with exit 2 before anything launches), the `fail(field, message)` checks of `spec_load`, the
`ValueError`s of the spec's models and of the configuration and adaptive-config parsers that
`spec_load` and `--set` turn into spec errors, and the messages `spec_load` builds from
pydantic's errors or gets from `core.adaptive.spec_problems`,
`core.versions.weight_cache_problem` and `search.fidelity.fidelity_problems`. Each message is
known by its longest fixed part (the text between its placeholders); the page must hold that
text, so a new message without an entry fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
#: Exceptions whose message a command prints as its one-line error (exit 2).
ERRORS = {"SpecError", "ManifestError", "ArgumentTypeError"}
#: Modules whose `ValueError`s become spec errors (pydantic validators; the baseline and `--set`
#: values; `--set speculative-adaptive-config`).
VALUE_ERRORS = {
    "spec_sweep/spec.py",
    "spec_sweep/core/config.py",
    "spec_sweep/core/adaptive_rules.py",
}
#: Functions that build or return spec error messages instead of raising them.
MESSAGE_FUNCTIONS = {
    ("spec_sweep/spec_load.py", "_format_validation"),
    ("spec_sweep/core/adaptive.py", "spec_problems"),
    ("spec_sweep/core/versions.py", "weight_cache_problem"),
    ("spec_sweep/search/fidelity.py", "fidelity_problems"),
}
#: Messages no user input reaches (`ParamSpec.values` of a continuous range is caught by its
#: callers).
UNREACHABLE = {"a float range without 'step' has no finite list of values"}


def _pieces(node: ast.AST) -> list[str]:
    """The fixed texts of a message expression, split at its placeholders."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        pieces, current = [], ""
        for value in node.values:
            if isinstance(value, ast.Constant):
                current += str(value.value)
            else:
                pieces.append(current)
                current = ""
        return [*pieces, current]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pieces(node.left) + _pieces(node.right)
    return []


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _messages_of(rel: str, tree: ast.Module) -> list[tuple[int, list[str]]]:
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = _called(node)
            if name in ERRORS or (name == "ValueError" and rel in VALUE_ERRORS):
                found.append((node.lineno, _pieces(node.args[0])))
            elif name == "fail" and rel == "spec_sweep/spec_load.py" and len(node.args) == 2:
                found.append((node.lineno, _pieces(node.args[1])))
        if isinstance(node, ast.FunctionDef) and (rel, node.name) in MESSAGE_FUNCTIONS:
            docstring = ast.get_docstring(node, clean=False)
            # arguments of a method (`msg.removeprefix("Value error, ")`) are not messages
            operands = {
                id(arg)
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                for arg in call.args
            }
            for inner in ast.walk(node):
                if id(inner) in operands:
                    continue
                if isinstance(inner, ast.JoinedStr) or (
                    isinstance(inner, ast.Constant)
                    and isinstance(inner.value, str)
                    and inner.value != docstring
                ):
                    found.append((inner.lineno, _pieces(inner)))
    return found


def collect_messages() -> dict[str, str]:
    """Each message's longest fixed part -> where it is raised (`path:line`)."""
    messages: dict[str, str] = {}
    for path in sorted((ROOT / "spec_sweep").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("spec_sweep/sim/"):
            continue  # the simulated server's own command line, not spec-sweep's
        for line, pieces in _messages_of(rel, ast.parse(path.read_text(encoding="utf-8"))):
            key = max((" ".join(p.split()) for p in pieces), key=len, default="")
            # shorter fixed parts are field names and punctuation, not the message
            if len(key) >= 12 and " " in key and key not in UNREACHABLE:
                messages.setdefault(key, f"{rel}:{line}")
    return messages


def test_the_collector_finds_the_messages_of_every_source() -> None:
    messages = collect_messages()
    assert len(messages) > 80
    sources = {where.split(":")[0] for where in messages.values()}
    assert {
        "spec_sweep/cli.py",
        "spec_sweep/spec.py",
        "spec_sweep/spec_load.py",
        "spec_sweep/core/adaptive.py",
        "spec_sweep/core/config.py",
        "spec_sweep/store/paths.py",
        "spec_sweep/store/replay.py",
    } <= sources
    assert "is not a launch_server flag of SGLang" in messages  # a fail() check
    assert ": unknown key:" in messages  # built from pydantic's error
    assert "invalid port" not in messages  # too short to tell a message by: its fix is kept
    assert ": use a number 1-65535" in messages


def test_every_message_has_an_entry_on_the_troubleshooting_page() -> None:
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    missing = [f"{where}: {key!r}" for key, where in collect_messages().items() if key not in page]
    assert not missing, (
        "add these messages, with their fix, to docs/troubleshooting.md:\n" + "\n".join(missing)
    )
