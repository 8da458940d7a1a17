"""Builds the simulated NVML library (`libnvidia-ml.so.1`) from the C sources next to this file
and the entry points generated from the call table (`generate.py`, into `<out>/generated/`).

The sources compile against NVIDIA's real `nvml.h`, which carries a proprietary license and is
never committed: it is taken from the `nvidia-nvml-dev` wheel in the active environment, or else
downloaded with pip into `<project>/.cache/nvml-dev/` (git-ignored) and unpacked from there.

A rebuild happens only when the sources, the generated entry points, the header or the compiler
flags change (a stamp file beside the library records their digest), and concurrent builders
serialise on a lock file.

Run as `python -m tests.nvmlsim.build` or `python tests/nvmlsim/build.py`; prints the directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the project root holds `exporter` and `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.simulated.node.call_shapes import SimCall
from exporter.simulated.node.call_table import CALLS
from tests.nvmlsim.generate import GenerateError, generate

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent.parent
DEFAULT_OUT = HERE / "build"
CACHE_DIR = PROJECT_ROOT / ".cache" / "nvml-dev"
LIBRARY_NAME = "libnvidia-ml.so.1"
SOURCES = ("nvmlsim.c", "sim_scenario.c", "sim_control.c", "sim_json.c", "sim_calls.c",
           "sim_prm.c")
HEADERS = ("sim_state.h", "sim_json.h")
# Header locations inside the wheel: the cu13 flavour, then the cu12 one.
HEADER_SUFFIXES = ("nvidia/cu13/include/nvml.h", "nvidia/nvml_dev/include/nvml.h")
CFLAGS = (
    "-std=c11",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Wshadow",
    "-Wno-unused-parameter",
    "-Werror",
    "-fPIC",
    "-shared",
    "-pthread",
    # both the _v2 names and the unversioned ones get defined
    "-DNVML_NO_UNVERSIONED_FUNC_DEFS",
)
LDFLAGS = ("-Wl,-soname," + LIBRARY_NAME, "-Wl,--no-undefined", "-lm")


class BuildError(RuntimeError):
    """The library could not be built; the message says which step failed and why."""


def _site_dirs() -> list[Path]:
    dirs = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def _installed_header() -> Path | None:
    for site in _site_dirs():
        for suffix in HEADER_SUFFIXES:
            candidate = site / suffix
            if candidate.is_file():
                return candidate
    return None


def _cached_header() -> Path | None:
    candidate = CACHE_DIR / "include" / "nvml.h"
    return candidate if candidate.is_file() else None


def _download_header() -> Path:
    wheels = CACHE_DIR / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--dest", str(wheels), "nvidia-nvml-dev>=13.5.37"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise BuildError(
            "nvml.h not found in this environment and `pip download nvidia-nvml-dev` failed "
            f"(exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
        )
    for wheel in sorted(wheels.glob("nvidia_nvml_dev-*.whl"), reverse=True):
        with zipfile.ZipFile(wheel) as zf:
            for suffix in HEADER_SUFFIXES:
                if suffix in zf.namelist():
                    target = CACHE_DIR / "include" / "nvml.h"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp = target.with_suffix(".h.tmp")
                    tmp.write_bytes(zf.read(suffix))
                    tmp.replace(target)
                    return target
    raise BuildError(f"downloaded nvidia-nvml-dev into {wheels}, but no wheel holds nvml.h")


def find_header() -> Path:
    """The real nvml.h: installed wheel, then the project cache, then a fresh download."""
    override = os.environ.get("NVMLSIM_NVML_H")
    if override:
        path = Path(override)
        if not path.is_file():
            raise BuildError(f"NVMLSIM_NVML_H={override} is not a file")
        return path
    return _installed_header() or _cached_header() or _download_header()


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise BuildError("no C compiler found (set CC, or install gcc)")
    return cc


def _extra_cflags() -> list[str]:
    """NVMLSIM_EXTRA_CFLAGS, e.g. "-fsanitize=address,undefined" for a checked build."""
    return os.environ.get("NVMLSIM_EXTRA_CFLAGS", "").split()


def _digest(header: Path, cc: str, generated: tuple[str, str]) -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode())
        h.update((HERE / name).read_bytes())
    for text in generated:
        h.update(text.encode())
    h.update(header.read_bytes())
    h.update(" ".join((cc, *CFLAGS, *_extra_cflags(), *LDFLAGS)).encode())
    return h.hexdigest()


def build_library(out_dir: Path | None = None, calls: Iterable[SimCall] | None = None) -> Path:
    """Builds (when stale) and returns the directory that holds `libnvidia-ml.so.1`; `calls`:
    the call table to generate entry points from (default: the package's)."""
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    header = find_header()
    cc = _compiler()
    try:
        generated = generate(CALLS if calls is None else calls,
                             header.read_text(encoding="utf-8", errors="replace"))
    except GenerateError as exc:
        raise BuildError(f"generating the call table's entry points: {exc}") from None
    digest = _digest(header, cc, generated)
    library = out / LIBRARY_NAME
    stamp = out / (LIBRARY_NAME + ".sha256")
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if library.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
            return out
        tables = out / "generated"
        tables.mkdir(exist_ok=True)
        (tables / "sim_table.c").write_text(generated[0])
        (tables / "sim_table.h").write_text(generated[1])
        tmp = out / (LIBRARY_NAME + f".tmp{os.getpid()}")
        cmd = [cc, *CFLAGS, *_extra_cflags(), f"-I{header.parent}", f"-I{HERE}", f"-I{tables}",
               "-o", str(tmp), *(str(HERE / s) for s in SOURCES), str(tables / "sim_table.c"),
               *LDFLAGS]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise BuildError(f"compiling the simulated NVML failed:\n$ {' '.join(cmd)}\n"
                             f"{proc.stderr.strip()}")
        # rename is atomic: a process that already mapped the old file keeps it intact
        tmp.replace(library)
        stamp.write_text(digest + "\n")
    return out


def main() -> int:
    try:
        print(build_library())
    except BuildError as exc:
        print(f"nvmlsim build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
