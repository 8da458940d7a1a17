"""Command-line entry: `gpu-exporter [serve|generate|doctor|report|advise] ...` (serve is the
default, so dcgm-exporter's command lines work as they are: `gpu-exporter -f counters.csv -c
5000`).

Each subcommand's module is imported only when it runs, so serving never loads the
dashboard generator's or the doctor's dependencies.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: gpu-exporter [serve] [flags]     run the exporter (gpu-exporter serve --help)
       gpu-exporter generate ...         write dashboards, alert rules, KEDA objects
       gpu-exporter doctor ...           explain what stands between this node and its metrics
       gpu-exporter report ...           GPU-hours, idle time, energy and cost per team
       gpu-exporter advise ...           MIG layouts and time-slicing that fit measured use
"""


def _run(command: str, rest: list[str]) -> int:
    if command == "serve":
        from exporter.serve import main as serve_main

        return serve_main(rest)
    if command == "generate":
        from exporter.artifacts.cli import main as generate_main

        return generate_main(rest)
    if command == "doctor":
        from exporter.doctor import main as doctor_main

        return doctor_main(rest)
    if command == "report":
        from exporter.report.cli import main as report_main

        return report_main(rest)
    if command == "advise":
        from exporter.advise.cli import main as advise_main

        return advise_main(rest)
    if command in ("help", "-h", "--help"):
        print(USAGE)
        return 0
    print(f"gpu-exporter: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


def missing_module_message(exc: ModuleNotFoundError) -> str:
    missing = exc.name or str(exc)
    return (f"gpu-exporter: the Python module {missing!r} is missing from this installation; "
            "reinstall gpu-exporter (e.g. `pip install --force-reinstall gpu-exporter`): "
            "every library it uses is a required dependency")


def main(argv: Sequence[str] | None = None) -> int:
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
