"""The mig-parted file rules against mig-parted's own test table (spec_test.go, parsed), its
example config and the GPU Operator's shipped default config; one refusal per rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from exporter.partitions.migparted import (
    MigPartedError,
    device_filter_matches,
    load,
    parse,
    parse_profile_name,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mig-parted"
# One case of spec_test.go's tables: {"Description", `spec`, expectedFailure},
CASE = re.compile(r'\{\s*"([^"]+)",\s*(?:`([^`]*)`|""),\s*(true|false),\s*\}', re.S)


def _go_cases(function: str) -> list[tuple[str, str, bool]]:
    source = (FIXTURES / "spec_test.go").read_text(encoding="utf-8")
    start = source.index(f"func {function}(")
    end = source.find("\nfunc ", start + 1)
    body = source[start:end if end != -1 else len(source)]
    return [(d, s, f == "true") for d, s, f in CASE.findall(body)]


SPEC_CASES = _go_cases("TestSpec")
ENTRY_CASES = _go_cases("TestMigConfigSpec")


def test_the_go_tables_were_read() -> None:
    assert len(SPEC_CASES) == 8
    assert len(ENTRY_CASES) == 15


@pytest.mark.parametrize(("text", "fails"), [c[1:] for c in SPEC_CASES],
                         ids=[c[0] for c in SPEC_CASES])
def test_spec_cases_of_spec_test_go(text: str, fails: bool) -> None:
    if fails:
        with pytest.raises(MigPartedError):
            parse(text, "spec_test.go")
    else:
        parse(text, "spec_test.go")


@pytest.mark.parametrize(("text", "fails"), [c[1:] for c in ENTRY_CASES],
                         ids=[c[0] for c in ENTRY_CASES])
def test_entry_cases_of_spec_test_go(text: str, fails: bool) -> None:
    if not text.strip():
        # An empty document never reaches the entry decoder in Go: nothing to decode.
        assert not fails
        return
    # The entry as the one entry of a config, so it goes through the same decoder.
    document = {"version": "v1", "mig-configs": {"c": [yaml.safe_load(text.replace("\t", " "))]}}
    if fails:
        with pytest.raises(MigPartedError, match=r"mig-configs\.c\[0\]"):
            parse(yaml.safe_dump(document), "spec_test.go")
    else:
        parse(yaml.safe_dump(document), "spec_test.go")


def _operator_config() -> str:
    configmap = yaml.safe_load((FIXTURES / "gpu-operator-0400_configmap.yaml").read_text())
    text = configmap["data"]["config.yaml"]
    assert isinstance(text, str)
    return text


def test_the_operators_default_config_reads_entirely() -> None:
    config = parse(_operator_config(), "default-mig-parted-config")
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.18gb", "all-3g.71gb",
            "all-1g.10gb.me"} <= set(config.mig_configs)
    assert len(config.mig_configs) > 40
    balanced = config.mig_configs["all-balanced"]
    h200 = [e for e in balanced if e.applies_to(0, 0x233510DE)]
    assert len(h200) == 1
    assert h200[0].mig_devices == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert config.mig_configs["all-enabled"][0].mig_devices == {}
    assert config.mig_configs["all-disabled"][0].mig_devices is None


def test_mig_parteds_example_config_reads() -> None:
    config = load(FIXTURES / "config.yaml")
    custom = config.mig_configs["custom-config"]
    assert [e.devices for e in custom][:3] == [(0, 1, 2, 3), (4,), (5,)]
    assert not custom[0].mig_enabled
    assert custom[1].mig_devices == {"1g.5gb": 7}


def test_profile_names_parse_as_go_nvlib_parses_them() -> None:
    assert parse_profile_name("1c.3g.71gb").gpu_instance == "3g.71gb"
    assert parse_profile_name("1c.3g.71gb").compute_slices == 1
    assert parse_profile_name("1g.24gb+me.all").attributes == {"me.all"}
    assert parse_profile_name("1g.24gb-me").negated == {"me"}
    assert parse_profile_name("3c.3g.20gb").same_gpu_instance(parse_profile_name("3g.20gb"))
    for bad in ("", "bogus", "1g", "1g.5gb+me-x", "1g.5gb+", "1g.5gb+me,me", "1g.5gb+1x",
                "1g.5gb+.me", "1g.5gb+m_e", " 1g.5gb", "1g.5gb.2", "xg.5gb"):
        with pytest.raises(ValueError, match=r"."):
            parse_profile_name(bad)


def test_device_filters_match_as_pkg_types_device_go() -> None:
    assert device_filter_matches("0x233510DE", 0x233510DE)
    assert device_filter_matches("0x233510de", 0x233510DE)
    assert not device_filter_matches("0x233010DE", 0x233510DE)
    assert device_filter_matches("0x233510DE:0x18BE10DE", 0x233510DE, 0x18BE10DE)
    assert not device_filter_matches("0x233510DE:0x18BE10DE", 0x233510DE, 0x16C110DE)
    # Unparsable filters (the spec test's model names) match nothing, as there.
    assert not device_filter_matches("A100-SXM4-40GB", 0x20B010DE)
    assert not device_filter_matches("0x1:0x2:0x3", 1)


GOOD = """\
version: v1
mig-configs:
  mine:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2}
