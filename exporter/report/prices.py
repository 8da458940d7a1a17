"""Prices per GPU-hour: one for every model (`--price`), or a file by `modelName`.

The file is YAML (or JSON, which YAML reads too), a map of model to price; `"*"` prices any
model it does not name:

    "NVIDIA H200": 4.10
    "NVIDIA A100-SXM4-80GB": 1.90
    "*": 2.50
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.report.connection import ReportError

ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class Prices:
    default: float | None = None
    by_model: Mapping[str, float] = field(default_factory=dict)

    def price(self, model: str) -> float | None:
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
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{where} {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ReportError(f"{where} {path}: not YAML or JSON: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ReportError(f"{where} {path}: expected a map of GPU model to price per "
                          "GPU-hour")
    by_model: dict[str, float] = {}
    for model, price in data.items():
        if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
            raise ReportError(f"{where} {path}: {model!r}: {price!r} is not a price")
        by_model[str(model)] = float(price)
    return Prices(by_model.pop(ANY_MODEL, default), by_model)
