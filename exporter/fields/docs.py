"""docs/metrics.md, generated from the field catalog and the self-metrics registry
(`python -m exporter.fields.docs [OUT]`)."""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from exporter.fields.catalog import CATALOG, FieldSpec, Reader, Scope
from exporter.fields.csv import EXPORTER_RENAMES, default_collectors_path, load_collectors
from exporter.fields.dcgm_names import Reason, dcgm_names
from exporter.fields.gpm_fallbacks import MEASURES, NO_COUNTERPART, SERVED
from exporter.fields.health_rules import ERROR_META, RESULT_NAMES, RULES, WATCHES
from exporter.selfmetrics import REGISTRY, XID_ERRORS, SelfMetric

_SCOPE_TEXT = {
    Scope.GPU: "physical GPU (on the parent GPU's series under MIG)",
    Scope.GPU_NO_MIG: "physical GPU; absent while MIG is enabled (NVML does not report it)",
    Scope.INSTANCE: "whole GPU without MIG; each MIG GPU instance with MIG",
    Scope.LINK: "each active NVLink of a GPU without MIG (`nvlink` label)",
    Scope.PEER: "each other GPU of the node (`link_status`, `peer_gpu` labels)",
}
_SCOPE_SHORT = {Scope.GPU: "GPU", Scope.GPU_NO_MIG: "GPU, not under MIG",
                Scope.INSTANCE: "GPU / MIG GPU instance", Scope.LINK: "NVLink",
                Scope.PEER: "GPU pair"}


def _source(spec: FieldSpec) -> str:
    if spec.reader is Reader.FIELD_VALUES:
        return f"`nvmlDeviceGetFieldValues` ({spec.part})"
    if spec.reader is Reader.GPM:
        served = SERVED.get(spec.name)
        return f"GPM metric {spec.part}" + (
            f"; without GPM {served.nvml} (see Before Hopper)" if served else "")
    if spec.reader is Reader.CALL:
        return f"`{spec.part}`"
    if spec.reader is Reader.HEALTH:
        return "DCGM's health rules over NVML values (see below)"
    counted = ("window", "total")  # what the XID ledger answers, not an attribute
    part = f" `.{spec.part}`" if isinstance(spec.part, str) and spec.part not in counted else ""
    return f"`{spec.reader.value}`{part}"


def _self_metric_row(metric: SelfMetric) -> str:
    meaning = f"{metric.help} {metric.note}" if metric.note else metric.help
    return (f"| `{metric.exposed_name}` | {metric.type} | {metric.label_text()} | "
            f"{meaning.replace('|', '&#124;')} |")


