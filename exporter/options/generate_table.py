"""The options of `generate` (its `-f` is serve's, declared with the serve options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from exporter.options.option import Command, Option, declared_options
from exporter.options.report_table import GroupBy
from exporter.options.values import Choice, FilePath, Integer, Number, Repeated, Text, Value

KedaMetric = Literal["util", "gr-engine", "fb", "dram"]
KEDA_METRICS: tuple[KedaMetric, ...] = ("util", "gr-engine", "fb", "dram")
KedaRole = Literal["prefill", "decode"]
KEDA_ROLES: tuple[KedaRole, ...] = ("prefill", "decode")

GENERATE: frozenset[Command] = frozenset({"generate"})

ALERTS_GROUP = "alerts"
RULES_GROUP = "usage rules"
KEDA_GROUP = "keda"
GROUP_DESCRIPTIONS = {
    RULES_GROUP: "the usage recording rules (`generate rules`; `alerts` and `all` write them "
                 "too)",
    KEDA_GROUP: "with --namespace, print one ScaledObject instead of writing the examples",
}


@dataclass(frozen=True, slots=True)
class GroupByList(Value[str]):
    """One or more `--group-by` names of the report, comma separated."""

    metavar = "GROUPING[,GROUPING...]"

    def parse(self, text: str, where: str) -> str:
        """Return `text` unchanged once each comma-separated part is checked as a report
        grouping; ConfigError names the first part that is not one."""
        for part in text.split(","):
            GroupBy().parse(part.strip(), where)
        return text

    def samples(self) -> tuple[str, ...]:
        """Return a list of one grouping and a list of two."""
        return ("namespace", "namespace,label:team")

OUT: Option[Path] = Option(
    "out", FilePath(), Path("."), commands=GENERATE, flags=("--out",), metavar="DIR",
    default_text="the current directory",
    help="directory that receives `dashboards/`, `alerts/` and `deploy/keda/`")
XID_TIERS: Option[tuple[str, ...]] = Option(
    "xid_tiers", Repeated(Text()), (), commands=GENERATE, group=ALERTS_GROUP,
    flags=("--xid-tier",), metavar="NAME=CODES",
    help="set the XID codes of a tier (fell-off-bus, critical, nvlink, contained-ecc, "
         "pending-reset), e.g. `critical=48,62,64`; repeatable; tiers must not overlap")
JOB_REGEX: Option[str | None] = Option(
    "job_regex", Text(), None, commands=GENERATE, group=ALERTS_GROUP,
    flags=("--job-regex",), metavar="RE",
    help="scrape jobs of the exporters, for the `up` alert")
GROUP_BY: Option[tuple[str, ...]] = Option(
    "rules_group_by", Repeated(GroupByList()), ("namespace",), commands=GENERATE,
    group=RULES_GROUP, flags=("--group-by",), default_text="`namespace`",
    help="record the usage figures per group of these report groupings too (repeatable or "
         "comma separated, e.g. `namespace,label:team`): `gpu-exporter report --group-by` "
         "one of them reads one series per group and hour; any other grouping reads the "
         "per-pod rules")
NAMESPACE: Option[str | None] = Option(
    "namespace", Text(), None, commands=GENERATE, group=KEDA_GROUP,
    flags=("--namespace",), metavar="NS", help="namespace of the scaled Deployment")
DEPLOYMENT: Option[str | None] = Option(
    "deployment", Text(), None, commands=GENERATE, group=KEDA_GROUP,
    flags=("--deployment",), metavar="NAME", help="the Deployment to scale")
METRIC: Option[KedaMetric | None] = Option(
    "metric", Choice(KEDA_METRICS), None, commands=GENERATE, group=KEDA_GROUP,
    flags=("--metric",), help="what to scale on: utilisation, graphics engine activity, "
                              "framebuffer used or memory-interface activity")
TARGET: Option[float | None] = Option(
    "target", Number(), None, commands=GENERATE, group=KEDA_GROUP, flags=("--target",),
    help="target value in percent (utilisation, activity, framebuffer used)")
ROLE: Option[KedaRole | None] = Option(
    "role", Choice(KEDA_ROLES), None, commands=GENERATE, group=KEDA_GROUP, flags=("--role",),
    help="scale one pool of a disaggregated server: every pod of the namespace whose role "
         "label (llm-d, Dynamo) says so, not the Deployment's pods; the GPU series need the "
         "exporter's `inference` pod-label preset")
MIN_REPLICAS: Option[int] = Option(
    "min_replicas", Integer(), 1, commands=GENERATE, group=KEDA_GROUP, flags=("--min",),
    help="minReplicaCount")
MAX_REPLICAS: Option[int] = Option(
    "max_replicas", Integer(), 10, commands=GENERATE, group=KEDA_GROUP, flags=("--max",),
    help="maxReplicaCount")
PROMETHEUS: Option[str | None] = Option(
    "prometheus", Text(), None, commands=GENERATE, group=KEDA_GROUP,
    flags=("--prometheus",), metavar="URL", help="Prometheus server address KEDA queries")
QUEUE_TARGET: Option[float | None] = Option(
    "queue_target", Number(), None, commands=GENERATE, group=KEDA_GROUP,
    flags=("--queue-target",), help="also scale on vLLM's waiting requests, N per replica")

GENERATE_OPTIONS: tuple[Option[object], ...] = declared_options(globals())
