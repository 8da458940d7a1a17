"""`pip install gpu-exporter` gives every feature: each third-party module the package imports,
lazily or not, belongs to a distribution the package requires unconditionally."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "exporter"


def _imported_top_levels() -> dict[str, str]:
    """Top-level module -> one file importing it, for every absolute import in exporter/."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def _unconditional_requirements() -> set[str]:
    requires = importlib.metadata.requires("gpu-exporter") or []
    plain = {r for r in requires if "extra ==" not in r}
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in plain}


def test_every_imported_third_party_module_is_a_required_dependency() -> None:
    third_party = {
        module: where for module, where in _imported_top_levels().items()
        if module not in sys.stdlib_module_names and module != "exporter"
    }
    assert {"aiohttp", "grpc", "kubernetes", "grafanalib", "yaml"} <= third_party.keys()
    providers = importlib.metadata.packages_distributions()
    required = _unconditional_requirements()
    missing = {}
    for module, where in sorted(third_party.items()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & required:
            missing[module] = (where, sorted(dists))
    assert not missing, f"imported but not required by the package: {missing}"