"""


def _refusal(text: str) -> str:
    with pytest.raises(MigPartedError) as caught:
        parse(text, "pool.yaml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("pool.yaml:")
    assert "expected" in message
    return message


@pytest.mark.parametrize(("old", "new", "says"), [
    ("version: v1", "version: v2", "version is string 'v2'; expected v1"),
    ("version: v1\n", "", "missing 'version'"),
    ("mig-configs:", "bogus: 1\nmig-configs:", "unexpected field 'bogus'"),
    ("      mig-enabled: true", "      mig-enabled: true\n      mig-device: {}",
     "mig-configs.mine[0]: unexpected field 'mig-device'; expected only device-filter"),
    ("    - devices: all\n      mig-enabled", "    - mig-enabled",
     "mig-configs.mine[0]: missing required field 'devices'"),
    ("devices: all", "devices: some", "mig-configs.mine[0]: devices is string 'some'; "
     "expected 'all' or a list"),
    ("devices: all", "devices: ['0']", "devices is a list; expected 'all' or a list"),
    ("mig-enabled: true", "mig-enabled: 1", "mig-enabled is number 1; expected true or false"),
    ('      mig-devices: {"1g.18gb": 2}\n', "",
     "mig-configs.mine[0]: missing required field 'mig-devices' when 'mig-enabled' is true"),
    ("mig-enabled: true", "mig-enabled: false",
     "mig-configs.mine[0]: MIG devices included when 'mig-enabled' is false"),
    ('"1g.18gb": 2', '"1g.18gb": 0', "all counts are 0; expected at least one"),
    ('"1g.18gb": 2', '"1g.18gb": -1', "count of '1g.18gb' is number -1; expected a whole"),
    ('"1g.18gb": 2', '"1g.18gb": 1.5', "count of '1g.18gb' is number 1.5"),
    ('"1g.18gb": 2', '"bogus": 2', "mig-configs.mine[0]: mig-devices: 'bogus' is not a MIG "
     "profile name"),
    ("    - devices", "    - device-filter: 0x233510DE\n      devices",
     "device-filter is number 590680286; expected a PCI device id string"),
    ("  mine:\n    - devices: all\n      mig-enabled: true\n"
     '      mig-devices: {"1g.18gb": 2}\n', "  mine: []\n",
     "mig-configs.mine: no entries; expected at least one"),
    ("  mine:\n    - devices: all\n      mig-enabled: true\n"
     '      mig-devices: {"1g.18gb": 2}\n', "  {}\n", "mig-configs is empty"),
])
def test_each_rule_refuses_with_one_line(old: str, new: str, says: str) -> None:
    assert old in GOOD
    assert says in _refusal(GOOD.replace(old, new))


def test_the_good_config_reads_and_quirks_follow_go() -> None:
    parse(GOOD, "pool.yaml")
    # 2.0 is written 2 on the way to JSON, so Go takes it as an int.
    assert parse(GOOD.replace(": 2}", ": 2.0}"), "p").mig_configs["mine"][0].mig_devices == {
        "1g.18gb": 2}
    # A repeated key keeps its last value (sigs.k8s.io/yaml's non-strict decoding).
    twice = GOOD.replace("mig-enabled: true", "mig-enabled: false\n      mig-enabled: true")
    assert parse(twice, "p").mig_configs["mine"][0].mig_enabled
    # An empty document is an empty config; selecting from it names what is expected.
    with pytest.raises(MigPartedError, match="holds 0 mig-configs; name one of: none"):
        parse("", "empty.yaml").select(None)


def test_selection_names_the_configs() -> None:
    config = parse(_operator_config(), "default-mig-parted-config")
    with pytest.raises(MigPartedError, match=r"holds \d+ mig-configs; name one of: all-1g"):
        config.select(None)
    with pytest.raises(MigPartedError, match="no mig-config 'nope'; expected one of: "):
        config.select("nope")
    assert parse(GOOD, "p").select(None)[0] == "mine"


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("version: v1\nmig-configs: [\n")
    with pytest.raises(MigPartedError, match=r"broken.yaml: line \d+ not YAML"):
        load(path)
    with pytest.raises(MigPartedError, match="cannot read"):
        load(tmp_path / "absent.yaml")
