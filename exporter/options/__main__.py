"""`python -m exporter.options --markdown | --write-readme README.md`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter.options.markdown import markdown_table, write_readme


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exporter.options",
                                     description="The flag table of `gpu-exporter serve`.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--markdown", action="store_true", help="print it as markdown")
    action.add_argument("--write-readme", type=Path, metavar="README",
                        help="rewrite the block between the options:begin/end markers")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown_table())
        return 0
    changed = write_readme(args.write_readme)
    print(f"{args.write_readme}: {'updated' if changed else 'already up to date'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
