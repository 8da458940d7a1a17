"""The config file's watch groups against the collectors, checked once when serve starts, as
dcgm-exporter 4.8.4 checks them: a field two groups match, or a group that matches no field,
stops the start in one line (exit 2); disjoint groups start. Patterns are Go's path.Match
patterns, not Python's fnmatch ones."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.fields.csv import parse_collectors
from exporter.options.go_glob import BadPattern, compile_go_pattern
from exporter.options.watch_groups import watched_names
from tests.cli.test_config_file import refusal
from tests.cli.test_dcgm_flags import SIM, BareExporter
from tests.support.paths import ROOT

CSV = ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
       "DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).\n"
       "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
INLINE = ("metrics:\n  fields:\n"
          "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: GPU temperature.}\n"
          "    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: Power draw.}\n"
          "    - {name: DCGM_FI_DEV_SM_CLOCK, prometheusType: gauge, help: SM clock.}\n")


def refused_at_start(config: Path, *argv: str) -> str:
    """The last line serve prints when it refuses to start, after checking it exits 2."""
    result = subprocess.run([sys.executable, "-m", "exporter", "--config-file", str(config),
                             *argv], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**SIM, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_v1_a_field_two_groups_match_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text(CSV, encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"version: 1\nmetrics:\n  file: {csv}\ncollection:\n  interval: 30s\n  watchGroups:\n"
        "    - name: temps\n      interval: 1s\n      fields: ['*_TEMP']\n"
        "    - name: gpu\n      interval: 5s\n      fields:\n        - DCGM_FI_DEV_POWER_USAGE\n"
        "        - DCGM_FI_DEV_GPU_*\n", encoding="utf-8")
    assert refused_at_start(config) == (
        f"gpu-exporter: --config-file: {config}:14: collection.watchGroups[1].fields[1]: "
        "'DCGM_FI_DEV_GPU_*' of watch group 'gpu' matches DCGM_FI_DEV_GPU_TEMP, and so does "
        "'*_TEMP' of watch group 'temps' (line 9, collection.watchGroups[0].fields[0]); a "
        "field may be in one watch group only")


def test_v1_a_group_matching_no_field_is_refused(tmp_path: Path) -> None:
    # The built-in collectors; Go's matching is case-sensitive, and DCGM_EXP_ fields are
    # dcgm-exporter's own, never watched.
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: 1\ncollection:\n  watchGroups:\n"
        "    - name: temps\n      interval: 1s\n      fields: [DCGM_FI_DEV_GPU_TEMP]\n"
        "    - name: typo\n      interval: 1s\n      fields: [dcgm_fi_dev_gpu_temp, DCGM_EXP_*]\n",
        encoding="utf-8")
    assert refused_at_start(config) == (
        f"gpu-exporter: --config-file: {config}:7: collection.watchGroups[1]: watch group "
        "'typo' ('dcgm_fi_dev_gpu_temp', 'DCGM_EXP_*') matches no field of the collectors "
        f"({ROOT / 'exporter' / 'fields' / 'default-collectors.csv'}); each group must match "
        "at least one (Go path.Match patterns, case-sensitive)")


def test_v2_a_field_two_groups_match_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"version: 2\n{INLINE}collections:\n"
        "  - {name: scrape, every: 30s, metrics: {include: ['*']}}\n"
        "  - {name: power, every: 1s, metrics: {include: ['DCGM_FI_DEV_POWER_USAGE']}}\n"
        "  - {name: dev, every: 5s, metrics: {include: ['DCGM_FI_DEV_[GP]*']}}\n",
        encoding="utf-8")
    assert refused_at_start(config) == (
        f"gpu-exporter: --config-file: {config}:10: collections[2].metrics.include[0]: "
        "'DCGM_FI_DEV_[GP]*' of watch group 'dev' matches DCGM_FI_DEV_POWER_USAGE, and so does "
        "'DCGM_FI_DEV_POWER_USAGE' of watch group 'power' (line 9, "
        "collections[1].metrics.include[0]); a field may be in one watch group only")


def test_v2_a_group_matching_no_field_of_the_flags_collectors_is_refused(
        tmp_path: Path) -> None:
    # -f beats metrics.file: the groups are matched against the collectors actually served.
    csv = tmp_path / "counters.csv"
    csv.write_text(CSV, encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: 2\nmetrics:\n  file: /etc/dcgm-exporter/default-counters.csv\n"
        "collections:\n  - name: clocks\n    every: 1s\n    metrics:\n"
        "      include: ['DCGM_FI_DEV_*_CLOCK']\n", encoding="utf-8")
    assert refused_at_start(config, "-f", str(csv)) == (
        f"gpu-exporter: --config-file: {config}:5: collections[0]: watch group 'clocks' "
        f"('DCGM_FI_DEV_*_CLOCK') matches no field of the collectors ({csv}); each group must "
        "match at least one (Go path.Match patterns, case-sensitive)")


@pytest.mark.parametrize("version", [1, 2])
def test_disjoint_groups_start_and_serve(tmp_path: Path, version: int) -> None:
    config = tmp_path / "config.yaml"
    if version == 1:
        config.write_text(
            f"version: 1\n{INLINE}collection:\n  interval: 2s\n  watchGroups:\n"
            "    - {name: temps, interval: 1s, fields: ['*_TEMP']}\n"
            "    - {name: rest, interval: 5s, fields: ['DCGM_FI_DEV_[^G]*']}\n",
            encoding="utf-8")
    else:
        config.write_text(
            f"version: 2\n{INLINE}collections:\n"
            "  - {name: scrape, every: 2s, metrics: {include: ['*']}}\n"
            "  - {name: temps, every: 1s, metrics: {include: ['*_TEMP']}}\n"
            "  - {name: rest, every: 5s, metrics: {include: ['DCGM_FI_DEV_[^G]*']}}\n",
            encoding="utf-8")
    proc = BareExporter([], {**SIM, "DCGM_EXPORTER_CONFIG_FILE": str(config)})
    try:
        proc.wait_ready()
        text = proc.metrics()
        assert "gpu_exporter_collect_interval_seconds 2\n" in text
        assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0"' in text
        assert proc.output().count("ignored because NVML is read directly") == 2
    finally:
        proc.close()


def test_the_names_matched_are_dcgm_exporters_dcgm_fields() -> None:
    collectors = parse_collectors(
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
        "DCGM_EXP_XID_ERRORS_TOTAL, counter, x\n"       # needs XID_ERRORS, added by name
        "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, c\n"
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, r\n"  # field 112 is named already
        "DCGM_FI_DEV_FUTURE_THING, gauge, f\n", "c.csv")  # unknown here: kept by its name
    assert watched_names(collectors) == [
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FUTURE_THING"]
    assert collectors.skipped == ("DCGM_FI_DEV_FUTURE_THING",)


@pytest.mark.parametrize(("pattern", "name", "go_matches", "fnmatch_matches"), [
    ("DCGM_FI_DEV_*", "DCGM_FI_DEV_GPU_TEMP", True, True),
    ("DCGM_FI_DEV_GPU_TEM?", "DCGM_FI_DEV_GPU_TEMP", True, True),
    ("dcgm_fi_dev_*", "DCGM_FI_DEV_GPU_TEMP", False, False),
    ("DCGM_FI_[^P]*", "DCGM_FI_DEV_GPU_TEMP", True, False),   # Go negates with ^
    ("DCGM_FI_[!P]*", "DCGM_FI_DEV_GPU_TEMP", False, True),   # fnmatch with !
    ("DCGM_FI_DEV\\_*", "DCGM_FI_DEV_GPU_TEMP", True, False),  # Go escapes with \
    ("DCGM_FI_[D-E]EV_*", "DCGM_FI_DEV_X", True, True),
    ("DCGM_FI_[E-D]EV_*", "DCGM_FI_DEV_X", False, False),     # a reversed range
    ("*", "a/b", False, True),                                # Go's * stops at /
    ("[a-\\]]", "]", False, False),                          # ']' < 'a': reversed
    ("[\\]]", "]", True, False),
])
def test_go_path_match_where_fnmatch_differs(pattern: str, name: str, go_matches: bool,
                                             fnmatch_matches: bool) -> None:
    assert bool(compile_go_pattern(pattern).fullmatch(name)) is go_matches
    assert fnmatch.fnmatchcase(name, pattern) is fnmatch_matches


@pytest.mark.parametrize("pattern", ["DCGM_[FI", "DCGM_[]", "DCGM_[^]", "[]a]", "[a-]",
                                     "[-a]", "DCGM_\\", "[\\", "[a"])
def test_go_bad_patterns_are_refused_where_the_file_is_read(tmp_path: Path,
                                                            pattern: str) -> None:
    with pytest.raises(BadPattern):
        compile_go_pattern(pattern)
    quoted = pattern.replace("\\", "\\\\")
    message = refusal(tmp_path, "version: 2\ncollections:\n  - name: g\n    every: 1s\n"
                                f'    metrics:\n      include: [X, "{quoted}"]\n')
    assert message.startswith(f"6: collections[0].metrics.include[1]: invalid field pattern "
                              f"{pattern!r}: "), message
