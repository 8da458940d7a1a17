"""Contract check on a machine with real NVIDIA GPUs: exporter vs nvidia-smi.

Usage: .venv/bin/python scripts/nvml_contract.py [--interval 1s]

Starts the exporter (`--backend nvml`) on a free loopback port, waits for a complete poll,
scrapes /metrics, runs `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` right after,
and compares every mapped field per GPU within the tolerances below. Prints a table; exits 1
on any mismatch, 2 when it cannot run (no GPU, no nvidia-smi). It only reads: it never
changes a GPU setting.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.config import parse_duration  # noqa: E402


@dataclass(frozen=True)
class Check:
    smi: str
    """nvidia-smi --query-gpu property."""
    field: str
    """Exported metric (or label, for identity checks)."""
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    scale: float = 1.0
    """Multiplies the nvidia-smi value into the exported unit."""


CHECKS = (
    Check("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", abs_tol=3),
    Check("temperature.memory", "DCGM_FI_DEV_MEMORY_TEMP", abs_tol=3),
    Check("power.draw", "DCGM_FI_DEV_POWER_USAGE", abs_tol=25, rel_tol=0.15),
    Check("power.limit", "DCGM_FI_DEV_POWER_MGMT_LIMIT", abs_tol=1),
    Check("clocks.current.sm", "DCGM_FI_DEV_SM_CLOCK", abs_tol=50, rel_tol=0.10),
    Check("clocks.current.memory", "DCGM_FI_DEV_MEM_CLOCK", abs_tol=50, rel_tol=0.05),
    Check("utilization.gpu", "DCGM_FI_DEV_GPU_UTIL", abs_tol=20),
    Check("utilization.memory", "DCGM_FI_DEV_MEM_COPY_UTIL", abs_tol=20),
    Check("utilization.encoder", "DCGM_FI_DEV_ENC_UTIL", abs_tol=20),
    Check("utilization.decoder", "DCGM_FI_DEV_DEC_UTIL", abs_tol=20),
    Check("memory.used", "DCGM_FI_DEV_FB_USED", abs_tol=64),
    Check("memory.free", "DCGM_FI_DEV_FB_FREE", abs_tol=64),
    Check("memory.reserved", "DCGM_FI_DEV_FB_RESERVED", abs_tol=1),
    Check("ecc.errors.corrected.volatile.total", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    Check("ecc.errors.uncorrected.volatile.total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    Check("remapped_rows.correctable", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
    Check("remapped_rows.uncorrectable", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    Check("remapped_rows.failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
)
IDENTITY = ("index", "uuid", "pci.bus_id", "name", "driver_version")

Samples = dict[str, dict[str, float]]
"""metric -> gpu index -> value, for whole-GPU series (no GPU_I_ID label)."""


def parse_smi_csv(text: str, properties: Iterable[str]) -> list[dict[str, str | None]]:
    """Return the rows of `--format=csv,noheader,nounits` output; "[N/A]"-style cells become
    None."""
    names = list(properties)
    rows = []
    for cells in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not cells:
            continue
        row: dict[str, str | None] = {}
        for name, cell in zip(names, cells, strict=True):
            value = cell.strip()
            row[name] = None if value.startswith("[") or value in ("N/A", "") else value
        rows.append(row)
    return rows


def _number(text: str) -> float:
    lowered = text.lower()
    if lowered in ("yes", "enabled", "active"):
        return 1.0
    if lowered in ("no", "disabled", "not active"):
        return 0.0
    return float(text.split()[0])


@dataclass(frozen=True)
class Result:
    gpu: str
    check: str
    smi: str
    exported: str
    ok: bool
    note: str = ""


def compare(samples: Samples, labels: dict[str, dict[str, str]],
            rows: list[dict[str, str | None]]) -> list[Result]:
    """Return one result per (GPU, check). `labels` maps gpu index -> its series' labels."""
    results = []
    for row in rows:
        gpu = row["index"] or "?"
        have = labels.get(gpu, {})
        for prop, label in (("uuid", "UUID"), ("pci.bus_id", "pci_bus_id"),
                            ("name", "modelName"), ("driver_version", "DCGM_FI_DRIVER_VERSION")):
            theirs, ours = row.get(prop), have.get(label)
            ok = theirs is None or (ours is not None and ours.lower() == theirs.lower())
            results.append(Result(gpu, label, str(theirs), str(ours), ok))
        for check in CHECKS:
            raw = row.get(check.smi)
            ours_value = samples.get(check.field, {}).get(gpu)
            if raw is None:
                note = "both absent" if ours_value is None else "nvidia-smi N/A"
                results.append(Result(gpu, check.field, "N/A", str(ours_value), True, note))
                continue
            theirs_value = _number(raw) * check.scale
            if ours_value is None:
                results.append(Result(gpu, check.field, raw, "absent", False,
                                      "exporter omits a value nvidia-smi shows"))
                continue
            tolerance = max(check.abs_tol, check.rel_tol * abs(theirs_value))
            ok = abs(ours_value - theirs_value) <= tolerance
            results.append(Result(gpu, check.field, f"{theirs_value:g}", f"{ours_value:g}", ok,
                                  f"tolerance {tolerance:g}"))
    return results


def samples_from_exposition(text: str) -> tuple[Samples, dict[str, dict[str, str]]]:
    from prometheus_client.parser import text_string_to_metric_families

    samples: Samples = {}
    labels: dict[str, dict[str, str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "gpu" not in s.labels or "GPU_I_ID" in s.labels:
                continue
            samples.setdefault(s.name, {})[s.labels["gpu"]] = s.value
            labels.setdefault(s.labels["gpu"], dict(s.labels))
    return samples, labels


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape_exporter(interval: str) -> str:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--backend", "nvml",
                             "-a", f"127.0.0.1:{port}", "-c", interval], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        time.sleep(3 * parse_duration(interval, "--interval", "s"))  # a GPM pair, settled
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", default="1s", help="exporter poll interval (seconds)")
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: this check needs a machine with NVIDIA GPUs")
        return 2
    exposition = _scrape_exporter(args.interval)
    properties = [*IDENTITY, *(c.smi for c in CHECKS)]
    smi = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(properties)}",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True).stdout
    samples, labels = samples_from_exposition(exposition)
    results = compare(samples, labels, parse_smi_csv(smi, properties))
    print("| gpu | field | nvidia-smi | exporter | ok | note |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.gpu} | {r.check} | {r.smi} | {r.exported} | "
              f"{'yes' if r.ok else 'NO'} | {r.note} |")
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
