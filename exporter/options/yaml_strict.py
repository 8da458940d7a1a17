"""A YAML file read as strictly as dcgm-exporter reads its config file (yaml.v3 with
`KnownFields(true)`): exactly one document, no key twice in a mapping at any depth, only
scalar keys, only the keys a schema declares, each value of the declared type.

A schema is a `Mapping` of key -> schema, `Sequence(item)`, or one of the scalar kinds
`int`, `bool`, `str` (any scalar, read as its text, as Go decodes one into a string).
Decoding gives plain dicts, lists and scalars; a null value counts as absent (as for Go's
pointer fields), and `Decoded.lines` says on which line each key path stands, so that later
checks can name it. Every error is one line: `FILE:LINE: KEY: what is wrong`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # PyYAML is imported only when a config file is read
    from yaml.nodes import Node, ScalarNode

Scalar = Literal["int", "bool", "str"]


@dataclass(frozen=True, slots=True)
class Sequence:
    item: Schema


Schema = Mapping[str, "Schema"] | Sequence | Scalar

_TAG = "tag:yaml.org,2002:"


class YamlError(ValueError):
    """One line naming the file, the line and the key at fault."""


@dataclass(slots=True)
class Decoded:
    value: object
    lines: dict[str, int] = field(default_factory=dict)
    """Key path (`collections[0].every`) -> its line, 1-based."""


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def compose_one(path: Path, text: str) -> Node:
    """The file's one document; YamlError for none, two, bad syntax or a repeated key."""
    try:
        return _compose_one(path, text)
    except RecursionError:  # PyYAML and the key check recurse once per level
        raise YamlError(f"{path}:1: not valid YAML here: nested too deeply") from None


def _compose_one(path: Path, text: str) -> Node:
    import yaml

    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise YamlError(f"{path}:{line}: not valid YAML: "
                        f"{_one_line(exc.problem or exc.context or str(exc))}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        line = text[:exc.position].count("\n") + 1
        raise YamlError(f"{path}:{line}: not valid YAML: character {exc.character!r} is not "
                        "allowed") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"{path}:1: not valid YAML: {_one_line(str(exc))}") from None
    if not documents:
        raise YamlError(f"{path}:1: the file holds no YAML document (expected version: 1 "
                        "or 2, and the settings)")
    if len(documents) > 1:
        raise YamlError(f"{path}:{_line(documents[1])}: multiple YAML documents are not "
                        "supported")
    _reject_repeated_keys(path, documents[0], "", set())
    return documents[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _reject_repeated_keys(path: Path, node: Node, key: str, visited: set[int]) -> None:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if id(node) in visited:  # an alias: checked where its anchor stands
        return
    visited.add(id(node))
    if isinstance(node, SequenceNode):
        for index, child in enumerate(node.value):
            _reject_repeated_keys(path, child, f"{key}[{index}]", visited)
    elif isinstance(node, MappingNode):
        first: dict[str, int] = {}
        for key_node, value in node.value:
            if not isinstance(key_node, ScalarNode):
                raise YamlError(f"{path}:{_line(key_node)}: {key or 'the document'}: YAML "
                                "mapping keys must be scalar")
            name = str(key_node.value)
            child_key = f"{key}.{name}" if key else name
            if name in first:
                raise YamlError(f"{path}:{_line(key_node)}: {child_key}: duplicate YAML key; "
                                f"first defined at line {first[name]}")
            first[name] = _line(key_node)
            _reject_repeated_keys(path, value, child_key, visited)


def decode(path: Path, node: Node, schema: Schema, key: str = "") -> Decoded:
    """The node (the document, or the value of `key`) as plain values, checked against
    `schema` (YamlError names the key)."""
    decoded = Decoded(None)
    decoded.value = _decode(path, node, schema, key, decoded.lines)
    return decoded


def _kind(schema: Schema) -> str:
    if isinstance(schema, Sequence):
        return "a list"
    if isinstance(schema, str):
        return {"int": "an integer", "bool": "true or false", "str": "a text"}[schema]
    return "a mapping"


def _decode(path: Path, node: Node, schema: Schema, key: str,
            lines: dict[str, int]) -> object:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    shown = key or "the document"
    if isinstance(node, ScalarNode) and node.tag == _TAG + "null":
        return None
    wrong = YamlError(f"{path}:{_line(node)}: {shown}: expected {_kind(schema)}, found "
                      f"{_found(node)}")
    if isinstance(schema, Sequence):
        if not isinstance(node, SequenceNode):
            raise wrong
        items = []
        for index, child in enumerate(node.value):
            item_key = f"{key}[{index}]"
            lines[item_key] = _line(child)
            items.append(_decode(path, child, schema.item, item_key, lines))
        return items
    if isinstance(schema, str):
        if not isinstance(node, ScalarNode):
            raise wrong
        return _scalar(node, schema, wrong)
    if not isinstance(node, MappingNode):
        raise wrong
    values: dict[str, object] = {}
    for key_node, value_node in node.value:
        name = str(key_node.value)
        child_key = f"{key}.{name}" if key else name
        if name not in schema:
            raise YamlError(f"{path}:{_line(key_node)}: {child_key}: unknown key (expected "
                            f"{_listed(schema)})")
        lines[child_key] = _line(key_node)
        value = _decode(path, value_node, schema[name], child_key, lines)
        if value is not None:
            values[name] = value
    return values


def _scalar(node: ScalarNode, kind: Scalar, wrong: YamlError) -> object:
    text = str(node.value)
    if kind == "str":
        return text
    if kind == "bool":
        if node.tag != _TAG + "bool":
            raise wrong
        return text.lower() in ("true", "yes", "on", "y")
    if node.tag != _TAG + "int":
        raise wrong
    from yaml.constructor import SafeConstructor

    # YAML 1.1 integers: 0x1f, 0o17, 1_000, as the resolver that tagged it reads them.
    constructed = SafeConstructor().construct_yaml_int(node)
    assert isinstance(constructed, int)
    return constructed


def _found(node: Node) -> str:
    from yaml.nodes import MappingNode, SequenceNode

    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    text = str(node.value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _listed(schema: Mapping[str, Schema]) -> str:
    names = list(schema)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
