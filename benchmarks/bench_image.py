"""The image's budgets: its size as a registry stores it, its start, its memory.

Usage: .venv/bin/python benchmarks/bench_image.py [--image REF] [--runs 3] [--json FILE]
Builds the amd64 image with scripts/image.py unless `--image` names one. Needs rootful
podman. The image is the node's (serve and doctor; docs/image.md), whose goal is 60 MB
compressed. Prints one report; the test command runs it (tests/image/test_image_budget.py),
which checks only the size goal. Measured, in one run:

- size: uncompressed (the layers as podman stores them) and compressed as a registry stores
  it (`podman push --compression-format gzip` into an OCI layout: gzip-compressed layer
  blobs, as `docker push` uploads them), per layer, and per Python distribution (its
  installed files, bytecode included, and those files gzip-compressed together);
- start to /health: from `podman run` to the first 200 on /health, against the same
  exporter started as a bare process from this checkout's venv (the median of `--runs`);
- resident memory after start and a few scrapes: the container's main process against the
  bare process, both on the simulated NVML library with the same three GPUs and CSV.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.podman import inspect_format, mounted_image, podman  # noqa: E402
from tests.nvmlsim.build import build_library  # noqa: E402
from tests.support.container import ContainerSpec, RunningContainer, start  # noqa: E402
from tests.support.exporter_process import free_port  # noqa: E402
from tests.support.nvml_injection import nvml_injection  # noqa: E402

MB = 1_000_000
SITE = "usr/local/lib/python3.11/dist-packages"
CSV = "dcp-metrics-included.csv"
SCENARIO = {"devices": [{}, {}, {}]}
"""Three simulated H200s."""
GOAL_COMPRESSED_MB = 60
"""The node image: serve and doctor only (docs/image.md)."""


def compressed_layers(image: str, scratch: Path) -> list[int]:
    """Return the bytes of each layer blob as a registry stores it (gzip), base first."""
    layout = scratch / "oci"
    podman("push", "--compression-format", "gzip", "--quiet", image, f"oci:{layout}:bench",
           timeout=900)
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs" / "sha256" / digest).read_text())
    return [int(layer["size"]) for layer in manifest["layers"]]


def _owners(site: Path) -> dict[str, list[Path]]:
    """Return the files of each distribution under `site`, by its RECORD, with their bytecode."""
    owned: dict[str, list[Path]] = {}
    for record in site.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0].replace("_", "-").lower()
        files = []
        for line in record.read_text().splitlines():
            rel = line.split(",")[0]
            path = site / rel
            if rel and not rel.startswith("..") and path.is_file():
                files.append(path)
                if path.suffix == ".py":
                    files += path.parent.glob(f"__pycache__/{path.stem}.*.pyc")
        owned[name] = files
    return owned


def _gzip_size(files: list[Path]) -> int:
    """Return the bytes of the files as one gzip-compressed tar stream (level 6, as pushed
    layers)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w|") as tar:
        for path in files:
            tar.add(str(path), arcname=str(path), recursive=False)
    return len(buffer.getvalue())


def package_sizes(rootfs: Path) -> list[tuple[str, int, int]]:
    """Return (distribution, installed bytes, compressed bytes) of each distribution, largest
    first."""
    rows = []
    for name, files in _owners(rootfs / SITE).items():
        rows.append((name, sum(p.stat().st_size for p in files), _gzip_size(files)))
    return sorted(rows, key=lambda row: -row[1])


def tree_size(root: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total


# ----------------------------------------------------------------------------- start, RSS


def _health_after(url: str, started: float, alive: Callable[[], bool],
                  timeout: float = 60) -> float:
    while time.monotonic() - started < timeout:
        if not alive():
            raise RuntimeError("the exporter exited before answering /health")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"/health did not answer within {timeout}s")


