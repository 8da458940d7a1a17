"""dcgm-exporter's YAML config file (`--config-file`): upstream's own examples (the chart's
default `config.data`, read from its values.yaml, and the snippets of its READMEs) configure
serve; flags and variables that were set beat the file, the file beats the defaults; every
refusal is one line naming the file, the line and the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exporter.config import ConfigError, ServeConfig, parse_serve_args
from exporter.fields.catalog import MetricType
from tests.cli.test_dcgm_flags import SIM, BareExporter
from tests.support.paths import ROOT

VALUES = ROOT / "tests" / "fixtures" / "dcgm-exporter-4.8.4" / "values.yaml"

README_V1 = """\
version: 1
metrics:
  file: /etc/dcgm-exporter/default-counters.csv
collection:
  interval: 30s
"""
"""The minimal v1 example of dcgm-exporter's README (4.8.3) and deployment/README."""
README_V2 = """\
version: 2
server:
  maxConcurrentScrapes: 16
"""
"""The smallest v2 snippet of dcgm-exporter's deployment/README (4.8.4)."""


def chart_default() -> str:
    values = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    data = values["config"]["data"]
    assert isinstance(data, str)
    return data


def served(tmp_path: Path, text: str, argv: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> ServeConfig:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return parse_serve_args(["--config-file", str(path), *argv], env={} if env is None else env)


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        parse_serve_args(["--config-file", str(path)], env={})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"--config-file: {path}:"), message
    return message.removeprefix(f"--config-file: {path}:")


def test_the_charts_default_config_data(tmp_path: Path) -> None:
    text = chart_default()
    assert text.startswith("version: 2\n")
    cfg = served(tmp_path, text)
    assert cfg.collectors == Path("/etc/dcgm-exporter/default-counters.csv")
    assert cfg.sampler.interval_s == 30.0  # the ["*"] collection's every
    assert cfg.web.exporter_metrics is False
    assert cfg.startup_warnings == ()  # bind/unbind detection is off: nothing to say


