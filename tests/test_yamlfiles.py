"""The one strict YAML reader (`exporter.yamlfiles`): each refusal is one line naming the
file, the line and the key path, and what it accepts comes back as typed values."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from exporter.yamlfiles import (
    MapOf,
    Schema,
    Section,
    Sequence,
    YamlError,
    compose_one,
    decode,
    read_yaml,
    read_yaml_text,
)

PATH = "settings.yaml"
SCHEMA: Mapping[str, Schema] = {
    "name": "str",
    "label": "text",
    "count": "int",
    "on": "bool",
    "price": "number",
    "tags": Sequence("str"),
    "server": {"port": "int", "hosts": Sequence({"host": "str", "weight": "int"})},
    "users": MapOf("str"),
    "extra": "any",
}


def _refusal(text: str, schema: Mapping[str, Schema] = SCHEMA) -> str:
    with pytest.raises(YamlError) as raised:
        read_yaml(PATH, text, schema)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


# (what is wrong, the file's text, the whole refusal)
REFUSALS = [
    ("a key twice at the top", "name: a\ncount: 1\nname: b\n",
     "settings.yaml:3: name: duplicate YAML key; first defined at line 1"),
    ("a key twice deep in a list", "server:\n  hosts:\n    - host: a\n      weight: 1\n"
     "    - host: b\n      weight: 2\n      host: c\n",
     "settings.yaml:7: server.hosts[1].host: duplicate YAML key; first defined at line 5"),
    ("a key twice in a free map", "users:\n  alice: x\n\n  alice: y\n",
     "settings.yaml:4: users.alice: duplicate YAML key; first defined at line 2"),
    ("a second document", "name: a\n---\nname: b\n",
     "settings.yaml:3: multiple YAML documents are not supported"),
    ("a list as a key", "server:\n  [a]: 1\n",
     "settings.yaml:2: server: YAML mapping keys must be scalar"),
    ("a mapping as the top key", "? {a: 1}\n: 2\n",
     "settings.yaml:1: the document: YAML mapping keys must be scalar"),
    ("an unknown key at the top", "name: a\nnmae: b\n",
     "settings.yaml:2: nmae: unknown key (expected name, label, count, on, price, tags, "
     "server, users or extra)"),
    ("an unknown key deep", "server:\n  hosts:\n    - host: a\n      wieght: 1\n",
     "settings.yaml:4: server.hosts[0].wieght: unknown key (expected host or weight)"),
    ("a word for an integer", "count: many\n",
     "settings.yaml:1: count: expected an integer, found 'many'"),
    ("a float for an integer", "\ncount: 1.5\n",
     "settings.yaml:2: count: expected an integer, found '1.5'"),
    ("a quoted integer", "count: '1'\n", "settings.yaml:1: count: expected an integer, "
     "found '1'"),
    ("a word for a flag", "on: maybe\n",
     "settings.yaml:1: on: expected true or false, found 'maybe'"),
    ("a number for a string", "name: 12\n", "settings.yaml:1: name: expected a string, "
     "found '12'"),
    ("a list for a text", "label: [a]\n", "settings.yaml:1: label: expected a text, "
     "found a list"),
    ("a word for a number", "price: cheap\n",
     "settings.yaml:1: price: expected a number, found 'cheap'"),
    ("a scalar for a list", "tags: a\n", "settings.yaml:1: tags: expected a list, found 'a'"),
    ("a number in a list of strings", "tags:\n  - a\n  - 2\n",
     "settings.yaml:3: tags[1]: expected a string, found '2'"),
    ("a list for a mapping", "server: []\n",
     "settings.yaml:1: server: expected a mapping, found a list"),
    ("a list for a free map", "users: [alice]\n",
     "settings.yaml:1: users: expected a mapping, found a list"),
    ("a number in a free map", "users:\n  alice: x\n  bob: 3\n",
     "settings.yaml:3: users.bob: expected a string, found '3'"),
    ("a scalar document", "just words\n",
     "settings.yaml:1: the document: expected a mapping, found 'just words'"),
    ("a long value is cut", "count: " + "x" * 50 + "\n",
     "settings.yaml:1: count: expected an integer, found '" + "x" * 37 + "...'"),
    ("bad syntax", "name: a\nserver: [\n", "settings.yaml:3: not valid YAML: expected the node "
     "content, but found '<stream end>'"),
    ("a character YAML refuses", "name: a\nlabel: \x07\n",
     "settings.yaml:2: not valid YAML: character '\\x07' is not allowed"),
    ("nesting past the parser", "extra: " + "[" * 2000 + "]" * 2000 + "\n",
     "settings.yaml:1: not valid YAML here: nested too deeply"),
]


@pytest.mark.parametrize(("text", "refusal"), [r[1:] for r in REFUSALS],
                         ids=[r[0] for r in REFUSALS])
def test_each_refusal_is_one_line_naming_file_line_and_key(text: str, refusal: str) -> None:
    assert _refusal(text) == refusal


def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(YamlError) as raised:
        read_yaml_text(tmp_path / "absent.yaml")
    assert str(raised.value) == f"{tmp_path / 'absent.yaml'}: cannot read: No such file or " \
                                "directory"


def test_values_come_back_typed() -> None:
    text = ("name: gpu\nlabel: 0x10\ncount: 0x1f\non: yes\nprice: 2.5\ntags: [a, b]\n"
            "server:\n  port: 1_000\n  hosts:\n    - host: h\n      weight: 017\n    - ~\n"
            "users:\n  alice: x\n  1234: y\nextra: {1: [a, {b: 2}]}\n")
    top = read_yaml(PATH, text, SCHEMA)
    assert (top.text("name"), top.text("label"), top.integer("count"), top.flag("on"),
            top.number("price"), top.texts("tags")) == ("gpu", "0x10", 31, True, 2.5,
                                                        ["a", "b"])
    server = top.section("server")
    assert server.integer("port") == 1000
    hosts = server.sections("hosts")
    assert [(h.key, h.text("host"), h.integer("weight")) for h in hosts] == [
        ("server.hosts[0]", "h", 15), ("server.hosts[1]", None, None)]
    users = top.section("users")
    assert [(name, users.text(name)) for name in users] == [("alice", "x"), ("1234", "y")]
    assert top.value("extra") == {1: ["a", {"b": 2}]}
    assert top.number("count") == 31.0


def test_absent_and_null_values() -> None:
    top = read_yaml(PATH, "name: ~\nserver:\nusers:\n  alice:\ntags: [a, ~]\n", SCHEMA)
    assert "name" not in top
    assert top.text("name") is None
    assert "server" not in top
    assert top.section("server").integer("port") is None
    assert top.sections("absent") == []
    # In a free map a null value keeps its key (as Go's maps do); in a list it reads as "".
    assert "alice" in top.section("users")
    assert top.section("users").text("alice") is None
    assert top.texts("tags") == ["a", ""]
    for empty in ("", "# nothing\n", "~\n"):
        assert dict(read_yaml(PATH, empty, SCHEMA).values) == {}, empty
    assert compose_one(PATH, "# nothing\n") is None


def test_a_repeated_key_may_keep_the_last_value() -> None:
    text = "server:\n  port: 1\n  port: 2\nextra: {a: 1, b: 2, a: 3}\n"
    top = read_yaml(PATH, text, SCHEMA, repeated_keys="last")
    assert top.section("server").integer("port") == 2
    assert top.value("extra") == {"b": 2, "a": 3}
    assert top.line_of("server.port") == 3


def test_errors_name_the_line_of_a_key_or_the_nearest_above() -> None:
    text = "name: a\nserver:\n  hosts:\n    - host: h\n\n      weight: 1\n"
    top = read_yaml(PATH, text, SCHEMA)
    host = top.section("server").sections("hosts")[0]
    assert str(host.error("weight", "too heavy")) == \
        "settings.yaml:6: server.hosts[0].weight: too heavy"
    assert str(host.error("absent", "is required")) == \
        "settings.yaml:4: server.hosts[0].absent: is required"
    assert str(host.error("", "is wrong")) == "settings.yaml:4: server.hosts[0]: is wrong"
    assert str(top.section("users").error("bob", "is required")) == \
        "settings.yaml:1: users.bob: is required"
    # An error about the section itself, on the line of one of its keys; where no line is on
    # record for either, none is named rather than a wrong one.
    assert str(host.error_at("weight", "too heavy for h")) == \
        "settings.yaml:6: server.hosts[0]: too heavy for h"
    assert str(host.error_at("absent", "is wrong")) == "settings.yaml:4: server.hosts[0]: is wrong"
    assert str(host.error_at("", "is wrong")) == "settings.yaml:4: server.hosts[0]: is wrong"
    assert str(top.error_at("absent", "is wrong")) == "settings.yaml: is wrong"
    assert str(top.section("users").error_at("bob", "is wrong")) == \
        "settings.yaml: users: is wrong"


def test_any_notes_the_line_of_every_key_inside() -> None:
    node = compose_one(PATH, "a:\n  - b: 1\n\n    c: [x, y]\n")
    assert node is not None
    decoded = decode(PATH, node, "any")
    assert decoded.value == {"a": [{"b": 1, "c": ["x", "y"]}]}
    assert decoded.lines == {"a": 1, "a[0]": 2, "a[0].b": 2, "a[0].c": 4, "a[0].c[0]": 4,
                             "a[0].c[1]": 4}


def test_an_alias_is_checked_once_where_its_anchor_stands() -> None:
    top = read_yaml(PATH, "tags: &t [a, b]\nextra: *t\n", SCHEMA)
    assert top.texts("tags") == ["a", "b"]
    assert top.value("extra") == ["a", "b"]


def test_a_free_map_at_the_top() -> None:
    prices = read_yaml(PATH, '"H200": 4\n"*": 2.5\n', MapOf("number"))
    assert isinstance(prices, Section)
    assert {name: prices.number(name) for name in prices} == {"H200": 4.0, "*": 2.5}
