"""The Helm chart's generated parts, and the manifests rendered from it.

    python scripts/chart.py sync              # write them all
    python scripts/chart.py package DIR       # DIR/gpu-exporter-<version>.tgz

What `sync` writes, each from one source, so that nothing is kept by hand twice
(tests/chart compares every one of them with what this script would write):

- charts/gpu-exporter/files/alerts/ and files/dashboards/: the rule files and dashboards
  `gpu-exporter generate` writes into alerts/ and dashboards/, byte for byte;
- Chart.yaml's `version` and `appVersion`: the exporter's version (exporter/__init__.py);
- the values table of charts/gpu-exporter/README.md, from values.schema.json (descriptions,
  types) and values.yaml (defaults);
- deploy/daemonset/**/gpu-exporter.yaml: the chart rendered with the `values.yaml` beside it,
  as `helm template gpu-exporter charts/gpu-exporter -n gpu-exporter -f values.yaml` would.

Rendering, packaging and schema validation are Helm's own (v4, through helm-python-sdk, a test
dependency), not a re-implementation.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gpu-exporter"
DEPLOY = ROOT / "deploy" / "daemonset"
RELEASE = "gpu-exporter"
NAMESPACE = "gpu-exporter"
RENDERED_NAME = "gpu-exporter.yaml"

COPIES = {
    Path("files/alerts/gpu-exporter.rules.yml"): ROOT / "alerts" / "gpu-exporter.rules.yml",
    Path("files/alerts/gpu-exporter.usage-rules.yml"):
        ROOT / "alerts" / "gpu-exporter.usage-rules.yml",
    **{Path("files/dashboards") / p.name: p for p in sorted((ROOT / "dashboards").glob("*.json"))},
}
"""Chart file (relative to the chart) -> the committed generated artifact it copies."""

TABLE_BEGIN = "<!-- values:begin -->"
TABLE_END = "<!-- values:end -->"

# Helm's install order (pkg/release/util/kind_sorter.go), so that the rendered files read as
# `helm template` prints them; kinds not listed come last.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "ConfigMap", "CustomResourceDefinition",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "DaemonSet", "Pod",
    "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "Ingress", "APIService",
)


def version() -> str:
    text = (ROOT / "exporter" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, flags=re.MULTILINE)
    if match is None:
        raise SystemExit("exporter/__init__.py: no __version__ line")
    return match.group(1)


# ----------------------------------------------------------------------------- Chart.yaml


def chart_yaml(text: str) -> str:
    """Return Chart.yaml with `version` and `appVersion` set to the exporter's version."""
    out = re.sub(r"^version: .*$", f"version: {version()}", text, count=1, flags=re.MULTILINE)
    return re.sub(r"^appVersion: .*$", f'appVersion: "{version()}"', out, count=1,
                  flags=re.MULTILINE)


# ----------------------------------------------------------------------------- values table


def _type_of(node: dict[str, Any]) -> str:
    kinds = node.get("type", "any")
    names = {"array": "list", "object": "map" if "additionalProperties" in node else "object"}
    return " or ".join(names.get(k, str(k))
                       for k in (kinds if isinstance(kinds, list) else [kinds]))


def _default(values: Any, path: tuple[str, ...]) -> str:
    for key in path:
        if not isinstance(values, dict) or key not in values:
            return ""
        values = values[key]
    text = json.dumps(values, separators=(", ", ": "))
    if len(text) > 60:
        return "see values.yaml"
    return "`" + text.replace("|", "\\|") + "`"


def _rows(node: dict[str, Any], values: Any, path: tuple[str, ...]) -> Iterator[str]:
    for key, child in node.get("properties", {}).items():
        here = (*path, key)
        if child.get("type") == "object" and "properties" in child:
            yield from _rows(child, values, here)
            continue
        description = child.get("description", "").replace("|", "\\|")
        yield (f"| `{'.'.join(here)}` | {_type_of(child)} | {_default(values, here)} | "
               f"{description} |")


def values_table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    lines = ["| key | type | default | meaning |", "|---|---|---|---|",
             *_rows(schema, values, ())]
    return "\n".join(lines) + "\n"


def readme(text: str) -> str:
    """Return the chart's README with the values table between its markers replaced."""
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{CHART / 'README.md'}: no {TABLE_BEGIN} ... {TABLE_END} markers")
    return text[:start + len(TABLE_BEGIN)] + "\n" + values_table() + text[end:]


