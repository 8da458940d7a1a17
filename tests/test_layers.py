"""The import contracts in pyproject.toml hold, and breaking each one fails `lint-imports`:
a back-edge between layers, the runtime importing a build tool, and a cycle between the
modules of one package (through an import inside a function, which grimp counts like any
other). What the contracts cannot see,
a package's `__init__` and one of its own modules importing each other, the module-graph
check below finds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

CYCLES = """
import json, sys
import grimp

graph = grimp.build_graph("exporter", cache_dir=None)
index, low, stack, on_stack, cycles = {}, {}, [], set(), []

def visit(module):
    # Tarjan's strongly connected components, iteratively: the graph is a few hundred
    # modules, but recursion depth is the length of the longest import chain.
    work = [(module, iter(sorted(graph.find_modules_directly_imported_by(module))))]
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    while work:
        node, children = work[-1]
        child = next(children, None)
        if child is not None:
            if child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print(json.dumps(sorted(cycles)))
"""


def _env(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=120, check=False,
    )


def _module_cycles(tree: Path) -> list[list[str]]:
    """Every set of modules that import each other, through any number of others."""
    result = subprocess.run([sys.executable, "-c", CYCLES], cwd=tree, env=_env(tree),
                            capture_output=True, text=True, timeout=120, check=True)
    cycles: list[list[str]] = json.loads(result.stdout)
    return cycles


def _copy_tree(dest: Path) -> Path:
    for package in ("exporter", "tools"):
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_package_keeps_its_contracts(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    assert "no import cycles between the modules of any package KEPT" in result.stdout


def test_an_import_from_a_lower_layer_into_a_higher_one_fails(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # The field catalog reaching up into the web layer: the kind of shortcut the contract is
    # there to stop.
    (tree / "exporter" / "fields" / "shortcut.py").write_text(
        "from exporter.web.app import make_handler\n\nAPP = make_handler\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert "exporter.fields.shortcut -> exporter.web.app" in result.stdout


def test_the_runtime_importing_a_build_tool_fails(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # An installed wheel has no tools/: such an import would end in ModuleNotFoundError.
    _append(tree / "exporter" / "fields" / "dcgm_names.py",
            "\n\ndef _derive() -> object:\n"
            "    from tools.derive_dcgm_names import derive\n\n"
            "    return derive\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "the runtime never imports the build tools BROKEN" in result.stdout
    assert "exporter.fields.dcgm_names -> tools.derive_dcgm_names" in result.stdout


def test_a_cycle_inside_a_layer_fails_even_through_a_function_level_import(
        tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # The pod map (imported by the pod metadata watcher) asking the watcher back, inside a
    # function: the shape of the apiwatch <-> enrich cycle this contract was added for.
    _append(tree / "exporter" / "k8s" / "pod_map.py",
            "\n\ndef _watcher_type() -> type:\n"
            "    from exporter.k8s.pod_metadata import PodMetadataWatcher\n\n"
            "    return PodMetadataWatcher\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "no import cycles between the modules of any package BROKEN" in result.stdout
    assert "No cycles are allowed in exporter.k8s." in result.stdout
    assert "layers: fields -> devices" in result.stdout  # the layers contract still holds
    assert "1 broken" in result.stdout


def test_no_module_imports_itself_through_others(tmp_path: Path) -> None:
    assert _module_cycles(_copy_tree(tmp_path)) == []


def test_a_package_and_its_own_module_importing_each_other_is_found(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # report/cli.py importing the package's __init__ (the library call), which imports it
    # back: no two siblings are involved, so only the module graph shows it.
    _append(tree / "exporter" / "report" / "cli.py",
            "\n\ndef _library() -> object:\n"
            "    from exporter.report import usage\n\n"
            "    return usage\n")
    _append(tree / "exporter" / "report" / "__init__.py",
            "\n\ndef _command() -> object:\n"
            "    from exporter.report.cli import main\n\n"
            "    return main\n")
    assert _module_cycles(tree) == [["exporter.report", "exporter.report.cli"]]


def test_a_production_module_importing_a_simulator_fails(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # The sampler deciding something by asking the simulated node: a simulator reached from
    # the path a GPU node runs.
    _append(tree / "exporter" / "sampling" / "sampler.py",
            "\n\ndef _profiles() -> object:\n"
            "    from exporter.simulated.node.profiles import profile_names\n\n"
            "    return profile_names\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "imports the simulated world BROKEN" in result.stdout
    assert "exporter.sampling.sampler -> exporter.simulated.node.profiles" in result.stdout


ROLE_NAMES = frozenset({"cli", "config", "render"})
"""Module names that say a module's role in its package (its command line, its settings, its
rendering), which every package may have; any other name names one thing."""


def test_no_concepts_module_name_repeats_across_packages() -> None:
    by_name: dict[str, list[str]] = {}
    for path in sorted((ROOT / "exporter").rglob("*.py")):
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    repeated = {name: paths for name, paths in by_name.items()
                if len(paths) > 1 and name not in ROLE_NAMES}
    assert repeated == {}
    assert len(by_name) > 100  # the walk saw the package
