"""The node page's view of one poll (`exporter.nodepage.build`): what each card
holds, where each value comes from, and what a pod-scoped view leaves out."""

from __future__ import annotations

from dataclasses import replace

from exporter.devices.model import Entity, Inventory, MigDevice, Readings, XidTotal
from exporter.fields.csv import parse_collectors
from exporter.k8s.types import Attribution, PodRef
from exporter.nodepage.build import node_view
from exporter.nodepage.view import GpuView, Holder, NodeView
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import (
    KUBELET_UP,
    NVML_ERRORS,
    NVML_UP,
    POD_GPU_ALLOCATION,
    POD_GPU_MEMORY_USED,
    POD_GPU_SM_UTILIZATION,
)
from exporter.series import Family

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, t
DCGM_FI_DEV_POWER_USAGE, gauge, p
DCGM_FI_DEV_POWER_MGMT_LIMIT, gauge, l
DCGM_FI_DEV_SM_CLOCK, gauge, c
DCGM_FI_DEV_GPU_UTIL, gauge, u
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, g
DCGM_FI_DEV_FB_USED, gauge, f
DCGM_FI_DEV_FB_FREE, gauge, f
DCGM_FI_DEV_FB_RESERVED, gauge, f
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, r
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, e
DCGM_FI_DEV_PCIE_TX_THROUGHPUT, counter, not served
"""

GPU0 = Entity(0, "GPU-aaaaaaaa-0000", "00000000:83:00.0", "nvidia0", "NVIDIA H200")
GPU1 = Entity(1, "GPU-bbbbbbbb-1111", "00000000:84:00.0", "nvidia1", "NVIDIA H200")
GPU2 = Entity(2, "GPU-cccccccc-2222", "00000000:A3:00.0", "nvidia2", "NVIDIA H200")
GI2 = Entity(0, GPU0.uuid, GPU0.pci_bus_id, "nvidia0", "NVIDIA H200", 2, "3g.71gb",
             (MigDevice("MIG-a", 2, 0, "NVIDIA H200 MIG 1c.3g.71gb"),
              MigDevice("MIG-b", 2, 1, "NVIDIA H200 MIG 2c.3g.71gb")))
GI9 = Entity(0, GPU0.uuid, GPU0.pci_bus_id, "nvidia0", "NVIDIA H200", 9, "1g.18gb",
             (MigDevice("MIG-c", 9, 0, "NVIDIA H200 MIG 1g.18gb"),))

ALICE = PodRef("llm-a", "inference", "server")


def _snapshot(**kw: object) -> Snapshot:
    base: dict[str, object] = dict(
        inventory=Inventory((GPU0, GPU1), (GI2, GI9), "590.48.01"),
        readings=Readings(values={
            (0, -1): {"DCGM_FI_DEV_GPU_TEMP": 37.0, "DCGM_FI_DEV_POWER_USAGE": 291.5,
                      "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0, "DCGM_FI_DEV_SM_CLOCK": 1980.0,
                      "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(0x001 | 0x020),
                      "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0},
            (0, 2): {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.64, "DCGM_FI_DEV_FB_USED": 10400.0,
                     "DCGM_FI_DEV_FB_FREE": 61024.0, "DCGM_FI_DEV_FB_RESERVED": 0.0},
            (0, 9): {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.1},
            (1, -1): {"DCGM_FI_DEV_GPU_UTIL": 35.0, "DCGM_FI_DEV_FB_USED": 1000.0,
                      "DCGM_FI_DEV_GPU_TEMP": 40.0},
        }, known={GPU2.key: GPU2},
            xid_totals=(XidTotal((2, -1), 79, 1, 1.7e9), XidTotal((0, 9), 43, 2, 1.6e9),
                        XidTotal((0, 9), 13, 1, 1.5e9))),
        collectors=parse_collectors(CSV, "c.csv"),
        host=HostLabel("Hostname", "node-a"),
        attribution=Attribution(owners={GI9.key: ALICE}),
        taken_at=1.75e9,
    )
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def _row(gpu: int, gi: int | None, pod: str, replica: str | None = None) -> tuple[
        tuple[str, str], ...]:
    labels = [("gpu", str(gpu)), ("UUID", "GPU-x")]
    if gi is not None:
        labels.append(("GPU_I_ID", str(gi)))
    labels += [("pod", pod), ("namespace", "inference"), ("container", "server"),
               ("resource", "nvidia.com/gpu")]
    if replica is not None:
        labels.append(("replica", replica))
    return tuple(labels)


def _families(*extra: Family) -> list[Family]:
    return [
        NVML_UP.single(1.0),
        NVML_ERRORS.family((NVML_ERRORS.sample(3.0, function="nvmlGpmMetricsGet",
                                               code="NOT_SUPPORTED"),)),
        KUBELET_UP.single(1.0),
        POD_GPU_ALLOCATION.family((
            POD_GPU_ALLOCATION.sample(1.0, **dict(_row(0, 2, "llm-b"))),
            POD_GPU_ALLOCATION.sample(1.0, **dict(_row(0, 2, "llm-c"))),
        )),
        *extra,
    ]


def _view(snapshot: Snapshot | None = None, families: list[Family] | None = None) -> NodeView:
    return node_view(snapshot or _snapshot(), PollStats(collect_interval_s=15.0),
                     _families() if families is None else families, "sim")


def _gpu(view: NodeView, index: int) -> GpuView:
    (card,) = [g for g in view.gpus if g.gpu == index]
    return card


def test_mig_instances_are_sized_by_their_slices_and_held_by_their_pods() -> None:
    gpu0 = _gpu(_view(), 0)
    assert gpu0.state == "ok"
    assert gpu0.mig_slices == 7
    gi2, gi9 = gpu0.instances
    assert (gi2.gpu_instance_id, gi2.profile, gi2.slices, gi2.compute_slices) == (
        2, "3g.71gb", 3, (1, 2))
    assert (gi9.slices, gi9.compute_slices) == (1, (1,))
    # GI 2's compute instances went to two pods: shared, each listed; GI 9 has one owner.
    assert gi2.sharing == "shared"
    assert [h.pod for h in gi2.holders] == ["llm-b", "llm-c"]
    assert gi9.sharing == "exclusive"
    assert gi9.holders == (Holder("inference", "llm-a", "server"),)
    assert gi2.memory is not None
    assert (gi2.memory.used_mib, gi2.memory.total_mib) == (10400.0, 71424.0)
    # A MIG GPU has no activity or framebuffer of its own: absent, never 0.
    assert gpu0.activity is None
    assert gpu0.memory is None


def test_activity_is_gpm_where_served_else_gpu_util_and_says_which() -> None:
    view = _view()
    gi2 = _gpu(view, 0).instances[0]
    assert gi2.activity is not None
    assert (gi2.activity.source, gi2.activity.ratio) == ("gpm", 0.64)
    gpu1 = _gpu(view, 1)
    assert gpu1.activity is not None
    assert (gpu1.activity.source, gpu1.activity.ratio) == ("nvml", 0.35)
    assert gpu1.activity.field == "DCGM_FI_DEV_GPU_UTIL"


def test_activity_of_a_gpu_without_gpm_is_nvmls_even_as_a_prof_field() -> None:
    # The counterpart: DCGM_FI_PROF_GR_ENGINE_ACTIVE on a GPU whose GPM is unsupported.
    base = _snapshot()
    values = dict(base.readings.values)
    values[(1, -1)] = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.42, "DCGM_FI_DEV_GPU_UTIL": 40.0}
    readings = replace(base.readings, values=values, gpm_support={1: "unsupported"})
    gpu1 = _gpu(_view(replace(base, readings=readings)), 1)
    assert gpu1.activity is not None
    assert (gpu1.activity.source, gpu1.activity.ratio) == ("nvml", 0.42)
    assert gpu1.activity.field == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def test_values_the_poll_did_not_read_are_absent() -> None:
    gpu0, gpu1 = _gpu(_view(), 0), _gpu(_view(), 1)
    assert (gpu0.temperature_c, gpu0.power_w, gpu0.power_limit_w) == (37.0, 291.5, 700.0)
    assert gpu1.power_w is None
    assert gpu1.clock_events is None
    assert gpu1.memory is not None
    assert gpu1.memory.total_mib is None  # no FB_FREE: no total made up from FB_USED
    assert gpu0.memory_temperature_c is None  # not in the collectors file
    assert gpu0.ecc_dbe == 0.0
    assert gpu0.ecc_sbe is None


def test_active_clock_event_reasons_are_decoded_by_dcgm_exporter_names() -> None:
    assert _gpu(_view(), 0).clock_events == ("gpu_idle", "sw_thermal")


def test_fields_named_by_an_alias_are_read_under_that_name() -> None:
    collectors = parse_collectors("dcgm_gpu_temp, gauge, t\n"
                                  "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\n", "old.csv")
    readings = Readings(values={(1, -1): {"dcgm_gpu_temp": 44.0,
                                          "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4.0}})
    gpu1 = _gpu(_view(_snapshot(collectors=collectors, readings=readings)), 1)
    assert gpu1.temperature_c == 44.0
    assert gpu1.clock_events == ("power_cap",)


def test_the_clock_event_counters_listed_first_leave_the_reasons_read() -> None:
    # Both counters read the reasons' bitmask, as the reasons' own row does, but neither is
    # served under the reasons' name: listed before it, they must not take its place.
    collectors = parse_collectors("DCGM_EXP_CLOCK_EVENTS_TOTAL, counter, t\n"
                                  "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, c\n"
                                  "DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, r\n", "events.csv")
    readings = Readings(values={(1, -1): {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 4.0}})
    gpu1 = _gpu(_view(_snapshot(collectors=collectors, readings=readings)), 1)
    assert gpu1.clock_events == ("power_cap",)


def test_a_lost_gpu_keeps_its_card_marked_lost_with_its_last_xid() -> None:
    view = _view()
    gpu2 = _gpu(view, 2)
    assert gpu2.state == "lost"
    assert gpu2.uuid == GPU2.uuid
    assert gpu2.xid is not None
    assert (gpu2.xid.xid, gpu2.xid.at) == (79, 1.7e9)
    assert gpu2.temperature_c is None
    # On GPU 0 the most recent XID is the one shown, with the instance it came from.
    gpu0 = _gpu(view, 0)
    assert gpu0.xid is not None
    assert (gpu0.xid.xid, gpu0.xid.gpu_instance_id, gpu0.xid_events) == (43, 9, 3)


def test_pod_scope_shows_only_the_pods_instance_and_nothing_node_wide() -> None:
    scoped = Attribution(owners={}, visible=frozenset({GI2.key}))
    families = [NVML_UP.single(1.0), KUBELET_UP.single(1.0), POD_GPU_ALLOCATION.family((
        POD_GPU_ALLOCATION.sample(1.0, **dict(_row(0, 2, "llm-b"))),))]
    view = _view(_snapshot(attribution=scoped), families)
    (gpu0,) = view.gpus
    assert gpu0.state == "partial"
    assert [i.gpu_instance_id for i in gpu0.instances] == [2]
    # The GPU's own values are the whole card's: shaped by other tenants, not shown.
    assert (gpu0.temperature_c, gpu0.power_w, gpu0.clock_events) == (None, None, None)
    assert [h.pod for h in gpu0.instances[0].holders] == ["llm-b"]
    assert gpu0.xid is None  # GI 9's XIDs are another tenant's
    assert view.exporter.scope == "pod"
    assert view.exporter.nvml_errors is None
    served = {f.name: f.entities for f in view.exporter.fields_served}
    assert served["DCGM_FI_DEV_GPU_TEMP"] == 0
    assert served["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 1


def test_time_sliced_holders_carry_their_process_use() -> None:
    rows = POD_GPU_ALLOCATION.family(
        POD_GPU_ALLOCATION.sample(1.0, **dict(_row(1, None, pod, replica)))
        for pod, replica in (("emb-0", "0"), ("emb-1", "1")))
    memory = POD_GPU_MEMORY_USED.family((POD_GPU_MEMORY_USED.sample(
        2.0 * 1024 ** 3, gpu="1", UUID="GPU-x", pod="emb-0", namespace="inference",
        container="server"),))
    sm = POD_GPU_SM_UTILIZATION.family((POD_GPU_SM_UTILIZATION.sample(
        0.25, gpu="1", UUID="GPU-x", pod="emb-0", namespace="inference",
        container="server"),))
    families = [KUBELET_UP.single(1.0), rows, memory, sm]
    gpu1 = _gpu(_view(families=families), 1)
    assert gpu1.sharing == "shared"
    first, second = gpu1.holders
    assert (first.pod, first.replica, first.memory_mib, first.sm_ratio) == (
        "emb-0", "0", 2048.0, 0.25)
    # Not measured for this holder: absent, not 0.
    assert (second.memory_mib, second.sm_ratio) == (None, None)


def test_virtual_gpus_give_each_holder_its_split_scaled_as_metrics_shows_it() -> None:
    refs = (PodRef("emb-0", "inference", "server", (("vgpu", "0"),)),
            PodRef("emb-1", "inference", "server", (("vgpu", "1"),)))
    attribution = Attribution(sharers={(1, -1): refs}, split={(1, -1): {
        "DCGM_FI_DEV_FB_USED": (600.0, 600.0), "DCGM_FI_DEV_GPU_UTIL": (10.0, None)}})
    rows = POD_GPU_ALLOCATION.family(
        POD_GPU_ALLOCATION.sample(1.0, **dict(_row(1, None, pod, replica)))
        for pod, replica in (("emb-0", "0"), ("emb-1", "1")))
    gpu1 = _gpu(_view(_snapshot(attribution=attribution), [KUBELET_UP.single(1.0), rows]), 1)
    # The holders' 1200 MiB exceed the device's 1000: scaled down together, as /metrics.
    assert [(h.memory_mib, h.sm_ratio) for h in gpu1.holders] == [
        (500.0, 0.1), (500.0, None)]


def test_without_pod_attribution_nobody_is_said_to_hold_anything() -> None:
    view = _view(families=[NVML_UP.single(1.0)])
    gpu1 = _gpu(view, 1)
    assert (gpu1.sharing, gpu1.holders) == ("unknown", ())
    assert view.exporter.kubelet is None
    with_kubelet = _gpu(_view(families=[KUBELET_UP.single(1.0)]), 1)
    assert with_kubelet.sharing == "free"


def test_exporter_status_comes_from_the_polls_counters_and_families() -> None:
    stats = PollStats(collect_interval_s=15.0, last_duration_s=0.012, scrapes=4)
    stats.errors["deadline"] += 2
    view = node_view(_snapshot(), stats, _families(), "sim")
    ex = view.exporter
    assert (ex.backend, ex.scope, ex.host, ex.interval_s, ex.scrapes) == (
        "sim", "node", "node-a", 15.0, 4)
    assert ex.poll_errors == (("deadline", 2),)
    assert ex.nvml_up is True
    assert ex.nvml_errors is not None
    assert [(e.function, e.code, e.count) for e in ex.nvml_errors] == [
        ("nvmlGpmMetricsGet", "NOT_SUPPORTED", 3)]
    assert ex.kubelet is not None
    assert ex.kubelet.up
    assert ex.api_server is None
    served = {f.name: f.entities for f in ex.fields_served}
    assert served["DCGM_FI_DEV_GPU_TEMP"] == 2
    assert served["DCGM_FI_DEV_FB_USED"] == 2
    assert "DCGM_FI_DEV_PCIE_TX_THROUGHPUT" not in served
    (skipped,) = ex.fields_skipped
    assert "DCGM_FI_DEV_PCIE_TX_THROUGHPUT is not served" in skipped


def test_before_the_first_poll_the_view_is_empty() -> None:
    view = node_view(None, PollStats(collect_interval_s=15.0), [], "nvml")
    assert view.gpus == ()
    assert view.exporter.taken_at is None
    assert replace(view.exporter, version="x").backend == "nvml"
