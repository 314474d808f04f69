"""Loading a sweep spec: YAML (plus `search_spaces/` fragments) into a checked `SweepSpec`.

This module owns reading the YAML format (docs/design.md, "Spec format"). `load_spec` reads the
file, resolves the `search_space.include` fragments, validates everything with pydantic and then
checks every SGLang flag name, value type and choice against the flag manifest of
`node.sglang_version`, the `when:` conditions and the baseline. Every problem becomes a
`SpecError` whose message is one line naming the file, the field path, the bad value and the
fix; nothing downstream re-reads YAML.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from spec_sweep.core.adaptive import spec_problems
from spec_sweep.core.config import baseline_config
from spec_sweep.core.secrets import seal
from spec_sweep.core.versions import weight_cache_problem
from spec_sweep.errors import SpecError
from spec_sweep.manifest import (
    FlagInfo,
    FlagManifest,
    ManifestError,
    is_bundled,
    load_manifest,
    replacement,
)
from spec_sweep.node.prompts import prompt_format
from spec_sweep.node.sglang_env import build_manifest, find_sglang
from spec_sweep.search.fidelity import fidelity_problems
from spec_sweep.spec import (
    AUTO_VERSION,
    DRAFT_PATH,
    RESERVED_FLAGS,
    NodeSpec,
    ParamSpec,
    Scalar,
    SweepSpec,
    _FragmentSpec,
    drafting_algorithms,
    spec_metric_names,
)
from spec_sweep.store.paths import default_state_root, sweep_state_dir

__all__ = ["SpecFix", "fix_spec", "load_spec", "resolve_node_version"]

_PROJECT_DIR = Path(__file__).resolve().parent.parent
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def load_spec(
    path: str | Path,
    *,
    detect: bool = False,
    node_version: str | None = None,
    state_dir: str | Path | None = None,
    defer_flags: bool = False,
    refuse_mismatch: bool = True,
) -> SweepSpec:
    """Read, resolve and validate a sweep spec.

    Args:
        path: The sweep YAML file.
        detect: Ask this machine's launch environment which SGLang `node.launch` starts
            (`node.sglang_env.find_sglang`) and check the spec against it.
        node_version: The SGLang version the nodes run, found by the caller (every node of a
            Ray cluster); takes the place of `detect`.
        state_dir: Root of the sweep state folders (`--state-dir`): manifests built at run
            time are kept in the sweep's state folder, under `manifests/`.
        defer_flags: The nodes decide the version later (a joined Ray cluster:
            `resolve_node_version` checks the flags then): for `auto`, or a written version
            without a manifest here, the flags are not checked against any version now.
        refuse_mismatch: A written version the node does not run is an error (off for
            commands that only read a sweep's record: the written version stays).

    Returns:
        The validated, frozen spec, `node.sglang_version` resolved (`sglang_version_source`
        says from where).

    Raises:
        SpecError: one line naming the file, the field, the value and the fix (also: a written
            `node.sglang_version` that is not the node's).
    """
    path = Path(path)
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the file must hold a mapping of keys (name, node, ...)")
    raw = dict(raw)
    raw["source"] = str(path.resolve())
    space = raw.get("search_space") or {}
    if isinstance(space, dict):
        raw["search_space"] = _resolve_includes(path, space)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(_format_validation(path, exc, raw)) from exc
    spec = _resolve_paths(path, spec)
    if detect or node_version is not None:
        spec = _resolve_version(
            path, spec, detect=detect, node_version=node_version, refuse=refuse_mismatch
        )
    folder = sweep_state_dir(spec, state_dir) / "manifests"
    version = spec.node.sglang_version
    unknown = not is_bundled(version) and not (folder / f"sglang-{version}.json").is_file()
    if defer_flags and (spec.node.sglang_version_source == "auto" or unknown):
        _check_semantics(path, spec, manifest=None)
    else:
        _check_semantics(path, spec, manifest=_manifest(path, spec, folder, built_here=detect))
    # Secrets become placeholders here: what every other module sees, writes and ships to Ray.
    return seal(spec)


def resolve_node_version(
    spec: SweepSpec, node_version: str, *, state_dir: str | Path | None = None
) -> SweepSpec:
    """A loaded spec checked again for the SGLang version its nodes run (found on every node
    of a Ray cluster): `auto` takes it, a written version must be it, and every flag is checked
    against its manifest (bundled, or kept in the sweep's state folder).

    Raises:
        SpecError: a written version the nodes do not run, or a flag that version lacks.
    """
    path = Path(spec.source) if spec.source else Path(spec.name)
    spec = _resolve_version(path, spec, detect=False, node_version=node_version)
    folder = sweep_state_dir(spec, state_dir) / "manifests"
    _check_semantics(path, spec, manifest=_manifest(path, spec, folder, built_here=False))
    return spec


def _resolve_version(
    path: Path, spec: SweepSpec, *, detect: bool, node_version: str | None, refuse: bool = True
) -> SweepSpec:
    """`node.sglang_version` as the node decides: the node's version for `auto`, and a written
    version checked against it."""
    node = spec.node
    where = "the nodes of the Ray cluster"
    if node_version is None and detect:
        found = find_sglang(node)
        node_version, where = found.version, found.where
    if node_version is None:
        return spec
    if refuse and node.sglang_version_source == "spec" and node.sglang_version != node_version:
        raise SpecError(
            f"{path}: node.sglang_version: {node.sglang_version!r} is written, but the node "
            f"runs SGLang {node_version} ({where}): write auto (or {node_version}), or launch "
            f"SGLang {node.sglang_version}"
        )
    if node.sglang_version_source == "spec":
        return spec
    resolved = node.model_copy(
        update={"sglang_version": node_version, "sglang_version_source": "node"}
    )
    return spec.model_copy(update={"node": resolved})


def _manifest(path: Path, spec: SweepSpec, folder: Path, *, built_here: bool) -> FlagManifest:
    """The flag manifest of the spec's version: bundled, kept in `folder`, or (for the SGLang
    of this machine's launch environment) read from its own parser into `folder`."""
    version = spec.node.sglang_version
    if (
        built_here
        and spec.node.sglang_version_source in ("node", "spec")
        and not is_bundled(version)
        and not (folder / f"sglang-{version}.json").is_file()
    ):
        build_manifest(spec.node, folder / f"sglang-{version}.json", version=version)
    try:
        return load_manifest(version, folder=folder)
    except ManifestError as exc:
        raise SpecError(f"{path}: node.sglang_version: {version!r}: {exc}") from exc


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with the same key twice."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {line}): keep one", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SpecError(f"{path}: no such file: check the path") from exc
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise SpecError(f"{path}: {where}: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc


def _fragment_dirs(spec_path: Path) -> list[Path]:
    base = spec_path.resolve().parent
    dirs = [
        base / "search_spaces",
        base.parent / "search_spaces",
        base,
        Path.cwd() / "search_spaces",
    ]
    dirs.append(_PROJECT_DIR / "search_spaces")
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def _resolve_includes(spec_path: Path, space: dict[str, Any]) -> dict[str, Any]:
    includes = space.get("include") or []
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list):
        return space  # pydantic reports the type error
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in includes:
        if not isinstance(name, str):
            raise SpecError(f"{spec_path}: search_space.include: {name!r} is not a file name")
        candidates = [d / name for d in _fragment_dirs(spec_path)]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            where = ", ".join(str(d) for d in _fragment_dirs(spec_path)[:2])
            raise SpecError(
                f"{spec_path}: search_space.include: {name!r} not found (looked in {where}): "
                "check the file name"
            )
        raw = _read_yaml(found)
        try:
            fragment = _FragmentSpec.model_validate(raw if raw is not None else {})
        except ValidationError as exc:
            raise SpecError(_format_validation(found, exc, raw)) from exc
        for key in fragment.params:
            if key in merged:
                raise SpecError(
                    f"{found}: params.{key}: duplicate parameter, already defined in "
                    f"{origin[key]}: keep it in one fragment (or override it in the sweep's "
                    "search_space.params)"
                )
            origin[key] = found.name
        raw_params = (raw or {}).get("params") or {}
        merged.update(raw_params)
    own = space.get("params") or {}
    if not isinstance(own, dict):
        return space
    merged.update(own)  # the sweep's own params override fragments
    return {**space, "include": includes, "params": merged}


def _local_model(spec_path: Path, model: str | None) -> str | None:
    """A model given as a relative local path (`./m`, `../m`, `.models/m`, `~/m`) -> absolute.

    Relative to the spec's folder, like every path in a spec: a trial's server runs in a Ray
    worker's folder, not the user's. A Hugging Face repo id never starts with `.` or `~`.
    """
    if model is None or not model.startswith((".", "~")):
        return model
    path = Path(model).expanduser()
    if not path.is_absolute():
        path = spec_path.resolve().parent / path
    return str(path.resolve())


def _resolve_paths(spec_path: Path, spec: SweepSpec) -> SweepSpec:
    node = spec.node
    model = _local_model(spec_path, node.model)
    draft: str | tuple[str, ...] | None
    if isinstance(node.draft_model, tuple):
        draft = tuple(_local_model(spec_path, d) or d for d in node.draft_model)
    else:
        draft = _local_model(spec_path, node.draft_model)
    if (model, draft) != (node.model, node.draft_model):
        node = node.model_copy(update={"model": model, "draft_model": draft})
        spec = spec.model_copy(update={"node": node})
    dataset = spec.workload.dataset
    if dataset in ("random", "builtin"):
        return spec
    candidate = Path(dataset).expanduser()
    if not candidate.is_absolute():
        candidate = spec_path.resolve().parent / candidate
    if not candidate.is_file():
        raise SpecError(
            f"{spec_path}: workload.dataset: {dataset!r} is not 'random', 'builtin' or an "
            "existing JSON/JSONL file: check the path (relative paths start at the spec's folder)"
        )
    workload = spec.workload.model_copy(update={"dataset": str(candidate)})
    return spec.model_copy(update={"workload": workload})


_FIXES = {
    "extra_forbidden": "remove it or check its spelling",
    "missing": "add it",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "literal_error": "use one of the allowed values",
    "enum": "use one of the allowed values",
}


def _format_validation(path: Path, exc: ValidationError, raw: Any) -> str:
    by_loc: dict[str, list[Any]] = {}
    for error in exc.errors():
        loc = ".".join(_real_path(raw, error["loc"]))
        by_loc.setdefault(loc, []).append(error)
    loc, errors = next(iter(by_loc.items()))
    first = errors[0]
    value = first.get("input")
    kind = first["type"]
    msg = first["msg"].removeprefix("Value error, ")
    if len(errors) > 1 and kind.endswith("_type"):
        expected = sorted(
            {e["type"].removesuffix("_type").removesuffix("_parsing") for e in errors}
        )
        msg = f"wrong type (expected {' or '.join(expected)})"
    fix = _FIXES.get(kind, "")
    if kind == "extra_forbidden":
        text = f"{path}: {loc}: unknown key: {fix}"
    elif kind == "missing":
        text = f"{path}: {loc}: required key is missing: {fix}"
    elif kind == "value_error" and isinstance(value, dict):
        # A check across keys of one section: its message names the keys and their values.
        text = f"{path}: {loc or '(top level)'}: {msg}"
    else:
        text = f"{path}: {loc or '(top level)'}: {_short(value)} is invalid: {msg}"
        if fix:
            text += f": {fix}"
    if len(by_loc) > 1:
        text += f" (and {len(by_loc) - 1} more)"
    return text


def _real_path(raw: Any, loc: tuple[int | str, ...]) -> list[str]:
    """The parts of a pydantic error location that are keys of the input (not union tags)."""
    parts: list[str] = []
    node = raw
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
        elif isinstance(node, dict) and i == len(loc) - 1:
            node = None  # a missing required key: still part of the path
        else:
            continue  # a union member tag such as 'int' or 'list[...]'
        parts.append(str(part))
    return parts


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------
# Semantic checks (need the whole spec and the flag manifest)


def _check_semantics(path: Path, spec: SweepSpec, *, manifest: FlagManifest | None) -> None:
    """Checks that need the whole spec and SGLang's flag manifest, in the order a reader meets
    the sections: node, search space, baseline, objective, searcher, draft model (without a
    manifest: all but the flags' names and values)."""

    def fail(field: str, message: str) -> None:
        raise SpecError(f"{path}: {field}: {message}")

    _check_prompts(path, spec)
    _check_node(fail, manifest, spec)
    if (problem := weight_cache_problem(spec)) is not None:
        fail("node.weight_cache", problem)
    params = spec.params
    for key, param in spec.search_space.params.items():  # the draft model's is built, not read
        _check_param(fail, manifest, params, key, param)
    _check_cycles(fail, params)
    for field, message in spec_problems(spec):  # adaptive speculative decoding
        fail(field, message)
    _check_baseline(fail, spec)
    _check_objective(fail, spec)
    for field, message in fidelity_problems(spec):  # budget.fidelity.mode: two
        fail(field, message)
    if spec.searcher.kind == "grid":
        for key, param in params.items():
            if param.kind == "float" and param.step is None:
                fail(
                    f"search_space.params.{key}",
                    "a grid search needs a 'step' for every float range: add 'step'",
                )
    if spec.node.draft_model is None and _may_need_draft(spec):
        fail(
            "node.draft_model",
            "missing: the search space can set an EAGLE speculative algorithm, which needs "
            "a draft model: set node.draft_model",
        )
    _check_draft_models(fail, spec)


def _check_draft_models(fail: Any, spec: SweepSpec) -> None:
    """Several draft models are searched only where an algorithm drafts with one."""
    heads = spec.node.draft_models
    if len(heads) < 2:
        return
    fixed = spec.node.server_args.get("speculative-algorithm")
    drafting = drafting_algorithms(spec.search_space.params.get("speculative-algorithm"))
    if drafting == () or (drafting is None and not fixed):
        shown = _short(list(heads))
        fail(
            "node.draft_model",
            f"{shown} lists {len(heads)} draft models, but no speculative algorithm of the "
            "search space drafts with a model: add 'speculative-algorithm' with an EAGLE value "
            "to search_space.params, or give one draft model",
        )


def _check_prompts(path: Path, spec: SweepSpec) -> None:
    """A chat template the workload requires is there (else every trial would fail on it)."""
    if spec.workload.dataset == "random":
        return
    try:
        prompt_format(spec.workload, model_path=spec.node.model)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from exc


def _check_node(fail: Any, manifest: FlagManifest | None, spec: SweepSpec) -> None:
    """Fixed server arguments are real flags with valid values; nothing is fixed and searched."""
    params = spec.params
    for key, value in spec.node.server_args.items():
        _check_key(fail, manifest, f"node.server_args.{key}", key, allow_env=False)
        flag = manifest.lookup(key) if manifest is not None else None
        if manifest is not None:
            assert flag is not None
            _check_flag_value(fail, flag, f"node.server_args.{key}", value)
        if key in params:
            fail(
                f"node.server_args.{key}",
                "duplicate parameter: it is both fixed here and searched in search_space: keep one",
            )
    for name in spec.node.env:
        if f"env.{name}" in params:
            fail(
                f"node.env.{name}",
                f"duplicate parameter: fixed in node.env and searched as 'env.{name}': keep one",
            )


def _check_param(
    fail: Any,
    manifest: FlagManifest | None,
    params: Mapping[str, ParamSpec],
    key: str,
    param: ParamSpec,
) -> None:
    """One searched parameter: a real flag (or env var), valid values, sound `when:`."""
    field = f"search_space.params.{key}"
    _check_key(fail, manifest, field, key, allow_env=True)
    flag = manifest.lookup(key) if manifest is not None and not key.startswith("env.") else None
    if flag is not None:
        for value in _param_values_to_check(param):
            _check_flag_value(fail, flag, field, value)
    for dep, wanted in param.when.items():
        if dep == key:
            fail(f"{field}.when", f"{key!r} cannot depend on itself")
        if dep not in params:
            fail(
                f"{field}.when.{dep}",
                f"{dep!r} is not a parameter of the search space: name one of {sorted(params)}",
            )
        options = wanted if isinstance(wanted, tuple) else (wanted,)
        for option in options:
            if not params[dep].contains(option):
                fail(
                    f"{field}.when.{dep}",
                    f"{option!r} is not a value {dep!r} can take: use one of its values",
                )


def _check_baseline(fail: Any, spec: SweepSpec) -> None:
    """The baseline names parameters of the space, with values they take, and is complete."""
    params = spec.params
    for key, value in spec.baseline.items():
        if key not in params:
            fail(
                f"baseline.{key}",
                f"{key!r} is not a parameter of the search space: use one of {sorted(params)}",
            )
        if not params[key].contains(value):
            fail(
                f"baseline.{key}",
                f"{value!r} is not a value this parameter can take: use {params[key].domain()}",
            )
    _check_baseline_complete(fail, spec)


def _check_objective(fail: Any, spec: SweepSpec) -> None:
    """The objective and its constraints name metrics a trial of this spec reports."""
    valid = spec_metric_names(spec)
    if spec.objective.metric not in valid:
        fail(
            "objective.metric",
            f"{spec.objective.metric!r} is not a metric: use one of {', '.join(valid)}",
        )
    if spec.objective.metric == "speedup_vs_baseline" and spec.objective.mode != "max":
        fail("objective.mode", "'speedup_vs_baseline' can only be maximised: use 'max'")
    for metric in spec.objective.constraints:
        if metric not in valid:
            fail(
                f"objective.constraints.{metric}",
                f"{metric!r} is not a metric: use one of {', '.join(valid)}",
            )


def _check_key(
    fail: Any, manifest: FlagManifest | None, field: str, key: str, *, allow_env: bool
) -> None:
    if key.startswith("env."):
        if not allow_env:
            fail(field, f"{key!r}: put environment variables in node.env")
        if not _ENV_RE.match(key[4:]):
            fail(field, f"{key!r}: 'env.' must be followed by an environment variable name")
        return
    if key.startswith("-"):
        fail(field, f"{key!r}: write flag names without leading dashes ({key.lstrip('-')!r})")
    if key == DRAFT_PATH:
        fail(
            field,
            f"{key!r} is set by spec_sweep itself: list the draft models in node.draft_model "
            "(node.draft_model: [path1, path2]) and the sweep searches them",
        )
    if key in RESERVED_FLAGS:
        fail(field, f"{key!r} is set by spec_sweep itself (node.model / node.draft_model)")
    if manifest is None:
        return  # the version is decided later (`resolve_node_version`)
    flag = manifest.lookup(key)
    renamed = replacement(key, manifest) if flag is None or flag.deprecated else None
    if renamed is not None:
        new = renamed.new + (f": {renamed.value}" if renamed.value is not None else "")
        state = "gone from" if flag is None else "deprecated in"
        fail(
            field,
            f"{key!r} is {state} SGLang {manifest.sglang_version}; its replacement is {new!r} "
            "(spec-sweep validate --fix rewrites the spec for this version)",
        )
    if flag is None:
        hints = manifest.suggest(key)
        hint = f": did you mean {' or '.join(repr(h) for h in hints[:2])}?" if hints else ""
        fail(
            field,
            f"{key!r} is not a launch_server flag of SGLang {manifest.sglang_version}{hint} "
            "(check node.sglang_version)",
        )
    elif flag.deprecated:
        note = re.search(r"\(?[Dd]eprecated[^)]*\)?", flag.help)
        hint = f" ({note.group(0).strip('()')})" if note else ""
        fail(
            field,
            f"{key!r} is deprecated in SGLang {manifest.sglang_version}{hint}: use its "
            "replacement (or pin node.sglang_version to a version where it is current)",
        )


def _param_values_to_check(param: ParamSpec) -> list[Scalar]:
    if param.choices is not None:
        return list(param.choices)
    if param.int_range is not None:
        return list(param.int_range)
    assert param.float_range is not None
    return list(param.float_range)


def _check_flag_value(fail: Any, flag: FlagInfo, field: str, value: Any) -> None:
    if value is None or value is False:
        return  # omitted flag
    if not flag.takes_value:
        if value is not True:
            fail(field, f"{value!r}: --{flag.name} is a bare flag: use true, false or null")
        return
    if value is True:
        fail(field, f"true: --{flag.name} takes a value, not a bare flag")
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and flag.nargs in (None, "?"):
        fail(field, f"{_short(value)}: --{flag.name} takes one value, not a list")
    for item in items:
        if isinstance(value, dict):
            break
        if flag.type == "int" and (isinstance(item, bool) or not isinstance(item, int)):
            fail(field, f"{item!r}: --{flag.name} takes an integer")
        if flag.type == "float" and (isinstance(item, bool) or not isinstance(item, int | float)):
            fail(field, f"{item!r}: --{flag.name} takes a number")
        if flag.choices is not None and not any(str(item) == str(c) for c in flag.choices):
            shown = ", ".join(str(c) for c in flag.choices)
            fail(field, f"{item!r} is not a valid choice for --{flag.name}: use one of {shown}")


def _check_cycles(fail: Any, params: Mapping[str, ParamSpec]) -> None:
    state: dict[str, int] = {}

    def visit(key: str, trail: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            cycle = " -> ".join([*trail[trail.index(key) :], key])
            fail(f"search_space.params.{key}.when", f"conditions form a cycle: {cycle}")
        state[key] = 1
        for dep in params[key].when:
            visit(dep, [*trail, key])
        state[key] = 2

    for key in params:
        visit(key, [])


def _check_baseline_complete(fail: Any, spec: SweepSpec) -> None:
    try:
        baseline_config(spec)
    except ValueError as exc:
        fail("baseline", str(exc))


def _may_need_draft(spec: SweepSpec) -> bool:
    values: list[Any] = []
    fixed = spec.node.server_args.get("speculative-algorithm")
    values.append(fixed)
    param = spec.params.get("speculative-algorithm")
    if param is not None and param.choices is not None:
        values.extend(param.choices)
    return any(isinstance(v, str) and v.upper().startswith("EAGLE") for v in values)


# ---------------------------------------------------------------------------------------------
# Rewriting a spec for the node's SGLang version (`spec-sweep validate --fix`)


@dataclass(frozen=True)
class SpecFix:
    """A spec rewritten for one SGLang version.

    Attributes:
        path: The spec file.
        version: The SGLang version it was rewritten for.
        before: The file's text.
        after: The rewritten text (equal to `before`: nothing to rewrite).
        changes: One line per change (`node.server_args.cuda-graph-max-bs ->
            cuda-graph-max-bs-decode`).
        left: What could not be rewritten in this file, one line each (a flag that comes
            from an included fragment, a replacement that is not a rename).
    """

    path: Path
    version: str
    before: str
    after: str
    changes: tuple[str, ...]
    left: tuple[str, ...]

    def diff(self) -> str:
        """The change as a unified diff of the file."""
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                fromfile=f"{self.path} (before)",
                tofile=f"{self.path} (SGLang {self.version})",
            )
        )


def fix_spec(
    path: str | Path,
    *,
    detect: bool = True,
    version: str | None = None,
    state_dir: str | Path | None = None,
) -> SpecFix:
    """Rewrite a spec's flags for the node's SGLang version (nothing is written here).

    Flags that version renamed (the manifests name the replacement: `cuda-graph-max-bs` ->
    `cuda-graph-max-bs-decode`; `disable-piecewise-cuda-graph: true` ->
    `cuda-graph-backend-prefill: disabled`) are renamed wherever the file names them (fixed
    server arguments, searched parameters, the baseline, `when:` conditions), and a written
    `node.sglang_version` becomes the target. Comments and layout stay.

    Args:
        path: The spec file.
        detect: Take the target version from this machine's launch environment.
        version: The target version (instead of detecting it).
        state_dir: Root of the sweep state folders (manifests built at run time are kept in
            the sweep's).

    Returns:
        The rewrite; `after` equals `before` when nothing needed rewriting.

    Raises:
        SpecError: the file cannot be read or is not a spec at all.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    raw = _read_yaml(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("node"), dict):
        raise SpecError(f"{path}: the file must hold a mapping with a node section")
    raw_node = dict(raw["node"])
    written = raw_node.get("sglang_version")
    probe = dict(raw_node)
    probe.pop("sglang_version", None)
    try:
        node = NodeSpec.model_validate(probe)
    except ValidationError as exc:
        raise SpecError(_format_validation(path, exc, {"node": probe})) from exc
    target = version
    if target is None and detect:
        target = find_sglang(node).version
    if target is None:
        target = str(written) if written not in (None, AUTO_VERSION) else node.sglang_version
    folder = _state_folder(raw, state_dir) / "manifests"
    if detect and version is None and not is_bundled(target):
        manifest_file = folder / f"sglang-{target}.json"
        if not manifest_file.is_file():
            build_manifest(node, manifest_file, version=target)
    try:
        manifest = load_manifest(target, folder=folder)
    except ManifestError as exc:
        raise SpecError(f"{path}: node.sglang_version: {target!r}: {exc}") from exc
    after, changes, left = _rewrite(text, raw, path, manifest)
    if written not in (None, AUTO_VERSION) and str(written) != target:
        after, count = _VERSION_LINE.subn(rf'\g<1>"{target}"', after, count=1)
        if count:
            changes.append(f"node.sglang_version: {written} -> {target}")
    return SpecFix(path, target, text, after, tuple(changes), tuple(left))


_VERSION_LINE = re.compile(r"""^(\s*sglang_version:\s*)(["']?)[^\s"'#]+\2""", re.MULTILINE)


def _state_folder(raw: Mapping[str, Any], state_dir: str | Path | None) -> Path:
    name = raw.get("name")
    root = Path(state_dir).resolve() if state_dir else default_state_root()
    return root / name if isinstance(name, str) and name else root


def _file_keys(raw: Mapping[str, Any]) -> dict[str, str]:
    """Every flag key the file itself names -> where it names it first."""
    node = raw.get("node") or {}
    space = raw.get("search_space") or {}
    own_params = space.get("params") if isinstance(space, dict) else None
    fixed = node.get("server_args") if isinstance(node, dict) else None
    keys: dict[str, str] = {}
    for key in fixed or {}:
        keys.setdefault(str(key), f"node.server_args.{key}")
    for key, param in (own_params or {}).items():
        keys.setdefault(str(key), f"search_space.params.{key}")
        if isinstance(param, dict) and isinstance(param.get("when"), dict):
            for dep in param["when"]:
                keys.setdefault(str(dep), f"search_space.params.{key}.when.{dep}")
    for key in raw.get("baseline") or {}:
        keys.setdefault(str(key), f"baseline.{key}")
    return {k: w for k, w in keys.items() if not k.startswith("env.") and k not in RESERVED_FLAGS}


def _rewrite(
    text: str, raw: Mapping[str, Any], path: Path, manifest: FlagManifest
) -> tuple[str, list[str], list[str]]:
    """Rename, in `text`, every flag key of the file that `manifest`'s version replaced."""
    keys = _file_keys(raw)
    changes: list[str] = []
    left: list[str] = []
    for key, where in keys.items():
        flag = manifest.lookup(key)
        if flag is not None and not flag.deprecated:
            continue
        renamed = replacement(key, manifest)
        if renamed is None:
            left.append(
                f"{where}: no replacement of {key!r} is known for SGLang "
                f"{manifest.sglang_version}: edit it by hand"
            )
        elif renamed.value is not None:
            # a bare flag that became one value of another: only `key: true` among the fixed
            # server arguments can be rewritten as `new: value`
            pattern = re.compile(rf"""(?<![\w.-])(["']?){re.escape(key)}\1(\s*:\s*)true\b""")
            count = 0
            if where.startswith("node.server_args."):
                text, count = pattern.subn(rf"{renamed.new}\g<2>{renamed.value}", text, count=1)
            if count:
                changes.append(f"{where}: true -> {renamed.new}: {renamed.value}")
            else:
                left.append(f"{where}: {key!r} is now {renamed.new}: {renamed.value}: edit it")
        else:
            pattern = re.compile(rf"""(?<![\w.-])(["']?){re.escape(key)}\1(?=\s*:)""")
            text, count = pattern.subn(renamed.new, text)
            if count:
                changes.append(f"{where} -> {renamed.new}")
    for key in _fragment_keys(raw, path):
        flag = manifest.lookup(key)
        if key.startswith("env.") or (flag is not None and not flag.deprecated):
            continue
        renamed = replacement(key, manifest)
        hint = ""
        if renamed is not None:
            now = renamed.new + (f": {renamed.value}" if renamed.value is not None else "")
            hint = f" (now {now!r})"
        left.append(
            f"search_space.include: {key!r}{hint} comes from an included fragment: include one "
            f"written for SGLang {manifest.sglang_version} instead"
        )
    return text, changes, left


def _fragment_keys(raw: Mapping[str, Any], path: Path) -> list[str]:
    space = raw.get("search_space") or {}
    if not isinstance(space, dict) or not space.get("include"):
        return []
    try:
        merged = _resolve_includes(path, {"include": space["include"]})
    except SpecError:
        return []
    return [str(k) for k in merged.get("params") or {}]
