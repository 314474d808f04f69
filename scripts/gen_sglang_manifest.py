#!/usr/bin/env python3
"""Generate a bundled manifest of SGLang's ``launch_server`` flags in a throwaway environment.

The parser is read by ``spec_sweep/node/sglang_parser.py`` (the same reader ``spec-sweep
manifest`` and a sweep on a version without a bundled manifest use), run inside an interpreter
that imports the wanted SGLang version; this script only prepares such an interpreter without a
GPU or SGLang's GPU dependencies. To write the manifest of the SGLang already installed in an
environment, ``spec-sweep manifest -o FILE`` is enough.

The manifest (``spec_sweep/manifests/sglang-<VERSION>.json``) lists every option of the parser
that ``python -m sglang.launch_server`` parses its command line with: the parser built by
``sglang.srt.server_args.prepare_server_args`` (a fresh ``argparse.ArgumentParser`` with SGLang's
``prog`` and argparse's ``allow_abbrev`` default, filled by ``ServerArgs.add_cli_args(parser)``),
walked through ``parser._actions``. The files are generated, never edited by hand.

Regenerate for another SGLang version (here ``0.5.24``) on a CPU-only machine, from the repository
root, with a fresh throwaway virtual environment under ``/tmp`` (never the project's ``.venv``;
one directory per version)::

    python3 scripts/gen_sglang_manifest.py --version 0.5.24 --make-venv /tmp/sglang-0.5.24 \\
        --out spec_sweep/manifests/sglang-0.5.24.json
    rm -rf /tmp/sglang-0.5.24

Then run ``pytest tests/unit/test_manifest.py`` and commit the JSON. The shipped files came from:

    --version 0.5.23 --make-venv /tmp/sglang-0.5.23               (~2 min, 2.3 GB)
    --version 0.5.22 --make-venv /tmp/sglang-0.5.22 --torch torch==2.14.1
    --version 0.5.20 --make-venv /tmp/sglang-0.5.20 --cuda-torch  (~5 min, 6 GB)
    --version 0.5.18 --make-venv /tmp/sglang-0.5.18 --cuda-torch
    --version 0.5.13 --make-venv /tmp/sglang-0.5.13 --cuda-torch  (~3 min, 5 GB)
    --version 0.5.17 --python VENV/bin/python  (the Python 3.12 venv that scripts/bundle/
        sglang-0.5.17.lock was made in: torch 2.11.0, SGLang's serving closure)

``--make-venv DIR`` creates ``DIR`` and installs torch (``--torch``, default ``torch==2.13.0``,
which on this project's machines resolves to a local CPU build), then ``pip install --no-deps
sglang==VERSION`` (none of SGLang's GPU dependencies) and a short list of small packages the
parser's import needs (numpy, orjson, psutil, pybase64, requests, triton, packaging, pillow,
starlette, msgspec, pydantic, pyzmq, tqdm, ipython, aiohttp). Any other module the import still
asks for is installed one at a time as it is reported missing (``--max-installs`` bounds that
loop). Every install is constrained to the torch already there and to the versions SGLang itself
pins (0.5.13 fails to import with a newer ``transformers`` than its pin). SGLang versions that
import ``torchvision`` at import time (0.5.13 and 0.5.19 do, 0.5.23 does not) need
``--cuda-torch``: PyPI's torchvision wheels only load with PyPI's own (CUDA) torch build, which
imports fine without a GPU; the flag installs torch from PyPI, ignoring pip's configured local
wheel directories. The same steps by hand::

    python3 -m venv /tmp/sglang-0.5.24
    /tmp/sglang-0.5.24/bin/pip install torch==2.13.0
    /tmp/sglang-0.5.24/bin/pip install --no-deps sglang==0.5.24
    /tmp/sglang-0.5.24/bin/pip install numpy orjson psutil ...   # whatever the import asks for
    python3 scripts/gen_sglang_manifest.py --version 0.5.24 \\
        --python /tmp/sglang-0.5.24/bin/python --out spec_sweep/manifests/sglang-0.5.24.json

Without ``--make-venv`` or ``--python`` the current interpreter must already import SGLang. The
parser is always read in a child process, in an empty working directory, with ``SGLANG_*`` and
``SGL_*`` environment variables removed (a few choice lists depend on them) and the installed
SGLang version checked against ``--version``. The output is stable: keys sorted, flags sorted by
name, set-valued choices sorted; values that are not JSON are stored as their ``repr``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

GENERATOR = "scripts/gen_sglang_manifest.py"
DEFAULT_TORCH = "torch==2.13.0"
# Imported (directly or transitively) by sglang.srt.server_args; installing them up front saves
# one round trip each through the missing-module loop.
BASE_PACKAGES = (
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "triton",
    "packaging",
    "pillow",
    "starlette",
    "msgspec",
    "pydantic",
    "pyzmq",
    "tqdm",
    "ipython",
    "aiohttp",
)
# Import name -> distribution name, where they differ.
MODULE_TO_PACKAGE = {
    "PIL": "pillow",
    "zmq": "pyzmq",
    "IPython": "ipython",
    "yaml": "pyyaml",
    "cv2": "opencv-python-headless",
    "sklearn": "scikit-learn",
    "google": "protobuf",
    "sentencepiece": "sentencepiece",
    "dateutil": "python-dateutil",
    "jwt": "pyjwt",
    "attr": "attrs",
    "multipart": "python-multipart",
    "dotenv": "python-dotenv",
    "fastapi": "fastapi",
    "huggingface_hub": "huggingface-hub",
}
# The child side: reads the parser inside the interpreter that has SGLang (run by path: it needs
# nothing of spec_sweep there). Its marker and exit status for a missing module:
PARSER_READER = Path(__file__).resolve().parent.parent / "spec_sweep" / "node" / "sglang_parser.py"
MISSING_MARKER = "GEN-MANIFEST-MISSING-MODULE:"
EXIT_MISSING = 3

# --------------------------------------------------------------------------------------------
# Parent side: prepares the interpreter and runs the child in it.
# --------------------------------------------------------------------------------------------


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _sglang_pins(python: Path) -> dict[str, str]:
    """SGLang's own requirement for each dependency (``transformers==5.8.1``), markers dropped.

    Installing what the import asks for at the version SGLang pins matters: a newer
    ``transformers`` can refuse SGLang's config registrations at import time.
    """
    script = "import importlib.metadata as m; print('\\n'.join(m.requires('sglang') or []))"
    out = subprocess.run(
        [str(python), "-c", script], check=True, text=True, capture_output=True
    ).stdout
    pins: dict[str, str] = {}
    for line in out.splitlines():
        requirement, _, marker = line.partition(";")
        if "extra" in marker:
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*(\[[^\]]*\])?\s*(.*)", requirement)
        if match and match.group(3).strip() and "@" not in match.group(3):
            name = _normalize(match.group(1))
            pins.setdefault(name, f"{match.group(1)}{match.group(3).strip().replace(' ', '')}")
    pins.pop("torch", None)  # the CPU torch installed first stays
    return pins


@dataclass(frozen=True)
class _Venv:
    """A throwaway venv: its python, and pip options that keep it consistent."""

    python: Path
    strict: list[str]  # constraints: its torch and every version SGLang pins
    loose: list[str]  # constraints: its torch only
    pins: dict[str, str]

    def install(self, *packages: str) -> None:
        """Install at SGLang's pins where it has them; if that does not resolve, unpinned."""
        pinned = [self.pins.get(_normalize(p), p) for p in packages]
        try:
            _pip(self.python, "--quiet", *self.strict, *pinned)
        except subprocess.CalledProcessError:
            print(f"warning: could not install {pinned} at SGLang's pins; unpinned", flush=True)
            _pip(self.python, "--quiet", *self.loose, *packages)


