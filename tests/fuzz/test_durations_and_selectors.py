"""Durations (`-c`, `--sim.fault at=...`) and device selections (`-d`): any text gives a value
in range or an error naming what was expected, quickly; and what a person writes parses to
what they meant."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.devices.filter import MAX_DEVICE_INDEX, DeviceFilter, parse_device_filter
from exporter.durations import parse_duration
from exporter.options.values import ConfigError
from exporter.options.values import parse_duration as parse_option_duration

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

number = st.one_of(
    st.integers(0, 10**6).map(str),
    st.decimals(0, 10**6, places=3, allow_nan=False, allow_infinity=False).map(str),
    st.text("0123456789", min_size=1, max_size=40),
    st.integers(1, 400).map(lambda digits: "9" * digits),  # up to absurdly long
)
durationish = st.one_of(
    st.text(max_size=20),
    st.builds(lambda n, unit, pad: f"{pad}{n}{pad}{unit}{pad}", number,
              st.sampled_from(["", *UNITS, "us", "d", "S"]), st.sampled_from(["", " "])),
)


@given(durationish)
@example("9" * 309 + "s")  # once overflowed to an infinite interval
def test_a_duration_is_finite_or_refused(text: str) -> None:
    try:
        seconds = parse_duration(text, "ms")
    except ValueError as exc:
        assert "duration" in str(exc)
        return
    assert math.isfinite(seconds)
    assert seconds >= 0


@given(durationish)
def test_an_interval_option_is_finite_and_positive_or_refused(text: str) -> None:
    try:
        seconds = parse_option_duration(text, "--collect-interval")
    except ConfigError as exc:
        assert str(exc).startswith("--collect-interval: ")
        return
    assert math.isfinite(seconds)
    assert seconds > 0


@given(st.integers(0, 10**5), st.sampled_from(sorted(UNITS)))
def test_a_written_duration_means_what_it_says(n: int, unit: str) -> None:
    assert parse_duration(f"{n}{unit}") == n * UNITS[unit]


@given(st.integers(10**6, 10**9), st.sampled_from(["h", "d", "w", "y"]))
def test_a_duration_past_a_century_is_refused(n: int, unit: str) -> None:
    try:
        parse_duration(f"{n}{unit}")
    except ValueError as exc:
        assert "longest duration" in str(exc)
    else:
        raise AssertionError(f"{n}{unit} accepted")


index = st.integers(0, MAX_DEVICE_INDEX)
id_list = st.lists(st.one_of(index.map(str), st.tuples(index, index).map(
    lambda r: f"{min(r)}-{max(r)}")), min_size=1, max_size=6).map(",".join)
selectionish = st.one_of(
    st.text(max_size=30),
    st.builds(lambda k, ids: f"{k}:{ids}", st.sampled_from(["f", "g", "i", "x", ""]),
              st.one_of(id_list, st.text(max_size=20))),
    st.builds(lambda k, a, b: f"{k}:{a}-{b}", st.sampled_from(["g", "i"]),
              st.integers(-5, 10**12), st.integers(-5, 10**12)),
    # dcgm-exporter 4.8.3's `+`-joined selectors, near-valid and not
    st.lists(st.one_of(st.sampled_from(["f", "g", "i", "", "x", "g:", "i::1"]),
                       st.builds(lambda k, ids: f"{k}:{ids}", st.sampled_from(["g", "i"]),
                                 id_list)), min_size=1, max_size=3).map("+".join),
)


@given(selectionish)
@example("g:0-1000000000000")  # once built a trillion-entry set at start-up
def test_a_selection_is_bounded_or_refused(text: str) -> None:
    try:
        selected = parse_device_filter(text)
    except ValueError as exc:
        assert str(exc).startswith("--devices: ")
        return
    assert isinstance(selected, DeviceFilter)
    for ids in (selected.gpu_ids, selected.instance_ids):
        assert ids is None or all(0 <= i <= MAX_DEVICE_INDEX for i in ids)


@given(id_list, id_list, st.booleans())
def test_a_combined_selection_means_both(gpus: str, instances: str, gpu_first: bool) -> None:
    parts = [f"g:{gpus}", f"i:{instances}"]
    text = "+".join(parts if gpu_first else parts[::-1])
    selected = parse_device_filter(text)
    assert (selected.gpus, selected.instances) == (True, True)
    assert selected.gpu_ids == parse_device_filter(f"g:{gpus}").gpu_ids
    assert selected.instance_ids == parse_device_filter(f"i:{instances}").instance_ids


@given(st.sampled_from(["g", "i"]), st.lists(st.tuples(index, index), min_size=1, max_size=5))
def test_a_written_selection_means_what_it_says(kind: str, ranges: list[tuple[int, int]]
                                                ) -> None:
    text = f"{kind}:" + ",".join(f"{min(a, b)}-{max(a, b)}" for a, b in ranges)
    expected = frozenset(i for a, b in ranges for i in range(min(a, b), max(a, b) + 1))
    selected = parse_device_filter(text)
    assert (selected.gpu_ids if kind == "g" else selected.instance_ids) == expected
    assert (selected.gpus, selected.instances) == (kind == "g", kind == "i")
