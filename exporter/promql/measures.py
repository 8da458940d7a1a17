"""PromQL that reads a GPM measure where a GPU has it, and NVML's counterpart where it does
not (GPUs older than Hopper; `exporter.fields.gpm_fallbacks` says which counterpart).

Every artifact that reads a GPM field - dashboards, alert and recording rules, KEDA objects,
the report - takes it from here, so the fallback is written once.

A GPU is never counted twice: the NVML side is joined with `or on (UUID)`, so it adds the
series of GPUs none of whose series reads the GPM field. Matching on the GPU rather than on
every label matters where the two live on different series: under MIG, GPM answers per GPU
instance while the NVLink counter sits on the parent GPU's series, and a plain `or` (all
labels but the name) would keep both. MIG series carry their parent's UUID. MIG instances of
a GPU without GPM have no value at all (NVML reports no utilisation under MIG).

The fallback is applied to raw series, before any aggregation, so the `or` always compares
device series with device series. Callers aggregate the result.

Generators that use only the fields a collectors file enables compose placeholders
(`Measure.select`) into their PromQL and `resolve` them once the fields are known: a
placeholder becomes PromQL over the enabled sources only, and a query whose measure has no
enabled source is dropped. Placeholders are never valid PromQL, so one that escapes shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from exporter.fields import gpm_fallbacks as facts
from exporter.fields.gpm_fallbacks import GpmMeasure

GPU = "UUID"
"""What the NVML side is matched on: the physical GPU."""

Enabled = Callable[[str], bool]
"""Whether a field is enabled (collected)."""
Wrap = Callable[[str], str]
"""What is done to each source's series before the sources are joined: a range function
over a window (`sum_over_time(x[1h:1m])`), a filter (`(x and on(UUID) y)`). It is applied to
each field's selector, before a counterpart's scale, so it must be linear for a measure that
sums several GPM fields."""


def everything(_field: str) -> bool:
    """Return True whatever the field: the default when every source may be read, for queries not
    bound to a collectors file."""
    return True


def as_is(selector: str) -> str:
    """Return `selector` unchanged: the default wrap, reading each source's series as they are."""
    return selector


_OPEN, _SEP, _CLOSE = "\u27e6", "\u00a6", "\u27e7"
_TOKEN = re.compile(f"{_OPEN}([^{_OPEN}{_CLOSE}]*){_CLOSE}")


