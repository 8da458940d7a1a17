"""The picture of the node page in docs/node-page.md, docs/node-page.png.

    .venv/bin/python scripts/node_page_screenshot.py [--out docs/node-page.png]

Serves the simulated node as `scripts/run.sh` does without a driver (8x H200 with MIG, the
simulated kubelet's pods, the inference label preset), waits for the second poll (GPM
answers from then on), opens `/` in headless Chromium at 1280x1480 and keeps the top of the
page as a 64-colour PNG, so the file stays small. Needs Debian's `chromium`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.chromium import BrowserTab, browser_page, chromium_port  # noqa: E402
from tests.support.exporter_process import ExporterProcess  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

RUN_SH_DEMO = ["--backend", "sim", "--sim.profile", "h200-mig", "--sim.kubelet",
               "--kubernetes.pod-labels", "inference"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "node-page.png")
    args = parser.parse_args()
    from PIL import Image  # matplotlib's dependency, installed with the package

    proc = ExporterProcess([*RUN_SH_DEMO, "-c", "2s"], env={"NODE_NAME": "gpu-node-07"})
    try:
        proc.wait_ready()
        wait_until(lambda: "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in proc.metrics(), 30.0,
                   what="GPM values (the second poll)")
        raw = args.out.with_suffix(".raw.png")

        async def shoot(port: int) -> None:
            async with browser_page(port, width=1280, height=1480) as tab:
                await tab.open(proc.base + "/")
                await _viewport_shot(tab, raw)

        with chromium_port() as port:
            asyncio.run(shoot(port))
    finally:
        proc.close()
    image = Image.open(raw).convert("RGB").quantize(64)
    image.save(args.out, optimize=True)
    raw.unlink()
    print(f"{args.out}: {args.out.stat().st_size // 1024} KiB")
    return 0


async def _viewport_shot(tab: BrowserTab, path: Path) -> None:
    """Take a picture of the viewport only: the first cards, the MIG layouts and the header."""
    await tab.value("window.scrollTo(0, 0)")
    await tab.screenshot(path, whole_page=False)


if __name__ == "__main__":
    sys.exit(main())
