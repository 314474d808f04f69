"""Build an offline bundle of SGLang + spec_sweep for a GPU node that has no package index.

Run on a machine that reaches PyPI; copy the parts to the GPU node; install there with the
generated `install.sh` (no index, no compiler). Usage::

    python scripts/gpu_bundle.py --out .bundle            # build (SGLang 0.5.17: see below)
    # on the GPU node, with the parts in one folder:
    bash install.sh /opt/spec_sweep_site
    export PYTHONPATH=/opt/spec_sweep_site PATH=/opt/spec_sweep_site/bin:$PATH
    spec-sweep validate sweeps/real_h200_smollm2.yaml

Which SGLang: the newest version the real matrix passed (`REAL_PASSED`, tests/real) unless
`--sglang` names another locked one. The build prints it, `install.sh` says it and records it in
`DEST/spec_sweep_bundle.txt`, and `spec-sweep validate` on the node finds it (`node.sglang_version:
auto`). A bundle that holds spec_sweep's runtime installs the `spec-sweep` command as
`DEST/bin/spec-sweep` (it runs `python3 -m spec_sweep` with `DEST` on `PYTHONPATH`;
`SPEC_SWEEP_PYTHON` names another interpreter).

What goes in. The target already has Python, PyTorch, Triton, CUDA's Python packages and the
common scientific stack (for the lent H200 image: `scripts/bundle/h200-image.txt`). The bundle holds
exactly the pinned distributions of two lock files, as wheels for the target (CPython 3.12,
manylinux x86_64), installed with `pip install --target --no-deps` and then slimmed:

- `scripts/bundle/sglang-<version>.lock`: SGLang's *serving* closure. Made by installing SGLang
  with `--no-deps` into a Python 3.12 venv holding the target's torch, adding dependencies until
  `sglang.launch_server`, the HTTP server, scheduler, model runner, Llama/EAGLE-3 models, the
  Triton attention backend and the NGRAM worker import, then walking every `sglang.srt` package
  for missing modules. SGLang's metadata asks for far more (flashinfer cubins, FA4, DeepGEMM,
  tilelang, datasets, modelscope...), none imported when serving with
  `--attention-backend triton --sampling-backend pytorch`; those are left out. transformers and
  tokenizers are pinned although the image has them: SGLang 0.5.13 pins transformers 5.8.1, which
  refuses the image's tokenizers 0.23.2.
- `scripts/bundle/spec-sweep.lock`: spec_sweep's runtime (Ray Tune, Optuna, MLflow and what they
  pull in) minus what the SGLang lock or the image already has; plus spec_sweep itself.

Slimming (each rule says why it is safe): FA3's `flash_ops.abi3.so` (1 GB; replaced by a module
that says FA3 is not in the bundle: use the Triton backend), the other architecture's
`common_ops` (`--arch sm90` keeps `sm90/` only), static libraries (`*.a`, never loaded), Ray's
Java jars and source maps, MLflow's web UI (run the UI where the tracking store is, not on the
GPU node), `__pycache__`. `IPython` is replaced by a stand-in for the two notebook helpers
`sglang.utils` imports at import time.

The result is one `site.tar.xz` cut into parts of at most `--part-mb` MiB, so each part fits a
transfer limit; `install.sh` joins and unpacks them.

`--only sglang` bundles SGLang's lock alone and `--only runtime` spec_sweep's runtime alone, so a
node that runs two SGLang versions carries the runtime once (`scripts/real_session.sh` installs
each into its own folder; both go on `PYTHONPATH`, the SGLang one first)::

    python scripts/gpu_bundle.py --sglang 0.5.17 --only sglang --out .bundle-sglang-0.5.17
    python scripts/gpu_bundle.py --only runtime --no-self --out .bundle-runtime
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "scripts" / "bundle"
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# Paths (globs relative to the site folder) removed after installing, with the reason.
SLIM: tuple[tuple[str, str], ...] = (
    ("sgl_kernel/flash_ops.abi3.so", "FA3 kernels (1 GB); the bundle serves with Triton attention"),
    ("**/*.a", "static libraries are never loaded at run time"),
    ("ray/jars", "Ray's Java workers"),
    ("ray/dashboard/client/build/**/*.map", "source maps of the dashboard"),
    ("mlflow/server/js", "MLflow's web UI: run it where the tracking store is"),
    ("**/__pycache__", "byte code is rebuilt on the node"),
)
_FLASH_OPS_STUB = '''"""FA3 (`flash_ops.abi3.so`) is not in this offline bundle (kept small).

