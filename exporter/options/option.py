"""An option as the table declares it, and what resolving it gave: the value and its source."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, cast

from exporter.options.values import Switch, Value

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

Command = Literal["serve", "doctor", "generate", "report", "advise"]


def first_long_flag(flags: tuple[str, ...]) -> str | None:
    """Return the spelling that errors and reports name an option by: its first long flag,
    else its first flag, or None where there is no flag."""
    return next((f for f in flags if f.startswith("--")), flags[0] if flags else None)


@dataclass(frozen=True, slots=True)
class Alias(Generic[T_co]):
    """dcgm-exporter's spelling of one of our options where its text reads differently:
    `-x 300000` is milliseconds where `--xid-count-window 300` is seconds, and the switch
    `--debug` is `--log-level debug`. Its flags and variables are consulted after the
    option's own (ours before dcgm-exporter's)."""

    value: Value[T_co]
    help: str
    """What the spelling means, said relative to the option (markdown, like Option.help)."""
    flags: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    @property
    def flag(self) -> str | None:
        """Return the spelling that errors and reports name this alias by (first_long_flag)."""
        return first_long_flag(self.flags)


@dataclass(frozen=True, slots=True)
class Option(Generic[T_co]):
    """One setting, declared once: how it is given, parsed and documented, and by whom used.

    The value comes from the flag when given, else from the first non-empty variable of
    `env` (ours before dcgm-exporter's), else `default`.
    """

    name: str
    """The option's identifier, which is also its argparse destination; with spaces for
    underscores, it is the label doctor shows."""
    value: Value[T_co]
    default: T_co
    help: str
    """What the option does, in one line of markdown: `code` in backticks, kept in the docs'
    flag tables and dropped in --help."""
    commands: frozenset[Command]
    flags: tuple[str, ...] = ()
    """Spellings on the command line; none for a setting read only from the environment."""
    env: tuple[str, ...] = ()
    """The environment variables read, in precedence order."""
    default_text: str | None = None
    """The default as the flag tables show it (markdown), or None to show `default` itself."""
    metavar: str | None = None
    """The placeholder after the flag in --help and the flag tables, or None for the value
    type's."""
    group: str | None = None
    """The heading this option is listed under in --help."""
    ignored: str | None = None
    """Set for a flag accepted only so that dcgm-exporter's command lines keep working: why it
    has no effect here. Setting it yields a start-up warning instead of an error."""
    aliases: tuple[Alias[T_co], ...] = ()
    """Other spellings whose text is parsed their own way (see Alias)."""
    fills: str | None = None
    """The settings field this option's value fills, `<settings>.<field>`, e.g.
    `web.openmetrics` (`exporter.config.SETTINGS` names each settings object): the
    serve configuration copies the value there with no further code. None: a value that
    code in `exporter/config.py` combines with others, or a command other than serve's."""

    @property
    def flag(self) -> str | None:
        """Return the spelling that errors and reports name the option by (first_long_flag):
        None for an option read only from the environment."""
        return first_long_flag(self.flags)

    @property
    def all_flags(self) -> tuple[str, ...]:
        """Return every command-line spelling of the option, its aliases' included."""
        return (*self.flags, *(f for a in self.aliases for f in a.flags))

    @property
    def all_env(self) -> tuple[str, ...]:
        """Return every variable the option reads, in precedence order (its aliases' after its
        own)."""
        return (*self.env, *(e for a in self.aliases for e in a.env))

    @property
    def label(self) -> str:
        """Return the option's name with spaces for underscores, as doctor's report shows it."""
        return self.name.replace("_", " ")

    def shown_default(self) -> str:
        """Return the default as the flag tables show it (markdown; "" when there is none)."""
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.value, Switch):
            return "on" if self.default else "off"
        if self.default is None or self.default == ():
            return ""
        return f"`{self.default}`"


def declared_options(namespace: Mapping[str, object]) -> tuple[Option[object], ...]:
    """Return the options a table module declares, in the order it declares them: pass the
    module's `globals()`, so that declaring an option is what lists it (no second list)."""
    found: dict[int, Option[object]] = {}
    for value in namespace.values():
        if isinstance(value, Option):
            found.setdefault(id(value), value)
    return tuple(found.values())


@dataclass(frozen=True, slots=True)
class Setting(Generic[T_co]):
    """An option's resolved value and where it came from."""

    option: Option[T_co]
    value: T_co
    source: str | None
    """The flag (`--scope`) or variable (`$GPU_EXPORTER_SCOPE`) it was read from, or None
    where the value is the default."""
    text: str = ""
    """The text as given (flags without argument: "on")."""

    @property
    def from_command_line(self) -> bool:
        """Return whether the value was read from a flag rather than a variable or the
        default."""
        return self.source is not None and not self.source.startswith("$")

    def describe(self) -> str:
        """Return one line naming the option, its text and where it came from, e.g.
        "collect interval 30000 (from $DCGM_EXPORTER_INTERVAL)", as doctor lists each setting
        not at its default."""
        where = "the command line" if self.from_command_line else self.source or "default"
        return f"{self.option.label} {self.text or repr('')} (from {where})"

    def ignored_warning(self) -> str | None:
        """Return the start-up warning, saying why it has no effect here, for a
        compatibility-only option that was set; None for any other setting."""
        if self.option.ignored is None or self.source is None:
            return None
        # A bare switch reads "--fake-gpus"; one given a value, "--fake-gpus=false".
        switched = self.from_command_line and self.option.value.action == "switch" \
            and self.text == "on"
        given = self.source if switched else f"{self.source}={self.text}"
        reason = self.option.ignored.replace("`", "")  # markdown in the table, plain in logs
        return f"{given}: accepted for compatibility; ignored because {reason}"


@dataclass(frozen=True, slots=True)
class Resolution:
    """Every option of one command, resolved."""

    command: Command
    settings: Mapping[str, Setting[object]] = field(default_factory=dict)

    def __getitem__(self, option: Option[T]) -> T:
        """Return the resolved value of `option`; KeyError when the command does not take it."""
        return self.setting(option).value

    def get(self, option: Option[T], otherwise: T) -> T:
        """Return the resolved value of `option`, or `otherwise` where the command does not
        take the option."""
        return self[option] if option.name in self.settings else otherwise

    def setting(self, option: Option[T]) -> Setting[T]:
        """Return the resolved setting of `option`, its value with its source; KeyError when
        the command does not take this very option."""
        found = self.settings.get(option.name)
        if found is None or found.option is not option:
            raise KeyError(f"option {option.name!r} is not one of `{self.command}`'s")
        # The identity check above is what makes the narrowing sound: the setting was
        # resolved from this very option, so its value has the option's type.
        return cast("Setting[T]", found)

    def changed(self) -> list[Setting[object]]:
        """Return the settings that a flag or variable gave, in table order: those that did
        not simply fall back to their default."""
        return [s for s in self.settings.values() if s.source is not None]

    def warnings(self) -> list[str]:
        """Return one warning per compatibility-only option that was set, for the caller to
        log once at start-up."""
        return [w for s in self.settings.values() if (w := s.ignored_warning()) is not None]
