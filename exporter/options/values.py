"""Value types of the option table: how the text of a flag or environment variable becomes a
typed value, and how it is taken on the command line.

Every parser gets `where` - the flag (`--collect-interval`) or the variable
(`$DCGM_EXPORTER_INTERVAL`) the text came from - so an error names it and says what was
expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, Literal, TypeVar

from exporter import durations
from exporter.devices.filter import DeviceFilter, parse_device_filter
from exporter.k8s.inference_labels import PodLabelSelection, parse_presets
from exporter.options.go_duration import go_seconds, go_text

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")
L = TypeVar("L", bound=str)

ArgAction = Literal["store", "append", "switch"]
"""How a flag takes its value: one argument (the last one wins), one argument per repetition,
or none (present = on)."""

FlagValue = str | list[str] | bool
"""What argparse hands over for a flag of each action."""


class ConfigError(ValueError):
    """A bad flag or environment value; the message names it and what is expected."""


class Value(Generic[T_co]):
    """The type of one option's value: how its text is parsed, and how its flag takes it.
    Subclasses are frozen dataclasses."""

    __slots__ = ()
    action: ClassVar[ArgAction] = "store"
    metavar: ClassVar[str | None] = None
    """The placeholder shown in `--help`, unless the option names its own."""
    def parse(self, text: str, where: str) -> T_co:
        """Return the value `text` stands for; ConfigError, naming `where` and what is
        expected, when it stands for none."""
        raise NotImplementedError

    def from_flag(self, given: FlagValue, where: str) -> T_co:
        """Return the value of the flag `where` that argparse took as `given`: a flag taken
        once hands over its text, which is parsed as a variable's would be."""
        if not isinstance(given, str):
            raise TypeError(f"{where}: argparse gave {given!r} to a single-valued flag")
        return self.parse(given, where)

    def choices(self) -> tuple[str, ...] | None:
        """Return the closed set of texts that argparse accepts and `--help` lists, or None
        where any text goes to `parse`."""
        return None

    def env_separator(self) -> str | None:
        """Return the text that separates the items of a repeatable flag in its environment
        variable, or None for a flag taken once."""
        return None

    def samples(self) -> tuple[str, ...]:
        """Return valid texts of this type, standing for distinct values where the type has
        several, so that the tests can tell which spelling of an option was read."""
        raise NotImplementedError


def _or_list(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


@dataclass(frozen=True, slots=True)
class Text(Value[str]):
    """Any text, taken as it is."""

    def parse(self, text: str, where: str) -> str:  # noqa: ARG002 (a Value: never fails)
        """Return `text` unchanged: any text is a valid value."""
        return text

    def samples(self) -> tuple[str, ...]:
        """Return three distinct words."""
        return ("alpha", "beta", "gamma")


@dataclass(frozen=True, slots=True)
class FilePath(Value[Path]):
    """The path of a file; whether the file can be read is checked where it is opened."""

    metavar = "FILE"

    def parse(self, text: str, where: str) -> Path:  # noqa: ARG002 (a Value: never fails)
        """Return `text` as a Path, without looking at the file."""
        return Path(text)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct paths, absolute and relative."""
        return ("/etc/a.csv", "/etc/b.csv", "c.csv")


_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off", ""})
"""Go's strconv.ParseBool spellings (dcgm-exporter's flags take those), and yes/no, on/off."""


def parse_bool(text: str, where: str) -> bool:
    """Return the boolean `text` spells, in any letter case and with blanks around it: Go's
    strconv.ParseBool spellings, yes/no or on/off; an empty text is false. Anything else is a
    ConfigError naming `where`."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{where}: {text!r} is not a boolean (expected true or false)")


@dataclass(frozen=True, slots=True)
class Switch(Value[bool]):
    """A flag without argument that turns something on; its variables take true/false, and
    so does the flag written `--flag=false` (as dcgm-exporter's flag parser allows)."""

    action = "switch"

    def parse(self, text: str, where: str) -> bool:
        """Return the boolean a variable's text spells (see parse_bool)."""
        return parse_bool(text, where)

    def from_flag(self, given: FlagValue, where: str) -> bool:
        """Return True for the bare flag, else the boolean its `=value` text spells."""
        # Bare, argparse hands over True; `--flag=false` (see parsing) hands over the text.
        return parse_bool(given, where) if isinstance(given, str) else True

    def samples(self) -> tuple[str, ...]:
        """Return three spellings of true, the one value a switch has besides its default."""
        return ("true", "1", "yes")