Serve with `--attention-backend triton` (or install sglang-kernel whole).
"""


def __getattr__(name: str) -> object:
    raise ImportError(
        f"sgl_kernel.flash_ops.{name}: FA3 is not in this bundle; "
        "use --attention-backend triton or install sglang-kernel whole"
    )
'''
_IPYTHON_INIT = '''"""Stand-in for IPython in the offline bundle (never used by a server)."""


def get_ipython() -> None:
    """Not inside IPython (Ray asks at import time)."""
    return None
'''
_IPYTHON_DISPLAY = '''"""Stand-in: `IPython.display` (`sglang.utils` imports it, for notebooks)."""


class HTML:
    def __init__(self, data: str = "") -> None:
        self.data = data


def display(*objs: object, **kwargs: object) -> None:
    for obj in objs:
        print(getattr(obj, "data", obj))
'''
#: SGLang versions the real matrix (tests/real, on an H200) passed, oldest first; the bundle
#: builds the newest unless `--sglang` says otherwise (docs/concepts/sglang-versions.md).
REAL_PASSED = ("0.5.13", "0.5.17")
_INSTALL_SH = """#!/usr/bin/env bash
# Install the spec_sweep offline bundle: join the parts, check them, unpack into DEST.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: install.sh DEST_SITE_DIR}"
holds="@HOLDS@"
mkdir -p "$dest"
cd "$here"
sha256sum -c parts.sha256
cat site.tar.xz.part-* | xz -d -T0 | tar -x -C "$dest"
echo "$holds" >"$dest/spec_sweep_bundle.txt"
@SHIM@
echo "installed $holds into $dest; use it with: export PYTHONPATH=$dest${PYTHONPATH:+:$PYTHONPATH}"
"""
# The `spec-sweep` command of a bundle that holds spec_sweep's runtime: DEST/bin/spec-sweep.
_SHIM = r"""mkdir -p "$dest/bin"
cat >"$dest/bin/spec-sweep" <<'SHIM'
#!/usr/bin/env bash
# spec-sweep from the offline bundle: its folder on PYTHONPATH, then python3 -m spec_sweep.
site="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
exec "${SPEC_SWEEP_PYTHON:-python3}" -m spec_sweep "$@"
SHIM
chmod +x "$dest/bin/spec-sweep"
echo "the spec-sweep command: $dest/bin/spec-sweep (export PATH=$dest/bin:\$PATH)"
"""


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def _requirements(lock: Path) -> list[str]:
    lines = (line.strip() for line in lock.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def install_locks(python: str, venv: Path, locks: list[Path], *, wheels: Path) -> Path:
    """A venv of the target's Python holding exactly the pinned wheels; returns its site folder.

    A real venv, not `pip install --target`: distributions that share a top-level package
    (mlflow, mlflow-skinny, mlflow-tracing) clobber each other under `--target`.
    """
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", where], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    reqs: list[str] = []
    for lock in locks:
        reqs += _requirements(lock)
    _pip("download", "-q", "--no-deps", "--only-binary=:all:", *_target(python), "-d", str(wheels),
         *reqs)  # fmt: skip
    _pip("--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", "--no-compile",
         "--no-index", "--find-links", str(wheels), *reqs)  # fmt: skip
    return site


def _target(python: str) -> list[str]:
    version = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return [*(f"--platform={p}" for p in PLATFORMS), f"--python-version={version}",
            "--implementation=cp"]  # fmt: skip


def install_self(venv: Path, wheels: Path) -> None:
    """spec_sweep itself, as a pure-Python wheel."""
    _pip("wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT))
    wheel = max(wheels.glob("spec_sweep-*.whl"), key=lambda p: p.stat().st_mtime)
    _pip("--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", "--no-compile",
         str(wheel))  # fmt: skip


def slim(site: Path, *, arch: str) -> int:
    """Apply `SLIM` and the architecture rule; returns the bytes removed."""
    removed = 0
    rules = list(SLIM)
    if arch:
        for other in ("sm90", "sm100"):
            if other != arch:
                rules.append((f"sgl_kernel/{other}", f"common_ops for another GPU than {arch}"))
    for pattern, _why in rules:
        for path in sorted(site.glob(pattern), reverse=True):
            if path.is_dir():
                removed += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                shutil.rmtree(path)
            elif path.exists():
                removed += path.stat().st_size
                path.unlink()
    if (site / "sgl_kernel").is_dir():
        (site / "sgl_kernel" / "flash_ops.py").write_text(_FLASH_OPS_STUB)
    ipython = site / "IPython"
    ipython.mkdir(exist_ok=True)
    (ipython / "__init__.py").write_text(_IPYTHON_INIT)
    (ipython / "display.py").write_text(_IPYTHON_DISPLAY)
    return removed


def install_script(*, holds: str, command: bool) -> str:
    """The bundle's `install.sh`: what it holds (`SGLang 0.5.17 + spec_sweep runtime`) and,
    with `command`, the `spec-sweep` command in DEST/bin."""
    return _INSTALL_SH.replace("@HOLDS@", holds).replace("@SHIM@\n", _SHIM if command else "")


def pack(
    site: Path, out: Path, *, part_mb: int, level: int = 6, holds: str = "", command: bool = False
) -> list[Path]:
    """`site` -> `out/site.tar.xz.part-NN`, each at most `part_mb` MiB, plus checksums and
    `install.sh` (see `install_script`)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("site.tar.xz.part-*"):
        old.unlink()
    archive = out / "site.tar.xz"
    tar = subprocess.Popen(["tar", "-C", str(site), "-c", "."], stdout=subprocess.PIPE)
    with archive.open("wb") as sink:
        subprocess.run(["xz", f"-{level}", "-T0", "-c"], stdin=tar.stdout, stdout=sink, check=True)
    if tar.wait() != 0:
        raise SystemExit("tar failed")
    parts: list[Path] = []
    size = part_mb << 20
    with archive.open("rb") as source:
        index = 0
        while chunk := source.read(size):
            part = out / f"site.tar.xz.part-{index:02d}"
            part.write_bytes(chunk)
            parts.append(part)
            index += 1
    archive.unlink()
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in parts]
    (out / "parts.sha256").write_text("\n".join(sums) + "\n")
    (out / "install.sh").write_text(install_script(holds=holds, command=command))
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sglang",
        default=REAL_PASSED[-1],
        help=f"SGLang version (needs its lock file; default {REAL_PASSED[-1]}, the newest the "
        "real matrix passed)",
    )
    parser.add_argument(
        "--python", default="python3.12", help="a local interpreter of the target's Python version"
    )
    parser.add_argument("--xz-level", type=int, default=6, help="xz preset (9 is ~4x slower)")
    parser.add_argument("--arch", default="sm90", help="keep sgl_kernel ops for this GPU only")
    parser.add_argument("--out", type=Path, default=ROOT / ".bundle", help="output folder")
    parser.add_argument("--part-mb", type=int, default=60, help="largest part in MiB")
    parser.add_argument("--no-self", action="store_true", help="leave spec_sweep itself out")
    parser.add_argument(
        "--only",
        choices=("sglang", "runtime"),
        help="one lock only: SGLang's serving closure, or spec_sweep's runtime (default: both)",
    )
    args = parser.parse_args(argv)
    lock = LOCKS / f"sglang-{args.sglang}.lock"
    if not lock.exists():
        known = ", ".join(p.stem.removeprefix("sglang-") for p in LOCKS.glob("sglang-*.lock"))
        parser.error(f"--sglang {args.sglang}: no lock file {lock.name}; locked versions: {known}")
    locks = {"sglang": [lock], "runtime": [LOCKS / "spec-sweep.lock"]}.get(
        args.only or "", [lock, LOCKS / "spec-sweep.lock"]
    )
    holds = {
        "sglang": f"SGLang {args.sglang}",
        "runtime": "spec_sweep runtime" + ("" if args.no_self else " + spec_sweep"),
    }.get(args.only or "", f"SGLang {args.sglang} + spec_sweep runtime")
    if not args.no_self and not args.only:
        holds += " + spec_sweep"
    print(f"building a bundle of {holds}")
    with tempfile.TemporaryDirectory(prefix="spec_sweep-bundle-") as tmp:
        venv, wheels = Path(tmp) / "venv", Path(tmp) / "wheels"
        site = install_locks(args.python, venv, locks, wheels=wheels)
        if not args.no_self and args.only != "sglang":
            install_self(venv, wheels)
        before = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
        removed = slim(site, arch=args.arch)
        parts = pack(
            site,
            args.out,
            part_mb=args.part_mb,
            level=args.xz_level,
            holds=holds,
            command=args.only != "sglang",
        )
    total = sum(p.stat().st_size for p in parts)
    print(f"site {before / 2**20:.0f} MiB, slimmed by {removed / 2**20:.0f} MiB")
    print(f"{len(parts)} part(s), {total / 2**20:.1f} MiB xz, in {args.out}: {holds}")
    for part in parts:
        print(f"  {part.name}  {part.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
