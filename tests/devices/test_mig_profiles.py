"""The GPU-instance profile label, read from MIG device names as NVML gives them."""

from __future__ import annotations

import pytest

from exporter.devices.enumerate import profile_from_name
from exporter.k8s.attribution import resource_accepted


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1c.7g.80gb", "7g.80gb"),
    ("NVIDIA H200 MIG 1g.18gb", "1g.18gb"),
    ("NVIDIA H200 MIG 2c.3g.71gb", "3g.71gb"),
    ("NVIDIA H100 NVL MIG 1g.12gb+me", "1g.12gb+me"),
    # Blackwell: media-engine and graphics variants are distinct profiles.
    ("NVIDIA B200 MIG 1g.23gb+me", "1g.23gb+me"),
    ("NVIDIA B200 MIG 1g.23gb+me.all", "1g.23gb+me.all"),
    ("NVIDIA B200 MIG 1c.2g.45gb-me", "2g.45gb-me"),
    ("NVIDIA B200 MIG 2g.45gb+gfx", "2g.45gb+gfx"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb+gfx", "1g.24gb+gfx"),
])
def test_profile_keeps_every_attribute(name: str, profile: str) -> None:
    assert profile_from_name(name) == profile


@pytest.mark.parametrize("resource", [
    "nvidia.com/mig-1g.23gb", "nvidia.com/mig-1g.23gb.me", "nvidia.com/mig-1g.23gb.me.all",
    "nvidia.com/mig-2g.45gb-me", "nvidia.com/mig-2g.45gb.gfx",
])
def test_mig_resource_names_with_attributes_are_accepted(resource: str) -> None:
    # Attribution goes by the device id; the profile in a resource name is never parsed.
    assert resource_accepted(resource)
