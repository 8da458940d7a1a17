"""How a pod's UID and Kubernetes labels become labels of the series attributed to it.

Two ways of copying pod labels, which may be combined:

- ours, `--kubernetes.pod-labels REGEX`: `pod_uid`, then `label_<key>` for every key the
  regex matches in full;
- dcgm-exporter's, `enable_pod_labels` (with `pod_label_allowlist`) and `enable_pod_uid`: the
  key itself as the label name (`llm-d.ai/role` -> `llm_d_ai_role`), for every key any
  allow-list regex matches anywhere in it (all keys when the list is empty), and `pod_uid`;
  `--kubernetes.pod-labels PRESET` (`exporter.k8s.inference_labels`) names such an allow-list:
  its keys are copied the same way, without `pod_uid`.

Keys are sanitised as dcgm-exporter does, every character outside `[a-zA-Z0-9_]` becoming
`_`; an unprefixed name that would start with a digit (`3scale.net/tier`) gets a leading `_`,
since Prometheus rejects such a name and with it the whole scrape. Values are copied as they
are (the exposition escapes them); an empty value is left out, as Prometheus reads an empty
label as an absent one.

A pod label never replaces one of the series' own labels; it is renamed, as dcgm-exporter
4.8.3 renames it (`copyPodLabels`): a name that is taken becomes `pod_label_<name>`, and
while that is taken too, `pod_label_<name>_conflict1`, `_conflict2`, ... A name is taken
when `exporter.label_registry` declares it for a series that can carry pod labels (device,
MIG, link, GPU pair, windows, XID attributes, allocation, DRA, ... and the names
dcgm-exporter reserves on its other entities), or when another copied label already has it.
As upstream, the keys whose names are free are copied first (in key order), then each
taken one is renamed (in key order) against everything copied so far, so the outcome
depends only on the pod's labels. Two keys of one copy that sanitise to one name (`a.b` and
`a-b` both become `a_b`) are one label, as in dcgm-exporter's map of sanitised keys: the
first in sort order is kept and the other is dropped. The caller reports each rename and
drop.

The names are reserved for the whole pod, not per series: dcgm-exporter renames a pod label
`xid` only on the series that carry an `xid` label, this exporter on all the pod's series,
so that one pod label has one name on every series of the pod.

This module is pure (no `kubernetes` import): the API-server watch in `exporter.k8s.pod_metadata`
applies it to every pod it sees, once per pod event, never per scrape.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from exporter import label_registry
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.inference_labels import preset_filter
from exporter.k8s.label_names import KeyFilter as KeyFilter  # re-exported: public API
from exporter.k8s.label_names import sanitise_label_name as sanitise_label_name
from exporter.k8s.label_names import series_label_name
from exporter.series import Labels

log = logging.getLogger(__name__)

RENAMED = "renamed"
"""The name is one of the series' own labels (or was taken): copied as `pod_label_<name>`."""
DUPLICATE = "duplicate"
"""Dropped: another key of the same copy sanitised to the same name first."""
INVALID = "invalid"
"""Dropped: the key gives no usable label name (the empty key)."""


def is_reserved(name: str) -> bool:
    """Return whether the exporter writes this label name itself on series that can carry pod
    labels."""
    return label_registry.taken_from_pod_labels(name)


def renamed(name: str, taken: Callable[[str], bool]) -> str:
    """Return dcgm-exporter's new name for a pod label whose `name` is taken: `pod_label_<name>`,
    else the first free `pod_label_<name>_conflict<N>` for N = 1, 2, and so on."""
    base = label_registry.POD_LABEL_PREFIX + name
    candidate, n = base, 0
    while taken(candidate):
        n += 1
        candidate = f"{base}{label_registry.CONFLICT_SUFFIX}{n}"
    return candidate


