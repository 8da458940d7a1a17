"""Reading a YAML file a person hands the exporter (the config file, the web config, a
mig-parted config, a prices file) strictly, so that every mistake is named in one line
`FILE:LINE: key.path: what is expected` (`exporter.textfiles.located`).

Strict means as Go's yaml.v3 with `KnownFields(true)` reads one: exactly one document, no key
twice in a mapping at any depth (unless the caller keeps the last, as mig-parted does), only
scalar keys, only the keys a schema declares, each value of the declared type.

A schema is a `Mapping` of key -> schema (those keys and no other), `MapOf(value)` (any keys,
each value of one schema), `Sequence(item)`, or a scalar kind:

- `"int"`: a YAML 1.1 integer (0x1f, 017, 1_000 included); `"bool"`: true or false;
- `"number"`: an integer or a float; `"str"`: a YAML string (quoted, or plain text that is
  no other type);
- `"text"`: any scalar, read as its text, as Go decodes one into a string;
- `"any"`: any value, built as PyYAML's safe loader builds it, for callers with their own
  rules; its keys' lines are still noted.

A null value counts as absent (as for Go's pointer fields), except in a `MapOf`, where its
key stays, with None (as Go's maps keep it). `Section` hands the checked values
back typed, so callers need no casts, and names any key's line in their own errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from exporter.textfiles import UnreadableFile, located, read_text

if TYPE_CHECKING:  # PyYAML is imported only when a YAML file is read
    from yaml.nodes import MappingNode, Node, ScalarNode

Scalar = Literal["int", "bool", "number", "str", "text", "any"]
RepeatedKeys = Literal["refuse", "last"]
FilePath = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Sequence:
    """A list whose items each follow `item`."""

    item: Schema


@dataclass(frozen=True, slots=True)
class MapOf:
    """A mapping with any keys (read as their text), whose values each follow `value`."""

    value: Schema


Schema = Mapping[str, "Schema"] | Sequence | MapOf | Scalar

_TAG = "tag:yaml.org,2002:"
_KINDS = {"int": "an integer", "bool": "true or false", "number": "a number",
          "str": "a string", "text": "a text", "any": "a value"}


class YamlError(ValueError):
    """A YAML file that cannot be used; its message is one line naming the file, the line
    and the key at fault."""


@dataclass(slots=True)
class Decoded:
    """A document's plain values, and the line of each key path in it."""

    value: object
    lines: dict[str, int] = field(default_factory=dict)
    """The 1-based line of each key path (`collections[0].every`)."""


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def read_yaml_text(path: FilePath) -> str:
    """Return the file's text; YamlError (`FILE: cannot read: <reason>`) when it cannot be
    read."""
    try:
        return read_text(path)
    except UnreadableFile as exc:
        raise YamlError(str(exc)) from None


def compose_one(path: FilePath, text: str, repeated_keys: RepeatedKeys = "refuse") -> Node | None:
    """Return the file's one document, None when it holds none; YamlError for two documents,
    bad syntax, a key that is not a scalar, or (unless `repeated_keys` is "last") a key
    written twice in one mapping."""
    try:
        return _compose_one(path, text, repeated_keys)
    except RecursionError:  # PyYAML and the key check recurse once per level
        raise YamlError(f"{path}:1: not valid YAML here: nested too deeply") from None


