"""XID codes grouped by what an operator should do about them.

Each tier becomes one alert. A code in two tiers would page twice with different advice, so
tiers must be disjoint; `XidTiers.parse` and `check` reject overlaps with the codes named.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

TIER_NAMES = ("fell-off-bus", "critical", "nvlink", "contained-ecc", "pending-reset")


@dataclass(frozen=True, slots=True)
class XidTiers:
    """The XID codes of each alert tier, one tier per thing an operator should do about them."""

    fell_off_bus: tuple[int, ...] = (79,)
    """The GPU disappeared from the PCIe bus: node reboot, usually a hardware fault."""
    critical: tuple[int, ...] = (48, 62, 64, 95, 119, 120)
    """Uncontained memory errors, internal micro-controller / GSP failures: reset or reboot."""
    nvlink: tuple[int, ...] = (74,)
    """NVLink errors: multi-GPU jobs on the node fail until the link is reset."""
    contained_ecc: tuple[int, ...] = (94,)
    """Contained ECC error: one application was killed; the GPU needs a reset when drained."""
    pending_reset: tuple[int, ...] = (63, 92)
    """Row remap / page retirement recorded, high single-bit rate: reset at the next window."""

    def by_name(self) -> dict[str, tuple[int, ...]]:
        """Return each tier's codes by the tier's name as `--xid-tier` spells it
        (`fell-off-bus`...)."""
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}

    def check(self) -> None:
        """Raise ValueError naming the code and tiers when a code is not a positive integer or is
        in two tiers, since a code in two tiers would page twice with different advice."""
        seen: dict[int, str] = {}
        for tier, codes in self.by_name().items():
            for code in codes:
                if code <= 0:
                    raise ValueError(f"XID tier {tier}: {code} is not a positive XID code")
                if code in seen:
                    raise ValueError(
                        f"XID {code} is in both tier {seen[code]} and tier {tier}; every code "
                        "may be in one tier only (use --xid-tier NAME=CODES to move it)")
                seen[code] = tier

    def with_overrides(self, overrides: list[str]) -> XidTiers:
        """Apply `NAME=CODES` settings (CODES comma-separated, empty to disable a tier)."""
        tiers = self
        for item in overrides:
            name, sep, codes_text = item.partition("=")
            name = name.strip()
            if not sep or name not in TIER_NAMES:
                raise ValueError(f"--xid-tier {item!r}: expected NAME=CODES with NAME one of "
                                 f"{', '.join(TIER_NAMES)}")
            try:
                codes = tuple(sorted({int(c) for c in codes_text.split(",") if c.strip()}))
            except ValueError:
                raise ValueError(f"--xid-tier {item!r}: CODES must be comma-separated integers"
                                 ) from None
            tiers = replace(tiers, **{name.replace("-", "_"): codes})
        tiers.check()
        return tiers
