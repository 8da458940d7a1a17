"""The mig-parted file rules, taken from mig-parted's spec (`api/spec/v1/spec.go`) and
checked on cases written here: whole documents and single entries in mig-parted's `v1`
format, each valid or refused as the spec says, a config in the shape of the GPU Operator's
default one, and one refusal per rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.partitions.migparted import (
    MigPartedError,
    device_filter_matches,
    load,
    parse,
    parse_profile_name,
)
from tests.support.mig_configs import OPERATOR_SHAPED_CONFIG, PARTITIONING_EXAMPLE

_OFF = "    - devices: all\n      mig-enabled: false\n"

# (what it is, the document, whether mig-parted refuses it)
DOCUMENT_CASES = [
    ("empty document", "", False),
    ("version alone", "version: v1\n", False),
    ("one config, MIG off", "version: v1\nmig-configs:\n  mig-off:\n" + _OFF, False),
    ("JSON written as YAML, tab-indented",
     '{\n\t"version": "v1",\n\t"mig-configs": {\n\t\t"mig-off": [{\n'
     '\t\t\t"devices": "all",\n\t\t\t"mig-enabled": false,\n\t\t}]\n\t}\n}', False),
    ("several configs", "version: v1\nmig-configs:\n  a:\n" + _OFF + "  b:\n" + _OFF, False),
    ("version v2", "version: v2\nmig-configs:\n  mig-off:\n" + _OFF, True),
    ("version v2 alone", "version: v2\n", True),
    ("version as a number", "version: 1\nmig-configs:\n  mig-off:\n" + _OFF, True),
    ("no version", "mig-configs:\n  mig-off:\n" + _OFF, True),
    ("an unknown key beside version", "version: v1\nextra: 1\nmig-configs:\n  mig-off:\n"
     + _OFF, True),
    ("mig-configs empty", "version: v1\nmig-configs: {}\n", True),
    ("mig-configs a list", "version: v1\nmig-configs:\n" + _OFF, True),
    ("a config with no entries", "version: v1\nmig-configs:\n  mig-off: []\n", True),
    ("a config that is null", "version: v1\nmig-configs:\n  mig-off:\n", True),
    ("a config that is a mapping", "version: v1\nmig-configs:\n  mig-off:\n"
     "    devices: all\n    mig-enabled: false\n", True),
    ("the document a list", "- version: v1\n", True),
]

# (what it is, the entry as a YAML flow mapping, whether mig-parted refuses it)
ENTRY_CASES = [
    ("MIG on with profiles", '{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 2}}',
     False),
    ("MIG on with none yet", "{devices: all, mig-enabled: true, mig-devices: {}}", False),
    ("MIG off without mig-devices", "{devices: all, mig-enabled: false}", False),
    ("MIG off with empty mig-devices", "{devices: all, mig-enabled: false, mig-devices: {}}",
     False),
    ("devices a list of indexes", "{devices: [0, 1, 2, 3], mig-enabled: false}", False),
    ("device-filter a string", '{device-filter: "0x233510DE", devices: all, '
     'mig-enabled: true, mig-devices: {"3g.71gb": 2}}', False),
    ("device-filter a list", '{device-filter: ["0x233010DE", "0x233510DE"], devices: all, '
     "mig-enabled: false}", False),
    ("device-filter with a subsystem id", '{device-filter: "0x233510DE:0x18BE10DE", '
     "devices: [1], mig-enabled: false}", False),
    ("device-filter naming a model, not an id",
     '{device-filter: "H200", devices: all, mig-enabled: false}', False),
    ("compute-instance and attribute profiles", "{devices: all, mig-enabled: true, "
     'mig-devices: {"1c.3g.71gb": 2, "1g.18gb+me": 1, "1g.24gb-me": 1}}', False),
    ("some counts 0, one not", '{devices: all, mig-enabled: true, '
     'mig-devices: {"1g.18gb": 0, "2g.35gb": 1}}', False),
    ("mig-enabled as YAML 1.1 yes", "{devices: all, mig-enabled: yes, mig-devices: {}}",
     False),
    ("no devices", '{mig-enabled: true, mig-devices: {"1g.18gb": 2}}', True),
    ("no mig-enabled", '{devices: all, mig-devices: {"1g.18gb": 2}}', True),
    ("MIG on without mig-devices", "{devices: all, mig-enabled: true}", True),
    ("MIG off with profiles", '{devices: all, mig-enabled: false, '
     'mig-devices: {"1g.18gb": 2}}', True),
    ("a profile name that does not parse", "{devices: all, mig-enabled: true, "
     'mig-devices: {"bogus": 2}}', True),
    ("a negative count", '{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": -1}}',
     True),
    ("every count 0", '{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 0}}', True),
    ("mig-devices a list", '{devices: all, mig-enabled: true, mig-devices: ["1g.18gb"]}',
     True),
    ("an unknown key", "{devices: all, mig-enabled: false, extra: 1}", True),
    ("devices a word other than all", "{devices: some, mig-enabled: false}", True),
    ("devices a mapping", "{devices: {}, mig-enabled: false}", True),
    ("devices a list of strings", '{devices: ["0"], mig-enabled: false}', True),
    ("mig-enabled a quoted string", '{devices: all, mig-enabled: "true", mig-devices: {}}',
     True),
    ("device-filter an unquoted id (a number)",
     "{device-filter: 0x233510DE, devices: all, mig-enabled: false}", True),
    ("device-filter a list holding a number",
     '{device-filter: ["0x233510DE", 7], devices: all, mig-enabled: false}', True),
    ("the entry a string", "all", True),
]


def test_the_cases_cover_both_outcomes() -> None:
    for cases in (DOCUMENT_CASES, ENTRY_CASES):
        assert len({c[0] for c in cases}) == len(cases)
        assert {c[2] for c in cases} == {True, False}


@pytest.mark.parametrize(("text", "fails"), [c[1:] for c in DOCUMENT_CASES],
                         ids=[c[0] for c in DOCUMENT_CASES])
def test_document_cases(text: str, fails: bool) -> None:
    if fails:
        with pytest.raises(MigPartedError, match=r"^doc\.yaml:(\d+:)? .*expected"):
            parse(text, "doc.yaml")
    else:
        parse(text, "doc.yaml")


@pytest.mark.parametrize(("entry", "fails"), [c[1:] for c in ENTRY_CASES],
                         ids=[c[0] for c in ENTRY_CASES])
def test_entry_cases(entry: str, fails: bool) -> None:
    # The entry as the second entry of a config, so the refusal must name it.
    text = f"version: v1\nmig-configs:\n  c:\n{_OFF}    - {entry}\n"
    if fails:
        with pytest.raises(MigPartedError,
                           match=r"^entry\.yaml:6: mig-configs\.c\[1\]: .*expected"):
            parse(text, "entry.yaml")
    else:
        assert len(parse(text, "entry.yaml").mig_configs["c"]) == 2


def test_an_operator_shaped_default_config_reads_entirely() -> None:
    config = parse(OPERATOR_SHAPED_CONFIG, "default-mig-parted-config")
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.18gb", "all-3g.71gb",
            "all-1g.10gb", "all-1g.5gb.me", "all-1g.18gb.me"} <= set(config.mig_configs)
    assert len(config.mig_configs) == 25
    balanced = config.mig_configs["all-balanced"]
    assert len(balanced) == 4
    h200 = [e for e in balanced if e.applies_to(0, 0x233510DE)]
    assert len(h200) == 1
    assert h200[0].mig_devices == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert h200[0].device_filter == ("0x233510DE",)
    h100 = [e for e in balanced if e.applies_to(3, 0x233010DE)]
    assert [e.device_filter for e in h100] == [("0x20B210DE", "0x233010DE")]
    assert config.mig_configs["all-1g.18gb.me"][0].mig_devices == {"1g.18gb+me": 1}
    assert config.mig_configs["all-enabled"][0].mig_devices == {}
    assert config.mig_configs["all-disabled"][0].mig_devices is None
    assert not config.mig_configs["all-disabled"][0].mig_enabled


def test_the_format_example_reads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(PARTITIONING_EXAMPLE)
    config = load(path)
    assert set(config.mig_configs) == {"all-balanced", "custom-config"}
    assert config.mig_configs["all-balanced"][0].devices == "all"
    assert config.mig_configs["all-balanced"][0].mig_devices == {
        "1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    custom = config.mig_configs["custom-config"]
    assert [e.devices for e in custom] == [(0, 1, 2, 3), (4,)]
    assert not custom[0].mig_enabled
    assert custom[0].mig_devices is None
    assert custom[1].mig_devices == {"1g.5gb": 7}


def test_profile_names_parse_as_mig_parted_parses_them() -> None:
    assert parse_profile_name("1c.3g.71gb").gpu_instance == "3g.71gb"
    assert parse_profile_name("1c.3g.71gb").compute_slices == 1
    assert parse_profile_name("1g.24gb+me.all").attributes == {"me.all"}
    assert parse_profile_name("1g.24gb-me").negated == {"me"}
    assert parse_profile_name("3c.3g.20gb").same_gpu_instance(parse_profile_name("3g.20gb"))
    for bad, says in (("", "no profile name"), ("bogus", "expected '<G>g.<GB>gb'"),
                      ("1g", "expected '<G>g.<GB>gb'"), ("1g.5gb+me-x", "both '+' and '-'"),
                      ("1g.5gb+", "blank"), ("1g.5gb+me,me", "'me' written twice"),
                      ("1g.5gb+1x", "'1x' starts with a digit"),
                      ("1g.5gb+.me", "'.me' starts or ends with '.'"),
                      ("1g.5gb+m_e", "'m_e' holds a character"), (" 1g.5gb", "space around"),
                      ("1g.5gb.2", "does not end in 'c'"),
                      ("xg.5gb", "no whole number before 'g'")):
        with pytest.raises(ValueError, match=re.escape(says)):
            parse_profile_name(bad)


def test_device_filters_match_by_pci_id() -> None:
    assert device_filter_matches("0x233510DE", 0x233510DE)
    assert device_filter_matches("0x233510de", 0x233510DE)
    assert not device_filter_matches("0x233010DE", 0x233510DE)
    assert device_filter_matches("0x233510DE:0x18BE10DE", 0x233510DE, 0x18BE10DE)
    assert not device_filter_matches("0x233510DE:0x18BE10DE", 0x233510DE, 0x16C110DE)
    # Filters that do not parse (a model's name, three parts) match nothing, as in mig-parted.
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
    ("mig-configs:", "bogus: 1\nmig-configs:", "unknown key 'bogus'"),
    ("      mig-enabled: true", "      mig-enabled: true\n      mig-device: {}",
     "mig-configs.mine[0]: unknown key 'mig-device'; expected only device-filter"),
    ("    - devices: all\n      mig-enabled", "    - mig-enabled",
     "mig-configs.mine[0]: no 'devices' key; expected devices"),
    ("devices: all", "devices: some", "mig-configs.mine[0]: devices is string 'some'; "
     "expected 'all' or a list"),
    ("devices: all", "devices: ['0']", "devices is a list; expected 'all' or a list"),
    ("mig-enabled: true", "mig-enabled: 1", "mig-enabled is number 1; expected true or false"),
    ('      mig-devices: {"1g.18gb": 2}\n', "",
     "mig-configs.mine[0]: mig-enabled is true but there is no 'mig-devices'; expected"),
    ("mig-enabled: true", "mig-enabled: false",
     "mig-configs.mine[0]: mig-enabled is false but mig-devices lists instances"),
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


# (what is wrong, the text replaced in GOOD, its replacement, the whole refusal)
MALFORMED = [
    ("an unknown key", '      mig-devices: {"1g.18gb": 2}\n',
     '      mig-devices: {"1g.18gb": 2}\n      mig-device: {}\n',
     "pool.yaml:7: mig-configs.mine[0]: unknown key 'mig-device'; expected only "
     "device-filter, devices, mig-enabled, mig-devices"),
    ("a number for a flag", "mig-enabled: true", "mig-enabled: 1",
     "pool.yaml:5: mig-configs.mine[0]: mig-enabled is number 1; expected true or false"),
    ("a negative count", '"1g.18gb": 2', '"1g.18gb": -1',
     "pool.yaml:6: mig-configs.mine[0]: mig-devices: count of '1g.18gb' is number -1; "
     "expected a whole number, 0 or more"),
    ("the wrong version", "version: v1", "version: v2",
     "pool.yaml:1: version is string 'v2'; expected v1, the only version mig-parted reads"),
    ("a list as a key", "  mine:", "  [a, b]: []\n  mine:",
     "pool.yaml:3: mig-configs: YAML mapping keys must be scalar; expected a mig-parted "
     "config"),
    ("a second document", '{"1g.18gb": 2}\n', '{"1g.18gb": 2}\n---\nversion: v1\n',
     "pool.yaml:8: multiple YAML documents are not supported; expected a mig-parted config"),
]


@pytest.mark.parametrize(("old", "new", "refusal"), [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_one_line_naming_its_line(tmp_path: Path, old: str, new: str,
                                                      refusal: str) -> None:
    assert old in GOOD
    path = tmp_path / "pool.yaml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(MigPartedError) as caught:
        load(path)
    assert str(caught.value) == refusal.replace("pool.yaml", str(path), 1)


# (what is wrong, the text replaced in GOOD, its replacement, the whole refusal): each names
# the entry (or config) at fault, on the line of the key that shows the fault
REFUSALS = [
    ("the document a list", GOOD, "- version: v1\n",
     "pool.yaml:1: a list; expected a mapping with version and mig-configs"),
    ("no version", "version: v1\n", "",
     "pool.yaml: missing 'version'; expected version: v1"),
    ("an unknown key beside version", "mig-configs:", "\nbogus: 1\nmig-configs:",
     "pool.yaml:3: unknown key 'bogus'; expected only version and mig-configs"),
    ("mig-configs a list", "  mine:\n    - devices", "    - devices",
     "pool.yaml:2: mig-configs is a list; expected a mapping of config name to a list of "
     "entries"),
    ("mig-configs empty", GOOD, "version: v1\nmig-configs: {}\n",
     "pool.yaml:2: mig-configs is empty; expected at least one config"),
    ("mig-configs null", GOOD, "version: v1\n\nmig-configs:\n",
     "pool.yaml:3: mig-configs is empty; expected at least one config"),
    ("a config a number", "  mine:\n", "  mine: 3\n  other:\n",
     "pool.yaml:3: mig-configs.mine: number 3; expected a list of entries"),
    ("a config without entries", "  mine:\n", "  mine: []\n  other:\n",
     "pool.yaml:3: mig-configs.mine: no entries; expected at least one"),
    ("an entry a string", "    - devices", "    - all\n    - devices",
     "pool.yaml:4: mig-configs.mine[0]: string 'all'; expected a mapping with device-filter, "
     "devices, mig-enabled, mig-devices"),
    ("an entry without devices", "    - devices: all\n      mig-enabled", "    - mig-enabled",
     "pool.yaml:4: mig-configs.mine[0]: no 'devices' key; expected devices (all or a list of "
     "GPU indexes) and mig-enabled"),
    ("devices a word", "devices: all", "devices: some",
     "pool.yaml:4: mig-configs.mine[0]: devices is string 'some'; expected 'all' or a list of "
     "GPU indexes"),
    ("devices on a line of their own", "devices: all\n      mig-enabled: true\n",
     "mig-enabled: true\n      devices: [a]\n",
     "pool.yaml:5: mig-configs.mine[0]: devices is a list; expected 'all' or a list of GPU "
     "indexes"),
    ("MIG on without mig-devices", '      mig-devices: {"1g.18gb": 2}\n', "",
     "pool.yaml:5: mig-configs.mine[0]: mig-enabled is true but there is no 'mig-devices'; "
     "expected profile counts ({} for none)"),
    ("MIG off with instances", "mig-enabled: true", "mig-enabled: false",
     "pool.yaml:6: mig-configs.mine[0]: mig-enabled is false but mig-devices lists instances; "
     "expected none (or mig-enabled: true)"),
    ("mig-devices a list", '{"1g.18gb": 2}', '["1g.18gb"]',
     "pool.yaml:6: mig-configs.mine[0]: mig-devices is a list; expected a mapping of profile "
     "to count"),
    ("a profile name on its own line", '{"1g.18gb": 2}', "\n        1g.18gb: 2\n        bogus: 1",
     "pool.yaml:8: mig-configs.mine[0]: mig-devices: 'bogus' is not a MIG profile name "
     "(expected '<G>g.<GB>gb' or '<C>c.<G>g.<GB>gb'); expected e.g. '3g.71gb', '1c.3g.71gb', "
     "'1g.18gb+me'"),
    ("a count on its own line", '{"1g.18gb": 2}', "\n        1g.18gb: 2\n        2g.35gb: x",
     "pool.yaml:8: mig-configs.mine[0]: mig-devices: count of '2g.35gb' is string 'x'; "
     "expected a whole number, 0 or more"),
    ("every count 0", '"1g.18gb": 2', '"1g.18gb": 0',
     "pool.yaml:6: mig-configs.mine[0]: mig-devices: all counts are 0; expected at least one "
     "above 0 (or {} for none)"),
    ("device-filter a number", '      mig-devices: {"1g.18gb": 2}\n',
     '      mig-devices: {"1g.18gb": 2}\n      device-filter: 0x233510DE\n',
     "pool.yaml:7: mig-configs.mine[0]: device-filter is number 590680286; expected a PCI "
     'device id string such as "0x233510DE" or a list of them (quote them: unquoted, YAML '
     "reads 0x... as a number)"),
    # A key whose line is not on record is named on its entry's line, else with no line: a
    # key YAML writes otherwise than JSON does (yes: the JSON key true), a value reached by
    # an alias.
    ("a key written otherwise than in JSON", "mig-configs:", "yes: 1\nmig-configs:",
     "pool.yaml: unknown key 'true'; expected only version and mig-configs"),
    ("a config named otherwise than in JSON", "  mine:\n", "  yes: []\n  mine:\n",
     "pool.yaml: mig-configs.true: no entries; expected at least one"),
    ("a profile reached by an alias", "    - devices: all\n      mig-enabled: true\n"
     '      mig-devices: {"1g.18gb": 2}\n', '    - device-filter: &m {"bogus": 1}\n'
     "      devices: all\n      mig-enabled: true\n      mig-devices: *m\n",
     "pool.yaml:4: mig-configs.mine[0]: mig-devices: 'bogus' is not a MIG profile name "
     "(expected '<G>g.<GB>gb' or '<C>c.<G>g.<GB>gb'); expected e.g. '3g.71gb', '1c.3g.71gb', "
     "'1g.18gb+me'"),
]


@pytest.mark.parametrize(("old", "new", "refusal"), [r[1:] for r in REFUSALS],
                         ids=[r[0] for r in REFUSALS])
def test_each_refusal_names_its_line(old: str, new: str, refusal: str) -> None:
    assert old in GOOD
    with pytest.raises(MigPartedError) as caught:
        parse(GOOD.replace(old, new, 1), "pool.yaml")
    assert str(caught.value) == refusal


def test_the_good_config_reads_and_quirks_follow_mig_parted() -> None:
    parse(GOOD, "pool.yaml")
    # 2.0 is written 2 on the way to JSON, so mig-parted takes it as a whole count.
    assert parse(GOOD.replace(": 2}", ": 2.0}"), "p").mig_configs["mine"][0].mig_devices == {
        "1g.18gb": 2}
    # A repeated key keeps its last value, as mig-parted's lenient YAML reading does.
    twice = GOOD.replace("mig-enabled: true", "mig-enabled: false\n      mig-enabled: true")
    assert parse(twice, "p").mig_configs["mine"][0].mig_enabled
    # An empty document is an empty config; selecting from it names what is expected.
    with pytest.raises(MigPartedError, match="holds 0 mig-configs; name one of: none"):
        parse("", "empty.yaml").select(None)


def test_selection_names_the_configs() -> None:
    config = parse(OPERATOR_SHAPED_CONFIG, "default-mig-parted-config")
    with pytest.raises(MigPartedError, match="holds 25 mig-configs; name one of: all-1g"):
        config.select(None)
    with pytest.raises(MigPartedError, match="no mig-config 'nope'; expected one of: "):
        config.select("nope")
    assert parse(GOOD, "p").select(None)[0] == "mine"


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("version: v1\nmig-configs: [\n")
    with pytest.raises(MigPartedError,
                       match=r"broken.yaml:3: not valid YAML: .*; expected a mig-parted config"):
        load(path)
    with pytest.raises(MigPartedError, match="cannot read"):
        load(tmp_path / "absent.yaml")
