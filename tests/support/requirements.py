"""What a test needs from the machine: a tool, a file, an importable module.

Locally a missing requirement skips the test with the reason, so a partial checkout still runs
the rest. In CI (the `CI` environment variable set, as CI sets `CI=true`) it fails the test
instead: there a missing tool means the setup script is broken, and a skip would hide it.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def missing(reason: str) -> NoReturn:
    """Skips the running test, or fails it in CI."""
    if in_ci():
        pytest.fail(f"{reason} (required in CI)", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, package: str | None = None) -> str:
    """The path of executable `name`; `package` names the Debian package that provides it."""
    path = shutil.which(name)
    if path is None:
        hint = f" (Debian package `{package}`)" if package else ""
        missing(f"{name} is not installed{hint}")
    return path


def require_file(path: Path) -> Path:
    if not path.exists():
        missing(f"{path} is not present in this checkout")
    return path


def require_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"cannot import {name}: {exc}")