def test_the_docs_examples_are_upstreams_and_load(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "config-file.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in doc.split("```yaml\n")[1:]]
    assert blocks[0] == chart_default()
    for block in blocks:
        assert served(tmp_path, block).startup_warnings == ()


def test_the_readme_examples(tmp_path: Path) -> None:
    v1 = served(tmp_path, README_V1)
    assert (v1.collectors, v1.sampler.interval_s) == (
        Path("/etc/dcgm-exporter/default-counters.csv"), 30.0)
    v2 = served(tmp_path, README_V2, ("--max-concurrent-scrapes", "3"))
    assert v2.web.max_concurrent_scrapes == 3
    assert served(tmp_path, README_V2.replace("16", "5")).web.max_concurrent_scrapes == 5


def test_the_file_beats_defaults_and_set_flags_and_variables_beat_the_file(
        tmp_path: Path) -> None:
    text = ("version: 2\nmetrics:\n  file: /from/yaml.csv\n  enableExporterMetrics: true\n"
            "server:\n  maxConcurrentScrapes: 4\ncollections:\n  - name: all\n    every: 2s\n"
            "    metrics:\n      include: ['*']\n")
    from_file = served(tmp_path, text)
    assert (from_file.collectors, from_file.sampler.interval_s,
            from_file.web.max_concurrent_scrapes, from_file.web.exporter_metrics) == (
        Path("/from/yaml.csv"), 2.0, 4, True)
    flags = served(tmp_path, text, ("-f", "/flag.csv", "-c", "7000",
                                    "--max-concurrent-scrapes", "9",
                                    "--enable-exporter-metrics=false"))
    assert (flags.collectors, flags.sampler.interval_s, flags.web.max_concurrent_scrapes,
            flags.web.exporter_metrics) == (Path("/flag.csv"), 7.0, 9, False)
    go_spelled = served(tmp_path, text, ("-collectors=/flag.csv", "--c=7000",
                                         "-max-concurrent-scrapes", "9",
                                         "-enable-exporter-metrics=0"))
    assert (go_spelled.collectors, go_spelled.sampler.interval_s,
            go_spelled.web.max_concurrent_scrapes, go_spelled.web.exporter_metrics) == (
        Path("/flag.csv"), 7.0, 9, False)
    env = served(tmp_path, text, env={"DCGM_EXPORTER_COLLECTORS": "/env.csv",
                                      "DCGM_EXPORTER_INTERVAL": "3000",
                                      "GPU_EXPORTER_MAX_CONCURRENT_SCRAPES": "8"})
    assert (env.collectors, env.sampler.interval_s, env.web.max_concurrent_scrapes) == (
        Path("/env.csv"), 3.0, 8)
    by_variable = parse_serve_args([], env={"DCGM_EXPORTER_CONFIG_FILE":
                                            str(tmp_path / "config.yaml")})
    assert by_variable.config_file == tmp_path / "config.yaml"
    assert by_variable.sampler.interval_s == 2.0


def test_v1_collection_interval_and_no_file_keep_the_defaults(tmp_path: Path) -> None:
    cfg = served(tmp_path, "version: 1\ncollection:\n  interval: 1500ms\n")
    assert cfg.sampler.interval_s == 1.5
    assert cfg.collectors is None  # no metrics block: the default collectors
    assert served(tmp_path, "version: 2\n").sampler.interval_s == 15.0


def test_inline_fields_are_csv_rows_with_the_csvs_checks(tmp_path: Path) -> None:
    text = ("version: 2\nmetrics:\n  fields:\n"
            "    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n"
            "      help: GPU temperature\n"
            "    - name: DCGM_EXP_NEXT_RELEASE_TOTAL\n      prometheusType: counter\n"
            "      help: from a newer release\n"
            "    - name: DCGM_FI_DEV_POWER_USAGE\n      prometheusType: untyped\n"
            "      help: power\n")
    cfg = served(tmp_path, text)
    path = tmp_path / "config.yaml"
    assert cfg.collectors is None
    assert cfg.inline_collectors is not None
    assert [(f.spec.name, f.type, f.help) for f in cfg.inline_collectors.fields] == [
        ("DCGM_FI_DEV_GPU_TEMP", MetricType.GAUGE, "GPU temperature"),
        ("DCGM_FI_DEV_POWER_USAGE", MetricType.UNTYPED, "power")]
    assert cfg.inline_collectors.warnings == (
        f"{path}:7: unknown field 'DCGM_EXP_NEXT_RELEASE_TOTAL'; skipped",)
    assert served(tmp_path, text, ("-f", "/x.csv")).inline_collectors is None
    assert served(tmp_path, text, ("-m", "ns:cm")).inline_collectors is None
    bad = text.replace("untyped", "summary")
    assert refusal(tmp_path, bad) == (
        "10: unsupported prometheus type 'summary' for DCGM_FI_DEV_POWER_USAGE; supported "
        "types are counter, gauge, untyped and label")


def test_watch_settings_are_checked_then_warned_as_meaning_nothing_here(
        tmp_path: Path) -> None:
    text = ("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepSamples: 50\n"
            "    detectBindUnbind:\n      enabled: true\n"
            "collections:\n  - name: fast\n    every: 1s\n    metrics:\n"
            "      include: ['DCGM_FI_PROF_*']\n")
    cfg = served(tmp_path, text)
    path = tmp_path / "config.yaml"
    assert (cfg.watch_max_keep_age_s, cfg.watch_max_keep_samples) == (600.0, 50)
    assert cfg.sampler.interval_s == 15.0  # no ["*"] collection
    assert [w.split(": accepted")[0] for w in cfg.startup_warnings] == [
        f"{path}:6: sources.dcgm.detectBindUnbind", f"{path}:4: sources.dcgm.watch",
        f"{path}:9: collections[0]"]
    flagged = served(tmp_path, text, ("--watch-max-keep-samples", "7"))
    assert flagged.watch_max_keep_samples == 7
    v1 = served(tmp_path, "version: 1\ncollection:\n  retention:\n    maxAge: 1m\n"
                          "  watchGroups:\n    - name: g\n      interval: 5s\n"
                          "      fields: [DCGM_FI_DEV_GPU_TEMP]\n")
    assert v1.watch_max_keep_age_s == 60.0
    assert len(v1.startup_warnings) == 2


@pytest.mark.parametrize(("text", "expected"), [
    ("version: 2\nserver:\n  maxConcurrentScrapes: 1\n  maxConcurent: 2\n",
     "4: server.maxConcurent: unknown key (expected maxConcurrentScrapes)"),
    ("version: 2\nmetrics:\n  file: a.csv\nserver:\n  maxConcurrentScrapes: 1\n"
     "metrics:\n  file: b.csv\n", "6: metrics: duplicate YAML key; first defined at line 2"),
    ("version: 2\ncollections:\n  - name: a\n    every: 1s\n    every: 2s\n",
     "5: collections[0].every: duplicate YAML key; first defined at line 4"),
    ("version: 2\n---\nversion: 2\n", "3: multiple YAML documents are not supported"),
    ("version: 3\n", "1: version: must be 1 or 2"),
    ("server:\n  maxConcurrentScrapes: 1\n", "1: version: must be 1 or 2"),
    ("version: two\n", "1: version: expected an integer, found 'two'"),
    ("version: 2\ncollection:\n  interval: 30s\n",
     "2: collection: unknown key (expected version, metrics, collections, sources or "
     "server)"),
    ("version: 1\ncollections: []\n", "2: collections: unknown key"),
    ("version: 1\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 1m\n",
     "4: sources.dcgm.watch: unknown key (expected detectBindUnbind)"),
    ("version: 1\ncollection:\n  interval: 30000\n",
     '3: collection.interval: missing unit in duration "30000"'),
    ("version: 1\ncollection:\n  interval: 500us\n",
     "3: collection.interval: must be expressed in whole milliseconds or larger"),
    ("version: 1\ncollection:\n  interval: 0s\n", "3: collection.interval: must be greater "
                                                  "than 0"),
    ("version: 2\nmetrics:\n  file: a.csv\n  fields:\n    - name: A\n",
     "2: metrics: must specify exactly one of file or fields"),
    ("version: 2\nmetrics: {}\n", "2: metrics: must specify file, fields, or "
                                  "enableExporterMetrics"),
    ("version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n"
     "      prometheusType: gauge\n", "4: metrics.fields[0].help: is required"),
    ("version: 2\nmetrics:\n  fields:\n    - {name: A, prometheusType: gauge, help: a}\n"
     "    - {name: A, prometheusType: gauge, help: b}\n",
     "5: metrics.fields[1].name: duplicates metrics.fields[0].name 'A'"),
    ("version: 2\nserver:\n  maxConcurrentScrapes: 0\n",
     "3: server.maxConcurrentScrapes: must be greater than 0"),
    ("version: 2\ncollections: []\n", "2: collections: must contain at least one collection"),
    ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: ['*']}}\n"
     "  - {name: b, every: 2s, metrics: {include: ['*']}}\n",
     "4: collections[1].metrics.include: duplicates the all-fields collection 'a'"),
    ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: ['*']}}\n"
     "  - {name: a, every: 2s, metrics: {include: [X]}}\n",
     "4: collections[1].name: 'a' is duplicated"),
    ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: []}}\n",
     "3: collections[0].metrics.include: must not be empty"),
    ("version: 2\ncollections:\n  - {every: 1s, metrics: {include: [X]}}\n",
     "3: collections[0].name: is required"),
    ("version: 2\ncollections:\n  - {name: a, metrics: {include: [X]}}\n",
     '3: collections[0].every: invalid duration ""'),
    ("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: -1s\n",
     "5: sources.dcgm.watch.maxKeepAge: must not be negative"),
    ("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepSamples: 2147483648\n",
     "5: sources.dcgm.watch.maxKeepSamples: must not exceed 2147483647"),
    ("version: 2\ncollections:\n  - name: a\n    every: 1s\n    metrics: {include: [X]}\n"
     "    sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 0}}}\n",
     "6: collections[0].sources.dcgm.watch: maxKeepAge and maxKeepSamples cannot both be "
     "zero"),
    ("version: 1\ncollection:\n  watchGroups:\n    - name: g\n      interval: 1s\n"
     "      fields: [X]\n      retention: {maxAge: 0s, maxSamples: 0}\n",
     "7: collection.watchGroups[0].retention: maxAge and maxSamples cannot both be zero"),
    ("version: 1\nsources:\n  dcgm:\n    detectBindUnbind:\n      pollInterval: 0s\n",
     "5: sources.dcgm.detectBindUnbind.pollInterval: must be greater than 0"),
    ("version: 2\nmetrics:\n  ? [a, b]\n  : x\n", "3: metrics: YAML mapping keys must be "
                                                 "scalar"),
    ("version: 2\nmetrics:\n  enableExporterMetrics: maybe\n",
     "3: metrics.enableExporterMetrics: expected true or false, found 'maybe'"),
    ("version: 2\nserver: [1]\n", "2: server: expected a mapping, found a list"),
    ("version: 2\nserver:\n  maxConcurrentScrapes: [\n", "4: not valid YAML"),
    # A null item is the zero value Go decodes it to: a field or pattern with no name.
    ("version: 2\nmetrics:\n  fields:\n    - ~\n", "4: metrics.fields[0].name: is required"),
    ("version: 2\ncollections:\n  - name: a\n    every: 1s\n    metrics:\n"
     "      include: [X, ~]\n", "6: collections[0].metrics.include[1]: is required"),
    ("version: 2\nserver:\n  maxConcurrentScrapes: 2\n\nserver: {}\n",
     "5: server: duplicate YAML key; first defined at line 2"),
])
def test_each_refusal_is_one_line_naming_file_line_and_key(tmp_path: Path, text: str,
                                                           expected: str) -> None:
    assert refusal(tmp_path, text).startswith(expected)


def test_the_files_watch_retention_must_keep_a_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 0s\n")
    with pytest.raises(ConfigError, match="cannot both be 0"):
        parse_serve_args(["--config-file", str(path)], env={})
    # A sample limit set by flag makes it a valid retention again.
    cfg = parse_serve_args(["--config-file", str(path), "--watch-max-keep-samples", "10"],
                           env={})
    assert (cfg.watch_max_keep_age_s, cfg.watch_max_keep_samples) == (0.0, 10)
    # A group that turns both limits off, laid over the global retention, is refused.
    path.write_text("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepSamples: 0\n"
                    "collections:\n  - name: g\n    every: 1s\n    metrics: {include: [X]}\n"
                    "    sources: {dcgm: {watch: {maxKeepAge: 0s}}}\n")
    with pytest.raises(ConfigError, match=rf"{path}:7: collections\[0\]: watch group 'g'.*"
                                          "cannot both be 0"):
        parse_serve_args(["--config-file", str(path)], env={})


def test_an_unreadable_or_empty_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=rf"^--config-file: {missing}: cannot read: No such "
                                          "file or directory$"):
        parse_serve_args(["--config-file", str(missing)], env={})
    assert refusal(tmp_path, "# nothing\n").startswith("1: the file holds no YAML document")


def test_a_process_started_with_a_config_file_serves_what_it_says(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: 2\nmetrics:\n  fields:\n"
        "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: GPU temperature.}\n"
        "    - {name: DCGM_EXP_NEXT_RELEASE_TOTAL, prometheusType: counter, help: Newer.}\n"
        "    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: untyped, help: Power.}\n"
        "collections:\n  - name: scrape\n    every: 3s\n    metrics:\n"
        "      include: ['*']\n", encoding="utf-8")
    proc = BareExporter([], {**SIM, "DCGM_EXPORTER_CONFIG_FILE": str(config)})
    try:
        proc.wait_ready()
        text = proc.metrics()
        assert "gpu_exporter_collect_interval_seconds 3\n" in text
        assert "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" in text
        assert "# TYPE DCGM_FI_DEV_POWER_USAGE untyped\n" in text
        assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0"' in text
        assert "DCGM_FI_DEV_SM_CLOCK" not in text  # only the file's fields
        assert f"{config}:5: unknown field 'DCGM_EXP_NEXT_RELEASE_TOTAL'; skipped" in \
            proc.output()
    finally:
        proc.close()


def test_a_process_refuses_a_bad_config_file_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: 2\nserver:\n  maxConcurrentScrapes: 4\n  maxConcurrentScrapes: 5\n",
                      encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "exporter", "--config-file", str(config)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**SIM, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"gpu-exporter: --config-file: {config}:4: server.maxConcurrentScrapes: duplicate "
        "YAML key; first defined at line 3")
