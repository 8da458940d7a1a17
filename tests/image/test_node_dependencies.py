"""The image's share of the dependencies is what the node's commands import.

The Dockerfile installs pyproject's dependencies without its `tools_only` list. Every import
reachable from `serve` and `doctor` (module level or inside functions, following the
package's own imports, importlib.import_module("...") included) must come from what is left
or from what that pulls in; each dependency left must be imported by them; and each one
left out must be one the other commands import. Read from the source, no image needed.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

from exporter.cli import COMMANDS, NODE_COMMANDS
from tests.support.paths import ROOT


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def tools_only() -> set[str]:
    """The names after `tools_only=` in the Dockerfile."""
    found = re.search(r'tools_only="([^"]*)"', (ROOT / "Dockerfile").read_text())
    assert found is not None, "Dockerfile: no tools_only=\"...\" list"
    return {_name(n) for n in found.group(1).split()}


def dependencies() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return {_name(r) for r in tomllib.load(file)["project"]["dependencies"]}


def node_dependencies() -> set[str]:
    return dependencies() - tools_only()


def _module_file(module: str) -> Path | None:
    path = ROOT.joinpath(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, package: str) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value


def third_party_imports(roots: Iterable[str]) -> dict[str, set[str]]:
    """Top-level third-party module -> the package modules that import it, over everything
    reachable from `roots`."""
    seen: set[str] = set()
    found: dict[str, set[str]] = {}
    stack = list(roots)
    while stack:
        module = stack.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _module_file(module)
        if path is None:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name in _imported(ast.parse(path.read_text(encoding="utf-8")), package):
            top = name.split(".")[0]
            if top == "exporter":
                parts = name.split(".")
                stack += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            elif top and top not in sys.stdlib_module_names:
                found.setdefault(top, set()).add(module)
    return found


def _entry_module(command: str) -> str:
    return COMMANDS[command].partition(":")[0]


def _distributions_of(modules: Iterable[str]) -> dict[str, set[str]]:
    """Top-level module -> the (normalised) installed distributions providing it."""
    providers = metadata.packages_distributions()
    return {m: {_name(d) for d in providers.get(m, [])} for m in modules}


def _closure(names: set[str]) -> set[str]:
    """`names` and every distribution their installed metadata requires on this Python (no
    extras), as pip resolves them."""
    from packaging.requirements import Requirement

    out: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in out:
            continue
        out.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(_name(requirement.name))
    return out


def test_the_node_commands_import_only_the_node_subset() -> None:
    imports = third_party_imports(_entry_module(c) for c in NODE_COMMANDS)
    providers = _distributions_of(imports)
    installed = _closure(node_dependencies())
    missing = {module: sorted(by) for module, by in providers.items() if not by & installed}
    assert missing == {}, {m: sorted(imports[m]) for m in missing}


def test_every_node_dependency_is_imported_by_a_node_command() -> None:
    imports = third_party_imports(_entry_module(c) for c in NODE_COMMANDS)
    imported = set().union(*_distributions_of(imports).values())
    assert node_dependencies() - imported == set()


def test_what_is_left_out_is_used_by_the_other_commands_only() -> None:
    others = [c for c in COMMANDS if c not in NODE_COMMANDS]
    imported = set().union(*_distributions_of(
        third_party_imports(_entry_module(c) for c in others)).values())
    assert tools_only() <= dependencies()
    assert tools_only() <= imported
    # And nothing the node's commands need is pulled only by the tools' libraries.
    assert not tools_only() & _closure(node_dependencies())


def test_the_walk_finds_imports_inside_functions() -> None:
    """The check above can fail: report's pandas is imported inside functions only."""
    assert "pandas" in third_party_imports(["exporter.report.cli"])
    assert "kubernetes" in third_party_imports(["exporter.serve"])
    # exporter.k8s.proto loads its modules with importlib.import_module.
    assert "google" in third_party_imports(["exporter.k8s.proto"])