def _one_of(parts: list[str]) -> str:
    """Return the alternatives joined with `or` (a series matching several is kept once)."""
    return parts[0] if len(parts) == 1 else f"({' or '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Measure:
    """A GPM measure as PromQL reads it: the GPM fields it sums and the NVML counterpart read on
    GPUs without GPM, from the facts in `exporter.fields.gpm_fallbacks`."""

    facts: GpmMeasure

    @property
    def key(self) -> str:
        """Return the measure's short name, the one its placeholders carry."""
        return self.facts.key

    def select(self, *selectors: str, window: str | None = None) -> str:
        """Return a placeholder for the measure on series matching any of `selectors` (label
        matcher blocks, `{...}`); `window` is the rate window of a counter counterpart.
        `resolve` turns it into PromQL."""
        blocks = selectors or ("",)
        for part in (*blocks, window or ""):
            if any(c in part for c in (_OPEN, _SEP, _CLOSE)):
                raise ValueError(f"a selector may not hold {_OPEN}{_SEP}{_CLOSE}: {part!r}")
        counterpart = self.facts.nvml
        if counterpart is not None and counterpart.counter and not window:
            raise ValueError(f"{self.key} falls back to the counter {counterpart.field}: "
                             "give its rate window")
        return _OPEN + _SEP.join((self.key, window or "", *blocks)) + _CLOSE

    def _gpm(self, blocks: tuple[str, ...], enabled: Enabled, wrap: Wrap = as_is
             ) -> str | None:
        if not all(enabled(f) for f in self.facts.gpm):
            return None
        terms = [" + ".join(wrap(f"{f}{b}") for f in self.facts.gpm) for b in blocks]
        return _one_of([t if len(self.facts.gpm) == 1 else f"({t})" for t in terms])

    def _nvml(self, blocks: tuple[str, ...], window: str | None, enabled: Enabled,
              wrap: Wrap = as_is) -> str | None:
        counterpart = self.facts.nvml
        if counterpart is None or not enabled(counterpart.field):
            return None
        scale = (f"/ {1 / counterpart.scale:g}" if counterpart.scale < 1
                 else f"* {counterpart.scale:g}")
        if counterpart.counter:
            if not window:
                raise ValueError(f"{self.key}: no rate window for {counterpart.field}")
            if wrap is not as_is:
                raise ValueError(f"{self.key}: the counter {counterpart.field} takes no wrap")
            terms = [f"rate({counterpart.field}{b}[{window}]) {scale}" for b in blocks]
        else:
            terms = [f"{wrap(counterpart.field + b)} {scale}" for b in blocks]
        return _one_of(terms)

    def promql(self, *selectors: str, window: str | None = None,
               enabled: Enabled = everything) -> str | None:
        """Return the measure on series matching any of `selectors`, from its enabled sources: GPM
        where a GPU has it, else NVML's counterpart. None when no source is enabled."""
        blocks = selectors or ("",)
        gpm = self._gpm(blocks, enabled)
        nvml = self._nvml(blocks, window, enabled)
        if gpm is not None and nvml is not None:
            return f"({gpm} or on ({GPU}) {nvml})"
        if nvml is not None:
            return f"({nvml})"
        return gpm

    def labelled(self, label: str, gpm_value: str, nvml_value: str, *selectors: str,
                 enabled: Enabled = everything, wrap: Wrap = as_is) -> str | None:
        """Return what `promql` returns, each series labelled with where it came from (`label`:
        `gpm_value` or `nvml_value`), one alternative a line. Labels added this way differ between
        the two sides, which is why the join matches on the GPU alone. `wrap` is applied to each
        field's series first (a range function over a window: the choice between GPM and NVML is
        then made once per GPU and window)."""
        blocks = selectors or ("",)
        sides = [(side, value) for side, value in (
            (self._gpm(blocks, enabled, wrap), gpm_value),
            (self._nvml(blocks, None, enabled, wrap), nvml_value)) if side is not None]
        if not sides:
            return None
        return f"\nor on({GPU})\n".join(
            f'label_replace({side}, "{label}", "{value}", "", "")' for side, value in sides)


GR_ENGINE, DRAM, NVLINK_BYTES = (Measure(m) for m in (facts.GR_ENGINE, facts.DRAM,
                                                      facts.NVLINK_BYTES))
_BY_KEY = {m.key: m for m in (Measure(f) for f in facts.MEASURES)}


def read(source: str | Measure, *selectors: str, window: str | None = None) -> str:
    """Return a plain field or a measure on series matching any of `selectors`: a field as
    `name{...}` (alternatives joined with `or`), a measure as its placeholder."""
    if isinstance(source, Measure):
        return source.select(*selectors, window=window)
    return _one_of([source + block for block in selectors or ("",)])


def resolve(expr: str, enabled: Enabled = everything) -> str | None:
    """Return `expr` with every placeholder turned into PromQL over the enabled sources; None when
    a measure in it has none."""
    missing: list[str] = []

    def expand(match: re.Match[str]) -> str:
        key, window, *blocks = match.group(1).split(_SEP)
        text = _BY_KEY[key].promql(*blocks, window=window or None, enabled=enabled)
        if text is None:
            missing.append(key)
            return ""
        return text

    out = _TOKEN.sub(expand, expr)
    return None if missing else out


def measures_in(expr: str) -> list[GpmMeasure]:
    """Return the measures whose placeholders `expr` holds, in order, each once."""
    keys = dict.fromkeys(m.group(1).split(_SEP)[0] for m in _TOKEN.finditer(expr))
    return [_BY_KEY[key].facts for key in keys]


def unresolved(expr: str) -> bool:
    """Tell whether `expr` still holds a placeholder (or a piece of one)."""
    return any(c in expr for c in (_OPEN, _SEP, _CLOSE))
