"""The options of `report`: where Prometheus is and how to reach it, the range, the grouping,
what is counted as idle, and prices.

Secrets (token, password) may come from the environment or a file rather than the command
line, where other users of the machine could read them in the process list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from exporter.durations import shown
from exporter.options.option import Command, Option, declared_options
from exporter.options.values import (
    Choice,
    ConfigError,
    FilePath,
    Integer,
    Number,
    Repeated,
    Switch,
    Text,
    Value,
    parse_duration,
)

ReportFormat = Literal["table", "csv", "json", "html"]
FORMATS: tuple[ReportFormat, ...] = ("table", "csv", "json", "html")
SeriesSource = Literal["auto", "rules", "raw"]
SOURCES: tuple[SeriesSource, ...] = ("auto", "rules", "raw")
Progress = Literal["auto", "on", "off"]
PROGRESS: tuple[Progress, ...] = ("auto", "on", "off")

REPORT: frozenset[Command] = frozenset({"report"})
READS: frozenset[Command] = frozenset({"report", "advise"})
"""Commands reading Prometheus: they share how to reach it, the range's ends and prices."""
CONNECTION_GROUP = "connection"
RANGE_GROUP = "range and grouping"
FIGURES_GROUP = "figures"

GROUPINGS = ("namespace", "pod", "node", "model", "role", "queue", "served-model")
"""The names `--group-by` takes; `role`, `queue` and `served-model` are the inference
dimensions of the pod-label presets."""
LABEL_PREFIX = "label:"
LAST_INSTANT = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def parse_span(text: str, where: str) -> float:
    """Return the seconds of a duration written as Prometheus writes it: 90d, 1h30m, 15s, 2w.
    A bare number is refused: a report's ranges are never in milliseconds."""
    return parse_duration(text, where, bare_unit=None)


@dataclass(frozen=True, slots=True)
class Span(Value[float]):
    """A duration in seconds, written as Prometheus writes durations (with days and weeks)."""

    metavar = "DURATION"

    def parse(self, text: str, where: str) -> float:
        """Return the seconds of `text` (see parse_span)."""
        return parse_span(text, where)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct spans, in days, hours and minutes, and seconds."""
        return ("30d", "1h30m", "15s")


def parse_instant(text: str, where: str) -> float:
    """Return the Unix seconds of `text`: RFC 3339 (`2025-05-01T00:00:00Z`; UTC where no zone
    is given), a date (`2025-05-01`, UTC midnight) or Unix seconds. ConfigError for any other
    text, and for a time outside the years 1970 to 9999."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is None:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{where}: {shown(text)} is not a time (expected RFC 3339 such as "
                              "2025-05-01T00:00:00Z, a date such as 2025-05-01, or Unix "
                              "seconds)") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        seconds = parsed.timestamp()
    if not 0 <= seconds <= LAST_INSTANT:  # nan and inf fail this too
        raise ConfigError(f"{where}: {shown(text)} is not a time between 1970 and 9999")
    return seconds


@dataclass(frozen=True, slots=True)
class Instant(Value[float]):
    """A point in time, as Unix seconds (see parse_instant)."""

    metavar = "TIME"

    def parse(self, text: str, where: str) -> float:
        """Return the Unix seconds of `text` (see parse_instant)."""
        return parse_instant(text, where)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct times: RFC 3339, a date and Unix seconds."""
        return ("2025-05-01T00:00:00Z", "2025-05-02", "1746057600")


@dataclass(frozen=True, slots=True)
class GroupBy(Value[str]):
    """A report grouping: namespace, pod, node, model (of GPU), role, queue, served-model, or
    label:<pod label key>."""

    metavar = "namespace|pod|node|model|role|queue|served-model|label:KEY"

    def parse(self, text: str, where: str) -> str:
        """Return `text` unchanged when it names a grouping (`label:` followed by a key);
        ConfigError, listing the groupings, otherwise."""
        if text in GROUPINGS:
            return text
        if text.startswith(LABEL_PREFIX) and text[len(LABEL_PREFIX):].strip():
            return text
        raise ConfigError(f"{where}: {text!r}; expected namespace, pod, node, model, role, "
                          "queue, served-model or label:<pod label key>, e.g. label:team")

    def samples(self) -> tuple[str, ...]:
        """Return two named groupings and a pod label's."""
        return ("namespace", "node", "label:team")


