"""The collectors CSV parser, fed near-valid and hostile files: it either accepts the file or
refuses it naming file:line of a real, non-comment line; it never raises anything else, and
no field name alone (known, unknown, misspelt) makes it refuse a well-formed file."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.fields.catalog import BY_NAME, MetricType
from exporter.fields.csv import Collectors, CollectorsError, parse_collectors
from exporter.fields.dcgm_names import dcgm_names

SOURCE = "counters.csv"
_LINE_REF = re.compile(rf"^{re.escape(SOURCE)}:(\d+): ")
_NEWLINES = re.compile(r"\r\n|\r|\n")
"""The line breaks an editor counts (and `read_text` turns into \\n)."""

served = st.sampled_from(sorted(BY_NAME))
any_dcgm_name = st.sampled_from(sorted(dcgm_names()))
names = st.one_of(served, any_dcgm_name, st.text(max_size=30))
SUPPORTED_TYPES = ("counter", "gauge", "untyped", "label")
"""dcgm-exporter 4.8.3's: histogram and summary are refused since."""
types = st.one_of(st.sampled_from([*SUPPORTED_TYPES, "histogram", "summary"]),
                  st.text(max_size=10))
cells = st.text(max_size=40)
spaces = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def rows(draw: st.DrawFn) -> str:
    parts = [draw(names), draw(types), draw(cells)]
    if draw(st.booleans()):
        parts += draw(st.lists(cells, max_size=2))  # too many columns
    elif draw(st.integers(0, 9)) == 0:
        parts = parts[:draw(st.integers(0, 2))]  # too few
    quoted = [f'"{p}"' if draw(st.integers(0, 4)) == 0 else p for p in parts]
    sep = draw(spaces)
    return ("," + sep).join(quoted)


lines = st.one_of(
    rows(),
    rows(),
    st.just(""),
    st.text(max_size=40).map(lambda t: "# " + t),
    st.text(max_size=60),  # anything at all: NUL, quotes, form feeds, U+2028 ...
)
files = st.tuples(st.lists(lines, max_size=12), st.sampled_from(["\n", "\r\n", "\r"])).map(
    lambda parts: parts[1].join(parts[0]))


@given(files)
@example("# \x1e\n0")  # str.splitlines() once counted the record separator as a line break
@example('"DCGM_FI_DEV_GPU_TEMP", "gauge", "a\u2028b"\nDCGM_FI_DEV_NOPE, gauge, x')
def test_accepts_or_names_a_real_line(text: str) -> None:
    try:
        result = parse_collectors(text, SOURCE)
    except CollectorsError as exc:
        match = _LINE_REF.match(str(exc))
        assert match, f"error without file:line: {exc}"
        line_no = int(match.group(1))
        file_lines = _NEWLINES.split(text)
        assert 1 <= line_no <= len(file_lines), f"line {line_no} of {len(file_lines)}: {exc}"
        named = file_lines[line_no - 1].strip()
        assert named, f"blames a blank line: {exc}"
        assert not named.startswith("#"), f"blames a comment line: {exc}"
        return
    assert isinstance(result, Collectors)
    for warning in result.warnings:
        assert _LINE_REF.match(warning), f"warning without file:line: {warning}"
    for field in result.fields:
        assert field.spec.name in text


@given(st.lists(served, min_size=1, max_size=8, unique=True), spaces)
def test_a_file_of_served_fields_loads_them_all_in_order(chosen: list[str], sep: str) -> None:
    text = "\n".join(f"{n},{sep}{BY_NAME[n].type.value},{sep}h" for n in chosen)
    loaded = parse_collectors(text, SOURCE)
    assert [f.spec.name for f in loaded.fields] == chosen


identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,40}", fullmatch=True)
"""Names DCGM could give a field: its own, a newer release's, typos."""
future_names = st.one_of(identifiers, identifiers.map(lambda n: "DCGM_FI_" + n),
                         identifiers.map(lambda n: "DCGM_EXP_" + n), any_dcgm_name)


def _fitting_type(name: str) -> str:
    """The type a served field must have (label or not); any other name takes a gauge."""
    spec = BY_NAME.get(name) or dcgm_names().resolve(name)
    return "label" if getattr(spec, "type", None) is MetricType.LABEL else "gauge"


@given(st.lists(future_names, min_size=1, max_size=8))
@example(["DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_TOTAL"])
@example(["DCGM_FI_DEV_FABRIC_HEALTH_MASK", "DCGM_FI_DEV_NVLINK_RECOVERY_FAILED_TOTAL"])
def test_no_name_stops_a_well_formed_file(chosen: list[str]) -> None:
    text = "DCGM_FI_DEV_GPU_TEMP, gauge, t\n" + "".join(
        f"{n}, {_fitting_type(n)}, h\n" for n in chosen)
    loaded = parse_collectors(text, SOURCE)
    assert "DCGM_FI_DEV_GPU_TEMP" in loaded.names
    served = [f.spec.name for f in loaded.fields]
    # Every row is served or named by exactly one warning.
    warned = {int(m.group(1)) for w in loaded.warnings if (m := _LINE_REF.match(w))}
    assert len(warned) == len(loaded.warnings)
    assert len(served) + len(warned) == len(chosen) + 1