def _scrape(url: str, times: int = 3) -> None:
    for _ in range(times):
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            response.read()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def run_container(image: str, lib_dir: Path, scratch: Path) -> tuple[float, int]:
    binds, env = nvml_injection(lib_dir, SCENARIO, scratch)
    spec = ContainerSpec(image=image, args=("-f", f"/etc/dcgm-exporter/{CSV}", "-c", "1000"),
                         env=env, binds=binds, read_only=True, cap_drop_all=True)
    container: RunningContainer = start(spec)
    try:
        after = _health_after(container.url, container.started,
                              lambda: container.exit_code() is None)
        _scrape(container.url)
        return after, container.rss_kib()
    finally:
        container.remove()


def run_bare(lib_dir: Path, scratch: Path) -> tuple[float, int]:
    scenario = scratch / "bare-scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "NVMLSIM_SCENARIO": str(scenario),
           "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "-f", str(ROOT / "exporter/fields/dcgm-exporter" / CSV),
         "-c", "1000", "-a", f"127.0.0.1:{port}"], env=env, cwd=scratch,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        after = _health_after(url, started, lambda: proc.poll() is None)
        _scrape(url)
        return after, _rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def measure(image: str, runs: int) -> dict[str, Any]:
    lib_dir = build_library()
    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
        scratch = Path(tmp)
        scratch.chmod(0o755)
        layers = compressed_layers(image, scratch)
        with mounted_image(image) as rootfs:
            packages = package_sizes(rootfs)
            uncompressed = tree_size(rootfs)
            site = tree_size(rootfs / SITE)
        container = [run_container(image, lib_dir, scratch) for _ in range(runs)]
        bare = [run_bare(lib_dir, scratch) for _ in range(runs)]
    start_c = statistics.median(s for s, _ in container)
    start_b = statistics.median(s for s, _ in bare)
    rss_c = statistics.median(r for _, r in container)
    rss_b = statistics.median(r for _, r in bare)
    return {
        "image": image, "architecture": inspect_format(image, "{{.Architecture}}"),
        "uncompressed_bytes": uncompressed, "python_packages_bytes": site,
        "compressed_bytes": sum(layers),
        "compressed_layers_bytes": layers,
        "packages": [{"name": n, "installed_bytes": i, "compressed_bytes": c}
                     for n, i, c in packages],
        "start_to_health_s": {"container": start_c, "bare": start_b,
                              "ratio": start_c / start_b},
        "rss_kib": {"container": rss_c, "bare": rss_b, "ratio": rss_c / rss_b},
        "runs": runs,
    }


def report(result: dict[str, Any]) -> str:
    lines = [f"image {result['image']} ({result['architecture']})",
             f"size: {result['uncompressed_bytes'] / MB:.0f} MB uncompressed, "
             f"{result['compressed_bytes'] / MB:.0f} MB compressed (goal <= "
             f"{GOAL_COMPRESSED_MB} MB); layers compressed: "
             + ", ".join(f"{b / MB:.1f}" for b in result["compressed_layers_bytes"]) + " MB",
             f"{'distribution':28}{'installed MB':>14}{'compressed MB':>15}"]
    for row in result["packages"]:
        lines.append(f"{row['name']:28}{row['installed_bytes'] / MB:14.1f}"
                     f"{row['compressed_bytes'] / MB:15.1f}")
    start_s, rss = result["start_to_health_s"], result["rss_kib"]
    lines += [f"start to /health (median of {result['runs']}): container "
              f"{start_s['container']:.2f} s, bare process {start_s['bare']:.2f} s "
              f"({start_s['ratio']:.2f}x)",
              f"RSS after start and 3 scrapes: container {rss['container'] / 1024:.1f} MiB, "
              f"bare process {rss['bare'] / 1024:.1f} MiB ({rss['ratio']:.2f}x)"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="image to measure (default: build the amd64 image)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    image = args.image
    if image is None:
        from scripts.image import build_image

        image = build_image("amd64")
    result = measure(image, args.runs)
    print(report(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