def _install_pypi_torch(python: Path, torch: str) -> None:
    """Install PyPI's own torch build (CUDA), bypassing pip's local wheel dirs and indexes.

    PyPI's torchvision wheels need it: with a CPU torch, ``import torchvision`` fails with
    "operator torchvision::nms does not exist". It imports fine on a machine without a GPU.
    """
    current = _installed_version(python, "torch")
    if current is not None and "+" in current:  # a local build such as 2.13.0+cpu
        subprocess.run([str(python), "-m", "pip", "uninstall", "--yes", "torch"], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_CONSTRAINT")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no configured find-links / extra indexes
    cmd = [str(python), "-m", "pip", "install", "--quiet", torch]
    print("+", " ".join(cmd), "(PyPI only)", flush=True)
    subprocess.run(cmd, check=True, env=env)


def _installed_version(python: Path, dist: str) -> str | None:
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    proc = subprocess.run([str(python), "-c", probe], text=True, capture_output=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _make_venv(directory: Path, *, version: str, torch: str, cuda_torch: bool) -> _Venv:
    """Create (or reuse, for the same SGLang version) the venv, with torch, SGLang and basics."""
    python = directory / "bin" / "python"
    if python.exists():
        there = _installed_version(python, "sglang")
        if there not in (None, version):
            raise SystemExit(
                f"error: {directory} holds SGLang {there}; use a fresh directory for {version} "
                "(leftover packages pinned for another version can break the import)"
            )
    else:
        print(f"creating virtual environment {directory}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(directory)
    if cuda_torch:
        _install_pypi_torch(python, torch)
    else:
        _pip(python, "--quiet", torch)
    # Later installs must not swap this torch for another build (torchvision, for one, would
    # pull a multi-GB CUDA torch), nor pull a dependency past SGLang's pin (a newer
    # transformers refuses SGLang's config registrations at import time).
    torch_version = (_installed_version(python, "torch") or "").split("+")[0]
    loose_file = directory / "gen-manifest-constraints-torch.txt"
    loose_file.write_text(f"torch=={torch_version}\n", encoding="utf-8")
    loose = ["--constraint", str(loose_file)]
    _pip(python, "--quiet", *loose, "--no-deps", f"sglang=={version}")
    pins = _sglang_pins(python)
    strict_file = directory / "gen-manifest-constraints.txt"
    lines = [f"torch=={torch_version}", *sorted(pins.values())]
    strict_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = _Venv(python, ["--constraint", str(strict_file)], loose, pins)
    env.install(*BASE_PACKAGES)
    return env


def _child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_", "SGL_")) and k not in ("PYTHONPATH", "PYTHONHOME")
    }
    env["PYTHONNOUSERSITE"] = "1"
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


def _run_child(python: Path, *, version: str, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(python), str(PARSER_READER), "--version", version, "--generator", GENERATOR]
    cmd += ["--out", str(out.resolve())]
    with tempfile.TemporaryDirectory(prefix="gen-manifest-") as cwd:
        proc = subprocess.run(cmd, cwd=cwd, env=_child_env(), text=True, capture_output=True)
    sys.stdout.write(proc.stdout)
    return proc


def _missing_module(stderr: str) -> str | None:
    for line in stderr.splitlines():
        if line.startswith(MISSING_MARKER):
            return line[len(MISSING_MARKER) :].strip()
    return None


def generate(python: Path, *, version: str, out: Path, env: _Venv | None, max_installs: int) -> int:
    """Run the child in ``python``; with ``env`` (our own venv), install what it misses."""
    installed: list[str] = []
    while True:
        proc = _run_child(python, version=version, out=out)
        module = _missing_module(proc.stderr)
        if proc.returncode != EXIT_MISSING or module is None:
            sys.stderr.write(proc.stderr)
            if "torchvision::" in proc.stderr:
                print(
                    "hint: torchvision from PyPI needs PyPI's torch build, not a CPU one: "
                    "rerun with --make-venv DIR --cuda-torch",
                    file=sys.stderr,
                )
            if installed:
                print(f"installed on demand: {' '.join(installed)}")
            return proc.returncode
        top = module.split(".")[0]
        package = MODULE_TO_PACKAGE.get(top, top.replace("_", "-"))
        if env is None:
            print(
                f"error: SGLang's parser needs module {module!r} (package {package!r}), "
                f"missing from {python}; install it or use --make-venv",
                file=sys.stderr,
            )
            return 1
        if package in installed or len(installed) >= max_installs:
            sys.stderr.write(proc.stderr)
            print(f"error: still missing {module!r} after installing {installed}", file=sys.stderr)
            return 1
        env.install(package)
        installed.append(package)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Generate spec_sweep's manifest of SGLang launch_server flags.",
        epilog="See this script's docstring for the full recipe.",
    )
    parser.add_argument("--version", required=True, help="SGLang version, e.g. 0.5.23")
    parser.add_argument(
        "--out",
        type=Path,
        help="output file (default: spec_sweep/manifests/sglang-VERSION.json in this repo)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--make-venv",
        type=Path,
        metavar="DIR",
        help="create (or reuse) a throwaway venv in DIR, install SGLang there, and use it",
    )
    where.add_argument(
        "--python", type=Path, help="an interpreter that already imports this SGLang version"
    )
    parser.add_argument(
        "--torch", default=DEFAULT_TORCH, help=f"torch requirement (default {DEFAULT_TORCH})"
    )
    parser.add_argument(
        "--cuda-torch",
        action="store_true",
        help="with --make-venv: install PyPI's own (CUDA) torch build, ignoring pip's configured "
        "local wheels; needed for SGLang versions that import torchvision at import time",
    )
    parser.add_argument(
        "--max-installs", type=int, default=30, help="bound on on-demand installs (default 30)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parse_args(argv)
    out: Path = args.out or (
        Path(__file__).resolve().parent.parent
        / "spec_sweep"
        / "manifests"
        / f"sglang-{args.version}.json"
    )
    if args.make_venv is not None:
        directory = args.make_venv.resolve()
        if directory == (Path(__file__).resolve().parent.parent / ".venv"):
            print("error: refusing to install SGLang into the project's .venv", file=sys.stderr)
            return 2
        env = _make_venv(
            directory, version=args.version, torch=args.torch, cuda_torch=args.cuda_torch
        )
        return generate(
            env.python, version=args.version, out=out, env=env, max_installs=args.max_installs
        )
    python = args.python or Path(sys.executable)
    return generate(python, version=args.version, out=out, env=None, max_installs=0)


if __name__ == "__main__":
    sys.exit(main())
