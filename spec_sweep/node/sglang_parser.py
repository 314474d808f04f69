"""Read SGLang's ``launch_server`` argument parser into a flag manifest (JSON).

This module owns the child side of manifest generation: it runs *inside the interpreter that
has SGLang* (the node's launch environment), by path, with the standard library only, so it
needs nothing of spec_sweep there: ``PYTHON path/to/sglang_parser.py [--version V] [--out
FILE]``. It takes the parser ``python -m sglang.launch_server`` parses its command line with
(``sglang.srt.server_args.prepare_server_args``, with ``parse_args`` intercepted, so its
``prog``, ``allow_abbrev`` and every flag are SGLang's own; else a fresh ``ArgumentParser`` given
``ServerArgs.add_cli_args``), walks ``parser._actions`` and writes every option: names, action,
``nargs``, type, choices, default, help and whether SGLang marks it deprecated. The output is
stable (keys sorted, flags sorted by name, set-valued choices sorted; values that are not JSON
are stored as their ``repr``). ``spec_sweep.node.sglang_env`` runs it for ``spec-sweep
manifest`` and for a node whose version has no bundled manifest;
``scripts/gen_sglang_manifest.py`` runs it in throwaway environments to make the bundled ones.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

#: Recorded in every manifest this module writes.
GENERATOR = "spec_sweep.node.sglang_parser"
#: Printed on stderr, followed by the module name, when the parser's import misses a module.
MISSING_MARKER = "GEN-MANIFEST-MISSING-MODULE:"
#: Exit status when a module is missing (the generator script installs it and tries again).
EXIT_MISSING = 3

_BUILTIN_ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_ExtendAction": "extend",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
}
_DEPRECATED_RE = re.compile(r"\bdeprecated\b", re.IGNORECASE)


def _json_safe(value: Any) -> Any:
    """Return ``value`` if it is plain JSON (tuples become lists), else its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        items = [_json_safe(v) for v in value]
        return items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_safe(v) for k, v in value.items()}
    return repr(value)


def _choice_value(choice: Any) -> Any:
    """A choice as JSON: plain JSON values stay, anything else becomes ``str(choice)``."""
    if choice is None or isinstance(choice, (bool, int, str)):
        return choice
    if isinstance(choice, float) and math.isfinite(choice):
        return choice
    return str(choice)


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    values = [_choice_value(c) for c in action.choices]
    if isinstance(action.choices, (set, frozenset)):
        values.sort(key=lambda v: (type(v).__name__, str(v)))
    return values


def _type_name(type_func: Any) -> str | None:
    if type_func is None:
        return None
    if type_func is int:
        return "int"
    if type_func is float:
        return "float"
    if type_func is str:
        return "str"
    if type_func is bool:
        return "bool"
    if type_func is json.loads:
        return "json"
    if isinstance(type_func, str):  # a type registered by name, e.g. type="int"
        return type_func if type_func in ("int", "float", "str", "bool") else f"other:{type_func}"
    name = getattr(type_func, "__name__", None) or type(type_func).__name__
    return f"other:{name}"


def _action_name(action: argparse.Action) -> str:
    cls = type(action)
    if cls.__module__ == "argparse" and cls.__name__ in _BUILTIN_ACTIONS:
        return _BUILTIN_ACTIONS[cls.__name__]
    return f"other:{cls.__name__}"


def _nargs(action: argparse.Action) -> Any:
    nargs = action.nargs
    if nargs is None or isinstance(nargs, (int, str)):
        return nargs
    return repr(nargs)


def _is_deprecated(action: argparse.Action) -> bool:
    if getattr(action, "deprecated", False) is True:  # argparse's own flag (Python >= 3.13)
        return True
    if "deprecat" in type(action).__name__.lower():
        return True
    help_text = action.help if isinstance(action.help, str) else ""
    return bool(_DEPRECATED_RE.search(help_text))


def _flag_entry(action: argparse.Action) -> dict[str, Any]:
    return {
        "dest": action.dest,
        "option_strings": list(action.option_strings),
        "action": _action_name(action),
        "nargs": _nargs(action),
        "type": _type_name(action.type),
        "choices": _choices(action),
        "default": _json_safe(action.default),
        "required": bool(action.required),
        "help": action.help if isinstance(action.help, str) else "",
        "deprecated": _is_deprecated(action),
    }


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


