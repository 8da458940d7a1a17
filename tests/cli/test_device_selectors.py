"""dcgm-exporter 4.8.3's device selections: `+` joins a GPU and a GPU-instance selector
(`g+i`, `g:0-3+i:0-2`, `i+g`), with its new refusals; `-s` and `-p` are checked the same way
(then only warned about); `-r` takes a DCGM connection string as well as HOST:PORT."""

from __future__ import annotations

import pytest

from exporter.config import ConfigError, parse_serve_args
from exporter.devices.config import DeviceSettings
from exporter.devices.filter import DeviceFilter, parse_device_filter
from exporter.devices.nvml import NvmlBackend
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.options import Option
from exporter.options.dcgm_table import CPU_DEVICES, REMOTE_HOSTENGINE_INFO, SWITCH_DEVICES
from exporter.options.parsing import parse_command_line
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock


@pytest.mark.parametrize(("text", "expected"), [
    ("g+i", DeviceFilter(gpus=True, instances=True)),
    ("i+g", DeviceFilter(gpus=True, instances=True)),
    ("g:0-3+i:0-2", DeviceFilter(gpu_ids=frozenset(range(4)), instance_ids=frozenset(range(3)))),
    ("i:1,5+g", DeviceFilter(instance_ids=frozenset({1, 5}))),
    (" g + i:2 ", DeviceFilter(instance_ids=frozenset({2}))),
    ("g", DeviceFilter(instances=False)),
    ("i:0-2", DeviceFilter(gpus=False, instance_ids=frozenset(range(3)))),
])
def test_combined_selections(text: str, expected: DeviceFilter) -> None:
    assert parse_serve_args(["-d", text], env={}).devices.selection == expected
    from_env = parse_serve_args([], env={"DCGM_EXPORTER_DEVICES_STR": text})
    assert from_env.devices.selection == expected


@pytest.mark.parametrize(("text", "message"), [
    ("f+g", "'f\\+g': the flex option 'f' cannot be combined with other device options"),
    ("g+f", "the flex option 'f' cannot be combined"),
    ("g+g", "'g\\+g' has the device option 'g' twice"),
    ("i:0+i:1", "has the device option 'i' twice"),
    ("g+", "'g\\+' has an empty selector"),
    ("+i", "has an empty selector"),
    ("g:0:1", "'g:0:1' has more than one ':'"),
    ("g:3-1", "invalid range '3-1': start \\(3\\) must not exceed end \\(1\\)"),
    ("g+x", "the only valid options are 'f', 'g', or 'i', but found 'x'"),
    ("f:0", "the flex option 'f' takes no ids"),
])
def test_upstreams_new_refusals(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^--devices: .*{message}"):
        parse_serve_args(["-d", text], env={})


@pytest.mark.parametrize(("spec", "gpus", "instances"), [
    ("g+i", 8, 11), ("i+g", 8, 11), ("f", 8, 11), ("g", 8, 0), ("i", 0, 11),
    ("g:0,1+i:9", 2, 2),
    # A GPU range also limits whose instances are served: GPU 0's instance 9 only.
    ("g:0+i:9", 1, 1),
])
def test_what_a_selection_serves_on_a_mig_node(spec: str, gpus: int, instances: int) -> None:
    lib = SimNvml("h200-mig", seed=3, clock=FakeClock(start=1_000_000.0))
    backend = NvmlBackend(lib, load_collectors(default_collectors_path()).specs,
                          DeviceSettings(selection=parse_device_filter(spec)))
    backend.start()
    try:
        readings = backend.poll()
        keys = [k for k, v in readings.values.items()
                if "DCGM_FI_DEV_GPU_TEMP" in v or "DCGM_FI_DEV_FB_USED" in v]
        assert (len([k for k in keys if k[1] == -1]),
                len([k for k in keys if k[1] != -1])) == (gpus, instances)
    finally:
        backend.close()


@pytest.mark.parametrize(("option", "variable"), [
    (SWITCH_DEVICES, "DCGM_EXPORTER_OTHER_DEVICES_STR"),
    (CPU_DEVICES, "DCGM_EXPORTER_CPU_DEVICES_STR"),
])
def test_switch_and_cpu_selections_are_checked_then_warned(option: Option[str | None],
                                                           variable: str) -> None:
    short, long = option.flags
    resolution = parse_command_line("serve", [short, "g:0-1+i"], {})
    assert resolution[option] == "g:0-1+i"
    assert len(resolution.warnings()) == 1
    with pytest.raises(ConfigError, match=f"^{long}: 'f\\+i': the flex option"):
        parse_serve_args([short, "f+i"], env={})
    with pytest.raises(ConfigError, match=rf"^\${variable}: .*invalid range"):
        parse_serve_args([], env={variable: "i:5-2"})


@pytest.mark.parametrize("text", [
    "localhost:5555", "nv-hostengine", "[::1]:5555", "host123:5555", "tcp://10.0.0.7:5555",
    "TCP://dcgm.gpu-operator.svc:5555", "unix:///run/nvidia/dcgm.sock", "vsock://3:5555",
])
def test_hostengine_addresses_dcgm_takes(text: str) -> None:
    resolution = parse_command_line("serve", ["-r", text], {})
    assert resolution[REMOTE_HOSTENGINE_INFO] == text
    assert resolution.warnings() == [
        f"--remote-hostengine-info={text}: accepted for compatibility; ignored because no "
        "DCGM hostengine is used; NVML is read directly"]


@pytest.mark.parametrize("text", ["http://dcgm:5555", "unix://relative.sock", "vsock://a:1",
                                  "tcp://nohost", "host:port", "host:99999", "two words:1"])
def test_hostengine_addresses_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^\$DCGM_REMOTE_HOSTENGINE_INFO: .* is not a "
                                          "hostengine address \\(expected HOST:PORT, "
                                          "tcp://HOST:PORT, unix:///PATH or "
                                          "vsock://CID:PORT\\)$"):
        parse_serve_args([], env={"DCGM_REMOTE_HOSTENGINE_INFO": text})
