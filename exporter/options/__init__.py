"""One declarative table of every command's options, and what is built from it: argparse for
each command, the resolution flag -> environment -> default (with where each value came
from), and the flag tables of the docs.

Declaring an option: add an `Option` to `serve_table.py` (or the table of its command) with
its flags, variables in precedence order, value type, default, help, commands and the
settings field it fills (`fills`, see docs/architecture.md "Where to change what"); the table
lists it because the module declares it. A flag of dcgm-exporter that has no meaning here gets
`ignored="<reason>"`: it is accepted, and when set yields a start-up warning
(`Resolution.warnings()`).
"""

from exporter.options.option import Command, Option, Resolution, Setting
from exporter.options.parsing import (
    add_arguments,
    build_parser,
    check_table,
    for_command,
    parse_command_line,
    resolve,
)
from exporter.options.table import OPTIONS
from exporter.options.values import ConfigError, parse_duration, parse_listen

__all__ = [
    "OPTIONS",
    "Command",
    "ConfigError",
    "Option",
    "Resolution",
    "Setting",
    "add_arguments",
    "build_parser",
    "check_table",
    "for_command",
    "parse_command_line",
    "parse_duration",
    "parse_listen",
    "resolve",
]
