"""What each `--group-by` name groups by: the labels aggregated by in PromQL, and how a
group's name follows from them. The report groups its figures this way, and
`generate rules --group-by` records the usage rules per group the same way, so the report can
read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.k8s.inference_labels import MODEL, QUEUE, ROLE, Dimension
from exporter.k8s.label_names import series_label_name
from exporter.options.report_table import GROUPINGS, LABEL_PREFIX
from exporter.options.values import ConfigError

INFERENCE_DIMENSIONS: dict[str, Dimension] = {"role": ROLE, "queue": QUEUE, "served-model": MODEL}
"""`--group-by` names of the inference dimensions (`model` is the GPU model, `modelName`)."""


@dataclass(frozen=True, slots=True)
class Grouping:
    """How rows are grouped: the PromQL labels aggregated by and how they make a name."""

    name: str
    labels: tuple[str, ...]
    """The labels aggregated by in PromQL; the group's name is the first of their values
    present, or all of them joined by `/`."""
    joined: bool = False
    """Whether the group's name is every label's value joined (namespace/pod), rather than
    the first one present (Hostname, else hostname, else instance)."""
    accepted: tuple[str, ...] = ()
    """Per label, the regex (matched in full) its value must match to name the group; empty
    where any value does. Dynamo's component type names a role only when it says prefill or
    decode."""

    def key(self, labels: dict[str, str]) -> str:
        """Return the name of the group that a series with `labels` belongs to: its values of
        `labels` joined by `/` for a joined grouping, else the first value present that its
        `accepted` pattern allows ("" when none does)."""
        values = [labels.get(name, "") for name in self.labels]
        if self.joined:
            return "/".join(values)
        patterns = self.accepted or (".+",) * len(values)
        return next((v for v, p in zip(values, patterns, strict=True)
                     if v and re.fullmatch(p, v)), "")

    @property
    def by(self) -> str:
        """Return the labels to aggregate by, as a PromQL `by (...)` clause lists them."""
        return ", ".join(self.labels)


def grouping(name: str) -> Grouping:
    """Return the grouping a `--group-by` value names; ConfigError for an unknown one."""
    if name == "namespace":
        return Grouping(name, ("namespace",))
    if name == "pod":
        return Grouping(name, ("namespace", "pod"), joined=True)
    if name == "node":
        # dcgm-exporter 4.8.3+ (and this exporter by default) write `hostname`, 4.8.2
        # `Hostname`: a fleet may carry either, or both while it is upgraded.
        return Grouping(name, ("Hostname", "hostname", "instance"))
    if name == "model":
        return Grouping(name, ("modelName",))
    if name in INFERENCE_DIMENSIONS:
        # The labels a pod-label preset writes, highest precedence first.
        sources = INFERENCE_DIMENSIONS[name].sources
        return Grouping(name, tuple(s.label for s in sources),
                        accepted=tuple(s.values for s in sources))
    if name.startswith(LABEL_PREFIX) and name[len(LABEL_PREFIX):].strip():
        key = name[len(LABEL_PREFIX):].strip()
        # `--kubernetes.pod-labels` writes label_<key>; dcgm-exporter's pod labels the key.
        return Grouping(name, (series_label_name(key, "label_"), series_label_name(key)))
    raise ConfigError(f"unknown grouping {name!r}; expected {', '.join(GROUPINGS)} or "
                      "label:<pod label key>")
