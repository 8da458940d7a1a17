"""The one way from a report's options to what it runs: the connection and the request.

`gpu-exporter report` resolves its options from flags and the environment
(`exporter.options`); the library call (`exporter.report.usage`) takes them as keywords named
as the option table names them (`idle_below=`, `max_chunk=`), read by `from_keywords` with
the table's own value types. Both then go through `build`: the same defaults (the table's),
the same checks, and the same message for a bad value, naming the option as the caller wrote
it: the flag (`--idle-below`, or the variable it came from) or the keyword (`idle_below`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path, PurePath
from typing import Literal

from exporter.options import ConfigError, Option, Resolution, Setting
from exporter.options import report_table as opt
from exporter.options.values import Repeated
from exporter.report.compute import ReportRequest
from exporter.report.connection import Connection, ReportError
from exporter.report.prices import load_prices
from exporter.report.query_plan import check_window_count

Spelling = Literal["flags", "keywords"]
"""How the caller names options: the command's flags, or the library call's keywords."""

COMMAND_LINE_ONLY: frozenset[str] = frozenset(
    o.name for o in (opt.PROMETHEUS, opt.FORMAT, opt.OUTPUT, opt.PROGRESS_OPTION))
"""Options the library call takes no keyword for: the server is its first argument, and it
returns frames instead of writing one format to a file."""
KEYWORD_OPTIONS: tuple[Option[object], ...] = tuple(
    o for o in opt.REPORT_OPTIONS if o.name not in COMMAND_LINE_ONLY)
"""The library call's keywords, each named as its option is."""
SERVER_ARGUMENT = "prometheus"
"""The library call's name for `--prometheus`: its first argument."""


def spelled(settings: Resolution, option: Option[object], spelling: Spelling) -> str:
    """Return the option as the caller wrote it (its keyword; its flag, or the variable it came
    from)."""
    if spelling == "keywords":
        return SERVER_ARGUMENT if option is opt.PROMETHEUS else option.name
    source = settings.setting(option).source
    if source is not None and source.startswith("$"):
        return source
    return option.flag or option.name


# -- the library call's keywords --------------------------------------------------------------


def _text(given: object, where: str) -> str:
    """Return a keyword's value as the text a flag would carry, so the table's parser reads it."""
    if isinstance(given, str):
        return given
    if isinstance(given, bool):
        return "true" if given else "false"
    if isinstance(given, int | float):
        return repr(given)
    if isinstance(given, datetime):
        return repr(given.timestamp())
    if isinstance(given, PurePath):
        return str(given)
    raise ConfigError(f"{where}: {given!r} is not text, a number, a time or a path")


def _items(given: object, where: str) -> list[str]:
    """Return a repeatable option's items: a mapping (headers: name -> value) or a list of text."""
    if isinstance(given, Mapping):
        return [f"{name}: {value}" for name, value in given.items()]
    if isinstance(given, Sequence) and not isinstance(given, str) and all(
            isinstance(item, str) for item in given):
        return list(given)
    raise ConfigError(f"{where}: {given!r}; expected a mapping or a list of text")


def _keyword_setting(option: Option[object], given: object, where: str) -> Setting[object]:
    if given is None:
        return Setting(option, option.default, None)
    value = option.value
    if isinstance(value, Repeated):
        items = _items(given, where)
        return Setting(option, tuple(value.item.parse(i, where) for i in items), where,
                       "; ".join(items))
    text = _text(given, where)
    if text == "":  # as an empty flag: the default
        return Setting(option, option.default, where, text)
    return Setting(option, value.parse(text, where), where, text)


def from_keywords(prometheus: str, keywords: Mapping[str, object]) -> Resolution:
    """Return the report's options from the library call's arguments; ConfigError names the first
    keyword that is unknown or whose value its option refuses."""
    known = {o.name for o in KEYWORD_OPTIONS}
    unknown = sorted(set(keywords) - known)
    if unknown:
        raise ConfigError(f"{unknown[0]}: not an option of the report (expected one of "
                          f"{', '.join(sorted(known))})")
    settings: dict[str, Setting[object]] = {}
    for option in opt.REPORT_OPTIONS:
        given = prometheus if option is opt.PROMETHEUS else keywords.get(option.name)
        where = SERVER_ARGUMENT if option is opt.PROMETHEUS else option.name
        settings[option.name] = _keyword_setting(option, given, where)
    return Resolution("report", settings)


# -- one builder for both ---------------------------------------------------------------------


def build(settings: Resolution, now: float, spelling: Spelling
          ) -> tuple[Connection, ReportRequest]:
    """Return what the report runs with: how to reach the server and what to ask it. ConfigError
    names the option at fault, as `spelling` writes it; nothing is asked of the server."""
    return connection(settings, spelling), _request(settings, now, spelling)


