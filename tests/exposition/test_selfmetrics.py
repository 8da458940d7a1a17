"""The self-metrics registry against what is really emitted, documented and queried.

Every `gpu_exporter_*` family a running exporter puts on /metrics must be declared in
`exporter.selfmetrics` and listed in docs/metrics.md, and every declared one must show up on
some simulated node; every such name the committed dashboards, alerts and KEDA objects query
must be declared too.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.publisher import Publisher
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.sampling.config import SamplerSettings
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from exporter.selfmetrics import (
    EXPOSED_NAMES,
    NVML_ERRORS,
    POD_GPU_ALLOCATION,
    REGISTRY,
    XID_ERRORS,
    LabelMismatch,
    SelfMetric,
)
from exporter.series import Sample
from exporter.simulated.node import PROFILES, SimNvml, parse_fault, profile_names
from tests.conftest import ROOT, ExporterProcess, free_port
from tests.support.wait import wait_until

_NAME = re.compile(r"\bgpu_exporter_[a-zA-Z0-9_]+")
_TYPE_LINE = re.compile(r"^# TYPE (gpu_exporter_\S+) (\S+)$", re.MULTILINE)


def documented_self_metrics() -> set[str]:
    """Metric names in the first column of docs/metrics.md's self-metrics table."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    section = text.split("## Self-metrics", 1)[1]
    return set(re.findall(r"^\| `(gpu_exporter_[^`]+)` \|", section, re.MULTILINE))


# --- declarations ------------------------------------------------------------------------


def test_names_are_declared_once_and_exposed_as_the_renderer_does() -> None:
    names = [m.name for m in REGISTRY]
    assert len(names) == len(set(names))
    assert NVML_ERRORS.exposed_name == "gpu_exporter_nvml_errors_total"
    assert POD_GPU_ALLOCATION.exposed_name == POD_GPU_ALLOCATION.name


def test_every_declaration_is_registered() -> None:
    import exporter.selfmetrics as module

    declared = {v for v in vars(module).values() if isinstance(v, SelfMetric)}
    assert declared == set(REGISTRY)


def test_the_docs_list_every_declared_metric() -> None:
    assert documented_self_metrics() == EXPOSED_NAMES


def test_samples_labelled_otherwise_than_declared_are_refused() -> None:
    good = NVML_ERRORS.sample(1.0, function="nvmlInit", code="ERROR_UNKNOWN")
    assert NVML_ERRORS.family([good]).samples == (good,)
    with pytest.raises(LabelMismatch, match="gpu_exporter_nvml_errors"):
        NVML_ERRORS.family([NVML_ERRORS.sample(1.0, code="ERROR_UNKNOWN", function="nvmlInit")])
    with pytest.raises(LabelMismatch):
        NVML_ERRORS.single(1.0, function="nvmlInit")


def test_optional_and_enrichment_labels() -> None:
    row = (("gpu", "0"), ("UUID", "GPU-a"), ("pod", "p"), ("namespace", "n"),
           ("container", "c"), ("resource", "nvidia.com/gpu"))
    POD_GPU_ALLOCATION.family([
        Sample(row, 1.0),
        Sample((*row[:2], ("GPU_I_ID", "3"), *row[2:], ("replica", "1")), 1.0),
        Sample((*row, ("pod_uid", "u"), ("label_team", "ml")), 1.0),
        Sample((*row, ("pod_uid", "u"), ("team", "ml")), 1.0),  # dcgm-exporter's naming
    ])
    for wrong in (row[1:], (*row, ("replica", "1"), ("gpu", "0")), (*row, ("pod", "q"))):
        with pytest.raises(LabelMismatch):
            POD_GPU_ALLOCATION.family([Sample(wrong, 1.0)])


def test_device_labels_come_first_and_vary() -> None:
    gpu = (("gpu", "0"), ("UUID", "GPU-a"), ("Hostname", "n"))
    mig = (("gpu", "0"), ("UUID", "GPU-a"), ("GPU_I_PROFILE", "1g"), ("GPU_I_ID", "9"))
    family = XID_ERRORS.family([XID_ERRORS.device_sample(gpu, 2.0, xid="79"),
                                XID_ERRORS.device_sample(mig, 1.0, xid="43")])
    assert family.type == "counter"
    assert family.samples[0].labels[-1] == ("xid", "79")
    with pytest.raises(LabelMismatch):
        XID_ERRORS.family([Sample(gpu, 1.0)])


def test_committed_artifacts_query_only_declared_metrics() -> None:
    """Dashboards, alert rules, KEDA objects and the docs: PromQL keeps names as strings."""
    files = [p for folder in ("dashboards", "alerts", "deploy", "docs")
             for p in sorted((ROOT / folder).rglob("*")) if p.is_file()]
    files.append(ROOT / "README.md")
    used: dict[str, set[str]] = {}
    for path in files:
        for name in _NAME.findall(path.read_text(errors="replace")):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert {"gpu_exporter_xid_errors_total", "gpu_exporter_pod_gpu_allocation"} <= set(used)
    undeclared = {name: sorted(where) for name, where in used.items()
                  if name not in EXPOSED_NAMES}
    assert not undeclared


