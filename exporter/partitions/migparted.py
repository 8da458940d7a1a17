"""Read a mig-parted config (the MIG Manager's file) by mig-parted's own rules.

The rules are those of mig-parted's spec (`api/spec/v1/spec.go`) and of the profile names it
accepts, as the MIG Manager applies them (the YAML is first turned into JSON, then each part
is decoded on its own): `version` must be `v1`; `mig-configs` maps names to non-empty lists
of entries; an entry needs `devices` (`all` or a list of GPU indexes) and `mig-enabled`,
takes `mig-devices` (profile -> count, required when enabled, empty when not) and
`device-filter` (a PCI device id or a list of them), and nothing else. A key repeated in one
mapping keeps its last value, as in mig-parted. The file is read by `exporter.yamlfiles`
(one document, scalar keys), so every refusal is one line `SOURCE:LINE: key: ...`. Whether
the profiles exist on a GPU and fit together is `migparted_layout`'s part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from exporter.yamlfiles import (
    Section,
    YamlError,
    compose_one,
    decode,
    key_path,
    read_yaml_text,
)

__all__ = [
    "ENTRY_KEYS",
    "VERSION",
    "MigConfigEntry",
    "MigPartedConfig",
    "MigPartedError",
    "ProfileName",
    "device_filter_matches",
    "load",
    "parse",
    "parse_profile_name",
]

VERSION = "v1"
ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
"""The keys an entry may have; any other is refused."""


class MigPartedError(ValueError):
    """A config mig-parted would refuse, or one that cannot be laid out; one line naming the
    file, the config and what is expected."""


# -- profile names ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProfileName:
    """A profile as mig-parted parses its name: `[<C>c.]<G>g.<GB>gb[+attr,...|-attr,...]`."""

    compute_slices: int
    gpu_slices: int
    memory_gb: int
    attributes: frozenset[str]
    negated: frozenset[str]

    @property
    def gpu_instance(self) -> str:
        """Return the name of the GPU-instance profile alone, without the compute-instance
        prefix."""
        suffix = ("+" + ",".join(sorted(self.attributes)) if self.attributes
                  else "-" + ",".join(sorted(self.negated)) if self.negated else "")
        return f"{self.gpu_slices}g.{self.memory_gb}gb{suffix}"

    def same_gpu_instance(self, other: ProfileName) -> bool:
        """Return whether both names ask for the same GPU-instance profile, whatever compute
        slices they ask for."""
        return (self.gpu_slices, self.memory_gb, self.attributes, self.negated) == (
            other.gpu_slices, other.memory_gb, other.attributes, other.negated)


_DIGITS = re.compile(r"[+-]?[0-9]+")
_ATTRIBUTE = re.compile(r"[A-Za-z.][A-Za-z0-9.]*")


def _field(text: str, unit: str) -> int:
    if text.strip() != text:
        raise ValueError(f"space around the '<n>{unit}' part")
    if not text.endswith(unit):
        raise ValueError(f"the '<n>{unit}' part does not end in '{unit}'")
    number = text.removesuffix(unit)
    if not _DIGITS.fullmatch(number):
        raise ValueError(f"the '<n>{unit}' part has no whole number before '{unit}'")
    return int(number)


def _attributes(text: str) -> frozenset[str]:
    seen: list[str] = []
    for attribute in text.split(","):
        if attribute in seen:
            raise ValueError(f"attribute {attribute!r} written twice")
        if not attribute:
            raise ValueError("an attribute is blank (nothing after '+', '-' or ',')")
        if attribute[0].isdigit():
            raise ValueError(f"attribute {attribute!r} starts with a digit")
        if attribute[0] == "." or attribute[-1] == ".":
            raise ValueError(f"attribute {attribute!r} starts or ends with '.'")
        if not _ATTRIBUTE.fullmatch(attribute):
            raise ValueError(f"attribute {attribute!r} holds a character other than letters, "
                             "digits and '.'")
        seen.append(attribute)
    return frozenset(seen)


def parse_profile_name(text: str) -> ProfileName:
    """Parse a mig-parted profile name; raise ValueError saying what is wrong."""
    if not text:
        raise ValueError("no profile name given")
    plus, minus = text.split("+", 1), text.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError("attributes after both '+' and '-'; one kind only")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) == 3:
        c, g, gb = _field(fields[0], "c"), _field(fields[1], "g"), _field(fields[2], "gb")
    elif len(fields) == 2:
        g, gb = _field(fields[0], "g"), _field(fields[1], "gb")
        c = g
    else:
        raise ValueError("expected '<G>g.<GB>gb' or '<C>c.<G>g.<GB>gb'")
    attributes = _attributes(parts[1]) if len(parts) == 2 else frozenset()
    if len(minus) == 2:
        return ProfileName(c, g, gb, frozenset(), attributes)
    return ProfileName(c, g, gb, attributes, frozenset())


# -- the file ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MigConfigEntry:
    """One device selection of a mig-config."""

    devices: Literal["all"] | tuple[int, ...]
    mig_enabled: bool
    mig_devices: Mapping[str, int] | None
    """Profile name -> count; None where the key is absent (allowed only with MIG off)."""
    device_filter: tuple[str, ...]
    """PCI ids (`0x233510DE`, optionally `:<subsystem>`); empty: every GPU."""

    def applies_to(self, index: int, pci_device_id: int, pci_subsystem_id: int = 0) -> bool:
        """Return whether mig-parted would apply this entry to the GPU at `index` with these PCI
        ids: the device filter, when given, must match, and the entry's devices must include it."""
        if self.device_filter and not any(
                device_filter_matches(f, pci_device_id, pci_subsystem_id)
                for f in self.device_filter):
            return False
        return self.devices == "all" or index in self.devices