def _read_secret(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None


def parse_header(text: str, where: str) -> tuple[str, str]:
    """Return the name and value of a header given as `NAME: VALUE`; raise ConfigError naming
    `where` (the option that gave it) when it is not of that form."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"{where} {text!r}: expected 'NAME: VALUE'")
    return name.strip(), value.strip()


def connection(settings: Resolution, spelling: Spelling) -> Connection:
    """Return how to reach the server, built from the connection options (which `advise` shares);
    raise ConfigError naming the option at fault."""
    def name(option: Option[object]) -> str:
        return spelled(settings, option, spelling)

    url = settings[opt.PROMETHEUS]
    if not url:
        alternative = f" (or ${opt.PROMETHEUS.env[0]})" if spelling == "flags" else ""
        raise ConfigError(f"{name(opt.PROMETHEUS)} URL is required{alternative}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{name(opt.PROMETHEUS)} {url!r}: expected an http:// or https:// URL")
    headers: list[tuple[str, str]] = []
    token = settings[opt.BEARER_TOKEN]
    token_file = settings[opt.BEARER_TOKEN_FILE]
    if token_file is not None:
        token = _read_secret(token_file, name(opt.BEARER_TOKEN_FILE))
    user = settings[opt.BASIC_AUTH_USER]
    password = settings[opt.BASIC_AUTH_PASSWORD]
    password_file = settings[opt.BASIC_AUTH_PASSWORD_FILE]
    if password_file is not None:
        password = _read_secret(password_file, name(opt.BASIC_AUTH_PASSWORD_FILE))
    if token and user:
        raise ConfigError("give a bearer token or basic authentication, not both")
    if token:
        headers.append(("Authorization", f"Bearer {token}"))
    elif user:
        pair = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        headers.append(("Authorization", f"Basic {pair}"))
    elif password:
        raise ConfigError(f"a basic authentication password needs {name(opt.BASIC_AUTH_USER)}")
    headers += [parse_header(h, name(opt.HEADERS)) for h in settings[opt.HEADERS]]
    if settings[opt.KEY_FILE] is not None and settings[opt.CERT_FILE] is None:
        raise ConfigError(f"{name(opt.KEY_FILE)} needs {name(opt.CERT_FILE)}")
    return Connection(
        url=url.rstrip("/"), headers=tuple(headers), timeout_s=settings[opt.TIMEOUT],
        ca_file=settings[opt.CA_FILE], cert_file=settings[opt.CERT_FILE],
        key_file=settings[opt.KEY_FILE], insecure_skip_verify=settings[opt.INSECURE],
        secret_headers=frozenset({"Authorization"}),
    )


def _request(settings: Resolution, now: float, spelling: Spelling) -> ReportRequest:
    def name(option: Option[object]) -> str:
        return spelled(settings, option, spelling)

    given_end, given_start = settings[opt.END], settings[opt.START]
    end = now if given_end is None else given_end
    start = end - settings[opt.LAST] if given_start is None else given_start
    if end <= start:
        raise ConfigError(f"{name(opt.START)} must come before {name(opt.END)}")
    below = settings[opt.IDLE_BELOW]
    if not 0 < below <= 100:
        raise ConfigError(f"{name(opt.IDLE_BELOW)} {below:g}: expected a percentage above 0, "
                          "up to 100")
    if settings[opt.TOP] < 0:
        raise ConfigError(f"{name(opt.TOP)} must not be negative")
    for option in (opt.PRICE, opt.GRID_INTENSITY):
        figure = settings[option]
        if figure is not None and figure < 0:
            raise ConfigError(f"{name(option)} {figure:g}: expected zero or more")
    step, idle_window = settings[opt.STEP], settings[opt.IDLE_WINDOW]
    try:
        # Before any query: rounding the widths up to the source's unit only lowers the count.
        if step is not None:
            check_window_count(end - start, step, name(opt.STEP))
        check_window_count(end - start, idle_window, name(opt.IDLE_WINDOW))
        prices = load_prices(settings[opt.PRICE_FILE], settings[opt.PRICE],
                             name(opt.PRICE_FILE))
    except ReportError as exc:
        raise ConfigError(str(exc)) from None
    chunk = settings.setting(opt.MAX_CHUNK)
    return ReportRequest(
        start=start, end=end, group_by=settings[opt.GROUP_BY], step_s=step,
        resolution_s=settings[opt.RESOLUTION], source=settings[opt.SOURCE],
        # Not given: the source decides (a day over raw series, 30 days over the rules).
        max_chunk_s=chunk.value if chunk.source is not None else None,
        idle_below_pct=below, idle_window_s=idle_window, top=settings[opt.TOP],
        prices=prices, grid_intensity_g_per_kwh=settings[opt.GRID_INTENSITY])