def _encodable(value: str) -> str:
    r"""Return the value with what UTF-8 cannot encode (a lone surrogate, which a JSON `\ud800`
    escape decodes to) replaced. The exposition is encoded once per poll, and one such value
    would make the whole render fail."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode(errors="replace").decode()
    return value


def allowlist_filter(patterns: Iterable[str]) -> KeyFilter:
    """Return dcgm-exporter's key filter of `--kubernetes-pod-label-allowlist-regex`: a key
    passes when any pattern matches anywhere in it (patterns are not anchored). A pattern that
    does not compile is logged and skipped; with no usable pattern (none given, or none compiled)
    every key passes, as upstream does. Patterns are Python regexes; RE2's common syntax means
    the same in them."""
    compiled: list[re.Pattern[str]] = []
    given = list(patterns)
    for pattern in given:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            log.warning("pod label allow-list pattern %r skipped: %s", pattern, exc)
    if given and not compiled:
        log.warning("no pod label allow-list pattern compiled: copying every pod label")
    if not compiled:
        return lambda _key: True
    return lambda key: any(p.search(key) for p in compiled)


def _any_of(filters: Iterable[KeyFilter]) -> KeyFilter:
    chosen = tuple(filters)
    return lambda key: any(f(key) for f in chosen)


@dataclass(frozen=True, slots=True)
class LabelNote:
    """A pod label not copied under the name its key gives."""

    key: str
    """The pod label key, as on the pod."""
    name: str
    """The label name its key gives."""
    reason: str
    """RENAMED, DUPLICATE or INVALID."""
    renamed_to: str = ""
    """With RENAMED: the name it is copied under."""


@dataclass(frozen=True, slots=True)
class _Copy:
    prefix: str
    selects: KeyFilter


class PodLabelRules:
    """Which of a pod's labels go onto its series, and under which names."""

    def __init__(
        self,
        *,
        uid: bool = False,
        prefixed: str | None = None,
        unprefixed: KeyFilter | None = None,
    ) -> None:
        """Hold two key filters: `prefixed` is our regex (keys matching it in full become
        `label_<key>`), and `unprefixed` is dcgm-exporter's key filter (keys passing it keep
        their name)."""
        self.uid = uid
        copies: list[_Copy] = []
        if prefixed:
            allow = re.compile(prefixed)
            copies.append(_Copy("label_", lambda key: allow.fullmatch(key) is not None))
        if unprefixed is not None:
            copies.append(_Copy("", unprefixed))
        self._copies = tuple(copies)

    @classmethod
    def from_config(cls, config: KubernetesConfig) -> PodLabelRules:
        """Return the rules that the Kubernetes settings ask for."""
        filters: list[KeyFilter] = []
        if config.enable_pod_labels:
            filters.append(allowlist_filter(config.pod_label_allowlist))
        if config.pod_label_presets:
            filters.append(preset_filter(config.pod_label_presets))
        return cls(
            uid=bool(config.pod_labels) or config.enable_pod_uid,
            prefixed=config.pod_labels,
            # One unprefixed copy for both: a key both select must not count as a duplicate.
            unprefixed=_any_of(filters) if filters else None,
        )

    @property
    def copies_labels(self) -> bool:
        """Return whether any pod labels are copied onto series."""
        return bool(self._copies)

    @property
    def labels_anything(self) -> bool:
        """Return whether the rules add any label at all (the pod UID or copied pod labels)."""
        return self.uid or self.copies_labels

    def apply(self, uid: str, pod_labels: Mapping[str, str]
              ) -> tuple[Labels, tuple[LabelNote, ...]]:
        """Return the labels to add after `pod` (`pod_uid`, then the copied labels sorted by
        name), and notes on the pod labels renamed or left out because of their name."""
        taken: dict[str, str] = {}
        notes: list[LabelNote] = []
        colliding: list[tuple[str, str]] = []
        for copy in self._copies:
            named: set[str] = set()
            for key in sorted(pod_labels):
                if not copy.selects(key):
                    continue
                name = series_label_name(key, copy.prefix)
                if not name:
                    notes.append(LabelNote(key, name, INVALID))
                elif name in named:
                    notes.append(LabelNote(key, name, DUPLICATE))
                elif is_reserved(name) or name in taken:
                    named.add(name)
                    colliding.append((key, name))
                else:
                    named.add(name)
                    taken[name] = _encodable(pod_labels[key])
        # Then the taken names, each against everything copied before it.
        for key, name in colliding:
            new_name = renamed(name, lambda n: is_reserved(n) or n in taken)
            taken[new_name] = _encodable(pod_labels[key])
            notes.append(LabelNote(key, name, RENAMED, new_name))
        pairs: list[tuple[str, str]] = [(label_registry.POD_UID, _encodable(uid))
                                        ] if self.uid and uid else []
        pairs += [(name, value) for name, value in sorted(taken.items()) if value != ""]
        return tuple(pairs), tuple(notes)
