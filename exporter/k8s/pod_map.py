"""The in-memory map of this node's pods that enrichment keeps: (namespace, pod) -> the labels
its series get, its UID and its containers' runtime ids.

Filled from pod objects as the API server serves them (JSON mappings): by the watch in
`exporter.k8s.pod_metadata`, or, on the simulated node, by `exporter.simulated.pods`. Scrapes
and polls only read it. Writers replace whole maps, so a reader on another thread sees either
the old or the new state, never a half update.

Pure: no `kubernetes` import.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.k8s.pod_labels import DUPLICATE, INVALID, RENAMED, LabelNote, PodLabelRules
from exporter.selfmetrics import POD_LABELS_DROPPED, POD_LABELS_RENAMED
from exporter.series import Family, Labels

log = logging.getLogger(__name__)

PodObject = Mapping[str, Any]
"""A Pod as the API server serves it (`metadata`, `status`), decoded from JSON."""

_DROPPED_MEMORY = 4096
"""Distinct renamed or dropped pod label keys remembered (so each is logged once);
bounded because label keys are chosen by every tenant of the cluster."""


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the map keeps of one pod: the labels its series get, its UID, and its containers."""

    labels: Labels
    """What goes on series: pod_uid and allow-listed labels (empty when not labelling)."""
    uid: str
    containers: Mapping[str, str]
    """Container names by container runtime id (without the `containerd://` scheme)."""


def _container_ids(status: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    # Native sidecars are init containers; they can hold GPUs too.
    for key in ("containerStatuses", "initContainerStatuses"):
        for item in status.get(key) or []:
            cid = str(item.get("containerID") or "")
            if cid:
                out[cid.rpartition("://")[2]] = str(item.get("name", ""))
    return out


class PodMap:
    """The records of this node's pods by namespace and pod name, with the pod label rules
    applied once per pod event."""

    def __init__(self, rules: PodLabelRules) -> None:
        self._rules = rules
        self._pods: dict[tuple[str, str], PodRecord] = {}
        self._by_uid: dict[str, tuple[str, str]] = {}
        self._dropped_seen: set[tuple[str, str]] = set()
        self._dropped: dict[str, int] = {DUPLICATE: 0, INVALID: 0}
        self._renamed = 0

    # -- reading --------------------------------------------------------------------------

    def labels_for(self, namespace: str, pod: str) -> Labels:
        """Return the labels that series attributed to this pod get (empty for an unknown pod)."""
        record = self._pods.get((namespace, pod))
        return record.labels if record is not None else ()

    def container_of(self, pod_uid: str, container_id: str) -> tuple[str, str, str] | None:
        """Return the namespace, pod and container name of a running container, by pod UID and
        runtime id, or None when it is unknown."""
        key = self._by_uid.get(pod_uid)
        record = self._pods.get(key) if key is not None else None
        if key is None or record is None:
            return None
        name = record.containers.get(container_id)
        return None if name is None else (key[0], key[1], name)

    def families(self) -> list[Family]:
        """Return `gpu_exporter_pod_labels_dropped_total` and
        `gpu_exporter_pod_labels_renamed_total` while pod labels are copied."""
        if not self._rules.copies_labels:
            return []
        return [POD_LABELS_DROPPED.family(
            POD_LABELS_DROPPED.sample(float(n), reason=reason)
            for reason, n in sorted(self._dropped.items())),
            POD_LABELS_RENAMED.single(float(self._renamed))]

    # -- writing --------------------------------------------------------------------------

    def replace_all(self, objects: Iterable[PodObject]) -> None:
        """Replace the map with the result of a list: these pods and no others."""
        self._publish(dict(self._entry(obj) for obj in objects))

    def upsert(self, obj: PodObject) -> None:
        """Add this pod to the map or replace its entry."""
        key, record = self._entry(obj)
        pods = dict(self._pods)
        pods[key] = record
        self._publish(pods)

    def remove(self, obj: PodObject) -> None:
        """Remove this pod from the map."""
        pods = dict(self._pods)
        pods.pop(_key(obj), None)
        self._publish(pods)

    def _publish(self, pods: dict[tuple[str, str], PodRecord]) -> None:
        self._by_uid = {r.uid: key for key, r in pods.items() if r.uid}
        self._pods = pods

    def _entry(self, obj: PodObject) -> tuple[tuple[str, str], PodRecord]:
        meta = obj.get("metadata") or {}
        key = _key(obj)
        uid = str(meta.get("uid", ""))
        labels, dropped = self._rules.apply(uid, meta.get("labels") or {})
        if dropped:
            self._note_dropped(key, dropped)
        containers = _container_ids(obj.get("status") or {})
        return key, PodRecord(labels, uid, containers)

    def _note_dropped(self, pod: tuple[str, str], notes: tuple[LabelNote, ...]) -> None:
        """Count and log each renamed or dropped key once per reason, whichever pods carry it."""
        for d in notes:
            if (d.key, d.reason) in self._dropped_seen:
                continue
            if len(self._dropped_seen) >= _DROPPED_MEMORY:
                self._dropped_seen.clear()
            self._dropped_seen.add((d.key, d.reason))
            if d.reason == RENAMED:
                self._renamed += 1
                log.info("pod label %r (first seen on %s/%s) copied as %r: its name %r is one "
                         "of the series' own labels", d.key, pod[0], pod[1], d.renamed_to,
                         d.name)
                continue
            self._dropped[d.reason] += 1
            why = ("is taken by another label of the pod" if d.reason == DUPLICATE
                   else "is not a label name")
            log.warning("pod label %r (first seen on %s/%s) not copied: its name %r %s",
                        d.key, pod[0], pod[1], d.name, why)


def _key(obj: PodObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


class ReadsPodMap:
    """The reading half of a pod-metadata source that keeps its pods in a pod map: the API
    server's watcher and the simulated node's demo pods answer the same questions from it."""

    _map: PodMap

    def labels_for(self, namespace: str, pod: str) -> Labels:
        """Return the labels that series attributed to this pod get (empty for an unknown pod)."""
        return self._map.labels_for(namespace, pod)

    def container_of(self, pod_uid: str, container_id: str) -> tuple[str, str, str] | None:
        """Return the namespace, pod and container name of a running container, by pod UID and
        runtime id, or None when it is unknown."""
        return self._map.container_of(pod_uid, container_id)
