"""The options of `advise` besides those it shares with `report` (how to reach Prometheus,
`--start`, `--end`, `--resolution`, `--price`, `--price-file`, `--progress`: declared in
`report_table.py` for both): the window, how use is measured and fitted, the outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from exporter.options.option import Command, Option, declared_options
from exporter.options.report_table import RANGE_GROUP, Span
from exporter.options.values import Choice, FilePath, Integer, Number, Switch

AdviseFormat = Literal["table", "json", "html", "mig-parted", "device-plugin"]
FORMATS: tuple[AdviseFormat, ...] = ("table", "json", "html", "mig-parted", "device-plugin")

ADVISE: frozenset[Command] = frozenset({"advise"})
FIT_GROUP = "fitting"

LAST: Option[float] = Option(
    "advise_last", Span(), 7 * 86400.0, commands=ADVISE, group=RANGE_GROUP, flags=("--last",),
    default_text="`7d`",
    help="length of the window when `--start` is not given: a week sees weekly cycles")
STEP: Option[float] = Option(
    "advise_step", Span(), 300.0, commands=ADVISE, group=RANGE_GROUP, flags=("--step",),
    default_text="`5m`",
    help="width of the steps whose maxima (framebuffer) and means (activity) are taken")
MEMORY_QUANTILE: Option[float] = Option(
    "memory_quantile", Number(), 0.99, commands=ADVISE, group=FIT_GROUP,
    flags=("--memory-quantile",), metavar="Q",
    help="quantile of the per-step framebuffer maxima taken as the peak; `1`: the highest")
COMPUTE_QUANTILE: Option[float] = Option(
    "compute_quantile", Number(), 0.95, commands=ADVISE, group=FIT_GROUP,
    flags=("--compute-quantile",), metavar="Q",
    help="quantile of the per-step mean activity taken as the compute need")
HEADROOM: Option[float] = Option(
    "headroom", Number(), 10.0, commands=ADVISE, group=FIT_GROUP, flags=("--headroom",),
    metavar="PERCENT", help="added to the peak framebuffer before fitting")
MIN_SAMPLES: Option[int] = Option(
    "min_samples", Integer(), 30, commands=ADVISE, group=FIT_GROUP, flags=("--min-samples",),
    help="holders with fewer framebuffer samples in the window are not advised")
MIN_HOURS: Option[float] = Option(
    "min_hours", Number(), 1.0, commands=ADVISE, group=FIT_GROUP, flags=("--min-hours",),
    metavar="HOURS", help="holders held for less time in the window are not advised")
MAX_REPLICAS: Option[int] = Option(
    "advise_max_replicas", Integer(), 8, commands=ADVISE, group=FIT_GROUP,
    flags=("--max-replicas",),
    help="most time-sliced replicas per GPU advised on GPUs without MIG")
TIME_LIMIT: Option[float] = Option(
    "time_limit", Span(), 10.0, commands=ADVISE, group=FIT_GROUP, flags=("--time-limit",),
    default_text="`10s`",
    help="time the exact packing may take per pool; past it, the best found and its gap")
SKIP_UNKNOWN: Option[bool] = Option(
    "skip_unknown_models", Switch(), False, commands=ADVISE, group=FIT_GROUP,
    flags=("--skip-unknown-models",),
    help="advise the other pools when a GPU model is not in the MIG profile table (else "
         "it is an error)")
ALL: Option[bool] = Option(
    "all", Switch(), False, commands=ADVISE, flags=("--all",),
    help="list the holders whose advice changes nothing too (else only counted)")
FORMAT: Option[AdviseFormat] = Option(
    "advise_format", Choice(FORMATS), "table", commands=ADVISE, flags=("--format",),
    help="`mig-parted`: the MIG Manager's config; `device-plugin`: the time-slicing "
         "ConfigMap; `html`: one self-contained file drawing each node's layouts")
OUTPUT: Option[Path | None] = Option(
    "advise_output", FilePath(), None, commands=ADVISE, flags=("-o", "--output"),
    default_text="standard output", help="file to write; written whole or not at all")

ADVISE_OPTIONS: tuple[Option[object], ...] = declared_options(globals())
