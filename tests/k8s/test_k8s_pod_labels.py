"""Naming rules of pod labels copied onto series: ours (`label_<key>`) and dcgm-exporter's
(the bare sanitised key), allow-lists, and the renaming of a pod label whose name is one of
the series' own (dcgm-exporter 4.8.3's `pod_label_<name>[_conflict<N>]`)."""

from __future__ import annotations

import logging

import pytest

from exporter.devices.model import Readings, XidCount, XidTotal
from exporter.exposition.render import device_families
from exporter.fields.csv import parse_collectors
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import (
    DUPLICATE,
    INVALID,
    RENAMED,
    PodLabelRules,
    allowlist_filter,
    is_reserved,
    renamed,
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


def test_series_labels_are_never_replaced_but_renamed() -> None:
    labels = {"pod": "evil", "Hostname": "x", "GPU_I_ID": "9", "DCGM_FI_DRIVER_VERSION": "1",
              "vgpu": "7", "pod_uid": "forged", "dra_pool_name": "p", "a.b": "1", "a-b": "2",
              "ok": "yes", "err_code": "e"}
    copied, notes = dcgm_rules(uid=True).apply("uid-1", labels)
    assert copied == (
        ("pod_uid", "uid-1"),
        ("a_b", "2"),
        ("ok", "yes"),
        ("pod_label_DCGM_FI_DRIVER_VERSION", "1"),
        ("pod_label_GPU_I_ID", "9"),
        ("pod_label_Hostname", "x"),
        ("pod_label_dra_pool_name", "p"),
        ("pod_label_err_code", "e"),
        ("pod_label_pod", "evil"),
        ("pod_label_pod_uid", "forged"),
        ("pod_label_vgpu", "7"),
    )
    assert {(d.key, d.reason, d.renamed_to) for d in notes} == {
        ("pod", RENAMED, "pod_label_pod"), ("Hostname", RENAMED, "pod_label_Hostname"),
        ("GPU_I_ID", RENAMED, "pod_label_GPU_I_ID"),
        ("DCGM_FI_DRIVER_VERSION", RENAMED, "pod_label_DCGM_FI_DRIVER_VERSION"),
        ("vgpu", RENAMED, "pod_label_vgpu"), ("pod_uid", RENAMED, "pod_label_pod_uid"),
        ("dra_pool_name", RENAMED, "pod_label_dra_pool_name"),
        ("err_code", RENAMED, "pod_label_err_code"), ("a.b", DUPLICATE, ""),
    }


def test_a_taken_new_name_gets_the_next_conflict_suffix() -> None:
    """dcgm-exporter's order: free names first, then each taken one (in key order) against
    everything copied so far."""
    labels = {"pod": "1", "pod_label_pod": "2", "pod_label_pod_conflict1": "3",
              "gpu": "4", "pod_label_gpu_conflict1": "5"}
    copied, notes = dcgm_rules().apply("u", labels)
    assert dict(copied) == {
        "pod_label_pod": "2", "pod_label_pod_conflict1": "3", "pod_label_pod_conflict2": "1",
        "pod_label_gpu": "4", "pod_label_gpu_conflict1": "5"}
    assert [(d.key, d.renamed_to) for d in notes] == [
        ("gpu", "pod_label_gpu"), ("pod", "pod_label_pod_conflict2")]
    taken = {"pod_label_x", "pod_label_x_conflict1"}
    assert renamed("x", taken.__contains__) == "pod_label_x_conflict2"
    assert renamed("x", lambda _n: False) == "pod_label_x"


def test_names_only_label_less_self_metrics_use_stay_free() -> None:
    """`version`, `kind`, `code` never sit beside pod labels: copied as they are, as
    dcgm-exporter copies them."""
    copied, notes = dcgm_rules().apply("u", {"version": "v1", "kind": "k", "code": "c"})
    assert copied == (("code", "c"), ("kind", "k"), ("version", "v1"))
    assert notes == ()


def test_the_empty_key_is_dropped() -> None:
    copied, notes = dcgm_rules().apply("u", {"": "x", "ok": "1"})
    assert copied == (("ok", "1"),)
    assert [(d.key, d.reason) for d in notes] == [("", INVALID)]


def test_both_ways_together_share_one_uid_and_never_collide() -> None:
    rules = PodLabelRules.from_config(KubernetesConfig(
        pod_labels="team", enable_pod_labels=True, pod_label_allowlist=("team", "label_team")))
    copied, notes = rules.apply("u", {"team": "ml", "label_team": "other"})
    # Ours makes `label_team` of `team`; dcgm-exporter's copy of the key `label_team` finds
    # that name taken and is renamed.
    assert copied == (("pod_uid", "u"), ("label_team", "ml"),
                      ("pod_label_label_team", "other"), ("team", "ml"))
    assert [(d.key, d.name, d.reason) for d in notes] == [
        ("label_team", "label_team", RENAMED)]


def test_every_label_the_exposition_writes_is_reserved() -> None:
    """A pod label may not take a name the exporter itself puts on a series or on a family
    pod labels go on; this fails when a new label is added without reserving it."""
    inventory = mig_node()
    keys = [e.key for e in (*inventory.gpus, *inventory.instances)]
    collectors = parse_collectors(
        "DCGM_FI_DEV_FB_USED, gauge, FB.\nDCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs.\n"
        "DCGM_FI_DEV_XID_ERRORS, gauge, Last XID.\n"
        "DCGM_FI_DRIVER_VERSION, label, Driver.\n", "t.csv")
    attribution = Attribution(
        owners={(0, -1): PodRef("p", "ns", "c", (("pod_uid", "u"),))},
        sharers={(1, 2): (PodRef("q", "ns", "c", (("pod_uid", "v"), ("vgpu", "1"))),
                          PodRef("r", "ns", "c"))})
    names: set[str] = set()
    for host in ("Hostname", "hostname"):
        snapshot = Snapshot(
            inventory,
            Readings(values={k: {"DCGM_FI_DEV_FB_USED": 1.0, "DCGM_FI_DEV_XID_ERRORS": 79.0}
                             for k in keys},
                     xid_window=tuple(XidCount(k, 79, 1) for k in keys),
                     xid_totals=tuple(XidTotal(k, 79, 1, 1.0) for k in keys),
                     xid_window_s=300.0),
            collectors, HostLabel(host, "node-a"), attribution)
        for fam in device_families(snapshot):
            names |= {name for s in fam.samples for name, _ in s.labels}
    for metric in (POD_GPU_ALLOCATION, POD_GPU_MEMORY_USED, POD_GPU_SM_UTILIZATION):
        names |= set(metric.labels)
    assert {"GPU_I_PROFILE", "vgpu", "xid", "window_size_in_ms", "resource", "err_code",
            "err_msg"} <= names
    assert [n for n in sorted(names) if not is_reserved(n)] == []