# ----------------------------------------------------------------------------- rendering


def render(values: dict[str, Any] | None = None, *, name: str = RELEASE,
           namespace: str = NAMESPACE, chart: Path = CHART) -> dict[str, str]:
    """Return each template path's rendered text, by Helm's engine (schema validation included)."""
    with helm_python.Chart.load(chart) as loaded:
        return loaded.render(values or {}, name=name, namespace=namespace)


def documents(rendered: dict[str, str]) -> list[tuple[str, str]]:
    """Return (template path, YAML text) of every non-empty document, in Helm's install order."""
    docs: list[tuple[int, str, str, str]] = []
    for template, text in sorted(rendered.items()):
        if not template.endswith((".yaml", ".yml")):
            continue
        for part in re.split(r"^---[ \t]*$", text, flags=re.MULTILINE):
            obj = yaml.safe_load(part)
            if not obj:
                continue
            kind = str(obj.get("kind", ""))
            rank = INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)
            docs.append((rank, str(obj.get("metadata", {}).get("name", "")), template,
                         part.strip("\n")))
    docs.sort(key=lambda d: (d[0], d[1], d[2]))
    return [(template, text) for _, _, template, text in docs]


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    # Each document ends with a line break, as it does in the file (a block scalar keeps it).
    return [yaml.safe_load(text + "\n") for _, text in documents(rendered)]


def deploy_values_files() -> list[Path]:
    return sorted(DEPLOY.rglob("values.yaml"))


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return `base` with `override` over it, as Helm coalesces `-f base -f override`: maps
    merge key by key, the rest is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def layered_values(values_file: Path) -> list[Path]:
    """Return the values files an entry point is rendered with: those of deploy/daemonset down to
    its own directory, outermost first (a sub-directory refines its parent's install)."""
    chain = [values_file]
    for parent in values_file.parent.parents:
        if not parent.is_relative_to(DEPLOY):
            break
        if (parent / "values.yaml").is_file():
            chain.insert(0, parent / "values.yaml")
    return chain


def deploy_manifest(values_file: Path) -> str:
    """Return what `sync` writes beside `values_file`."""
    chain = layered_values(values_file)
    values: dict[str, Any] = {}
    for path in chain:
        values = merge_values(values, yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    flags = " ".join(f"-f {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
                     for path in chain)
    header = (
        f"# Generated by `python scripts/chart.py sync`; do not edit. charts/gpu-exporter as\n"
        f"#   helm template {RELEASE} charts/gpu-exporter -n {NAMESPACE} {flags}\n"
        f"# renders it: change those values files and run sync again.\n")
    body = "\n".join(f"---\n# Source: {template}\n{text}"
                     for template, text in documents(render(values)))
    return header + body + "\n"


# ----------------------------------------------------------------------------- sync


def expected() -> dict[Path, bytes]:
    """Return every file `sync` writes (absolute path -> content)."""
    out = {CHART / rel: source.read_bytes() for rel, source in COPIES.items()}
    out[CHART / "Chart.yaml"] = chart_yaml(
        (CHART / "Chart.yaml").read_text(encoding="utf-8")).encode()
    out[CHART / "README.md"] = readme((CHART / "README.md").read_text(encoding="utf-8")).encode()
    for values_file in deploy_values_files():
        out[values_file.parent / RENDERED_NAME] = deploy_manifest(values_file).encode()
    return out


def stale_copies() -> list[Path]:
    """Return the files under files/alerts and files/dashboards that no artifact stands behind."""
    kept = {CHART / rel for rel in COPIES}
    return [p for d in ("alerts", "dashboards") for p in sorted((CHART / "files" / d).glob("*"))
            if p not in kept]


def sync() -> int:
    # Chart.yaml first: the rendered manifests carry its version.
    chart = CHART / "Chart.yaml"
    chart.write_text(chart_yaml(chart.read_text(encoding="utf-8")), encoding="utf-8")
    for path, content in expected().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    for path in stale_copies():
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


def package(destination: Path) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    return Path(helm_python.package(CHART, destination=destination))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/chart.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="write the chart's generated files and deploy/ manifests")
    pack = sub.add_parser("package", help="package the chart as a .tgz")
    pack.add_argument("destination", type=Path)
    args = parser.parse_args(argv)
    if args.command == "sync":
        return sync()
    print(package(args.destination))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
