"""Prices per GPU-hour: one for every model (`--price`), or a file by `modelName`.

The file is YAML (or JSON, which YAML reads too), a map of model to price; `"*"` prices any
model it does not name:

    "NVIDIA H200": 4.10
    "NVIDIA A100-SXM4-80GB": 1.90
    "*": 2.50

It is read strictly (`exporter.yamlfiles`): a model named twice, a price that is not a number
or a second document is refused in one line naming the file, the line and the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.report.connection import ReportError
from exporter.yamlfiles import MapOf, YamlError, read_yaml, read_yaml_text

ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class Prices:
    """The price of a GPU-hour for each GPU model, with a default for models the price file does
    not name."""

    default: float | None = None
    by_model: Mapping[str, float] = field(default_factory=dict)

    def price(self, model: str) -> float | None:
        """Return the price of a GPU-hour of `model`, else the default price; None when neither
        is known."""
        return self.by_model.get(model, self.default)

    def cost(self, hours: Iterable[tuple[str, str, float]]) -> dict[str, float]:
        """Return the cost per group from (group, modelName, GPU-hours)."""
        rows = list(hours)
        missing = sorted({model for _, model, _ in rows if self.price(model) is None})
        if missing:
            raise ReportError(f"the price file names no price for {', '.join(map(repr, missing))}"
                              f"; add them or a \"{ANY_MODEL}\" entry")
        cost: dict[str, float] = {}
        for group, model, held in rows:
            cost[group] = cost.get(group, 0.0) + held * (self.price(model) or 0.0)
        return cost


def load_prices(path: Path | None, default: float | None, where: str) -> Prices | None:
    """Return the prices from `--price-file` and `--price` (the file's `"*"` wins over `--price`);
    errors name the file's option as `where` spells it."""
    if path is None:
        return None if default is None else Prices(default)
    try:
        given = read_yaml(path, read_yaml_text(path), MapOf("number"))
    except YamlError as exc:
        raise ReportError(f"{where} {exc}") from None
    if not given.values:
        raise ReportError(f"{where} {path}: expected a map of GPU model to price per "
                          "GPU-hour")
    by_model: dict[str, float] = {}
    for model in given:
        price = given.number(model)
        if price is None or not (math.isfinite(price) and price >= 0):
            shown = "null" if price is None else f"{price:g}"
            refusal = given.error(model, f"{shown} is not a price; expected a number, 0 or more")
            raise ReportError(f"{where} {refusal}")
        by_model[model] = price
    return Prices(by_model.pop(ANY_MODEL, default), by_model)
