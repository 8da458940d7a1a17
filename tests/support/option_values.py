"""What each sample text of each option value type means, written out as literals: the
expectation of the tests that resolve options from flags and variables, stated apart from the
parsers that resolve them."""

from __future__ import annotations

from pathlib import Path

from exporter.devices.filter import DeviceFilter
from exporter.k8s.inference_labels import PodLabelSelection
from exporter.options import Option

NAMED_AS_GIVEN = ("Text", "Choice", "Regex", "Hostengine", "DeviceSelection", "GroupBy")
"""Value types whose value is the text exactly as given."""

PARSED: dict[tuple[str, str], object] = {
    ("Integer", "7"): 7, ("Integer", "11"): 11, ("Integer", "13"): 13,
    ("Number", "2.5"): 2.5, ("Number", "40"): 40.0, ("Number", "75"): 75.0,
    ("Share", "0.25"): 0.25, ("Share", "0.5"): 0.5, ("Share", "1"): 1.0,
    ("Switch", "true"): True, ("Switch", "1"): True, ("Switch", "yes"): True,
    ("Switch", "false"): False,
    ("Duration", "250ms"): 0.25, ("Duration", "2s"): 2.0, ("Duration", "3m"): 180.0,
    ("GoDuration", "5m0s"): 300.0, ("GoDuration", "90s"): 90.0, ("GoDuration", "1h"): 3600.0,
    ("LenientGoDuration", "5s"): 5.0, ("LenientGoDuration", "1m30s"): 90.0,
    ("LenientGoDuration", "250ms"): 0.25,
    ("Span", "30d"): 30 * 86400.0, ("Span", "1h30m"): 5400.0, ("Span", "15s"): 15.0,
    ("Instant", "2025-05-01T00:00:00Z"): 1746057600.0, ("Instant", "2025-05-02"):
        1746144000.0, ("Instant", "1746057600"): 1746057600.0,
    ("Listen", "127.0.0.1:9401"): ("127.0.0.1", 9401), ("Listen", ":9402"): (None, 9402),
    ("Listen", "[::1]:9403"): ("::1", 9403),
    ("Devices", "g:0,1"): DeviceFilter(gpus=True, instances=False,
                                       gpu_ids=frozenset({0, 1}), instance_ids=None),
    ("Devices", "i"): DeviceFilter(gpus=False, instances=True, gpu_ids=None,
                                   instance_ids=None),
    ("Devices", "g"): DeviceFilter(gpus=True, instances=False, gpu_ids=None,
                                   instance_ids=None),
    ("Repeated", "alpha"): ("alpha",), ("Repeated", "beta"): ("beta",),
    ("Repeated", "gamma"): ("gamma",), ("Repeated", "namespace"): ("namespace",),
    ("Repeated", "namespace,label:team"): ("namespace,label:team",),
    ("Separated", "a.io/gpu"): ("a.io/gpu",), ("Separated", "d.io/gpu"): ("d.io/gpu",),
    ("Separated", "b.io/gpu, c.io/gpu"): ("b.io/gpu", "c.io/gpu"),
    ("RegexList", "^team$"): ("^team$",), ("RegexList", "app.*, tier"): ("app.*", "tier"),
    ("RegexList", "^a"): ("^a",),
    ("PodLabels", "team|app"): PodLabelSelection(regex="team|app"),
    ("PodLabels", "inference"): PodLabelSelection(presets=("inference",)),
    ("PodLabels", "llm-d,kai"): PodLabelSelection(presets=("llm-d", "kai")),
    ("ConfigMapRef", "gpu-operator:metrics"): ("gpu-operator", "metrics"),
    ("ConfigMapRef", "none"): None, ("ConfigMapRef", "monitoring:dcgm"): ("monitoring", "dcgm"),
    # Upstream's defaults, as dcgm-exporter's flags state them.
    ("Listen", ":9400"): (None, 9400), ("Duration", "30000"): 30.0,
    ("Duration", "300000"): 300.0, ("Integer", "16"): 16, ("Integer", "0"): 0,
    ("GoDuration", "10m0s"): 600.0, ("LenientGoDuration", "10s"): 10.0,
    ("LenientGoDuration", "30s"): 30.0,
    ("Devices", "f"): DeviceFilter(gpus=True, instances=True, gpu_ids=None,
                                   instance_ids=None),
    # `--debug`, the one switch that stands for a value: log level debug.
    ("SwitchTo", "true"): "debug", ("SwitchTo", "1"): "debug", ("SwitchTo", "false"): "info",
}
"""What each sample text of each value type means, written out: the expectation of the
precedence tests, stated apart from the parsers that resolve it."""


def expected(option: Option[object], text: str) -> object:
    """The value `text` should give `option`, from the literals above."""
    return expected_of(type(option.value).__name__, text, option.name)


def expected_of(kind: str, text: str, what: str) -> object:
    """The value `text` should give a value of type `kind` (`what`: named on failure)."""
    if kind in NAMED_AS_GIVEN:
        return text
    if kind == "FilePath":
        return Path(text)
    key = (kind, text)
    assert key in PARSED, f"{what}: no literal for {key} in PARSED; add the value"
    return PARSED[key]