PROMETHEUS: Option[str | None] = Option(
    "prometheus_url", Text(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--prometheus",), env=("GPU_EXPORTER_PROMETHEUS_URL",), metavar="URL",
    help="Prometheus, VictoriaMetrics, Thanos or Mimir query URL (Mimir: up to "
         "`/prometheus`); required")
BEARER_TOKEN: Option[str | None] = Option(
    "bearer_token", Text(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--bearer-token",), env=("GPU_EXPORTER_PROMETHEUS_TOKEN",), metavar="TOKEN",
    help="sent as `Authorization: Bearer`; prefer the variable or `--bearer-token-file`")
BEARER_TOKEN_FILE: Option[Path | None] = Option(
    "bearer_token_file", FilePath(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--bearer-token-file",), help="file holding the bearer token")
BASIC_AUTH_USER: Option[str | None] = Option(
    "basic_auth_user", Text(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--basic-auth-user",), metavar="USER", help="basic authentication user")
BASIC_AUTH_PASSWORD: Option[str | None] = Option(
    "basic_auth_password", Text(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--basic-auth-password",), env=("GPU_EXPORTER_PROMETHEUS_PASSWORD",),
    metavar="PASSWORD", help="basic authentication password")
BASIC_AUTH_PASSWORD_FILE: Option[Path | None] = Option(
    "basic_auth_password_file", FilePath(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--basic-auth-password-file",), help="file holding the password")
CA_FILE: Option[Path | None] = Option(
    "ca_file", FilePath(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--ca-file",), help="CA bundle the server's certificate must chain to")
CERT_FILE: Option[Path | None] = Option(
    "cert_file", FilePath(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--cert-file",), help="client certificate (PEM), for mutual TLS")
KEY_FILE: Option[Path | None] = Option(
    "key_file", FilePath(), None, commands=READS, group=CONNECTION_GROUP,
    flags=("--key-file",), help="the client certificate's key (PEM)")
INSECURE: Option[bool] = Option(
    "insecure_skip_verify", Switch(), False, commands=READS, group=CONNECTION_GROUP,
    flags=("--insecure-skip-verify",), help="do not check the server's certificate")
HEADERS: Option[tuple[str, ...]] = Option(
    "headers", Repeated(Text()), (), commands=READS, group=CONNECTION_GROUP,
    flags=("--header",), metavar="'NAME: VALUE'",
    help="extra request header, repeatable, e.g. `X-Scope-OrgID: team-a` for Mimir")
TIMEOUT: Option[float] = Option(
    "timeout", Span(), 120.0, commands=READS, group=CONNECTION_GROUP, flags=("--timeout",),
    default_text="`2m`", help="deadline of each query, passed to the server too")

START: Option[float | None] = Option(
    "start", Instant(), None, commands=READS, group=RANGE_GROUP, flags=("--start",),
    default_text="`--end` minus `--last`", help="start of the range")
END: Option[float | None] = Option(
    "end", Instant(), None, commands=READS, group=RANGE_GROUP, flags=("--end",),
    default_text="now", help="end of the range")
LAST: Option[float] = Option(
    "last", Span(), 86400.0, commands=REPORT, group=RANGE_GROUP, flags=("--last",),
    default_text="`1d`", help="length of the range when `--start` is not given, e.g. `30d`")
GROUP_BY: Option[str] = Option(
    "group_by", GroupBy(), "namespace", commands=REPORT, group=RANGE_GROUP,
    flags=("--group-by",), default_text="`namespace`",
    help="`namespace`, `pod`, `node`, `model` (the GPU model), `role` (prefill/decode), "
         "`queue` (KAI Scheduler), `served-model` (the LLM served), or `label:<pod label key>` "
         "(the pod labels the exporter copies, e.g. `label:team`); role, queue and "
         "served-model read the labels of the `inference` pod-label preset")
STEP: Option[float | None] = Option(
    "step", Span(), None, commands=REPORT, group=RANGE_GROUP, flags=("--step",),
    default_text="a day, an hour or a minute, by the range",
    help="width of the chart bars and of the JSON time series")
RESOLUTION: Option[float] = Option(
    "resolution", Span(), 60.0, commands=READS, group=RANGE_GROUP, flags=("--resolution",),
    default_text="`1m`",
    help="sampling interval of raw series (at least the scrape interval; holdings shorter "
         "than it are sampled)")
SOURCE: Option[SeriesSource] = Option(
    "source", Choice(SOURCES), "auto", commands=REPORT, group=RANGE_GROUP,
    flags=("--source",),
    help="`rules`: the recording rules of `alerts/`; `raw`: the exporter's series; `auto`: "
         "the rules where they cover the range")
MAX_CHUNK: Option[float] = Option(
    "max_chunk", Span(), 86400.0, commands=REPORT, group=RANGE_GROUP, flags=("--chunk",),
    default_text="`1d` (`30d` over the rules)",
    help="longest range one query covers (also kept under 11,000 points per series)")

IDLE_BELOW: Option[float] = Option(
    "idle_below", Number(), 5.0, commands=REPORT, group=FIGURES_GROUP,
    flags=("--idle-below",), metavar="PERCENT",
    help="activity under which held GPUs count as idle")
IDLE_WINDOW: Option[float] = Option(
    "idle_window", Span(), 1800.0, commands=REPORT, group=FIGURES_GROUP,
    flags=("--idle-window",), default_text="`30m`",
    help="how long activity must stay below `--idle-below` (whole windows from the start)")
PRICE: Option[float | None] = Option(
    "price", Number(), None, commands=READS, group=FIGURES_GROUP, flags=("--price",),
    metavar="PER_GPU_HOUR", help="cost of one allocated GPU-hour")
PRICE_FILE: Option[Path | None] = Option(
    "price_file", FilePath(), None, commands=READS, group=FIGURES_GROUP,
    flags=("--price-file",),
    help="YAML or JSON map of `modelName` to price per GPU-hour; `\"*\"` for any other")
GRID_INTENSITY: Option[float | None] = Option(
    "grid_intensity", Number(), None, commands=REPORT, group=FIGURES_GROUP,
    flags=("--grid-intensity",), metavar="G_PER_KWH",
    help="grams of CO2 per kWh, for a CO2 column")
TOP: Option[int] = Option(
    "top", Integer(), 10, commands=REPORT, group=FIGURES_GROUP, flags=("--top",),
    help="idle-allocated pods listed")

FORMAT: Option[ReportFormat] = Option(
    "format", Choice(FORMATS), "table", commands=REPORT, flags=("--format",),
    help="`table` for a terminal; `html`: one self-contained file with charts")
OUTPUT: Option[Path | None] = Option(
    "output", FilePath(), None, commands=REPORT, flags=("-o", "--output"),
    default_text="standard output",
    help="file to write; written whole or not at all")
PROGRESS_OPTION: Option[Progress] = Option(
    "progress", Choice(PROGRESS), "auto", commands=READS, flags=("--progress",),
    help="progress on standard error; `auto`: when it is a terminal")

REPORT_OPTIONS: tuple[Option[object], ...] = declared_options(globals())
