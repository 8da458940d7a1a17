"""Every option of every command, in the order --help and the flag tables list them."""

from __future__ import annotations

from exporter.options import dcgm_table, generate_table
from exporter.options.advise_table import ADVISE_OPTIONS
from exporter.options.dcgm_table import DCGM_OPTIONS
from exporter.options.generate_table import GENERATE_OPTIONS
from exporter.options.option import Option
from exporter.options.report_table import REPORT_OPTIONS
from exporter.options.serve_table import SERVE_OPTIONS

OPTIONS: tuple[Option[object], ...] = (*SERVE_OPTIONS, *DCGM_OPTIONS, *GENERATE_OPTIONS,
                                       *REPORT_OPTIONS, *ADVISE_OPTIONS)

GROUP_DESCRIPTIONS: dict[str, str] = {**dcgm_table.GROUP_DESCRIPTIONS,
                                      **generate_table.GROUP_DESCRIPTIONS}
"""The line --help shows under a group's heading, by heading."""
