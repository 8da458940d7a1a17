"""The pod labels LLM-serving stacks set, as presets of `--kubernetes.pod-labels` and as the
role, queue and model dimensions the dashboards, KEDA objects and reports group by.

Sources (with the values each key takes) are in the project's reference notes on inference
labels: NVIDIA Dynamo's operator (`deploy/operator/internal/consts/consts.go`), llm-d's
inference scheduler and charts, KAI Scheduler (`pkg/common/constants/constants.go`).

A preset copies its keys the way dcgm-exporter's allow-list does, under the sanitised key
(`llm-d.ai/role` -> `llm_d_ai_role`), so a query written for dcgm-exporter with pod labels
reads this exporter's series unchanged; `allowlist_regexes` gives the dcgm-exporter
allow-list that copies exactly the same keys. Each copied label lengthens every series of a
GPU its pod holds, so presets list only keys worth grouping by: not hashes of pod templates,
selectors or switches.

Pure: no `kubernetes` import, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.k8s.label_names import KeyFilter, sanitise_label_name


@dataclass(frozen=True, slots=True)
class Preset:
    """A named set of pod label keys that one LLM-serving stack sets."""

    name: str
    keys: tuple[str, ...]
    """Pod label keys copied, exactly as on the pod."""
    summary: str


DYNAMO = Preset("dynamo", (
    "nvidia.com/dynamo-component-type",
    "nvidia.com/dynamo-sub-component-type",
    "nvidia.com/dynamo-component",
    "nvidia.com/dynamo-graph-deployment-name",
    "nvidia.com/dynamo-namespace",
    "nvidia.com/dynamo-base-model",
    "nvidia.com/dynamo-base-model-hash",
), "NVIDIA Dynamo: component type and prefill/decode sub-type, component, graph, Dynamo "
   "namespace, base model (its name in older releases, its hash in newer ones)")
LLM_D = Preset("llm-d", (
    "llm-d.ai/role",
    "llm-d.ai/model",
), "llm-d: prefill/decode role and model")
KAI = Preset("kai", (
    "kai.scheduler/queue",
), "KAI Scheduler: the queue the pod was scheduled from")
INFERENCE = Preset("inference", DYNAMO.keys + LLM_D.keys + KAI.keys,
                   "dynamo, llm-d and kai together")

PRESETS: Mapping[str, Preset] = {p.name: p for p in (DYNAMO, LLM_D, KAI, INFERENCE)}


@dataclass(frozen=True, slots=True)
class PodLabelSelection:
    """What `--kubernetes.pod-labels` was given: a regex, or one or more preset names."""

    regex: str | None = None
    """Keys fully matching it are copied as `label_<key>`, with `pod_uid`."""
    presets: tuple[str, ...] = ()
    """Names in PRESETS; their keys are copied under the sanitised key (no prefix)."""


def parse_presets(text: str) -> tuple[str, ...] | None:
    """Return the preset names in a text such as `inference` or `llm-d,kai`, or None when the
    text is not a list of preset names (it is then a regex)."""
    names = tuple(item.strip() for item in text.split(","))
    if names and all(name in PRESETS for name in names):
        return tuple(dict.fromkeys(names))
    return None


def preset_keys(names: Iterable[str]) -> tuple[str, ...]:
    """Return the pod label keys that the named presets copy, each once, in the order the presets
    declare them."""
    return tuple(dict.fromkeys(key for name in names for key in PRESETS[name].keys))


def preset_filter(names: Iterable[str]) -> KeyFilter:
    """Return a filter that accepts exactly the pod label keys of these presets."""
    keys = frozenset(preset_keys(names))
    return keys.__contains__


def allowlist_regexes(names: Iterable[str]) -> tuple[str, ...]:
    """Return dcgm-exporter allow-list regexes (`--kubernetes-pod-label-allowlist-regex`, the GPU
    Operator's `podLabelAllowlistRegex`) that select exactly the presets' keys: one anchored
    regex per key prefix, since upstream matches a pattern anywhere in a key."""
    by_prefix: dict[str, list[str]] = {}
    for key in preset_keys(names):
        prefix, _, name = key.rpartition("/")
        by_prefix.setdefault(prefix, []).append(name)
    out = []
    for prefix, rest in by_prefix.items():
        if len(rest) == 1:
            tail = rest[0]
        else:
            shared = _shared_start(rest)
            tail = f"{shared}({'|'.join(n[len(shared):] for n in rest)})"
        # Keys hold only [a-z0-9.-/]: escaping the dots is enough, and reads the same in RE2.
        out.append(f"^{prefix}/{tail}$".replace(".", r"\."))
    return tuple(out)


def _shared_start(names: list[str]) -> str:
    """Return the dash-ended words that all the names share, such as `dynamo-` for
    `dynamo-component` and `dynamo-namespace`."""
    words = names[0].split("-")[:-1]
    for n in range(len(words), 0, -1):
        start = "-".join(words[:n]) + "-"
        if all(name.startswith(start) and len(name) > len(start) for name in names):
            return start
    return ""


# -- dimensions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelSource:
    """One pod label that carries a dimension's value."""

    key: str
    values: str = ".+"
    """Regex (matched in full) of the values that belong to the dimension: Dynamo's component
    type is a role only when it says `prefill` or `decode` (not `frontend` or `worker`)."""

    @property
    def label(self) -> str:
        """Return the series label this dimension becomes under a preset."""
        return sanitise_label_name(self.key)


@dataclass(frozen=True, slots=True)
class Dimension:
    """One role or model dimension of LLM serving, and the labels it is read from."""

    name: str
    sources: tuple[LabelSource, ...]
    """Highest precedence first: the first source a series carries a matching value in
    gives the dimension's value."""
    meaning: str

    def value_of(self, labels: Mapping[str, str]) -> str | None:
        """Return the dimension's value on a series with these labels, or None when no source
        gives one."""
        for source in self.sources:
            value = labels.get(source.label, "")
            if value and re.fullmatch(source.values, value):
                return value
        return None


ROLE = Dimension("role", (
    LabelSource("llm-d.ai/role"),
    # Worker pods of Dynamo releases with `worker` as component type carry the phase here.
    LabelSource("nvidia.com/dynamo-sub-component-type"),
    LabelSource("nvidia.com/dynamo-component-type", "prefill|decode"),
), "prefill or decode (llm-d also has encode and combined roles)")
QUEUE = Dimension("queue", (LabelSource("kai.scheduler/queue"),), "KAI Scheduler queue")
MODEL = Dimension("model", (
    LabelSource("llm-d.ai/model"),
    LabelSource("nvidia.com/dynamo-base-model"),
    LabelSource("nvidia.com/dynamo-base-model-hash"),
), "served model: its name, or with Dynamo's newer releases the first 8 hex digits of the "
   "SHA-256 of its name")

DIMENSIONS: Mapping[str, Dimension] = {d.name: d for d in (ROLE, QUEUE, MODEL)}
"""What reports and dashboards group by (`--group-by role`)."""
