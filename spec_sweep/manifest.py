"""SGLang ``launch_server`` flag manifests: which flags each SGLang version accepts, and how.

The manifests in ``spec_sweep/manifests/sglang-<VERSION>.json`` are generated from SGLang's own
argument parser (``spec_sweep.node.sglang_parser``; ``spec-sweep manifest``) and never edited by
hand; a version without one gets its manifest built at run time from the node's SGLang, kept in
the sweep's state folder (``load_manifest(version, folder=...)``). This module owns reading them
and what they say about renamed flags (:func:`replacement`). :func:`load_manifest` returns a
:class:`FlagManifest` whose ``lookup`` checks a flag name exactly (no abbreviations, so a retired
flag is caught even where argparse would take it as a prefix of a newer one), whose ``suggest``
proposes replacements for an unknown name, and whose ``build_parser`` rebuilds an ``argparse``
parser that accepts and rejects command lines the way SGLang's does (the simulated server uses
it).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "FlagInfo",
    "FlagManifest",
    "ManifestError",
    "Replacement",
    "available_versions",
    "is_bundled",
    "load_manifest",
    "manifest_from_text",
    "newest_version",
    "replacement",
]

_FILE_RE = re.compile(r"^sglang-(?P<version>.+)\.json$")
_GENERATOR_HINT = (
    "on a machine with that SGLang, `spec-sweep manifest -o sglang-VERSION.json` writes it; "
    "or set node.sglang_version: auto there"
)
# Actions that never consume a value from the command line.
_BARE_ACTIONS = frozenset(
    {"store_true", "store_false", "store_const", "append_const", "count", "help", "version"}
)
_BOOLEAN_OPTIONAL = "other:BooleanOptionalAction"
_MAX_PREFIX_SUGGESTIONS = 6
_MAX_CLOSE_SUGGESTIONS = 3


class ManifestError(Exception):
    """No usable manifest: an unknown SGLang version, or a file that is not a valid manifest."""


@dataclass(frozen=True, slots=True)
class FlagInfo:
    """One ``launch_server`` option as SGLang's parser defines it.

    Attributes:
        name: Canonical long name without leading dashes (``"cuda-graph-max-bs-decode"``).
        option_strings: Every spelling the parser accepts (``("--tp-size",
            "--tensor-parallel-size")``).
        dest: Attribute the value is stored under (``"tp_size"``).
        takes_value: False for bare flags (``store_true``, ``store_false``, ``count``, ...).
        choices: Allowed values as JSON values, or None when any value is allowed.
        type: ``"int"``, ``"float"``, ``"str"``, ``"json"``, ``"bool"``, ``"other:<name>"`` for a
            custom converter, or None (a plain string).
        nargs: argparse ``nargs`` (None, ``"?"``, ``"*"``, ``"+"``, or a count; 0 for bare flags).
        deprecated: True when SGLang marks the flag deprecated (its action or help text).
        default: The parser's default (a ``repr`` string when it was not JSON).
        help: The help text.
        action: ``"store"``, ``"store_true"``, ..., or ``"other:<ActionClass>"``.
        required: Whether the parser requires the flag.
    """

    name: str
    option_strings: tuple[str, ...]
    dest: str
    takes_value: bool
    choices: tuple[object, ...] | None
    type: str | None
    nargs: str | int | None
    deprecated: bool
    default: object
    help: str
    action: str = "store"
    required: bool = False


@dataclass(frozen=True)
class FlagManifest:
    """Every ``launch_server`` flag of one SGLang version.

    Attributes:
        sglang_version: The SGLang release the manifest was generated from.
        flags: The flags, sorted by name.
        prog: The ``prog`` of SGLang's parser (shown in its usage and error lines).
        allow_abbrev: Whether SGLang's parser accepts unambiguous prefixes of long options.
    """

    sglang_version: str
    flags: tuple[FlagInfo, ...]
    prog: str = "sglang serve"
    allow_abbrev: bool = True
    _by_option: dict[str, FlagInfo] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        index: dict[str, FlagInfo] = {}
        for flag in self.flags:
            for option in flag.option_strings:
                index.setdefault(option, flag)
        object.__setattr__(self, "_by_option", index)

    def lookup(self, key: str) -> FlagInfo | None:
        """Find a flag by exact name, with or without leading dashes.

        Args:
            key: ``"mem-fraction-static"`` or ``"--mem-fraction-static"``; any of a flag's
                spellings (``"tensor-parallel-size"`` finds ``tp-size``). Prefixes do not match.

        Returns:
            The flag, or None when no option string is exactly ``key``.
        """
        key = key.strip()
        if key.startswith("-"):
            return self._by_option.get(key)
        return self._by_option.get(f"--{key}") or self._by_option.get(f"-{key}")

    def suggest(self, key: str) -> list[str]:
        """Propose flag names for an unknown ``key``, best first, without leading dashes.

        The dashed spelling of an underscored key comes first (``mem_fraction_static``), then
        flags whose name extends ``key`` (``cuda-graph-max-bs`` -> ``cuda-graph-max-bs-decode``,
        ``cuda-graph-max-bs-prefill``), shortest first, then close spellings (``difflib``).

        Args:
            key: The unknown flag name, with or without dashes.

        Returns:
            Up to a handful of names; empty when nothing is close.
        """
        bare = key.strip().lstrip("-")
        if not bare:
            return []
        names = sorted({o.lstrip("-") for o in self._by_option if o.startswith("--")})
        extending = sorted(
            (n for n in names if n.startswith(bare) and n != bare),
            key=lambda n: (not n.startswith(f"{bare}-"), len(n), n),
        )
        dashed = bare.replace("_", "-")
        hints = [dashed] if dashed != bare and dashed in names else []
        hints += [n for n in extending[:_MAX_PREFIX_SUGGESTIONS] if n not in hints]
        for name in difflib.get_close_matches(bare, names, n=_MAX_CLOSE_SUGGESTIONS, cutoff=0.6):
            if name not in hints and name != bare:
                hints.append(name)
        return hints

    def build_parser(
        self,
        *,
        prog: str | None = None,
        extra: Callable[[argparse.ArgumentParser], None] | None = None,
    ) -> argparse.ArgumentParser:
        """Rebuild a parser that accepts and rejects what SGLang's parser does for these flags.

        Same option strings, ``nargs``, choices, ``int``/``float``/``str``/``json`` conversions,
        bare flags, required flags and ``allow_abbrev``; so a bad command line fails the same way
        (``error: unrecognized arguments: ...``, ``invalid choice``, ``ambiguous option``, exit
        status 2). Custom SGLang converters (``other:...`` types) accept any string.

        Args:
            prog: Program name for usage and error lines; defaults to SGLang's own.
            extra: Called with the parser last, to add the caller's own flags.

        Returns:
            A fresh parser.
        """
        parser = argparse.ArgumentParser(
            prog=prog if prog is not None else self.prog,
            allow_abbrev=self.allow_abbrev,
            add_help=False,
        )
        for flag in self.flags:
            _add_flag(parser, flag)
        if extra is not None:
            extra(parser)
        return parser


def available_versions() -> list[str]:
    """List the SGLang versions that have a manifest in the package, oldest first.

    Returns:
        Versions such as ``["0.5.13", "0.5.23"]``.
    """
    versions = []
    for entry in resources.files("spec_sweep").joinpath("manifests").iterdir():
        match = _FILE_RE.match(entry.name)
        if match and entry.is_file():
            versions.append(match.group("version"))
    return sorted(versions, key=_version_key)


def newest_version() -> str:
    """The newest SGLang version with a manifest in the package (`auto` before the node says)."""
    return available_versions()[-1]


def is_bundled(version: str) -> bool:
    """Whether the package ships the manifest of `version`."""
    return resources.files("spec_sweep").joinpath("manifests", f"sglang-{version}.json").is_file()


def load_manifest(version: str, *, folder: Path | None = None) -> FlagManifest:
    """Load the flag manifest of one SGLang version (cached).

    Args:
        version: An SGLang release, exactly as in the manifest's file name (``"0.5.23"``).
        folder: Where manifests built at run time are kept (`sglang-<VERSION>.json`, the
            sweep's state folder); the package's own are looked at first.

    Returns:
        The manifest.

    Raises:
        ManifestError: No manifest for ``version`` (the message lists the available ones), or
            the file is not a valid manifest.
    """
    return _load_manifest(version, folder.resolve() if folder is not None else None)


@functools.cache
def _load_manifest(version: str, folder: Path | None) -> FlagManifest:
    name = f"sglang-{version}.json"
    resource = resources.files("spec_sweep").joinpath("manifests", name)
    if resource.is_file():
        text = resource.read_text(encoding="utf-8")
    elif folder is not None and (folder / name).is_file():
        text = (folder / name).read_text(encoding="utf-8")
    else:
        available = ", ".join(available_versions()) or "none"
        raise ManifestError(
            f"no SGLang flag manifest for version {version!r}; available: {available} "
            f"({_GENERATOR_HINT})"
        )
    return manifest_from_text(text, name=name)


def manifest_from_text(text: str, *, name: str = "manifest") -> FlagManifest:
    """Parse a manifest file's text (as `spec-sweep manifest` writes it).

    Raises:
        ManifestError: the text is not a valid manifest.
    """
    try:
        raw = json.loads(text)
        return FlagManifest(
            sglang_version=str(raw["sglang_version"]),
            flags=tuple(_flag_from_json(entry) for entry in raw["flags"]),
            prog=str(raw.get("prog") or "sglang serve"),
            allow_abbrev=bool(raw.get("allow_abbrev", True)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(
            f"SGLang flag manifest {name} is invalid ({exc!r}); regenerate it ({_GENERATOR_HINT})"
        ) from exc


@dataclass(frozen=True, slots=True)
class Replacement:
    """What replaces a flag that is deprecated in, or gone from, one SGLang version.

    Attributes:
        old: The flag as the spec writes it (``"cuda-graph-max-bs"``).
        new: The flag that replaces it (``"cuda-graph-max-bs-decode"``).
        value: For a bare flag that became a value of another (``--disable-piecewise-cuda-graph``
            -> ``--cuda-graph-backend-prefill=disabled``), that value; None when the value
            carries over unchanged.
        source: The manifest (version) whose help text names the replacement.
    """

    old: str
    new: str
    value: str | None
    source: str


# "Deprecated alias for --new." / "Deprecated alias for --new=value." / "[Deprecated] Use --new
# instead." / "(Deprecated, use --new)": the wording SGLang's deprecated actions carry.
_ALIAS_RE = re.compile(
    r"(?:alias for|[Uu]se)\s+--(?P<new>[a-z0-9][a-z0-9-]*)"
    r"(?:=(?P<value>[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*))?"
    r"(?P<rest>[^\s.,)]*)"
)


def replacement(key: str, manifest: FlagManifest) -> Replacement | None:
    """The flag of `manifest`'s version that replaces `key`, where SGLang names one.

    `key` is deprecated in `manifest` (its help names the replacement), or gone from it and
    deprecated in another known manifest whose replacement `manifest` has (``cuda-graph-max-bs``,
    deprecated from 0.5.14, gone from 0.5.20: ``cuda-graph-max-bs-decode``).

    Args:
        key: A flag name without dashes.
        manifest: The manifest of the node's version.

    Returns:
        The replacement, or None when no manifest names one that `manifest` accepts as a
        current flag (a help text such as ``--cuda-graph-backend-{decode,prefill}=disabled``
        names no single flag).
    """
    seen = [manifest] + [
        load_manifest(v) for v in reversed(available_versions()) if v != manifest.sglang_version
    ]
    for source in seen:
        flag = source.lookup(key)
        if flag is None or not flag.deprecated:
            continue
        match = _ALIAS_RE.search(flag.help)
        if match is None or match.group("rest"):
            continue
        new = manifest.lookup(match.group("new"))
        if new is None or new.deprecated:
            continue
        value = match.group("value")
        if value is not None and flag.takes_value:
            continue  # a valued flag mapped to one value of another: not a rename
        if value is None and flag.takes_value != new.takes_value:
            continue  # a bare flag for a valued one (or back): the value is not the spec's
        return Replacement(old=key, new=new.name, value=value, source=source.sglang_version)
    return None


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"[.\-+]", version)
    )


def _flag_from_json(entry: dict[str, Any]) -> FlagInfo:
    option_strings = tuple(str(o) for o in entry["option_strings"])
    dest = str(entry["dest"])
    action = str(entry.get("action") or "store")
    nargs = entry.get("nargs")
    if nargs is not None and not isinstance(nargs, (str, int)):
        raise TypeError(f"nargs of {dest} is {nargs!r}")
    choices = entry.get("choices")
    longs = [o for o in option_strings if o.startswith("--")]
    name = (longs[0] if longs else (option_strings[0] if option_strings else dest)).lstrip("-")
    type_name = entry.get("type")
    return FlagInfo(
        name=name,
        option_strings=option_strings,
        dest=dest,
        takes_value=action not in _BARE_ACTIONS and nargs != 0,
        choices=tuple(choices) if choices is not None else None,
        type=str(type_name) if type_name is not None else None,
        nargs=nargs,
        deprecated=bool(entry.get("deprecated", False)),
        default=entry.get("default"),
        help=str(entry.get("help") or ""),
        action=action,
        required=bool(entry.get("required", False)),
    )


def _identity(value: str) -> str:
    return value


def _converter(type_name: str | None) -> Callable[[str], Any]:
    """The converter SGLang uses for ``type_name``; custom ones (``other:...``) keep the string."""
    converters: dict[str, Callable[[str], Any]] = {
        "int": int,
        "float": float,
        "str": str,
        "bool": bool,
        "json": json.loads,
    }
    return converters.get(type_name or "str", _identity)


def _add_flag(parser: argparse.ArgumentParser, flag: FlagInfo) -> None:
    common: dict[str, Any] = {"help": flag.help.replace("%", "%%")}
    if not flag.option_strings:  # a positional argument
        parser.add_argument(flag.dest, nargs=flag.nargs, type=_converter(flag.type), **common)
        return
    common["dest"] = flag.dest
    if flag.action == "help":
        parser.add_argument(*flag.option_strings, action="help", help=common["help"])
    elif flag.action in ("store_true", "store_false", "count"):
        parser.add_argument(
            *flag.option_strings,
            action=flag.action,
            default=flag.default,
            required=flag.required,
            **common,
        )
    elif flag.action == _BOOLEAN_OPTIONAL:
        positives = [o for o in flag.option_strings if not o.startswith("--no-")]
        parser.add_argument(
            *positives,
            action=argparse.BooleanOptionalAction,
            default=flag.default,
            required=flag.required,
            **common,
        )
    elif not flag.takes_value:  # store_const, custom deprecated bare flags, ...
        parser.add_argument(
            *flag.option_strings,
            action="store_const",
            const=True,
            default=flag.default,
            required=flag.required,
            **common,
        )
    else:
        kwargs: dict[str, Any] = {
            "action": flag.action if flag.action in ("append", "extend") else "store",
            "default": flag.default,
            "required": flag.required,
        }
        if flag.type is not None:
            kwargs["type"] = _converter(flag.type)
        if flag.nargs is not None:
            kwargs["nargs"] = flag.nargs
        if flag.choices is not None:
            kwargs["choices"] = list(flag.choices)
        parser.add_argument(*flag.option_strings, **kwargs, **common)