def _compose_one(path: FilePath, text: str, repeated_keys: RepeatedKeys) -> Node | None:
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
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise YamlError(f"{path}:{line}: not valid YAML: character {character!r} is not "
                        "allowed") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"{path}:1: not valid YAML: {_one_line(str(exc))}") from None
    if not documents:
        return None
    if len(documents) > 1:
        raise YamlError(f"{path}:{_line(documents[1])}: multiple YAML documents are not "
                        "supported")
    _check_keys(path, documents[0], "", set(), repeated_keys == "refuse")
    return documents[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_keys(path: FilePath, node: Node, key: str, visited: set[int],
                refuse_repeated: bool) -> None:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if id(node) in visited:  # an alias: checked where its anchor stands
        return
    visited.add(id(node))
    if isinstance(node, SequenceNode):
        for index, child in enumerate(node.value):
            _check_keys(path, child, f"{key}[{index}]", visited, refuse_repeated)
    elif isinstance(node, MappingNode):
        first: dict[str, int] = {}
        for key_node, value in node.value:
            if not isinstance(key_node, ScalarNode):
                raise YamlError(located(path, _line(key_node), key or "the document",
                                        "YAML mapping keys must be scalar"))
            name = str(key_node.value)
            child_key = key_path(key, name)
            if name in first and refuse_repeated:
                raise YamlError(located(path, _line(key_node), child_key,
                                        f"duplicate YAML key; first defined at line "
                                        f"{first[name]}"))
            first[name] = _line(key_node)
            _check_keys(path, value, child_key, visited, refuse_repeated)


def key_path(key: str, name: str) -> str:
    """Return the key path of `name` in the mapping at `key` (`server.port`); a name that
    cannot be shown on one line (a newline, a tab) is shown quoted, so that every error stays
    one line."""
    shown = name if name.isprintable() else repr(name)
    return f"{key}.{shown}" if key else shown


def decode(path: FilePath, node: Node, schema: Schema, key: str = "") -> Decoded:
    """Return the node (the document, or the value of `key`) as plain values checked against
    `schema`, with the line of every key path; YamlError names the key at fault."""
    decoded = Decoded(None)
    decoded.value = _decode(path, node, schema, key, decoded.lines, {})
    return decoded


def read_yaml(path: FilePath, text: str, schema: Mapping[str, Schema] | MapOf,
              repeated_keys: RepeatedKeys = "refuse") -> Section:
    """Return the document of `text` (the file at `path`) checked against `schema`, as a
    Section; a file with no document, or a null one, is an empty Section."""
    node = compose_one(path, text, repeated_keys)
    if node is None:
        return Section(path, "", {}, {})
    decoded = decode(path, node, schema)
    values = decoded.value if isinstance(decoded.value, dict) else {}
    return Section(path, "", values, decoded.lines)


def kind_of(schema: Schema) -> str:
    """Return what a value of `schema` is, in words ("an integer", "a mapping")."""
    if isinstance(schema, Sequence):
        return "a list"
    if isinstance(schema, str):
        return _KINDS[schema]
    return "a mapping"


def _decode(path: FilePath, node: Node, schema: Schema, key: str, lines: dict[str, int],
            built: dict[int, object]) -> object:
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    if isinstance(node, ScalarNode) and node.tag == _TAG + "null":
        return None
    if schema == "any":
        return _any(node, key, lines, built)
    wrong = YamlError(located(path, _line(node), key or "the document",
                              f"expected {kind_of(schema)}, found {_found(node)}"))
    if isinstance(schema, Sequence):
        if not isinstance(node, SequenceNode):
            raise wrong
        items = []
        for index, child in enumerate(node.value):
            item_key = f"{key}[{index}]"
            lines[item_key] = _line(child)
            items.append(_decode(path, child, schema.item, item_key, lines, built))
        return items
    if isinstance(schema, str):
        if not isinstance(node, ScalarNode):
            raise wrong
        return _scalar(node, schema, wrong)
    if not isinstance(node, MappingNode):
        raise wrong
    return _decode_mapping(path, node, schema, key, lines, built)


def _decode_mapping(path: FilePath, node: MappingNode, schema: Mapping[str, Schema] | MapOf,
                    key: str, lines: dict[str, int], built: dict[int, object]) -> object:
    values: dict[str, object] = {}
    for key_node, value_node in node.value:
        name = str(key_node.value)
        child_key = key_path(key, name)
        if isinstance(schema, MapOf):
            child_schema = schema.value
        elif name in schema:
            child_schema = schema[name]
        else:
            raise YamlError(located(path, _line(key_node), child_key,
                                    f"unknown key (expected {_listed(schema)})"))
        lines[child_key] = _line(key_node)
        value = _decode(path, value_node, child_schema, child_key, lines, built)
        values.pop(name, None)  # a repeated key kept as the last one: in the last one's place
        if value is not None or isinstance(schema, MapOf):  # a map's null is a value
            values[name] = value
    return values


def _any(node: Node, key: str, lines: dict[str, int], built: dict[int, object]) -> object:
    """Return the node as PyYAML's safe loader builds it (mapping keys keep their type),
    noting the line of every key path in `lines`; an alias is the value built at its anchor."""
    from yaml.nodes import MappingNode, SequenceNode

    if id(node) in built:
        return built[id(node)]
    if isinstance(node, SequenceNode):
        items: list[object] = []
        built[id(node)] = items
        for index, child in enumerate(node.value):
            lines[f"{key}[{index}]"] = _line(child)
            items.append(_any(child, f"{key}[{index}]", lines, built))
        return items
    if isinstance(node, MappingNode):
        mapping: dict[object, object] = {}
        built[id(node)] = mapping
        for key_node, value_node in node.value:
            child_key = key_path(key, str(key_node.value))
            lines[child_key] = _line(key_node)
            name = _constructed(key_node)
            mapping.pop(name, None)
            mapping[name] = _any(value_node, child_key, lines, built)
        return mapping
    return _constructed(node)


def _constructed(node: Node) -> object:
    from yaml.constructor import ConstructorError, SafeConstructor

    try:
        return SafeConstructor().construct_object(node, deep=True)
    except (ConstructorError, ValueError, TypeError):  # e.g. an unhashable or bad timestamp
        return str(node.value)


def _scalar(node: ScalarNode, kind: Scalar, wrong: YamlError) -> object:
    text = str(node.value)
    if kind == "text":
        return text
    if kind == "str":
        if node.tag != _TAG + "str":
            raise wrong
        return text
    if kind == "bool":
        if node.tag != _TAG + "bool":
            raise wrong
        return text.lower() in ("true", "yes", "on", "y")
    if node.tag == _TAG + "float" and kind == "number":
        value = _constructed(node)
        if not isinstance(value, float):
            raise wrong
        return value
    if node.tag != _TAG + "int":
        raise wrong
    # YAML 1.1 integers: 0x1f, 017, 1_000, as the resolver that tagged it reads them.
    return _constructed(node)


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


@dataclass(frozen=True, slots=True)
class Section:
    """A decoded mapping (the document, or a mapping in it), whose checked values it hands
    back typed, and whose keys' lines it names in errors."""

    path: FilePath
    key: str
    """Its key path in the document; empty for the document itself."""
    values: Mapping[str, object]
    lines: Mapping[str, int]

    def __contains__(self, name: str) -> bool:
        """Return whether the mapping sets the key `name` (outside a `MapOf`, a null value
        counts as absent)."""
        return name in self.values

    def __iter__(self) -> Iterator[str]:
        """Return an iterator over the keys the mapping sets, in the file's order."""
        return iter(self.values)

    def key_of(self, name: str) -> str:
        """Return the key path of `name` in this mapping."""
        return key_path(self.key, name)

    def line_of(self, key: str) -> int:
        """Return the line of the key path `key`, else of the nearest key above it that has
        one, else this section's line, else 1."""
        line = self.lines.get(key)
        while line is None and ("." in key or "[" in key):
            key = key[:max(key.rfind("."), key.rfind("["))]
            line = self.lines.get(key)
        return line or self.lines.get(self.key, 1)

    def error(self, name: str, message: str) -> YamlError:
        """Return the one-line error `FILE:LINE: key.path: message` for the key `name` (empty:
        this section itself)."""
        key = self.key_of(name) if name else self.key
        return YamlError(located(self.path, self.line_of(key), key or None, message))

    def error_at(self, name: str, message: str) -> YamlError:
        """Return the one-line error `FILE:LINE: key.path: message` about this section itself,
        on the line of its key `name` (empty: its own line), else on its own line. For a rule
        on the mapping as a whole that one of its keys breaks (a key it must not have, a value
        that contradicts another). Where neither line is on record (a key reached through an
        alias, or named otherwise than the file writes it), the error names no line rather
        than a wrong one."""
        line = (self.lines.get(self.key_of(name)) if name else None) or self.lines.get(self.key)
        return YamlError(located(self.path, line, self.key or None, message))

    def _get(self, name: str, kind: type | tuple[type, ...]) -> object:
        value = self.values.get(name)
        if value is not None and (not isinstance(value, kind) or
                                  (kind is not bool and isinstance(value, bool))):
            raise TypeError(f"{self.key_of(name)}: the schema does not make it {kind}")
        return value

    def text(self, name: str) -> str | None:
        """Return the "str" or "text" value of `name`; None when absent."""
        value = self._get(name, str)
        return value if isinstance(value, str) else None

    def integer(self, name: str) -> int | None:
        """Return the "int" value of `name`; None when absent."""
        value = self._get(name, int)
        return value if isinstance(value, int) else None

    def flag(self, name: str) -> bool | None:
        """Return the "bool" value of `name`; None when absent."""
        value = self._get(name, bool)
        return value if isinstance(value, bool) else None

    def number(self, name: str) -> float | None:
        """Return the "number" value of `name` as a float; None when absent."""
        value = self._get(name, (int, float))
        return float(value) if isinstance(value, int | float) else None

    def texts(self, name: str) -> list[str] | None:
        """Return the `Sequence("str")` or `Sequence("text")` value of `name` (a null item is
        "", as Go decodes it); None when absent."""
        value = self._get(name, list)
        if not isinstance(value, list):
            return None
        return [item if isinstance(item, str) else "" for item in value]

    def section(self, name: str) -> Section:
        """Return the mapping at `name` (an empty one when absent)."""
        value = self._get(name, dict)
        return Section(self.path, self.key_of(name),
                       value if isinstance(value, dict) else {}, self.lines)

    def sections(self, name: str) -> list[Section]:
        """Return the list of mappings at `name` (empty when absent; a null item is an empty
        mapping)."""
        value = self._get(name, list)
        items = value if isinstance(value, list) else []
        return [Section(self.path, f"{self.key_of(name)}[{index}]",
                        item if isinstance(item, dict) else {}, self.lines)
                for index, item in enumerate(items)]

    def value(self, name: str) -> object:
        """Return the value of `name` as decoded (an "any" value); None when absent."""
        return self.values.get(name)