@dataclass(frozen=True, slots=True)
class SwitchTo(Value[L]):
    """A switch standing for one value of a closed set: dcgm-exporter's `--debug` is
    `--log-level debug`. Its variables take true/false; false stands for `off`."""

    on: L
    off: L
    action = "switch"

    def parse(self, text: str, where: str) -> L:
        """Return `on` where `text` spells true, else `off` (see parse_bool)."""
        return self.on if parse_bool(text, where) else self.off

    def from_flag(self, given: FlagValue, where: str) -> L:
        """Return `on` for the bare flag, else the value its `=value` text spells."""
        return self.parse(given, where) if isinstance(given, str) else self.on

    def samples(self) -> tuple[str, ...]:
        """Return three spellings of true, which all stand for `on`."""
        return ("true", "1", "yes")


@dataclass(frozen=True, slots=True)
class Integer(Value[int]):
    """A whole number, no less than `minimum` and no more than `maximum` where they are set."""

    minimum: int | None = None
    maximum: int | None = None
    metavar = "N"

    def parse(self, text: str, where: str) -> int:
        """Return the integer `text` writes; ConfigError when it is not an integer or lies
        outside the bounds."""
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(f"{where}: {durations.shown(text)} is not an integer") from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{where}: {text!r} is below {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{where}: {text!r} is above {self.maximum}")
        return value

    def samples(self) -> tuple[str, ...]:
        """Return three distinct integers."""
        return ("7", "11", "13")


@dataclass(frozen=True, slots=True)
class Number(Value[float]):
    """A finite decimal number (`inf` and `nan` are refused)."""

    metavar = "N"

    def parse(self, text: str, where: str) -> float:
        """Return the number `text` writes; ConfigError when it is not a finite number."""
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{where}: {durations.shown(text)} is not a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {durations.shown(text)} is not a finite number")
        return value

    def samples(self) -> tuple[str, ...]:
        """Return three distinct numbers, whole and fractional."""
        return ("2.5", "40", "75")


@dataclass(frozen=True, slots=True)
class Share(Value[float]):
    """A share of a whole, from 0 to 1 (`0.5` is half)."""

    metavar = "SHARE"

    def parse(self, text: str, where: str) -> float:
        """Return the share `text` writes; ConfigError when it is not a number from 0 to 1."""
        value = Number().parse(text, where)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{where}: {text!r} is not a share from 0 to 1 (0.5 is half)")
        return value

    def samples(self) -> tuple[str, ...]:
        """Return three distinct shares."""
        return ("0.25", "0.5", "1")


def parse_duration(text: str, where: str, bare_unit: str | None = "ms") -> float:
    """Return the seconds `text` stands for: "15s", "500ms", "5m", "1h30m", "7d"
    (`exporter.durations`' grammar), or a bare number in `bare_unit` (dcgm's -c is
    milliseconds), which is refused when `bare_unit` is None. ConfigError, naming `where`, for
    any other text and for a duration that is not above zero."""
    try:
        seconds = durations.parse_duration(text, bare_unit)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if seconds <= 0:
        raise ConfigError(f"{where}: {durations.shown(text)} must be greater than zero")
    return seconds


@dataclass(frozen=True, slots=True)
class Duration(Value[float]):
    """A duration in seconds; a number without a unit is in `bare_unit` (dcgm-exporter's
    are milliseconds)."""

    bare_unit: Literal["ms", "s", "m", "h"] = "ms"
    metavar = "DURATION"

    def parse(self, text: str, where: str) -> float:
        """Return the seconds `text` stands for (see parse_duration)."""
        return parse_duration(text, where, self.bare_unit)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct durations, each in another unit."""
        return ("250ms", "2s", "3m")


@dataclass(frozen=True, slots=True)
class GoDuration(Value[float]):
    """A duration in seconds, written in Go's duration syntax (`10m0s`, `90s`; see
    go_duration) as dcgm-exporter's duration flags take it; zero is allowed, a negative
    duration is refused."""

    metavar = "DURATION"

    def parse(self, text: str, where: str) -> float:
        """Return the seconds of the Go duration `text`; ConfigError when it does not parse
        or is negative."""
        try:
            seconds = go_seconds(text.strip())
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc} (expected a Go duration such as 10m0s, 30s "
                              "or 500ms)") from None
        if seconds < 0:
            raise ConfigError(f"{where}: {durations.shown(text)} must not be negative")
        return seconds

    def samples(self) -> tuple[str, ...]:
        """Return three distinct Go durations."""
        return ("5m0s", "90s", "1h")


@dataclass(frozen=True, slots=True)
class LenientGoDuration(Value[float | None]):
    """A Go duration that is never an error, as dcgm-exporter reads its web timeouts: text
    that does not parse, or is not above zero, gives None, which stands for the option's
    default (and a start-up warning; see `lenient_warning`)."""

    metavar = "DURATION"

    def parse(self, text: str, where: str) -> float | None:  # noqa: ARG002 (never fails)
        """Return the seconds of the Go duration `text`, or None (the option's default) when
        it does not parse or is not above zero."""
        try:
            seconds = go_seconds(text.strip())
        except ValueError:
            return None
        return seconds if seconds > 0 else None

    def samples(self) -> tuple[str, ...]:
        """Return three distinct Go durations above zero."""
        return ("5s", "1m30s", "250ms")


def lenient_warning(source: str, text: str, default_s: float) -> str:
    """Return the start-up warning for `source` given `text`, a LenientGoDuration value that
    did not parse and so stands for the default `default_s`, which is used instead."""
    return (f"{source}={text}: not a Go duration above zero (such as 10s or 1m30s); using "
            f"the default {go_text(default_s)}")


@dataclass(frozen=True, slots=True)
class Choice(Value[L]):
    """One of a closed set; `values` are the members of the option's Literal type."""

    values: tuple[L, ...]
    fold_case: bool = False
    """Accept any letter case from the environment (flags are checked by argparse as-is)."""

    def parse(self, text: str, where: str) -> L:
        """Return the member of `values` that `text` names (in any letter case with
        `fold_case`); ConfigError, listing the members, for any other text."""
        wanted = text.lower() if self.fold_case else text
        for value in self.values:
            if value == wanted:
                return value
        raise ConfigError(f"{where}: {text!r}; expected {_or_list(self.values)}")

    def choices(self) -> tuple[str, ...]:
        """Return the members, which argparse checks a flag's value against."""
        return self.values

    def samples(self) -> tuple[str, ...]:
        """Return the members: each is a valid value, distinct from the others."""
        return self.values


ListenAddress = tuple[str | None, int]
"""A listening address as (host, port); a host of None listens on every interface."""


def parse_listen(text: str, where: str) -> ListenAddress:
    """Return the (host, port) of `text`, written `HOST:PORT`, `[IPv6]:PORT` or `:PORT` (an
    empty host is None: every interface); ConfigError, naming `where`, when there is no port
    or it is not a number from 0 to 65535."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ConfigError(f"{where}: {text!r} is not HOST:PORT or :PORT")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{where}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{where}: port {number} is out of range")
    return (host.strip("[]") or None), number


@dataclass(frozen=True, slots=True)
class Listen(Value[ListenAddress]):
    """An address to listen on, `[HOST]:PORT` (see parse_listen)."""

    metavar = "[HOST]:PORT"

    def parse(self, text: str, where: str) -> ListenAddress:
        """Return the (host, port) `text` names (see parse_listen)."""
        return parse_listen(text, where)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct addresses: IPv4, every interface, and IPv6."""
        return ("127.0.0.1:9401", ":9402", "[::1]:9403")


@dataclass(frozen=True, slots=True)
class Devices(Value[DeviceFilter]):
    """The devices to export, in dcgm-exporter's selection syntax: f, g, i, g:0,1, i:0-2."""

    metavar = "SELECTION"

    def parse(self, text: str, where: str) -> DeviceFilter:
        """Return the device filter `text` selects; ConfigError, naming `where`, for text
        that is not a selection."""
        try:
            return parse_device_filter(text, where)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def samples(self) -> tuple[str, ...]:
        """Return three distinct selections."""
        return ("g:0,1", "i", "g")


@dataclass(frozen=True, slots=True)
class DeviceSelection(Value[str]):
    """The same grammar as Devices, kept as text (for -s and -p, which select entities not
    exported here: checked as dcgm-exporter checks them, then only warned about)."""

    metavar = "SELECTION"

    def parse(self, text: str, where: str) -> str:
        """Return `text` unchanged once it is checked as a device selection; ConfigError
        when it is not one."""
        Devices().parse(text, where)
        return text

    def samples(self) -> tuple[str, ...]:
        """Return three distinct selections."""
        return ("f", "g:0+i", "i:0-3")


_HOSTENGINE_HINT = "HOST:PORT, tcp://HOST:PORT, unix:///PATH or vsock://CID:PORT"


def _host_and_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    if not sep:  # a bare host: DCGM's default port
        host, port = text, "5555"
    if host.startswith("["):
        host = host.removeprefix("[").removesuffix("]")
    return bool(host) and " " not in host and "/" not in host and port.isdigit() \
        and int(port) <= 65535


def parse_hostengine(text: str, where: str) -> str:
    """Return `text` unchanged once it is checked as dcgm-exporter 4.8.3 checks its `-r`:
    HOST[:PORT], or a DCGM URI (`tcp://`, `unix://` or `vsock://`, the scheme in any case);
    ConfigError, naming `where` and the forms expected, otherwise."""
    scheme, sep, rest = text.strip().partition("://")
    if not sep:
        valid = _host_and_port(text.strip())
    elif scheme.lower() == "tcp":
        valid = ":" in rest and _host_and_port(rest)
    elif scheme.lower() == "unix":
        valid = rest.startswith("/") and len(rest) > 1
    elif scheme.lower() == "vsock":
        cid, colon, port = rest.partition(":")
        valid = bool(colon) and cid.isdigit() and int(cid) < 2**32 and port.isdigit() \
            and int(port) < 2**32
    else:
        valid = False
    if not valid:
        raise ConfigError(f"{where}: {durations.shown(text)} is not a hostengine address "
                          f"(expected {_HOSTENGINE_HINT})")
    return text


@dataclass(frozen=True, slots=True)
class Hostengine(Value[str]):
    """The address of a DCGM hostengine, as dcgm-exporter's `-r` takes it."""

    metavar = "ADDRESS"

    def parse(self, text: str, where: str) -> str:
        """Return `text` unchanged once it is checked (see parse_hostengine)."""
        return parse_hostengine(text, where)

    def samples(self) -> tuple[str, ...]:
        """Return three distinct addresses: a host, a TCP URI and a Unix socket URI."""
        return ("nv-hostengine:5555", "tcp://10.0.0.1:5555", "unix:///run/dcgm.sock")


@dataclass(frozen=True, slots=True)
class Regex(Value[str]):
    """A Python regular expression, checked at start-up; the text is kept."""

    metavar = "REGEX"

    def parse(self, text: str, where: str) -> str:
        """Return `text` unchanged once it compiles; ConfigError with the compiler's reason
        when it does not."""
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigError(f"{where}: {text!r} is not a valid regex: {exc}") from None
        return text

    def samples(self) -> tuple[str, ...]:
        """Return three distinct regular expressions."""
        return ("team|app", "^a$", "b.*")


@dataclass(frozen=True, slots=True)
class PodLabels(Value[PodLabelSelection]):
    """The pod labels to copy (`--kubernetes.pod-labels`): one or more preset names separated
    by commas (`inference`, `llm-d,kai`), else a regex of label keys. A key named like a
    preset is still reachable as a regex: `^(llm-d)$`."""

    metavar = "REGEX|PRESET"

    def parse(self, text: str, where: str) -> PodLabelSelection:
        """Return the presets `text` names where it is a list of preset names, else `text`
        as a regex of label keys (ConfigError when it does not compile)."""
        presets = parse_presets(text)
        if presets is not None:
            return PodLabelSelection(presets=presets)
        return PodLabelSelection(regex=Regex().parse(text, where))

    def samples(self) -> tuple[str, ...]:
        """Return a regex, one preset and two presets."""
        return ("team|app", "inference", "llm-d,kai")


@dataclass(frozen=True, slots=True)
class RegexList(Value[tuple[str, ...]]):
    """Regular expressions separated by commas (dcgm-exporter splits them so, whatever a
    regex's own commas mean), each checked at start-up; blanks around them are dropped."""

    metavar = "REGEXES"

    def parse(self, text: str, where: str) -> tuple[str, ...]:
        """Return the regular expressions between the commas of `text`, blanks dropped, once
        each compiles; ConfigError names the first that does not."""
        patterns = Separated(",").parse(text, where)
        for pattern in patterns:
            Regex().parse(pattern, where)
        return patterns

    def samples(self) -> tuple[str, ...]:
        """Return three distinct lists, one of them of two regular expressions."""
        return ("^team$", "app.*, tier", "^a")


_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
"""A Kubernetes object name (DNS subdomain; namespaces are the stricter DNS label)."""

ConfigMapName = tuple[str, str]
"""A ConfigMap's (namespace, name)."""


@dataclass(frozen=True, slots=True)
class ConfigMapRef(Value[ConfigMapName | None]):
    """A ConfigMap named `<namespace>:<name>`, or `none` for none (dcgm-exporter's `-m`)."""

    metavar = "NAMESPACE:NAME"

    def parse(self, text: str, where: str) -> ConfigMapName | None:
        """Return the (namespace, name) `text` names, or None for `none`; ConfigError when
        either part is not a valid Kubernetes name."""
        if text.strip().lower() == "none":
            return None
        namespace, _, name = text.strip().partition(":")
        if not (_K8S_NAME.fullmatch(namespace) and _K8S_NAME.fullmatch(name)):
            raise ConfigError(f"{where}: {text!r} is not NAMESPACE:NAME of a ConfigMap "
                              "(or none)")
        return namespace, name

    def samples(self) -> tuple[str, ...]:
        """Return two distinct ConfigMaps and `none`."""
        return ("gpu-operator:metrics", "none", "monitoring:dcgm")


@dataclass(frozen=True, slots=True)
class Separated(Value[tuple[str, ...]]):
    """Several items in one value, e.g. "a, b"; blanks around and between are dropped."""

    separator: str = ","
    metavar = "LIST"

    def parse(self, text: str, where: str  # noqa: ARG002 (a Value: never fails)
              ) -> tuple[str, ...]:
        """Return the items of `text` between separators, blanks dropped and empty items
        left out."""
        return tuple(item.strip() for item in text.split(self.separator) if item.strip())

    def samples(self) -> tuple[str, ...]:
        """Return three distinct lists, one of them of two items."""
        return ("a.io/gpu", "b.io/gpu, c.io/gpu", "d.io/gpu")


@dataclass(frozen=True, slots=True)
class Repeated(Value[tuple[T, ...]]):
    """A flag given once per item; its environment variable holds the items separated by
    `separator`, e.g. GPU_EXPORTER_SIM_FAULTS="xid,code=79,at=5s;lost,gpu=1,at=9s"."""

    item: Value[T]
    separator: str = ";"
    action = "append"
    metavar = "VALUE"

    def env_separator(self) -> str:
        """Return `separator`, which parts the items in the environment variable."""
        return self.separator

    def parse(self, text: str, where: str) -> tuple[T, ...]:
        """Return the items of a variable's `text`, split at `separator` (blank parts are
        skipped), each parsed by `item`."""
        return tuple(self.item.parse(part, where)
                     for part in text.split(self.separator) if part.strip())

    def from_flag(self, given: FlagValue, where: str) -> tuple[T, ...]:
        """Return the items of a flag given once per item, each parsed by `item`."""
        if not isinstance(given, list):
            raise TypeError(f"{where}: argparse gave {given!r} to a repeatable flag")
        return tuple(self.item.parse(part, where) for part in given)

    def samples(self) -> tuple[str, ...]:
        """Return the item type's samples, each a valid list of one item."""
        return tuple(self.item.samples())
