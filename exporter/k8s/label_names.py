"""How a Kubernetes label key becomes a Prometheus label name: dcgm-exporter's rule."""

from __future__ import annotations

import re
from collections.abc import Callable

KeyFilter = Callable[[str], bool]
"""Says whether a pod label key is copied onto series."""

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def sanitise_label_name(key: str) -> str:
    """Return a pod label key made into a label name by replacing each character outside
    `[a-zA-Z0-9_]` with `_`, as dcgm-exporter does."""
    return _UNSAFE.sub("_", key)


def series_label_name(key: str, prefix: str = "") -> str:
    """Return the label name that a pod label key becomes on series: `prefix` (ours is `label_`)
    followed by the sanitised key. Without a prefix, a name that would start with a digit
    (`3scale.net/tier`) gets a leading `_`, since Prometheus refuses it (dcgm-exporter would emit
    it as is)."""
    name = prefix + sanitise_label_name(key)
    return "_" + name if not prefix and name[:1].isdigit() else name
