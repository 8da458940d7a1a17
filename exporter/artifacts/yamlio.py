"""Deterministic YAML output: insertion-ordered keys, literal blocks for multi-line text."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(*documents: Any, header: str = "") -> str:
    """Return the YAML text of one or more documents; `header` lines become `#` comments on top."""
    body = yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=4096,
                         default_flow_style=False, allow_unicode=True, explicit_start=True)
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + body
