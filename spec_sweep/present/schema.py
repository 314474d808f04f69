"""The JSON Schema of a sweep spec, for editors that validate and complete sweep YAML.

This module owns `sweep_schema`: the pydantic models' own JSON Schema (`spec.SweepSpec`, by
alias, as the YAML spells the keys), plus what the models cannot say themselves: the spellings
`spec_load` accepts before the models see the file (one concurrency level as a number, one
fragment file as a string), the SLA metric names, and the `launch_server` flags of every SGLang
version the package bundles a manifest of (`manifest`), offered as the keys of
`search_space.params` and `node.server_args` with SGLang's help text. The package ships the
result as `spec_sweep/data/sweep.schema.json` (`spec-sweep docs` writes it, `spec-sweep schema`
prints it); a sweep YAML names it on its first line
(`# yaml-language-server: $schema=...`). The schema checks structure (keys, types, allowed
values); `spec-sweep validate` remains the full check (flag values, conditions, the baseline).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from spec_sweep.manifest import FlagInfo, available_versions, load_manifest
from spec_sweep.spec import RESERVED_FLAGS, SweepSpec
from spec_sweep.spec_metrics import LEVEL_METRICS

__all__ = ["SCHEMA_ID", "SCHEMA_RESOURCE", "schema_text", "shipped_schema_text", "sweep_schema"]

#: Where the package keeps the schema (under `spec_sweep/`).
SCHEMA_RESOURCE = ("data", "sweep.schema.json")
#: The schema's `$id`: a name, not an address anything is fetched from.
SCHEMA_ID = "spec_sweep/sweep.schema.json"
_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_HELP_CHARS = 240


def sweep_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep spec file (draft 2020-12).

    Returns:
        The schema as a JSON-ready dict, the same on every call for the same package.
    """
    schema = SweepSpec.model_json_schema(by_alias=True, mode="validation")
    defs = schema["$defs"]
    top = {
        "$schema": _DIALECT,
        "$id": SCHEMA_ID,
        "title": "spec_sweep sweep spec",
        "description": (
            "A sweep spec (spec-sweep run SWEEP.yaml). Structure only: spec-sweep validate "
            "also checks flag values against node.sglang_version, the when: conditions and "
            "the baseline."
        ),
    }
    schema = {**top, **{k: v for k, v in schema.items() if k not in top}}
    _accept_single_values(schema, defs)
    flag_defs = _flag_defs(_bundled_flags())
    _offer_flags(defs["SearchSpaceSpec"]["properties"]["params"], flag_defs, value_ref="ParamSpec")
    server_args = defs["NodeSpec"]["properties"]["server_args"]
    defs["ServerArgValue"] = server_args["additionalProperties"]
    _offer_flags(server_args, flag_defs, value_ref="ServerArgValue")
    defs.update(flag_defs)
    defs["ParamSpec"]["oneOf"] = [
        {"required": ["choices"]},
        {"required": ["int"]},
        {"required": ["float"]},
    ]
    return schema


def schema_text() -> str:
    """`sweep_schema` as the shipped file holds it (indented JSON, sorted keys, final newline)."""
    return json.dumps(sweep_schema(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def shipped_schema_text() -> str:
    """The schema file the installed package ships (empty when it has none)."""
    resource = resources.files("spec_sweep").joinpath(*SCHEMA_RESOURCE)
    return resource.read_text(encoding="utf-8") if resource.is_file() else ""


def _accept_single_values(schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """What `spec_load` and the models' before-validators take besides the models' types."""
    workload = defs["WorkloadSpec"]["properties"]
    levels = workload["concurrency"]
    workload["concurrency"] = {
        "anyOf": [copy.deepcopy(levels["items"]), {k: v for k, v in levels.items() if k in _TYPE}],
        **{k: v for k, v in levels.items() if k not in _TYPE},
    }
    workload["sla"]["propertyNames"] = {"enum": list(LEVEL_METRICS)}
    space = defs["SearchSpaceSpec"]["properties"]
    files = space["include"]
    space["include"] = {
        "anyOf": [{"type": "string"}, {k: v for k, v in files.items() if k in _TYPE}],
        **{k: v for k, v in files.items() if k not in _TYPE},
    }
    # Fields spec_sweep fills in itself (`source`: the file load_spec read) say so in their
    # description; a spec does not write them.
    for model in [schema, *defs.values()]:
        for key, field in list(model.get("properties", {}).items()):
            if str(field.get("description", "")).startswith(_SET_BY):
                del model["properties"][key]


_SET_BY = ("Set by load_spec", "Set by spec_sweep")
_TYPE = frozenset({"type", "items", "prefixItems", "minItems", "maxItems"})


def _bundled_flags() -> dict[str, tuple[FlagInfo, list[str]]]:
    """Each flag of the bundled manifests: its newest definition and the versions that have it."""
    flags: dict[str, tuple[FlagInfo, list[str]]] = {}
    for version in available_versions():
        for flag in load_manifest(version).flags:
            seen = flags.get(flag.name)
            flags[flag.name] = (flag, [*(seen[1] if seen else []), version])
    return dict(sorted(flags.items()))


def _flag_defs(flags: dict[str, tuple[FlagInfo, list[str]]]) -> dict[str, Any]:
    """One definition per flag (SGLang's help, deprecation), named `flag:<name>`; the flags
    that spec_sweep sets itself are left out."""
    defs: dict[str, Any] = {}
    for name, (flag, versions) in flags.items():
        if name in RESERVED_FLAGS:
            continue
        entry: dict[str, Any] = {"description": _flag_help(flag, versions)}
        if flag.deprecated:
            entry["deprecated"] = True
        defs[f"flag:{name}"] = entry
    return defs


def _offer_flags(holder: dict[str, Any], flag_defs: dict[str, Any], *, value_ref: str) -> None:
    """List the flags as the known keys of a mapping (editors complete them and show SGLang's
    help); every key's value follows `value_ref` (a pattern property), and other keys stay
    allowed (a newer SGLang's flags, `env.NAME`: `spec-sweep validate` checks them)."""
    holder["properties"] = {
        key.removeprefix("flag:"): {"$ref": f"#/$defs/{key}"} for key in flag_defs
    }
    holder["patternProperties"] = {"": {"$ref": f"#/$defs/{value_ref}"}}
    holder.pop("additionalProperties", None)


def _flag_help(flag: FlagInfo, versions: list[str]) -> str:
    text = " ".join(flag.help.split())
    if len(text) > _HELP_CHARS:
        text = text[: _HELP_CHARS - 3].rstrip() + "..."
    bundled = available_versions()
    first, last = bundled.index(versions[0]), bundled.index(versions[-1])
    if len(versions) == 1:
        span = versions[0]
    elif versions == bundled[first : last + 1]:
        span = f"{versions[0]} to {versions[-1]}"
    else:
        span = ", ".join(versions)
    return f"--{flag.name}" + (f": {text}" if text else "") + f" (SGLang {span})"
