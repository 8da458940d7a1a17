"""The real-GPU contract script's parsing and comparison, on a real nvidia-smi capture."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from tests.support.paths import ROOT, fixture_file

spec = importlib.util.spec_from_file_location("nvml_contract",
                                              ROOT / "scripts" / "nvml_contract.py")
assert spec is not None
assert spec.loader is not None
contract = importlib.util.module_from_spec(spec)
sys.modules["nvml_contract"] = contract
spec.loader.exec_module(contract)


def capture_rows(path: Path) -> list[dict[str, str | None]]:
    """The idle `--query-gpu` CSV section of a capture (header row with units, then data)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# idle :: query-gpu"))
    header = next(line for line in lines[start:] if line.startswith("timestamp,"))
    data = lines[lines.index(header, start) + 1]
    names = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in header.split(",")]
    rows: list[dict[str, str | None]] = contract.parse_smi_csv(data, names)
    return rows


def exposition_for(row: dict[str, str | None], power_offset: float = 0.0) -> str:
    labels = (f'gpu="0",UUID="{row["uuid"]}",pci_bus_id="{row["pci.bus_id"]}",device="nvidia0",'
              f'modelName="{row["name"]}",DCGM_FI_DRIVER_VERSION="{row["driver_version"]}"')
    lines = []
    for check in contract.CHECKS:
        raw = row.get(check.smi)
        if raw is None:
            continue
        value = contract._number(raw) + (power_offset if check.smi == "power.draw" else 0)
        lines.append(f"{check.field}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def test_matching_values_pass_and_a_power_mismatch_fails() -> None:
    rows = capture_rows(fixture_file("nvidia-smi", "linux-x86_64__nvidia-h200__590.48.01.txt"))
    row = rows[0]
    row["index"] = "0"
    assert row["power.draw"] is not None
    assert row["memory.used"] is not None
    samples, labels = contract.samples_from_exposition(exposition_for(row))
    results = contract.compare(samples, labels, rows)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert any(r.check == "DCGM_FI_DEV_FB_USED" and r.note.startswith("tolerance")
               for r in results)
    samples, labels = contract.samples_from_exposition(exposition_for(row, power_offset=200))
    failed = [r for r in contract.compare(samples, labels, rows) if not r.ok]
    assert [r.check for r in failed] == ["DCGM_FI_DEV_POWER_USAGE"]


def test_a_value_the_exporter_omits_is_a_failure() -> None:
    rows = capture_rows(fixture_file("nvidia-smi", "linux-x86_64__nvidia-h200__590.48.01.txt"))
    rows[0]["index"] = "0"
    text = "\n".join(line for line in exposition_for(rows[0]).splitlines()
                     if not line.startswith("DCGM_FI_DEV_GPU_TEMP")) + "\n"
    samples, labels = contract.samples_from_exposition(text)
    failed = [r for r in contract.compare(samples, labels, rows) if not r.ok]
    assert [(r.check, r.exported) for r in failed] == [("DCGM_FI_DEV_GPU_TEMP", "absent")]
