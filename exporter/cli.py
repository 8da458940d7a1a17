"""Command-line entry: `gpu-exporter [serve|generate|doctor|report|advise] ...` (serve is the
default, so dcgm-exporter's command lines work as they are:
`gpu-exporter -f counters.csv -c 5000`).

Each subcommand's module is imported only when it runs, so serving never loads the
dashboard generator's or the report's dependencies. The container image installs only the
libraries of the node's commands (NODE_COMMANDS); the others answer there with one line
saying where to get them (docs/image.md).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Sequence

USAGE = """usage: gpu-exporter [serve] [flags]     run the exporter (gpu-exporter serve --help)
       gpu-exporter generate ...         write dashboards, alert rules, KEDA objects
       gpu-exporter doctor ...           explain what stands between this node and its metrics
       gpu-exporter report ...           GPU-hours, idle time, energy and cost per team
       gpu-exporter advise ...           MIG layouts and time-slicing that fit measured use
"""

COMMANDS = {
    "serve": "exporter.serve:main",
    "doctor": "exporter.doctor:main",
    "generate": "exporter.artifacts.cli:main",
    "report": "exporter.report.cli:main",
    "advise": "exporter.advise.cli:main",
}
"""Each command and the `module:function` that runs it with the remaining arguments."""

NODE_COMMANDS = frozenset({"serve", "doctor"})
"""What runs on a GPU node: the container image holds these commands' libraries only."""

DISTRIBUTION = "gpu-exporter"


def _entry(command: str) -> Callable[[list[str]], int]:
    """Return the function that runs `command`, importing its module only now."""
    module, _, function = COMMANDS[command].partition(":")
    entry: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return entry


def absent_dependencies(distribution: str = DISTRIBUTION) -> list[str]:
    """Return the required dependencies of `distribution` that are not installed (those the
    container image leaves out), or none when `distribution` itself is not installed (a
    checkout run from its directory)."""
    from importlib import metadata

    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return []
    absent = []
    for requirement in requirements:
        if "extra ==" in requirement.partition(";")[2]:
            continue  # an optional extra's, not required
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
        if name is None:
            continue
        try:
            metadata.version(name.group(0))
        except metadata.PackageNotFoundError:
            absent.append(name.group(0))
    return absent


def tool_absent_message(command: str, absent: Sequence[str]) -> str:
    """Return the line that says `command` is not in this installation (its libraries
    `absent` are missing, as in the container image) and where to get it."""
    return (f"gpu-exporter: `{command}` is not in this installation ({', '.join(absent)} not "
            f"installed): the container image carries only {' and '.join(sorted(NODE_COMMANDS))}; "
            f"run `{command}` from `pip install gpu-exporter`, which installs every command")


def _run(command: str, rest: list[str]) -> int:
    """Run `command` with the arguments `rest` and return its exit status; 2 for an unknown
    command, 1 for a tool whose libraries this installation lacks."""
    if command in COMMANDS:
        if command not in NODE_COMMANDS:
            # Checked before anything runs: the libraries are imported lazily, so without
            # this `report --help` would work and `report` fail halfway.
            absent = absent_dependencies()
            if absent:
                print(tool_absent_message(command, absent), file=sys.stderr)
                return 1
        return _entry(command)(rest)
    if command in ("help", "-h", "--help"):
        print(USAGE)
        return 0
    print(f"gpu-exporter: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


def missing_module_message(exc: ModuleNotFoundError) -> str:
    """Return the line, shown instead of a traceback, that names the module `exc` found
    missing and says how to reinstall the exporter."""
    missing = exc.name or str(exc)
    return (f"gpu-exporter: the Python module {missing!r} is missing from this installation; "
            "reinstall gpu-exporter (e.g. `pip install --force-reinstall gpu-exporter`): "
            "every library it uses is a required dependency")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command the first argument names, with the arguments after it, and return its
    exit status; serve runs when there is no argument or the first is a flag."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args and not args[0].startswith("-") else "serve"
    rest = args[1:] if args and args[0] == command else args
    try:
        return _run(command, rest)
    except ModuleNotFoundError as exc:
        # A broken installation: one line that says what to do, not a traceback.
        print(missing_module_message(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
