"""The SGLang a node launches: which version it is, and its flag manifest, read at run time.

This module owns asking the node's launch environment about its SGLang, before anything boots
(docs/concepts/sglang-versions.md). For the default launcher (`python -m sglang.launch_server`,
or `node.launch` naming a Python interpreter and `-m sglang.launch_server`) the interpreter that
trials will run is asked for the installed package's version (`importlib.metadata`), with the
environment a trial gets (this process's, plus `node.env`), so a `PYTHONPATH` in `node.env` or
the bundle's is honoured. Any other prefix (`docker run ...`, a wrapper script) cannot be asked
before it boots: its version comes from the server's own report on the baseline's boot
(`server_version`). `build_manifest` reads the installed SGLang's own argument parser
(`sglang_parser`, run by path in that interpreter) into a manifest file, for a version the
package bundles none of.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from spec_sweep.core.config import render_value
from spec_sweep.errors import SpecError
from spec_sweep.manifest import available_versions, is_bundled
from spec_sweep.spec import NodeSpec

__all__ = [
    "NodeSGLang",
    "build_manifest",
    "find_sglang",
    "launch_python",
    "server_version",
    "version_mismatch",
    "write_manifest",
]

_PROBE = (
    "import importlib.metadata as m\n"
    "try:\n"
    "    print(m.version('sglang'))\n"
    "except m.PackageNotFoundError:\n"
    "    print('')\n"
)
_PROBE_TIMEOUT_S = 120.0
_MANIFEST_TIMEOUT_S = 600.0
_READER = Path(__file__).resolve().parent / "sglang_parser.py"
_LAUNCH_MODULE = "sglang.launch_server"


@dataclass(frozen=True, slots=True)
class NodeSGLang:
    """What the node's launch environment says about its SGLang.

    Attributes:
        version: The installed SGLang's version; None when the launch environment has none, or
            when the launch prefix cannot be asked before it boots (`askable` False).
        askable: The prefix is the default launcher (a Python interpreter running
            `-m sglang.launch_server`), whose environment can be asked before a boot.
        where: The interpreter asked (or the prefix), for messages.
    """

    version: str | None
    askable: bool
    where: str


def launch_python(node: NodeSpec) -> str | None:
    """The interpreter a trial's server runs in, for the default launcher (None: another prefix).

    A leading `python`/`python3` is this process's interpreter, as the trial launches it
    (`node.server.launch_server`).
    """
    prefix = node.launch_prefix()
    if len(prefix) < 3 or prefix[1] != "-m" or prefix[2] != _LAUNCH_MODULE:
        return None
    program = prefix[0]
    if program in ("python", "python3"):
        return sys.executable
    if Path(program).name.startswith("python"):
        return program
    return None


def launch_env(node: NodeSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a trial's server gets: `base` (this process's) plus `node.env`."""
    env = dict(os.environ if base is None else base)
    env.update({k: render_value(v) for k, v in node.env.items() if v is not None})
    return env


def find_sglang(node: NodeSpec) -> NodeSGLang:
    """Ask the node's launch environment which SGLang it has (no GPU, nothing booted).

    Raises:
        SpecError: the launch interpreter cannot be run at all (a `node.launch` naming a
            Python that does not exist).
    """
    python = launch_python(node)
    if python is None:
        return NodeSGLang(version=None, askable=False, where=" ".join(node.launch_prefix()))
    out = _run(python, ["-c", _PROBE], env=launch_env(node), timeout_s=_PROBE_TIMEOUT_S)
    if out.returncode != 0:
        raise SpecError(
            f"node.launch: {python} could not report its SGLang version (exit {out.returncode}: "
            f"{_last_line(out.stderr)}): check the interpreter and node.env"
        )
    version = out.stdout.strip().splitlines()[-1].strip() if out.stdout.strip() else ""
    return NodeSGLang(version=version or None, askable=True, where=python)