@dataclass(frozen=True, slots=True)
class MigPartedConfig:
    """A mig-parted config file as read: each named MIG config and its entries, and the file it
    came from for messages."""

    source: str
    """The file it was read from, for messages."""
    mig_configs: Mapping[str, tuple[MigConfigEntry, ...]]

    def select(self, name: str | None) -> tuple[str, tuple[MigConfigEntry, ...]]:
        """Return (name, entries) of the config `name`, or of the only one when None, as
        `nvidia-mig-parted apply -c` picks it."""
        names = ", ".join(sorted(self.mig_configs)) or "none"
        if name is None:
            if len(self.mig_configs) != 1:
                raise MigPartedError(
                    f"{self.source}: holds {len(self.mig_configs)} mig-configs; name one of: "
                    f"{names}")
            name = next(iter(self.mig_configs))
        if name not in self.mig_configs:
            raise MigPartedError(
                f"{self.source}: no mig-config {name!r}; expected one of: {names}")
        return name, self.mig_configs[name]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    return "a mapping"


def _as_int(value: object) -> int | None:
    """Return `value` as an integer the way Go's JSON decoder takes one into an int, or None when
    it would refuse it; a whole float passes, since the YAML-to-JSON step writes 2.0 as 2."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _refused(where: Section, name: str, message: str) -> MigPartedError:
    """Return the refusal `SOURCE:LINE: key: message` of `where` (the document, a config or an
    entry), on the line of its key `name` (empty: its own line)."""
    return MigPartedError(str(where.error_at(name, message)))


def _entry(raw: object, config: Section, index: int) -> MigConfigEntry:
    if raw is None:
        raw = {}
    entry = Section(config.path, f"{config.key}[{index}]", raw if isinstance(raw, dict) else {},
                    config.lines)
    if not isinstance(raw, dict):
        raise _refused(entry, "", f"{_kind(raw)}; expected a mapping with "
                                  f"{', '.join(ENTRY_KEYS)}")
    for required in ("devices", "mig-enabled"):
        if required not in raw:
            raise _refused(entry, "", f"no {required!r} key; expected devices (all or a list "
                                      "of GPU indexes) and mig-enabled")
    unknown = sorted(k for k in raw if k not in ENTRY_KEYS)
    if unknown:
        raise _refused(entry, unknown[0], f"unknown key {unknown[0]!r}; expected only "
                                          f"{', '.join(ENTRY_KEYS)}")
    devices = _devices(raw["devices"], entry)
    enabled = raw["mig-enabled"]
    # Go's decoder leaves a bool untouched by null: false.
    if enabled is None:
        enabled = False
    if not isinstance(enabled, bool):
        raise _refused(entry, "mig-enabled", f"mig-enabled is {_kind(enabled)}; expected true "
                                             "or false")
    mig_devices = _mig_devices(raw["mig-devices"], entry) if "mig-devices" in raw else None
    if enabled and mig_devices is None:
        raise _refused(entry, "mig-enabled", "mig-enabled is true but there is no "
                                             "'mig-devices'; expected profile counts ({} for "
                                             "none)")
    if not enabled and mig_devices:
        raise _refused(entry, "mig-devices", "mig-enabled is false but mig-devices lists "
                                             "instances; expected none (or mig-enabled: true)")
    return MigConfigEntry(devices, enabled, mig_devices,
                          _device_filter(raw.get("device-filter"), entry))


def _devices(value: object, entry: Section) -> Literal["all"] | tuple[int, ...]:
    if value == "all":
        return "all"
    if isinstance(value, list):
        indexes = [_as_int(v) for v in value]
        if all(i is not None for i in indexes):
            return tuple(i for i in indexes if i is not None)
    raise _refused(entry, "devices", f"devices is {_kind(value)}; expected 'all' or a list of "
                                     "GPU indexes")


def _device_filter(value: object, entry: Section) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _refused(entry, "device-filter", f"device-filter is {_kind(value)}; expected a PCI "
                                           "device id string such as \"0x233510DE\" or a list "
                                           "of them (quote them: unquoted, YAML reads 0x... as "
                                           "a number)")


def _mig_devices(value: object, entry: Section) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _refused(entry, "mig-devices", f"mig-devices is {_kind(value)}; expected a "
                                             "mapping of profile to count")
    counts: dict[str, int] = {}
    for name, raw_count in value.items():
        at = key_path("mig-devices", name)
        try:
            parse_profile_name(name)
        except ValueError as exc:
            raise _refused(entry, at, f"mig-devices: {name!r} is not a MIG profile name "
                                      f"({exc}); expected e.g. '3g.71gb', '1c.3g.71gb', "
                                      "'1g.18gb+me'") from None
        count = _as_int(raw_count)
        if count is None or count < 0:
            raise _refused(entry, at, f"mig-devices: count of {name!r} is {_kind(raw_count)}; "
                                      "expected a whole number, 0 or more")
        counts[name] = count
    if counts and not any(counts.values()):
        raise _refused(entry, "mig-devices", "mig-devices: all counts are 0; expected at least "
                                             "one above 0 (or {} for none)")
    return counts


def _json_keys(value: object) -> object:
    """Return the YAML value with every mapping key turned into a string, as sigs.k8s.io/yaml
    hands the document on as JSON (the reader has already refused any key that is not a scalar)."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if isinstance(key, bool):
                text = str(key).lower()
            elif isinstance(key, float):
                text = repr(key)
            else:
                text = str(key)
            out[text] = _json_keys(item)
        return out
    if isinstance(value, list):
        return [_json_keys(item) for item in value]
    return value


