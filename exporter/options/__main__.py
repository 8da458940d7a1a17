"""Print a command's flag table, or write it into a docs page:
`python -m exporter.options [--command report] --markdown | --write-readme PAGE.md`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter.options.markdown import markdown_table, write_readme


def main(argv: Sequence[str] | None = None) -> int:
    """Print a command's flag table as markdown, or rewrite the table block of a docs page
    with it; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m exporter.options",
                                     description="The flag table of a command.")
    parser.add_argument("--command", choices=("serve", "report", "advise"), default="serve",
                        help="whose flags (serve's go in docs/configuration.md, report's in "
                             "docs/report.md, advise's in docs/advise.md)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--markdown", action="store_true", help="print it as markdown")
    action.add_argument("--write-readme", type=Path, metavar="PAGE",
                        help="rewrite the block between the options:begin/end markers")
    args = parser.parse_args(argv)
    table = markdown_table(args.command)
    if args.markdown:
        sys.stdout.write(table)
        return 0
    changed = write_readme(args.write_readme, table)
    print(f"{args.write_readme}: {'updated' if changed else 'already up to date'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
