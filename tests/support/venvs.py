"""Virtual environments that borrow this environment's installed dependencies."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_with_our_dependencies(venv: Path) -> Path:
    """Create a virtual environment at `venv` and return its interpreter.

    It has no pip and installs nothing: a `.pth` line adds this environment's site-packages
    as plain directories, without running the `.pth` files in them, so the third-party
    packages are found while an editable install of this checkout stays out.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                   capture_output=True, text=True, timeout=120, check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, timeout=60, check=True)
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib.stdout.strip(), "dependencies.pth").write_text(
        "".join(f"{path}\n" for path in sorted(dependencies)), encoding="utf-8")
    return python