def _flow_tabs(text: str) -> str:
    """Return `text` with the tabs at the start of its lines removed when it is a flow document
    (`{...}`, JSON written as YAML): go-yaml reads those tabs as plain separation but PyYAML
    refuses them. A block document is returned as it is, since a tab cannot indent YAML in either
    parser."""
    if not text.lstrip().startswith("{"):
        return text
    return "\n".join(line.lstrip("\t") for line in text.split("\n"))


def parse(text: str, source: str) -> MigPartedConfig:
    """Read a mig-parted config; raise MigPartedError where mig-parted would refuse it, in one
    line naming the source, the line and the key. An empty document is an empty config, as
    in mig-parted (selecting from it then fails). A key repeated in one mapping keeps its
    last value, as mig-parted's lenient reading does."""
    try:
        node = compose_one(source, _flow_tabs(text), repeated_keys="last")
        decoded = decode(source, node, "any") if node is not None else None
    except YamlError as exc:
        raise MigPartedError(f"{exc}; expected a mig-parted config") from None
    if decoded is None:
        return MigPartedConfig(source, {})
    raw = _json_keys(decoded.value)
    if raw is None:
        return MigPartedConfig(source, {})
    if not isinstance(raw, dict):
        raise MigPartedError(f"{source}:1: {_kind(raw)}; expected a mapping with version and "
                             "mig-configs")
    if "version" not in raw:
        raise MigPartedError(f"{source}: missing 'version'; expected version: {VERSION}")
    document = Section(source, "", raw, decoded.lines)
    if raw["version"] != VERSION:
        raise _refused(document, "version", f"version is {_kind(raw['version'])}; expected "
                                            f"{VERSION}, the only version mig-parted reads")
    unknown = sorted(k for k in raw if k not in ("version", "mig-configs"))
    if unknown:
        raise _refused(document, unknown[0], f"unknown key {unknown[0]!r}; expected only "
                                             "version and mig-configs")
    return MigPartedConfig(source, _configs(raw["mig-configs"], document)
                           if "mig-configs" in raw else {})


