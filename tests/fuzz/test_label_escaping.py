"""Label escaping: any pod, namespace, container or pod-label value (and any model name or
host name NVML or the node may report) goes through our exposition and comes back out of
Prometheus' own text parsers, text and OpenMetrics, as the same value; and promtool accepts
the bodies (a sample of them; dcgm's inherited names aside)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.devices.model import Entity, Inventory, Readings
from exporter.exposition.render import device_families, render
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from tests.support.promtool import promtool_problems

COLLECTORS = load_collectors(default_collectors_path())
TEMP = "DCGM_FI_DEV_GPU_TEMP"
UUID = "GPU-7a1c0000-0000-4000-8000-0000000000aa"
PROMTOOL_EVERY = 10
_examples = itertools.count()

value = st.one_of(
    st.text(max_size=40),  # any code point but lone surrogates (not in a Kubernetes string)
    st.text('\\"\n\r\t{},=# ', max_size=12),  # what escaping is about, densely
)


@given(pod=value, namespace=value, container=value, app=value, model=value, host=value)
def test_label_values_round_trip(pod: str, namespace: str, container: str, app: str,
                                 model: str, host: str) -> None:
    gpu = Entity(gpu=0, uuid=UUID, pci_bus_id="00000000:9B:00.0", device="nvidia0", model=model)
    snapshot = Snapshot(
        inventory=Inventory(gpus=(gpu,), driver_version="590.48.01"),
        readings=Readings(values={gpu.key: {TEMP: 41.0}}),
        collectors=COLLECTORS,
        host=HostLabel("Hostname", host),
        attribution=Attribution(owners={gpu.key: PodRef(pod, namespace, container,
                                                        (("label_app", app),))}),
    )
    rendered = render(device_families(snapshot))
    assert rendered.openmetrics is not None
    expected = {"gpu": "0", "UUID": UUID, "pci_bus_id": "00000000:9B:00.0",
                "device": "nvidia0", "modelName": model, "Hostname": host,
                "DCGM_FI_DRIVER_VERSION": "590.48.01", "container": container,
                "namespace": namespace, "pod": pod, "label_app": app}
    for body, parse in ((rendered.text, parse_text), (rendered.openmetrics, parse_openmetrics)):
        temps = [s for f in parse(body.decode("utf-8")) for s in f.samples if s.name == TEMP]
        assert len(temps) == 1
        assert temps[0].labels == expected
        assert temps[0].value == 41.0
    if next(_examples) % PROMTOOL_EVERY == 0:
        assert promtool_problems(rendered.text.decode("utf-8")) == []
