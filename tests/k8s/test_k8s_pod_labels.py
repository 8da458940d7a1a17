"""Naming rules of pod labels copied onto series: ours (`label_<key>`) and dcgm-exporter's
(the bare sanitised key), allow-lists, and names a pod label may never take."""

from __future__ import annotations

import logging

import pytest

from exporter.devices.model import Readings, XidCount, XidTotal
from exporter.exposition.render import device_families
from exporter.fields.csv import parse_collectors
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import (
    DUPLICATE,
    RESERVED,
    PodLabelRules,
    allowlist_filter,
    is_reserved,
    sanitise_label_name,
)
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.selfmetrics import POD_GPU_ALLOCATION, POD_GPU_MEMORY_USED, POD_GPU_SM_UTILIZATION

from .k8s_helpers import mig_node


def dcgm_rules(*allowlist: str, uid: bool = False) -> PodLabelRules:
    return PodLabelRules.from_config(KubernetesConfig(
        enable_pod_labels=True, enable_pod_uid=uid, pod_label_allowlist=allowlist))


def test_dcgm_names_are_the_sanitised_key_without_prefix() -> None:
    labels, dropped = dcgm_rules().apply("uid-1", {
        "llm-d.ai/role": "decode", "app.kubernetes.io/name": "vllm", "team": "ml",
        "3scale.net/tier": "gold", "empty": ""})
    assert labels == (
        ("_3scale_net_tier", "gold"),  # a name may not start with a digit
        ("app_kubernetes_io_name", "vllm"),
        ("llm_d_ai_role", "decode"),
        ("team", "ml"),
    )
    assert dropped == ()
    assert sanitise_label_name("llm-d.ai/role") == "llm_d_ai_role"


def test_pod_uid_follows_its_own_switch() -> None:
    assert dcgm_rules(uid=True).apply("uid-1", {"team": "ml"})[0] == (
        ("pod_uid", "uid-1"), ("team", "ml"))
    only_uid = PodLabelRules.from_config(KubernetesConfig(enable_pod_uid=True))
    assert only_uid.apply("uid-1", {"team": "ml"})[0] == (("pod_uid", "uid-1"),)
    assert not only_uid.copies_labels
    assert only_uid.labels_anything
    # An unknown UID (pod not yet seen) is left out rather than shown empty.
    assert only_uid.apply("", {})[0] == ()
    nothing = PodLabelRules.from_config(KubernetesConfig())
    assert nothing.apply("uid-1", {"team": "ml"}) == ((), ())
    assert not nothing.labels_anything


def test_allowlist_is_any_unanchored_match() -> None:
    labels = {"app": "a", "application-tier": "t", "llm-d.ai/role": "r", "team": "ml"}
    copied, _ = dcgm_rules("^app$", "llm-d").apply("u", labels)
    assert [name for name, _ in copied] == ["app", "llm_d_ai_role"]
    # Unanchored: "app" matches inside "application-tier" too (as Go's MatchString does).
    copied, _ = dcgm_rules("app").apply("u", labels)
    assert [name for name, _ in copied] == ["app", "application_tier"]


def test_allowlist_skips_bad_patterns_and_falls_back_to_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "exporter.k8s.pod_labels")
    keep = allowlist_filter(["(unclosed", "^team$"])
    assert keep("team")
    assert not keep("role")
    assert "(unclosed" in caplog.text
    caplog.clear()
    every = allowlist_filter(["(unclosed"])
    assert every("team")
    assert every("role")
    assert "copying every pod label" in caplog.text
    assert allowlist_filter([])("anything")


def test_series_labels_are_never_replaced() -> None:
    labels = {"pod": "evil", "Hostname": "x", "GPU_I_ID": "9", "DCGM_FI_DRIVER_VERSION": "1",
              "vgpu": "7", "pod_uid": "forged", "dra_pool_name": "p", "a.b": "1", "a-b": "2",
              "ok": "yes"}
    copied, dropped = dcgm_rules(uid=True).apply("uid-1", labels)
    assert copied == (("pod_uid", "uid-1"), ("a_b", "2"), ("ok", "yes"))
    assert {(d.key, d.reason) for d in dropped} == {
        ("pod", RESERVED), ("Hostname", RESERVED), ("GPU_I_ID", RESERVED),
        ("DCGM_FI_DRIVER_VERSION", RESERVED), ("vgpu", RESERVED), ("pod_uid", RESERVED),
        ("dra_pool_name", RESERVED), ("a.b", DUPLICATE),
    }


def test_both_ways_together_share_one_uid_and_never_collide() -> None:
    rules = PodLabelRules.from_config(KubernetesConfig(
        pod_labels="team", enable_pod_labels=True, pod_label_allowlist=("team", "label_team")))
    copied, dropped = rules.apply("u", {"team": "ml", "label_team": "other"})
    assert copied == (("pod_uid", "u"), ("label_team", "ml"), ("team", "ml"))
    assert [(d.key, d.name, d.reason) for d in dropped] == [
        ("label_team", "label_team", DUPLICATE)]


def test_every_label_the_exposition_writes_is_reserved() -> None:
    """A pod label may not take a name the exporter itself puts on a series or on a family
    pod labels go on; this fails when a new label is added without reserving it."""
    inventory = mig_node()
    keys = [e.key for e in (*inventory.gpus, *inventory.instances)]
    collectors = parse_collectors(
        "DCGM_FI_DEV_FB_USED, gauge, FB.\nDCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs.\n"
        "DCGM_FI_DRIVER_VERSION, label, Driver.\n", "t.csv")
    attribution = Attribution(
        owners={(0, -1): PodRef("p", "ns", "c", (("pod_uid", "u"),))},
        sharers={(1, 2): (PodRef("q", "ns", "c", (("pod_uid", "v"), ("vgpu", "1"))),
                          PodRef("r", "ns", "c"))})
    names: set[str] = set()
    for host in ("Hostname", "hostname"):
        snapshot = Snapshot(
            inventory,
            Readings(values={k: {"DCGM_FI_DEV_FB_USED": 1.0} for k in keys},
                     xid_window=tuple(XidCount(k, 79, 1) for k in keys),
                     xid_totals=tuple(XidTotal(k, 79, 1, 1.0) for k in keys),
                     xid_window_s=300.0),
            collectors, HostLabel(host, "node-a"), attribution)
        for fam in device_families(snapshot):
            names |= {name for s in fam.samples for name, _ in s.labels}
    for metric in (POD_GPU_ALLOCATION, POD_GPU_MEMORY_USED, POD_GPU_SM_UTILIZATION):
        names |= set(metric.labels)
    assert {"GPU_I_PROFILE", "vgpu", "xid", "window_size_in_ms", "resource"} <= names
    assert [n for n in sorted(names) if not is_reserved(n)] == []