def _configs(listed: object, document: Section) -> dict[str, tuple[MigConfigEntry, ...]]:
    if listed is not None and not isinstance(listed, dict):
        raise _refused(document, "mig-configs", f"mig-configs is {_kind(listed)}; expected a "
                                                "mapping of config name to a list of entries")
    if not listed:
        raise _refused(document, "mig-configs", "mig-configs is empty; expected at least one "
                                                "config")
    configs: dict[str, tuple[MigConfigEntry, ...]] = {}
    for name, entries in listed.items():
        config = Section(document.path, key_path("mig-configs", name), {}, document.lines)
        if entries is not None and not isinstance(entries, list):
            raise _refused(config, "", f"{_kind(entries)}; expected a list of entries")
        if not entries:
            raise _refused(config, "", "no entries; expected at least one")
        configs[name] = tuple(_entry(e, config, i) for i, e in enumerate(entries))
    return configs


def load(path: Path) -> MigPartedConfig:
    """Read the mig-parted config at `path` (see `parse`)."""
    try:
        text = read_yaml_text(path)
    except YamlError as exc:
        raise MigPartedError(f"{exc}; expected a mig-parted config file") from None
    return parse(text, str(path))


# -- device filters ---------------------------------------------------------------------------

def _pci_number(text: str) -> int | None:
    """Read an unsigned 32-bit number: hexadecimal, octal or binary with a 0x/0o/0b prefix,
    else decimal; `_` separators only after a prefix. None when it is not one."""
    try:
        value = int(text, 0)
    except ValueError:
        return None
    if text.startswith(("+", "-")) or not 0 <= value < 1 << 32:
        return None
    return value


def device_filter_matches(text: str, pci_device_id: int, pci_subsystem_id: int = 0) -> bool:
    """Return whether the device filter `text` (`0xDDDDVVVV[:0xSSSSVVVV]`) matches a GPU with
    these ids (device in the high 16 bits, vendor in the low, as NVML's `pciDeviceId`). A filter
    mig-parted cannot parse matches nothing, as in mig-parted."""
    parts = text.split(":")
    if len(parts) > 2:
        return False
    primary = _pci_number(parts[0])
    if primary != pci_device_id:
        return False
    if len(parts) == 2:
        return _pci_number(parts[1]) == pci_subsystem_id
    return True