def build_manifest(node: NodeSpec, out: Path, *, version: str | None = None) -> Path:
    """Write the manifest of the SGLang in the node's launch environment to `out`.

    Its own argument parser is read (`sglang_parser`), in an empty working directory, with
    `SGLANG_*`/`SGL_*` variables removed (a few choice lists depend on them) and no GPU asked
    for.

    Args:
        node: The node (its launch interpreter and `node.env`).
        out: The file to write.
        version: The version the environment must hold (None: whatever it holds).

    Returns:
        `out`.

    Raises:
        SpecError: the launch prefix is not the default launcher, or SGLang's parser could not
            be read (its last error line is named).
    """
    python = launch_python(node)
    if python is None:
        raise SpecError(
            f"node.launch: {' '.join(node.launch_prefix())!r} is not `python -m "
            f"{_LAUNCH_MODULE}`, so its SGLang cannot be read here: run `spec-sweep manifest "
            "-o FILE` where that SGLang is installed (e.g. inside the container)"
        )
    env = {
        k: v
        for k, v in launch_env(node).items()
        if not k.startswith(("SGLANG_", "SGL_")) or k in node.env
    }
    env["PYTHONNOUSERSITE"] = "1"
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    args = [str(_READER), "--out", str(out.resolve())]
    if version is not None:
        args += ["--version", version]
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(python, args, env=env, timeout_s=_MANIFEST_TIMEOUT_S)
    if proc.returncode != 0 or not out.is_file():
        raise SpecError(
            f"node.sglang_version: reading the flags of the SGLang in {python} failed (exit "
            f"{proc.returncode}: {_last_line(proc.stderr)}): fix that environment, or name a "
            "bundled version in node.sglang_version"
        )
    return out


def write_manifest(version: str | None, *, python: str | None, out: Path | None) -> str:
    """`spec-sweep manifest`: the manifest of the SGLang in `python` (or a bundled version's).

    Args:
        version: The version wanted: a bundled one is taken from the package (no SGLang
            needed); another must be the one installed.
        python: The interpreter whose SGLang is read (default: this one).
        out: Also write it there.

    Returns:
        The manifest's JSON text.

    Raises:
        SpecError: no SGLang in that interpreter (or another version than `version`).
    """
    if version is not None and is_bundled(version) and python is None:
        text = resources.files("spec_sweep").joinpath("manifests", f"sglang-{version}.json")
        body = text.read_text(encoding="utf-8")
    else:
        interpreter = python or sys.executable
        found = _run(interpreter, ["-c", _PROBE], env=os.environ, timeout_s=_PROBE_TIMEOUT_S)
        installed = found.stdout.strip()
        if found.returncode != 0 or not installed:
            available = ", ".join(available_versions())
            raise SpecError(
                f"--python: {interpreter} has no SGLang installed: run it where SGLang is "
                f"(--python PATH), or name a bundled --version ({available})"
            )
        if version is not None and installed != version:
            raise SpecError(
                f"--version: {version} was asked for, and {interpreter} has SGLang {installed}: "
                f"ask for {installed}, or name the interpreter that has {version} (--python)"
            )
        with tempfile.TemporaryDirectory(prefix="spec-sweep-manifest-") as folder:
            target = Path(folder) / "manifest.json"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
            env.setdefault("CUDA_VISIBLE_DEVICES", "")
            proc = _run(
                interpreter,
                [str(_READER), "--out", str(target)],
                env=env,
                timeout_s=_MANIFEST_TIMEOUT_S,
            )
            if proc.returncode != 0 or not target.is_file():
                raise SpecError(
                    f"--python: reading the flags of SGLang {installed} in {interpreter} failed "
                    f"(exit {proc.returncode}: {_last_line(proc.stderr)}): fix that environment"
                )
            body = target.read_text(encoding="utf-8")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body, encoding="utf-8")
    return body


def server_version(server_info: Mapping[str, Any] | None) -> str | None:
    """The SGLang version a server reports in its `/server_info` answer (`version`), if any."""
    if not server_info:
        return None
    version = server_info.get("version")
    return version.strip() if isinstance(version, str) and version.strip() else None


def _run(
    python: str, args: list[str], *, env: Mapping[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="spec-sweep-sglang-") as cwd:
        try:
            return subprocess.run(
                [python, *args],
                cwd=cwd,
                env=dict(env),
                text=True,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SpecError(
                f"node.launch: {python!r} cannot be run ({exc.strerror}): name an interpreter "
                "that exists"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise SpecError(
                f"node.launch: {python} did not answer within {timeout_s:.0f} s: check that "
                "environment"
            ) from exc


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def version_mismatch(node: NodeSpec, reported: str | None) -> str | None:
    """Why a server that reports SGLang `reported` cannot be measured under this spec (None: it
    reports the spec's version, or nothing).

    The spec's flags, log patterns and rules follow `node.sglang_version`; a server of another
    version (a custom launch prefix that runs another SGLang) stops the sweep on its first boot.
    """
    if reported is None or reported == node.sglang_version:
        return None
    if node.sglang_version_source == "spec":
        fix = f"write node.sglang_version: {reported} (or auto), or launch SGLang "
        fix += node.sglang_version
    else:
        fix = f"write node.sglang_version: {reported}, so its flags are checked before a boot"
    return (
        f"the server reports SGLang {reported}, and the spec was checked against "
        f"{node.sglang_version}: {fix}"
    )
