"""The image contract: what our Dockerfile puts where, and the dcgm-exporter CSVs it ships.

A replacement for dcgm-exporter's image must start with no arguments (no CMD for a pod's
`args` to replace), carry the NVIDIA runtime's env, and hold dcgm-exporter's metric lists at
/etc/dcgm-exporter/ (dcgm-exporter 4.8.4's files, byte for byte), in a real directory a
ConfigMap can be subPath-mounted into. The Dockerfile is read here; tests/image builds and
runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.fields.catalog import BY_NAME
from exporter.fields.csv import load_collectors
from exporter.fields.dcgm_names import DcgmField, dcgm_names

from .operator_render import (
    DOCKERFILE,
    FIXTURES,
    REPO_ROOT,
    ImageSpec,
    RenderError,
    lay_out_image,
    read_dockerfile,
)

SHIPPED_CSVS = REPO_ROOT / "exporter" / "fields" / "dcgm-exporter"
UPSTREAM_CSVS = FIXTURES / "dcgm-exporter-4.8.4"
"""dcgm-exporter 4.8.4's etc/*.csv (the 1.x file: the newest copy to be had, 4.8.2's; see
that folder's SOURCE.md)."""
SHIPPED_NAMES = ["1.x-compatibility-metrics.csv", "dcp-metrics-included.csv",
                 "default-counters.csv"]


@pytest.fixture(scope="module")
def image() -> ImageSpec:
    return read_dockerfile(DOCKERFILE)


def test_entrypoint_serves_with_zero_arguments_and_no_cmd(image: ImageSpec) -> None:
    # A CMD would be replaced by the ClusterPolicy's `args`; dcgm flags go straight through.
    assert image.entrypoint == ("/usr/local/bin/gpu-exporter",)
    assert image.cmd == ()
    assert {k: v for k, v in image.env.items() if k.startswith("NVIDIA_")} == {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,compat32",
        "NVIDIA_DISABLE_REQUIRE": "true",
    }


def test_image_ships_dcgm_exporter_csvs_in_a_real_directory(image: ImageSpec,
                                                           tmp_path: Path) -> None:
    lay_out_image(image, REPO_ROOT, tmp_path)
    etc = tmp_path / "etc" / "dcgm-exporter"
    assert etc.is_dir()
    assert not etc.is_symlink()
    assert sorted(p.name for p in etc.iterdir()) == [
        "1.x-compatibility-metrics.csv", "dcp-metrics-included.csv", "default-counters.csv"]
    for path in etc.iterdir():
        assert path.read_bytes() == (SHIPPED_CSVS / path.name).read_bytes()


def test_a_run_step_in_the_stage_the_final_one_extends_is_refused(tmp_path: Path) -> None:
    # The final stage extends `runtime`: a RUN there would execute on the target
    # architecture during the build (emulation for arm64), and the layout could not follow.
    text = DOCKERFILE.read_text()
    anchor = "FROM --platform=$TARGETPLATFORM ${RUNTIME_IMAGE} AS runtime\n"
    assert anchor in text
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text.replace(anchor, anchor + "RUN true\n"))
    with pytest.raises(RenderError, match="the final stage uses RUN"):
        read_dockerfile(dockerfile)


@pytest.mark.parametrize(("broken", "error"), [
    ("RUN ln -s /usr/local/lib/site-packages/exporter/fields /etc/dcgm-exporter\n",
     "RUN"),
    ('ENTRYPOINT gpu-exporter serve\n', "exec (JSON) form"),
])
def test_the_dockerfile_reader_refuses_what_it_cannot_lay_out(tmp_path: Path, broken: str,
                                                             error: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DOCKERFILE.read_text() + broken)
    with pytest.raises(RenderError, match=re.escape(error)):
        read_dockerfile(dockerfile)


# ----------------------------------------------------------------------------- the CSVs


