"""A page opened in a real headless browser (Debian's `chromium`), driven over the DevTools
protocol: what it logged as errors, what its charts measure, and a screenshot."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.requirements import require_tool
from tests.support.wait import wait_until

CHART_SIZES_JS = """JSON.stringify(Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : null;
  return {id: f.id, width: r ? r.width : 0, height: r ? r.height : 0,
          shapes: svg ? svg.querySelectorAll('path, rect, use').length : 0};
}))"""


@dataclass
class RenderedPage:
    errors: list[str] = field(default_factory=list)
    """Console errors, uncaught exceptions and browser log entries of level error."""
    charts: list[dict[str, Any]] = field(default_factory=list)
    """Per `figure.chart`: id, rendered width and height (CSS px), drawn shapes."""


class _DevTools:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        await self.socket.send_json({"id": number, "method": method, "params": params})
        while True:
            message = await self.socket.receive_json(timeout=30)
            if message.get("id") == number:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    async def until_event(self, method: str) -> None:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(await self.socket.receive_json(timeout=30))


def _errors(events: list[dict[str, Any]]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(" ".join(str(a.get("value", a.get("description")))
                                  for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            found.append(str(params.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            found.append(str(params["entry"].get("text")))
    return found


async def _drive(port: int, url: str, screenshot: Path, width: int, height: int
                 ) -> RenderedPage:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as socket:
            tools = _DevTools(socket)
            for domain in ("Runtime", "Log", "Page"):
                await tools.call(f"{domain}.enable")
            await tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                             deviceScaleFactor=1, mobile=False)
            await tools.call("Page.navigate", url=url)
            await tools.until_event("Page.loadEventFired")
            sizes = await tools.call("Runtime.evaluate", expression=CHART_SIZES_JS,
                                     returnByValue=True)
            shot = await tools.call("Page.captureScreenshot", format="png",
                                    captureBeyondViewport=True)
            await asyncio.to_thread(screenshot.write_bytes, base64.b64decode(shot["data"]))
            return RenderedPage(_errors(tools.events), json.loads(sizes["result"]["value"]))


def render_in_chromium(path: Path, screenshot: Path, width: int = 1200, height: int = 900
                       ) -> RenderedPage:
    """Open `path` in headless chromium; the screenshot covers the whole page."""
    binary = require_tool("chromium", "chromium")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        browser = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            active = Path(profile) / "DevToolsActivePort"

            def port() -> int | None:
                if browser.poll() is not None:
                    raise AssertionError(f"chromium exited with {browser.returncode}")
                lines = active.read_text().split() if active.exists() else []
                return int(lines[0]) if lines else None
            number = wait_until(port, 60.0, 0.1, what="chromium's DevTools port")
            return asyncio.run(_drive(number, path.resolve().as_uri(), screenshot, width,
                                      height))
        finally:
            browser.terminate()
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                browser.kill()
                browser.wait()
