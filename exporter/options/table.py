"""Every option of every command, in the order --help and the README list them."""

from __future__ import annotations

from exporter.options.generate_table import GENERATE_OPTIONS
from exporter.options.model import Option
from exporter.options.report_table import REPORT_OPTIONS
from exporter.options.serve_table import SERVE_OPTIONS

OPTIONS: tuple[Option[object], ...] = (*SERVE_OPTIONS, *GENERATE_OPTIONS, *REPORT_OPTIONS)
