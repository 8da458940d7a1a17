"""The collectors CSV from a ConfigMap, read from the fake API server and applied by the real
sampler's file-change reload over the simulated node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import Rendered
from exporter.fields.csv import load_collectors
from exporter.k8s.config import parse_configmap_ref
from exporter.k8s.configmap import CONFIGMAP, FILE, ConfigMapCollectors
from exporter.sampling.config import SamplerSettings
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from exporter.simulated.node import SimNvml
from tests.support.apiserver import CONFIGMAPS, FakeApiServer, config_map
from tests.support.wait import wait_until

REF = ("gpu-operator", "exporter-metrics")
FILE_CSV = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
MAP_CSV = "# from the ConfigMap\nDCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
CHANGED_CSV = MAP_CSV + "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"


pytestmark = pytest.mark.usefixtures("kubeconfig")


@pytest.fixture
def fallback(tmp_path: Path) -> Path:
    path = tmp_path / "dcgm-metrics.csv"
    path.write_text(FILE_CSV)
    return path


@pytest.fixture
def follower(api: FakeApiServer, fallback: Path  # noqa: ARG001 (served by it)
             ) -> Iterator[ConfigMapCollectors]:
    made = ConfigMapCollectors.open(REF, fallback, retry_s=0.2, poll_s=0.2)
    assert made is not None
    try:
        yield made
    finally:
        made.close()
    assert not made.directory.exists()


def served(sampler: Sampler[Rendered]) -> set[str]:
    text = sampler.current.text.decode()
    return {line.split("{")[0] for line in text.splitlines() if line.startswith("DCGM_FI_")}


async def test_the_configmaps_fields_are_served_and_its_changes_reloaded(
    api: FakeApiServer, follower: ConfigMapCollectors
) -> None:
    api.state.configmaps = [config_map(*REF, {"metrics": MAP_CSV})]
    collectors = follower.load_initial()
    assert follower.source == CONFIGMAP
    assert collectors.names == {"DCGM_FI_DEV_POWER_USAGE"}
    backend = NvmlBackend(SimNvml("l4-1"), collectors.specs)
    backend.start()
    settings = SamplerSettings(interval_s=1.0, host=HostLabel("Hostname", "n"),
                               collectors_path=follower.path)
    sampler = Sampler(backend, collectors, settings, Publisher("sim"))
    try:
        await sampler.poll_once()
        assert served(sampler) == {"DCGM_FI_DEV_POWER_USAGE"}

        api.state.push("MODIFIED", config_map(*REF, {"metrics": CHANGED_CSV}), CONFIGMAPS)
        wait_until(lambda: "SM_CLOCK" in follower.path.read_text())
        await sampler.poll_once()
        assert served(sampler) == {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"}

        # A bad edit is refused by the reload and counted; the running fields stay.
        api.state.push("MODIFIED", config_map(*REF, {"metrics": "NOT_A_FIELD, gauge, x\n"}),
                       CONFIGMAPS)
        wait_until(lambda: "NOT_A_FIELD" in follower.path.read_text())
        await sampler.poll_once()
        assert served(sampler) == {"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"}
        assert sampler.stats.reloads == {"success": 1, "failure": 1}

        api.state.push("DELETED", config_map(*REF, {}), CONFIGMAPS)
        wait_until(lambda: follower.source == FILE)
        await sampler.poll_once()
        assert served(sampler) == {"DCGM_FI_DEV_GPU_TEMP"}
    finally:
        await sampler.close()
    (watched,) = api.state.watches()[:1]
    assert watched["fieldSelector"] == [f"metadata.name={REF[1]}"]


def test_an_absent_configmap_means_the_file_until_it_is_created(
    api: FakeApiServer, follower: ConfigMapCollectors, fallback: Path
) -> None:
    assert follower.load_initial().names == {"DCGM_FI_DEV_GPU_TEMP"}
    assert follower.source == FILE
    assert follower.path.resolve() == fallback
    api.state.push("ADDED", config_map(*REF, {"metrics": MAP_CSV}), CONFIGMAPS)
    wait_until(lambda: follower.source == CONFIGMAP)
    assert load_collectors(follower.path).names == {"DCGM_FI_DEV_POWER_USAGE"}


@pytest.mark.parametrize("data", [{"other-key": MAP_CSV}, {"metrics": "BAD, gauge, x\n"}])
def test_a_configmap_without_a_usable_csv_at_startup_means_the_file(
    api: FakeApiServer, follower: ConfigMapCollectors, data: dict[str, str]
) -> None:
    api.state.configmaps = [config_map(*REF, data)]
    assert follower.load_initial().names == {"DCGM_FI_DEV_GPU_TEMP"}
    assert follower.source == FILE
    # Fixed later: used.
    api.state.push("MODIFIED", config_map(*REF, {"metrics": MAP_CSV}), CONFIGMAPS)
    wait_until(lambda: follower.source == CONFIGMAP)


def test_a_forbidden_configmap_means_the_file(
    api: FakeApiServer, follower: ConfigMapCollectors
) -> None:
    api.state.configmaps = [config_map(*REF, {"metrics": MAP_CSV})]
    api.state.denied.add((CONFIGMAPS, "get"))
    assert follower.load_initial().names == {"DCGM_FI_DEV_GPU_TEMP"}
    assert follower.source == FILE
    assert follower.errors >= 1


def test_without_the_watch_verb_the_configmap_is_read_again(
    api: FakeApiServer, follower: ConfigMapCollectors
) -> None:
    # The GPU Operator's Role grants get and list on ConfigMaps, not watch.
    api.state.configmaps = [config_map(*REF, {"metrics": MAP_CSV})]
    api.state.denied.add((CONFIGMAPS, "watch"))
    assert follower.load_initial().names == {"DCGM_FI_DEV_POWER_USAGE"}
    wait_until(lambda: follower.polling)
    written = follower.path.stat().st_mtime_ns
    api.state.configmaps = [config_map(*REF, {"metrics": CHANGED_CSV})]
    wait_until(lambda: "SM_CLOCK" in follower.path.read_text())
    changed = follower.path.stat().st_mtime_ns
    assert changed != written
    # Re-reading an unchanged ConfigMap rewrites nothing (no reload every poll).
    reads = len(api.state.requests)
    wait_until(lambda: len(api.state.requests) >= reads + 3)
    assert follower.path.stat().st_mtime_ns == changed


def test_the_configmap_reference() -> None:
    assert parse_configmap_ref("gpu-operator:exporter-metrics") == REF
    assert parse_configmap_ref("none") is None
    assert parse_configmap_ref("") is None
    for bad in ("exporter-metrics", "a:b:c", ":b", "a:"):
        with pytest.raises(ValueError, match="namespace"):
            parse_configmap_ref(bad)