# --- a running exporter --------------------------------------------------------------------


def _wait_for(condition: Callable[[], str | None], what: str) -> str:
    # Generous: every simulated profile's exporter runs at once, on 2 cores; a passing run
    # returns as soon as the condition holds.
    return wait_until(condition, timeout=180.0, interval=0.1, what=what)


def _faults(profile: str) -> list[str]:
    last = len(PROFILES[profile].gpus) - 1
    # An XID is lost when it fires before its GPU is registered for events (as with NVML),
    # so a second one follows for an exporter slow to start; the lost GPU comes back so
    # that, on a one-GPU node, it is registered again in time for that second XID.
    # On a machine so loaded that start-up takes longer than that, a third XID later on.
    return ["--sim.fault", "xid,code=79,gpu=0,at=5s", "--sim.fault", "xid,code=43,gpu=0,at=15s",
            "--sim.fault", "xid,code=31,gpu=0,at=60s",
            "--sim.fault", f"lost,gpu={last},at=5s,for=2s"]


_EVENTS = tuple(re.compile(pattern, re.MULTILINE) for pattern in (
    r"^gpu_exporter_xid_errors_total\{",
    r"^gpu_exporter_gpu_lost_total [1-9]",
    r"^gpu_exporter_config_last_reload_success_timestamp_seconds ",
    r"^gpu_exporter_kubelet_last_refresh_success_timestamp_seconds ",
    r"^gpu_exporter_kubernetes_api_errors_total ",
))
"""What a scrape shows once the faults, a reload and a kubelet and API server round have
happened."""


def test_every_emitted_self_metric_is_declared_and_documented(
        exporter: type[ExporterProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pod labels and process attribution on, against an API server address where nothing
    # listens: the pod watch fails, and its families say so.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # DRA on too: the ResourceSlice watch fails the same way and reports it.
    env = {"KUBECONFIG": str(kubeconfig), "NODE_NAME": "node-a", "KUBERNETES_ENABLE_DRA": "true"}
    # A web config (plain HTTP, one header) for the web config's own families.
    web_config = tmp_path / "web.yml"
    web_config.write_text("http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
    processes = {
        profile: exporter(["--backend", "sim", "--sim.profile", profile, "--sim.kubelet",
                           "-c", "200ms", "-f", str(default_collectors_path()),
                           "--web.config.file", str(web_config),
                           "--kubernetes.pod-labels", "team",
                           "--kubernetes.process-attribution", "--label-limit", "25",
                           # The node fault writer, refused the same way, reports it too.
                           "--faults.node-condition", "--faults.events", "--faults.taint",
                           *_faults(profile)], env)
        for profile in profile_names()
    }
    documented = documented_self_metrics()
    emitted_anywhere: set[str] = set()
    for profile, proc in processes.items():
        proc.wait_ready()
        proc.proc.send_signal(signal.SIGHUP)  # a collectors reload

        def after_events(proc: ExporterProcess = proc) -> str | None:
            text = proc.metrics()
            return text if all(event.search(text) for event in _EVENTS) else None

        text = _wait_for(after_events, f"{profile}: {[e.pattern for e in _EVENTS]}")
        emitted = dict(_TYPE_LINE.findall(text))
        undeclared = set(emitted) - EXPOSED_NAMES
        assert not undeclared, f"{profile}: emitted but not in exporter/selfmetrics.py"
        undocumented = set(emitted) - documented
        assert not undocumented, f"{profile}: emitted but not in docs/metrics.md"
        declared_types = {m.exposed_name: m.type for m in REGISTRY}
        assert {n: declared_types[n] for n in emitted} == emitted, profile
        emitted_anywhere |= set(emitted)
    assert emitted_anywhere == EXPOSED_NAMES, "declared, but no simulated node emits it"


@pytest.mark.parametrize(("profile", "faults", "value", "reason"), [
    ("h100-8", (), 1.0, ""),
    ("l4-1", (), 0.0, "unsupported"),
    ("h200-mig", ("gpm-admin-only",), 0.0, "no_permission"),
])
async def test_gpm_supported_says_why_not(profile: str, faults: tuple[str, ...], value: float,
                                          reason: str) -> None:
    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml(profile, faults=[parse_fault(f) for f in faults]),
                          collectors.specs)
    backend.start()
    sampler = Sampler(backend, collectors, SamplerSettings(1.0, HostLabel(None, ""), 60.0),
                      Publisher("sim"))
    await sampler.poll_once()
    await sampler.close()
    (family,) = [f for f in text_string_to_metric_families(sampler.current.text.decode())
                 if f.name == "gpu_exporter_gpm_supported"]
    gpus = len(PROFILES[profile].gpus)
    # Every sample carries `reason` (empty when supported): one label set for the family.
    assert [(s.value, s.labels["reason"], sorted(s.labels)) for s in family.samples] == \
        [(value, reason, ["UUID", "gpu", "reason"])] * gpus
