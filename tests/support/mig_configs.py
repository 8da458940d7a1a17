"""mig-parted configs written for the tests: one in the shape of the GPU Operator's default
config, and a short example of the format (a balanced config and one by GPU index).

Both are written here, in mig-parted's `v1` format; no upstream file is read.
"""

from __future__ import annotations

__all__ = ["OPERATOR_SHAPED_CONFIG", "PARTITIONING_EXAMPLE"]


def _all_of(profile: str, count: int, device_filter: str = "") -> str:
    """Return one `all-<profile>` config: every GPU (of the filter's ids, when given) as
    `count` instances of `profile`."""
    lines = [f"  all-{profile.replace('+', '.')}:"]
    lead = "    - "
    if device_filter:
        lines.append(f"{lead}device-filter: {device_filter}")
        lead = "      "
    lines += [f"{lead}devices: all", "      mig-enabled: true", "      mig-devices:",
              f'        "{profile}": {count}']
    return "\n".join(lines) + "\n"


# The A100 40GB filters (0x20B010DE, 0x20F110DE) and B200's (0x290110DE) name boards the
# profile table has no PCI id on record for, so the entries under them are left unchecked.
OPERATOR_SHAPED_CONFIG = (
    """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-balanced:
    - device-filter: ["0x20B010DE", "0x20F110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x233510DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 2
        "2g.35gb": 1
        "3g.71gb": 1
    - device-filter: "0x290110DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.23gb": 2
        "2g.45gb": 1
        "3g.90gb": 1

  all-1g.10gb:
    - device-filter: ["0x20B010DE", "0x20F110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4
    - device-filter: ["0x20B210DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"""
    # A100 40GB
    + _all_of("1g.5gb", 7) + _all_of("1g.5gb+me", 1) + _all_of("2g.10gb", 3)
    + _all_of("3g.20gb", 2) + _all_of("4g.20gb", 1) + _all_of("7g.40gb", 1)
    # A100 80GB and H100 80GB
    + _all_of("1g.10gb+me", 1) + _all_of("1g.20gb", 4) + _all_of("2g.20gb", 3)
    + _all_of("3g.40gb", 2) + _all_of("4g.40gb", 1) + _all_of("7g.80gb", 1)
    # H200
    + _all_of("1g.18gb", 7) + _all_of("1g.18gb+me", 1) + _all_of("1g.35gb", 4)
    + _all_of("2g.35gb", 3) + _all_of("3g.71gb", 2) + _all_of("4g.71gb", 1)
    + _all_of("7g.141gb", 1)
    # B200: one config behind its filter, one without a filter
    + _all_of("1g.23gb", 7, '"0x290110DE"') + _all_of("3g.90gb", 2)
)
"""A config in the shape of the GPU Operator's `default-mig-parted-config`: `all-disabled`,
`all-enabled`, `all-balanced` with one entry per device filter (on H200 2x 1g.18gb + 2g.35gb +
3g.71gb), and an `all-<profile>` config per profile (`+` written `.` in the name)."""

PARTITIONING_EXAMPLE = """\
version: v1                 # required, only v1
mig-configs:                # name -> list of device selections, each non-empty
  all-balanced:
    - devices: all          # required: `all` or a list of GPU indexes
      mig-enabled: true     # required
      mig-devices:          # profile -> count; required when enabled ({} allowed), empty when disabled
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
"""  # noqa: E501 (the example's comment line is kept whole)
"""The format in brief, comments included: `all-balanced` on every GPU (A100 40GB profiles)
and `custom-config`, MIG off on GPUs 0-3 and seven 1g.5gb on GPU 4."""