def _sglang_parser() -> tuple[argparse.ArgumentParser, str]:
    """Return the parser ``launch_server`` parses with, and how it was obtained.

    ``prepare_server_args([])`` is called with ``parse_args`` intercepted, so the parser is
    exactly the one SGLang builds (its ``prog``, ``allow_abbrev``, every flag). ``sys.argv[0]``
    is set as ``python -m sglang.launch_server`` sets it, for versions that leave ``prog`` to
    argparse. If that fails, a fresh ``ArgumentParser`` gets ``ServerArgs.add_cli_args``.
    """
    from importlib.util import find_spec

    from sglang.srt import server_args as server_args_module

    launch_spec = find_spec("sglang.launch_server")  # located, not imported
    sys.argv = [str(launch_spec.origin if launch_spec else "launch_server.py")]
    prepare = getattr(server_args_module, "prepare_server_args", None)
    if prepare is not None:
        originals = (argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args)

        def _intercept(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
            raise _Captured(self)

        argparse.ArgumentParser.parse_args = _intercept  # type: ignore[method-assign]
        argparse.ArgumentParser.parse_known_args = _intercept  # type: ignore[method-assign]
        try:
            prepare([])
        except _Captured as captured:
            return captured.parser, "prepare_server_args"
        except Exception as exc:  # fall back to the documented recipe below
            print(f"warning: prepare_server_args([]) failed: {exc!r}", file=sys.stderr)
        finally:
            argparse.ArgumentParser.parse_args = originals[0]  # type: ignore[method-assign]
            argparse.ArgumentParser.parse_known_args = originals[1]  # type: ignore[method-assign]
    parser = argparse.ArgumentParser()
    server_args_module.ServerArgs.add_cli_args(parser)
    return parser, "ArgumentParser() + ServerArgs.add_cli_args"


def dump(version: str | None, out: Path | None, *, generator: str = GENERATOR) -> int:
    """Write the manifest of the SGLang importable here (to `out`, or stdout).

    Args:
        version: The version it must be (None: whatever is installed).
        out: The file to write; None prints the JSON.
        generator: Recorded in the manifest (who made it).

    Returns:
        0, `EXIT_MISSING` when a module the parser imports is missing (its name on stderr after
        `MISSING_MARKER`), 1 when another SGLang version is installed.
    """
    from importlib.metadata import version as dist_version

    try:
        installed = dist_version("sglang")
        parser, how = _sglang_parser()
    except ModuleNotFoundError as exc:
        print(f"{MISSING_MARKER} {exc.name or exc}", file=sys.stderr)
        return EXIT_MISSING
    except Exception as exc:
        print(f"error: could not import SGLang's parser: {exc!r}", file=sys.stderr)
        raise
    if version is not None and installed != version:
        print(f"error: SGLang {installed} is installed here, not {version}", file=sys.stderr)
        return 1
    flags = [_flag_entry(a) for a in parser._actions]
    flags.sort(key=lambda f: (_flag_name_from_entry(f), f["dest"]))
    manifest = {
        "sglang_version": installed,
        "generator": generator,
        "python": ".".join(str(p) for p in sys.version_info[:3]),
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "flags": flags,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}: {len(flags)} flags, prog={parser.prog!r} (parser from {how})")
    return 0


def _flag_name_from_entry(entry: dict[str, Any]) -> str:
    longs = [s for s in entry["option_strings"] if s.startswith("--")]
    chosen = longs[0] if longs else (entry["option_strings"] or [""])[0]
    return str(chosen).lstrip("-") or str(entry["dest"])


def main(argv: list[str] | None = None) -> int:
    """``PYTHON sglang_parser.py [--version V] [--out FILE] [--generator NAME]``."""
    parser = argparse.ArgumentParser(description="Write the manifest of the SGLang here.")
    parser.add_argument("--version", help="the SGLang version that must be installed")
    parser.add_argument("--out", type=Path, help="output file (default: stdout)")
    parser.add_argument("--generator", default=GENERATOR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return dump(args.version, args.out, generator=args.generator)


if __name__ == "__main__":
    sys.exit(main())