def _generated_section() -> list[str]:
    """Return the section listing the fields served through the generic readers, by canonical
    name and DCGM id."""
    table = dcgm_names()
    rows = [(f, f.generated) for f in table.fields if f.generated is not None]
    lines = [
        "## Other DCGM fields",
        "",
        f"{len(rows)} more DCGM fields (under {sum(len(f.names) for f, _ in rows)} names) are "
        "served by reading their NVML source as DCGM does, with DCGM's conversion; none is "
        "enabled in the default collectors file. They are derived from "
        "`tests/fixtures/dcgm-fields/dcgm-fields.csv` (see `tools/dcgm_recipes.py`). "
        "Any name of a field works (the table lists the canonical one and how many others "
        "there are); the series carry the name the collectors file gives. Sources: "
        "`nvmlDeviceGetFieldValues` entries as `id@scope` (`link`: the link's index, summed "
        "with `+`), GPM metric ids, or the pynvml call with its arguments (`h`: the device).",
        "",
        "| field | id | names | type | unit | source | conversion | scope |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for field, spec in rows:
        lines.append(
            f"| `{spec.name}` | {field.dcgm_id} | {len(field.names)} | {spec.type.value} | "
            f"{spec.unit or '-'} | {_source(spec)} | {spec.convert.value} | "
            f"{_SCOPE_SHORT[spec.scope]} |")
    return [*lines, ""]


def _unserved_section() -> list[str]:
    """Return the section listing what a collectors file may name but this exporter does not
    serve, grouped by reason."""
    unserved = dcgm_names().unserved()
    fields = Counter(f.reason for f in unserved)
    names = Counter(f.reason for f in unserved for _ in f.names)
    lines = [
        "## DCGM fields not served",
        "",
        "A collectors file may name a field by any of its DCGM names: the canonical name, an "
        "alias kept after the DCGM 4.6 renames, a dcgm-exporter 1.x name (`dcgm_gpu_temp`) or "
        "a `DCGM_EXP_*` name. A served field is exported under the name the file gives it, as "
        "dcgm-exporter does. So are dcgm-exporter 4.10's names for the PCIe and NVLink "
        "profiling rows, which no DCGM table here has: "
        + ", ".join(f"`{new}` (`{old}`)" for new, old in EXPORTER_RENAMES.items())
        + ", in bytes per second as before. A field this exporter does not serve is skipped "
        "with a warning naming its reason below; a name no table here knows (a newer "
        "release's field, or a typo) is skipped with a warning naming the file and line. The "
        "names come "
        "from `exporter/fields/dcgm-names.csv`, derived from "
        "`tests/fixtures/dcgm-fields/dcgm-fields.csv` by "
        "`python -m tools.derive_dcgm_names --write`.",
        "",
        "| reason | fields | names |",
        "|---|---|---|",
    ]
    lines += [f"| {reason.summary} | {fields[reason]} | {names[reason]} |"
              for reason in Reason if fields[reason]]
    lines += [f"| total | {fields.total()} | {names.total()} |", ""]
    by_call: dict[str, list[str]] = defaultdict(list)
    for field in unserved:
        if field.reason is Reason.NVML:
            function = re.match(r"\w+", field.nvml_source)
            by_call[function.group(0) if function else field.nvml_source].append(field.name)
    if not by_call:
        return [*lines, "Every field whose value NVML (or GPM) has on a GPU, a GPU or compute "
                "instance or an NVLink is served.", ""]
    lines += [
        "### NVML sources not read yet",
        "",
        "Fields whose value NVML has, but that this exporter does not read yet, by NVML call "
        "(canonical names; their other names resolve to them):",
        "",
    ]
    for call, call_fields in sorted(by_call.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- `{call}` ({len(call_fields)}): "
                     + ", ".join(f"`{name}`" for name in call_fields))
    return [*lines, ""]


def _before_hopper_section() -> list[str]:
    """Return the section on what GPUs without GPM serve in place of the GPM fields, and what the
    generated dashboards and alerts read where even that is absent."""
    lines = [
        "## Before Hopper",
        "",
        "GPM, the source of every `DCGM_FI_PROF_*` field, exists on Hopper and newer only. "
        "dcgm-exporter reads some of these fields on older datacenter GPUs (A100, A30, A10, "
        "L4, T4) through DCGM's own profiling module, one NVML does not expose. Where NVML "
        "measures the same quantity, this exporter serves the `DCGM_FI_PROF_*` row on a GPU "
        "without GPM (`gpu_exporter_gpm_supported` 0) from NVML instead, in DCGM's unit, on "
        "the whole GPU with MIG off; never on a GPU with GPM, whose GPM value stands. "
        "`--no-prof-counterparts` turns them all off. They differ from DCGM's in how they "
        "are sampled:",
        "",
        "| field | NVML source | sampling |",
        "|---|---|---|",
    ]
    lines += [f"| `{served.field}` | {served.nvml} | {served.sampling} |"
              for served in SERVED.values()]
    lines += [
        "",
        "A poll with nothing new to average, or a counter that wrapped, leaves the series out "
        "for that poll rather than repeat the last value, which would show activity that may "
        "have stopped. The other GPM fields ("
        + ", ".join(f"`{f}`" for f in sorted(NO_COUNTERPART))
        + ") have no NVML counterpart and no series before Hopper.",
        "",
        "The generated dashboards, alert and recording rules, KEDA objects and the usage "
        "report read each GPM measure, served by GPM or by the counterpart above, and, where "
        "it is absent (counterparts turned off, or dcgm-exporter on a GPU its profiling "
        "module skips), the NVML field below, matched per GPU (`... or on (UUID) ...`), so a "
        "GPU with both is counted once. A measure with neither has values where GPM or a "
        "counterpart serves it only; its dashboard panels say so instead of showing "
        "\"No data\".",
        "",
        "| measure | GPM fields | NVML field read where they are absent |",
        "|---|---|---|",
    ]
    for measure in MEASURES:
        gpm = " + ".join(f"`{f}`" for f in measure.gpm)
        instead = (measure.nvml.describe if measure.nvml is not None
                   else f"none: {measure.without}")
        lines.append(f"| {measure.meaning} ({measure.unit}) | {gpm} | {instead} |")
    return [
        *lines,
        "",
        "NVML reports no utilisation for MIG instances, so a MIG instance of a GPU before "
        "Hopper (A100, A30) has no activity measure at all: scale MIG workloads there on "
        "framebuffer or on their request queue. The GPM fields among the other DCGM fields "
        "below (source \"GPM metric\") likewise exist on Hopper and newer only.",
        "",
    ]


def _health_section() -> list[str]:
    """Return the section on DCGM_EXP_GPU_HEALTH_STATUS: each watch's rules and the NVML call
    that feeds them."""
    lines = [
        "## Health watches",
        "",
        "`DCGM_EXP_GPU_HEALTH_STATUS` has one series per GPU and health watch ("
        + ", ".join(f"`{w}`" for w in WATCHES) + "), labelled `health_watch`, "
        "`health_error_code`, `health_error_severity` and `health_error_category` after the "
        "GPU's labels, as dcgm-exporter 4.8.3 labels them; its value is DCGM's health "
        "result (0 PASS, 10 WARN, 20 FAIL). DCGM computes health in its engine; this "
        "exporter runs DCGM 4.6's rules (`modules/health/DcgmHealthWatch.cpp`) on the NVML "
        "values behind the fields DCGM watches, read only while the field is enabled. A "
        "watch with no rule firing is PASS with `DCGM_FR_OK` (severity and category "
        "`NONE`), also where NVML cannot tell (the call answers NOT_SUPPORTED). PMU, MCU "
        "and SM have no rule in DCGM 4.6 and always pass.",
        "",
        "Counters are compared over the last minute, as DCGM does when asked without a start "
        "time; XIDs count from the exporter's start (DCGM keeps them for its own lifetime), "
        "an XID filed on a MIG GPU instance counting for its GPU. dcgm-exporter shows one "
        "incident per watch; where several rules fire the worst result wins, and among "
        "equal results the later row below. Not derived: DCGM's NVLink5 BER and fabric "
        "health-mask checks, the retired-page-per-week rule, the uncorrectable row remap "
        "limit, power unreadable, and XID 93 (DCGM counts it on Volta only).",
        "",
        "| watch | NVML source | condition | result | `health_error_code` | severity | "
        "category |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule in RULES:
        severity, category = ERROR_META[rule.code]
        lines.append(f"| {rule.watch} | `{rule.source}` | {rule.condition} | "
                     f"{RESULT_NAMES[rule.result]} | `{rule.code}` | {severity} | "
                     f"{category} |")
    return [*lines, ""]


def render_markdown() -> str:
    """Return the text of docs/metrics.md."""
    enabled = load_collectors(default_collectors_path()).names
    lines = [
        "# Metrics",
        "",
        "Generated from `exporter/fields/catalog.py` and `exporter/selfmetrics.py` by "
        "`python -m exporter.fields.docs docs/metrics.md`; a test fails when this file "
        "drifts from them.",
        "",
        "Device series carry the labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, "
        "then `GPU_I_PROFILE` and `GPU_I_ID` on MIG GPU instances (the profile as NVML names "
        "it, `nvmlDeviceGetGpuInstanceProfileInfoByIdV`, as dcgm-exporter 4.8.4 does; the "
        "profile in the MIG device's name where NVML names none), then the host label "
        "(`hostname` as in dcgm-exporter 4.8.3 and later; `Hostname`, 4.8.2's, under "
        "`--hostname-label Hostname`), then label-type fields (`DCGM_FI_DRIVER_VERSION`), then "
        "`container`, `namespace`, `pod` when one container holds the device (with "
        "`pod_uid` under `--kubernetes-enable-pod-uid`, on the device-plugin, virtual-GPU "
        "and DRA paths alike, and the pod's copied labels).",
        "",
        "A copied pod label never repeats one of the series' own labels: one whose name is "
        "taken is copied as `pod_label_<name>`, then `pod_label_<name>_conflict1`, "
        "`_conflict2`, ... while that is taken too, as dcgm-exporter 4.8.3 renames it "
        "(`pod`, `gpu`, `hostname`, `err_code`, `DCGM_*`, ...: every name "
        "`exporter/label_registry.py` declares for a series that can carry pod labels).",
        "",
        "Link fields (`Scope.LINK`) have one series per active NVLink of a GPU (MIG off), "
        "labelled as dcgm-exporter labels link entities: `nvlink`, `gpu`, `gpu_uuid`, "
        "`pci_bus_id`, `device`, `model_name`, `hostname`, then label-type fields and pod "
        "labels as on the GPU's series.",
        "",
        "GPU-pair fields (`Scope.PEER`, `DCGM_EXP_P2P_STATUS`) have one series per other GPU "
        "of the node, on the GPU's labels followed by `link_status` (`OK`, "
        "`ChipsetNotSupported`, `GPUNotSupported`, `TopologyNotSupported`, "
        "`DisabledByRegKey`, `NotSupported`, `Unknown`) and `peer_gpu` (its index).",
        "",
        "A value NVML does not report (NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND) is "
        "omitted: there is no series, never a 0 in its place.",
        "",
        *_before_hopper_section(),
        "## Device fields",
        "",
        "| field | type | unit | default | NVML source | conversion | scope |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in CATALOG:
        lines.append(
            f"| `{spec.name}` | {spec.type.value} | {spec.unit or '-'} | "
            f"{'yes' if spec.name in enabled else 'no'} | {_source(spec)} | "
            f"{spec.convert.value} | {_SCOPE_TEXT[spec.scope]} |"
        )
    lines += [
        "",
        "Notes:",
        "",
        "- `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` is a counter of KiB (TX + RX over all links, "
        "as NVML accumulates them); use `rate()` and multiply by 1024 for bytes per second. "
        "So are all NVLink throughput fields (`DCGM_FI_DEV_NVLINK_THROUGHPUT_*`, "
        "`..._BANDWIDTH_L<n>`, `..._PER_LINK`), where DCGM stores a rate computed from the "
        "same counters ((delta KiB / delta s) / 1000, 0 on the first sample). "
        "dcgm-exporter 4.8.3's CSVs declare it a gauge (\"Aggregate NVLink throughput ... "
        "(in MB/s)\" in 4.8.4's): with such a file the series is typed gauge but still holds "
        "the KiB counter here, so `rate()` still applies.",
        "- Power limits are whole watts (DCGM divides the milliwatts as integers); power "
        "draw keeps its fraction.",
        "- GPM bandwidths (`DCGM_FI_PROF_*_BYTES`) keep the fraction of a byte per second "
        "that DCGM truncates.",
        "- `DCGM_FI_DEV_XID_ERRORS` is the last XID code seen (0: none since start), as in "
        f"dcgm-exporter; alert on `increase({XID_ERRORS.exposed_name}[..])` instead. As in "
        "dcgm-exporter, its series end with `err_code` (the code) and `err_msg` "
        "(dcgm-exporter's text for it, `exporter/fields/xid-messages.csv`: `No Error` for 0, "
        "`Unknown Error` past code 172).",
        "- `DCGM_EXP_XID_ERRORS_COUNT` carries `xid` and `window_size_in_ms` labels; an "
        "entity with no XID in the window has one series of 0 with `window_size_in_ms` and "
        "no `xid`, as dcgm-exporter shows it.",
        "- `DCGM_EXP_XID_ERRORS_TOTAL` (dcgm-exporter 4.8.3) counts the XIDs of each entity "
        "by code (`xid`) since the exporter started; a code has no series before it is "
        "seen, and there is no window label.",
        "- `DCGM_EXP_CLOCK_EVENTS_TOTAL` (dcgm-exporter 4.8.3) counts, per GPU and reason "
        "(`clock_event`), how often the reason turned on since the exporter started: the "
        "first poll of a GPU is the baseline, each later one adds 1 for every reason bit "
        "set now and clear the poll before. A reason that never turned on has no series. "
        "Both totals carry on across a reload of the collectors file (dcgm-exporter starts "
        "them again when it rebuilds its collectors); a restart starts them from 0.",
        "- `DCGM_EXP_CLOCK_EVENTS_COUNT` counts, per GPU and clock event reason (`clock_event`, "
        "named as dcgm-exporter names the reason bits: `power_cap`, `sw_thermal`, ...), the "
        "polls within the window (`window_size_in_ms`) that found the reason active; a reason "
        "not seen in the window has no series, and a GPU with no reading in the window (the "
        "bitmask unsupported there) has one series of 0 without `clock_event`, as "
        "dcgm-exporter shows a GPU it has no sample of.",
        "- Both windowed counts, like every device series, are repeated per job with an "
        "`hpc_job` label where `--hpc-job-mapping-dir` lists jobs for the device.",
        "- In OpenMetrics exposition, DCGM counters are typed `unknown` so that they keep "
        "their dcgm names (OpenMetrics would otherwise require a `_total` suffix, lowercase: "
        "`DCGM_EXP_XID_ERRORS_TOTAL` does not satisfy it either). The text format types "
        "them `counter`.",
        "",
        *_health_section(),
        *_generated_section(),
        *_unserved_section(),
        "## Self-metrics",
        "",
        "Declared in `exporter/selfmetrics.py`. Labels: *device labels* are a device's "
        "labels as on its DCGM series; `[...]` marks labels that some series lack; "
        "`label_<key>...` stands for one label per allow-listed pod label.",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    lines += [_self_metric_row(m) for m in REGISTRY]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Write docs/metrics.md to the path given, or to standard output without one; return the exit
    status."""
    text = render_markdown()
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
