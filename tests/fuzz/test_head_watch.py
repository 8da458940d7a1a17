"""The header deadline's view of a connection (`HeadWatch`): however a client's bytes are cut
into reads, after each read it says what a reading of the whole stream so far says: whether
the stream stops short of a complete request head, and whether a head ended in that read."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.web.listener import HeadWatch

HEAD_BYTE = re.compile(rb"[^\r\n]")


def heads_in(stream: bytes) -> tuple[int, bool]:
    """(complete heads, whether bytes follow the last one), reading `stream` whole: a head
    starts at its first byte other than CR or LF and ends at the first blank line after."""
    pos, heads, last_end = 0, 0, 0
    while (first := HEAD_BYTE.search(stream, pos)) is not None:
        end = stream.find(b"\r\n\r\n", first.start())
        if end < 0:
            break
        pos = last_end = end + 4
        heads += 1
    return heads, last_end < len(stream)


request = st.builds(
    lambda path, headers: b"GET /" + path + b" HTTP/1.1\r\n" + b"".join(
        name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n",
    st.binary(max_size=8).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.lists(st.tuples(st.sampled_from([b"Host", b"Accept", b"X"]),
                       st.text("ab \t", max_size=6).map(str.encode)), max_size=3))
junk = st.binary(max_size=12).map(lambda b: bytes(b"\r\na "[x % 4] for x in b))
"""Bytes from the four that decide where heads end: CR, LF and two others."""
stream = st.lists(st.one_of(request, junk), max_size=6).map(b"".join)


@given(stream, st.lists(st.integers(1, 40), max_size=30))
@example(b"GET / HTTP/1.1\r\n\r\n\r\n", [18])  # an empty line after a complete head
@example(b"\r\n\r\n\r\n", [])  # empty lines are no head
@example(b"a\r\n\r\n\r\n\r\n", [1, 3])  # a marker split by a read, then empty lines
def test_every_split_reads_like_the_whole_stream(data: bytes, cuts: list[int]) -> None:
    watch = HeadWatch()
    reads, pos = [], 0
    for size in cuts:
        reads.append(data[pos:pos + size])
        pos += size
    reads.append(data[pos:])
    seen = 0
    for read in reads:
        ended = watch.feed(read)
        seen += len(read)
        before, _ = heads_in(data[:seen - len(read)])
        heads, unfinished = heads_in(data[:seen])
        assert ended == (heads > before), (data[:seen], read)
        assert watch.open == unfinished, (data[:seen], read)


def test_what_each_read_says() -> None:
    watch = HeadWatch()
    assert watch.feed(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") is True
    assert not watch.open  # idle: no deadline until the next byte
    assert watch.feed(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r") is False
    assert watch.open
    assert watch.feed(b"\n") is True  # the marker split by the read
    assert not watch.open
    # Two pipelined heads and the start of a third.
    assert watch.feed(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGE") is True
    assert watch.open
    assert watch.feed(b"T / HTTP/1.1\r\n\r\n") is True
    assert not watch.open
    # Empty lines alone begin no request: the deadline runs on them.
    assert watch.feed(b"\r\n\r\n") is False
    assert watch.open
