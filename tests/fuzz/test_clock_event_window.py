"""The clock-event window's running counts equal a recount of the polls inside it, whatever
the sequence of polls, GPUs, bitmasks and gaps."""

from __future__ import annotations

import collections

from hypothesis import given
from hypothesis import strategies as st

from exporter.devices.clock_events import CLOCK_EVENTS_COUNT_FIELD, REASONS, ClockEventCounter

WINDOW_S = 10.0

polls = st.lists(st.tuples(
    st.floats(min_value=0.0, max_value=6.0),  # time since the previous poll
    st.dictionaries(st.integers(0, 3), st.integers(0, 0x3FF), max_size=4)),  # gpu -> bits
    max_size=40)


@given(polls)
def test_running_counts_equal_a_recount(sequence: list[tuple[float, dict[int, int]]]) -> None:
    now = [0.0]
    counter = ClockEventCounter(WINDOW_S, lambda: now[0])
    seen: list[tuple[float, tuple[int, int], int]] = []
    for gap, bits_by_gpu in sequence:
        now[0] += gap
        values = {(gpu, -1): {CLOCK_EVENTS_COUNT_FIELD: float(bits)}
                  for gpu, bits in bits_by_gpu.items()}
        counter.record(values)
        assert all(CLOCK_EVENTS_COUNT_FIELD not in v for v in values.values())  # taken out
        seen += [(now[0], (gpu, -1), bits) for gpu, bits in bits_by_gpu.items()]
        gpus = [(g, -1) for g in range(4)]
        got = counter.window(gpus)
        inside = [(key, bits) for t, key, bits in seen if t >= now[0] - WINDOW_S]
        want: collections.Counter[tuple[tuple[int, int], str | None]] = collections.Counter()
        for key, bits in inside:
            for bit, name in REASONS:
                if bits & bit:
                    want[(key, name)] += 1
        for key in set(gpus) - {key for key, _ in inside}:
            want[(key, None)] = 0
        assert {(c.entity_key, c.reason): c.count for c in got} == dict(want)