def _rows(path: Path) -> list[tuple[str, str, str]]:
    """(name, type, help) of every active line, in dcgm-exporter's reading of the format."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.strip().startswith("#"):
            name, kind, help_text = (cell.strip() for cell in line.split(","))
            rows.append((name, kind, help_text))
    return rows


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_shipped_csvs_are_upstreams_files(name: str) -> None:
    assert sorted(p.name for p in SHIPPED_CSVS.iterdir()) == SHIPPED_NAMES
    assert (SHIPPED_CSVS / name).read_bytes() == (UPSTREAM_CSVS / name).read_bytes()
    source = (UPSTREAM_CSVS / "SOURCE.md").read_text(encoding="utf-8")
    # The provenance table names each file with its upstream path and commit.
    assert re.search(rf"^\| {re.escape(name)} \| etc/{re.escape(name)} \| [0-9a-f]{{40}}",
                     source, re.MULTILINE)


# NVIDIA/dcgm-exporter etc/1.x-compatibility-metrics.csv at d5e5f510a1b6 (blob 027425389d6e),
# not among the fixtures: its active lines, in order (the PCIe byte fields are listed twice).
UPSTREAM_1X_FIELDS = [
    ("dcgm_sm_clock", "gauge"), ("dcgm_memory_clock", "gauge"),
    ("dcgm_memory_temp", "gauge"), ("dcgm_gpu_temp", "gauge"),
    ("dcgm_power_usage", "gauge"), ("dcgm_total_energy_consumption", "counter"),
    ("dcgm_fi_prof_pcie_tx_bytes", "counter"), ("dcgm_fi_prof_pcie_rx_bytes", "counter"),
    ("dcgm_pcie_replay_counter", "counter"),
    ("dcgm_gpu_utilization", "gauge"), ("dcgm_mem_copy_utilization", "gauge"),
    ("dcgm_enc_utilization", "gauge"), ("dcgm_dec_utilization", "gauge"),
    ("dcgm_xid_errors", "gauge"), ("dcgm_fb_free", "gauge"), ("dcgm_fb_used", "gauge"),
    ("dcgm_nvlink_bandwidth_total", "counter"),
    ("dcgm_fi_prof_gr_engine_active", "gauge"), ("dcgm_fi_prof_pipe_tensor_active", "gauge"),
    ("dcgm_fi_prof_dram_active", "gauge"),
    ("dcgm_fi_prof_pcie_tx_bytes", "counter"), ("dcgm_fi_prof_pcie_rx_bytes", "counter"),
]


def test_shipped_1x_compatibility_csv_has_upstreams_field_list() -> None:
    rows = _rows(SHIPPED_CSVS / "1.x-compatibility-metrics.csv")
    assert [(n, t) for n, t, _ in rows] == UPSTREAM_1X_FIELDS


@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_shipped_csv_loads_and_serves_every_line(name: str) -> None:
    collectors = load_collectors(SHIPPED_CSVS / name)
    listed = [n for n, _, _ in _rows(SHIPPED_CSVS / name)]
    # vGPU licensing included, read through the generic readers rather than the catalog.
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" in listed
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in BY_NAME
    assert [f.spec.name for f in collectors.fields] == listed
    assert collectors.warnings == ()
    assert not any(isinstance(dcgm_names().resolve(n), DcgmField) for n in listed)


def test_shipped_1x_compatibility_csv_loads() -> None:
    path = SHIPPED_CSVS / "1.x-compatibility-metrics.csv"
    collectors = load_collectors(path)
    # Every field once, in upstream's order; the PCIe byte fields' second listing (the file's
    # last two lines) is left out with one warning each naming both lines.
    assert [f.spec.name for f in collectors.fields] == [n for n, _ in UPSTREAM_1X_FIELDS[:-2]]
    assert collectors.warnings == (
        f"{path}:65: dcgm_fi_prof_pcie_tx_bytes already enabled at line 18; ignored",
        f"{path}:66: dcgm_fi_prof_pcie_rx_bytes already enabled at line 19; ignored",
    )
