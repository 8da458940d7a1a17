"""Every option of every command that takes a duration, a number or a time: any text gives a
finite value in range or an error that names the option, never an exception from deeper down
(an infinite range once ended `report` in an OverflowError traceback)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.durations import MAX_SECONDS, UNIT_SECONDS
from exporter.options import OPTIONS, ConfigError, Option
from exporter.options.option import first_long_flag
from exporter.options.report_table import Instant, Span
from exporter.options.values import Duration, Number

KINDS = (Duration, Span, Number, Instant)
OPTIONS_WITH_NUMBERS = [o for o in OPTIONS if isinstance(o.value, KINDS)]
DURATION_OPTIONS = [o for o in OPTIONS_WITH_NUMBERS if isinstance(o.value, Duration | Span)]

number = st.one_of(
    st.integers(0, 10**6).map(str),
    st.decimals(0, 10**6, places=3, allow_nan=False, allow_infinity=False).map(str),
    st.floats().map(repr),
    st.text("0123456789.eE+-", min_size=1, max_size=40),
    st.integers(1, 400).map(lambda digits: "9" * digits),
    st.sampled_from(["inf", "-inf", "nan", "NaN", "Infinity", "1e400", "1e-400", "-0"]),
)
unit = st.sampled_from(["", *UNIT_SECONDS, "us", "S", "1"])
textish = st.one_of(
    st.text(max_size=24),
    st.builds(lambda n, u: f"{n}{u}", number, unit),
    st.lists(st.builds(lambda n, u: f"{n}{u}", number, unit), min_size=2, max_size=4
             ).map("".join),
)


def _name(option: Option[object]) -> str:
    return first_long_flag(option.flags) or option.env[0]


def test_every_kind_is_covered() -> None:
    # The search below is only as good as the list it walks.
    assert {type(o.value) for o in OPTIONS_WITH_NUMBERS} == set(KINDS)
    assert len(DURATION_OPTIONS) >= 8


@pytest.mark.parametrize("option", OPTIONS_WITH_NUMBERS, ids=_name)
@given(text=textish)
@example(text="inf")
@example(text="1e400s")
@example(text="9" * 400 + "y")
def test_a_value_is_finite_or_refused_naming_the_option(option: Option[object],
                                                         text: str) -> None:
    where = _name(option)
    try:
        value = option.value.parse(text, where)
    except ConfigError as exc:
        assert str(exc).startswith(f"{where}: ")
        assert len(str(exc)) < 300  # the value is quoted cut short, whatever its length
        return
    assert isinstance(value, float)
    assert math.isfinite(value)
    if isinstance(option.value, Duration | Span):
        assert 0 < value <= MAX_SECONDS


@pytest.mark.parametrize("option", DURATION_OPTIONS, ids=_name)
@given(parts=st.lists(st.tuples(st.integers(0, 999), st.sampled_from(sorted(UNIT_SECONDS))),
                      min_size=1, max_size=3))
def test_every_duration_option_reads_one_grammar(option: Option[object],
                                                 parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{u}" for n, u in parts)
    meant = sum(n * UNIT_SECONDS[u] for n, u in parts)
    try:
        value = option.value.parse(text, "x")
    except ConfigError as exc:
        assert (meant == 0 and "greater than zero" in str(exc)) or \
            (meant > MAX_SECONDS and "longest duration" in str(exc))
        return
    assert value == pytest.approx(meant)
