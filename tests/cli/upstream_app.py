"""dcgm-exporter's flag table, read from its own `pkg/cmd/app.go` (the 4.8.4 copy in
tests/fixtures): every urfave/cli flag struct's Name (following the `CLI*` constants),
Aliases, EnvVars and, where it is a literal, its default Value."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT

APP_GO = ROOT / "tests" / "fixtures" / "dcgm-exporter-4.8.4" / "app.go"


@dataclass(frozen=True)
class Upstream:
    """One flag of dcgm-exporter: its spellings, its variable and its literal default."""

    kind: str
    """urfave/cli's flag type: String, Bool, Int, Int64, Duration, StringSlice."""
    flags: tuple[str, ...]
    """`--name` first, then each alias as dcgm-exporter's docs write it (`-f`, `-rbmn`)."""
    env: tuple[str, ...]
    default: str | None
    """The Value as text where app.go gives a literal (or a string constant), else None."""


_CONST = re.compile(r'^\s*(\w+)\s*=\s*"([^"]*)"', re.MULTILINE)
_FLAG = re.compile(r"&cli\.(\w+)Flag\{(.*?)\n\t*\}", re.DOTALL)
_STRINGS = re.compile(r'"([^"]*)"')


def _field(body: str, name: str) -> str | None:
    found = re.search(rf"^\s*{name}:\s*(.+?),?\s*$", body, re.MULTILINE)
    return found.group(1) if found else None


def _text(expr: str, constants: dict[str, str]) -> str | None:
    """A Go expression's value where it is a literal or a constant of this file."""
    if (quoted := re.fullmatch(r'"([^"]*)"', expr)) is not None:
        return quoted.group(1)
    if re.fullmatch(r"-?\d+|true|false", expr):
        return expr
    return constants.get(expr)


def upstream_flags(path: Path = APP_GO) -> list[Upstream]:
    source = path.read_text(encoding="utf-8")
    constants = dict(_CONST.findall(source))
    found = []
    for kind, body in _FLAG.findall(source):
        name_expr = _field(body, "Name")
        assert name_expr is not None, body
        name = _text(name_expr, constants)
        assert name, f"{name_expr}: not a constant of app.go"
        aliases = _STRINGS.findall(_field(body, "Aliases") or "")
        env = tuple(_STRINGS.findall(_field(body, "EnvVars") or ""))
        value = _field(body, "Value")
        found.append(Upstream(kind, (f"--{name}", *(f"-{a}" for a in aliases)), env,
                              None if value is None else _text(value, constants)))
    return found


def cli_constants(path: Path = APP_GO) -> set[str]:
    """The names of app.go's `CLI*` constants (every flag has one)."""
    source = path.read_text(encoding="utf-8")
    return {value for key, value in _CONST.findall(source) if key.startswith("CLI")}
