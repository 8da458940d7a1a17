"""A page opened in a real headless browser (Debian's `chromium`), driven over the DevTools
protocol: what it logged as errors, what its charts measure, and a screenshot.

`render_in_chromium` opens a file once; `chromium_port` and `browser_page` give a test a
live tab to navigate, query, wait on reloads and screenshot (pages served over HTTP(S)).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
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


@contextlib.asynccontextmanager
async def _first_tab(port: int, domains: Sequence[str], width: int, height: int
                     ) -> AsyncIterator[_DevTools]:
    """DevTools on the first tab of the chromium on `port`, with `domains` enabled and the
    viewport at this size."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as socket:
            tools = _DevTools(socket)
            for domain in domains:
                await tools.call(f"{domain}.enable")
            await tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                             deviceScaleFactor=1, mobile=False)
            yield tools


async def _drive(port: int, url: str, screenshot: Path, width: int, height: int
                 ) -> RenderedPage:
    async with _first_tab(port, ("Runtime", "Log", "Page"), width, height) as tools:
        await tools.call("Page.navigate", url=url)
        await tools.until_event("Page.loadEventFired")
        sizes = await tools.call("Runtime.evaluate", expression=CHART_SIZES_JS,
                                 returnByValue=True)
        shot = await tools.call("Page.captureScreenshot", format="png",
                                captureBeyondViewport=True)
        await asyncio.to_thread(screenshot.write_bytes, base64.b64decode(shot["data"]))
        return RenderedPage(_errors(tools.events), json.loads(sizes["result"]["value"]))


@contextlib.contextmanager
def chromium_port(flags: Sequence[str] = ()) -> Iterator[int]:
    """A headless chromium for the block: its DevTools port. `flags` are added to its
    command line (e.g. `--ignore-certificate-errors-spki-list=...`)."""
    binary = require_tool("chromium", "chromium")
    # Its own process group: the renderer and helper processes outlive the browser process
    # for a moment and keep writing the profile, which then cannot be removed.
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        browser = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", *flags, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            active = Path(profile) / "DevToolsActivePort"

            def port() -> int | None:
                if browser.poll() is not None:
                    raise AssertionError(f"chromium exited with {browser.returncode}")
                lines = active.read_text().split() if active.exists() else []
                return int(lines[0]) if lines else None
            yield wait_until(port, 60.0, 0.1, what="chromium's DevTools port")
        finally:
            _stop_group(browser)


def _stop_group(browser: subprocess.Popen[bytes]) -> None:
    """Ends the browser and every process of its group, and waits until none runs."""
    browser.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        browser.wait(10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(browser.pid, signal.SIGKILL)
    if browser.poll() is None:
        browser.wait()
    deadline = time.monotonic() + 10.0
    while _running_in_group(browser.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _running_in_group(group: int) -> bool:
    """Whether a process of `group` still runs (zombies left to init do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def render_in_chromium(path: Path, screenshot: Path, width: int = 1200, height: int = 900
                       ) -> RenderedPage:
    """Open `path` in headless chromium; the screenshot covers the whole page."""
    with chromium_port() as number:
        return asyncio.run(_drive(number, path.resolve().as_uri(), screenshot, width, height))


class BrowserTab:
    """One tab of a running chromium (`browser_page`)."""

    def __init__(self, tools: _DevTools) -> None:
        self._tools = tools
        self._seen: list[dict[str, Any]] = []
        """Events of pages loaded before the current one (their errors still count)."""

    async def open(self, url: str) -> None:
        """Navigate and wait for the page's load event."""
        self._keep_events()
        await self._tools.call("Page.navigate", url=url)
        await self._tools.until_event("Page.loadEventFired")

    async def reloaded(self) -> None:
        """Wait until the page loads again by itself (a meta refresh)."""
        self._keep_events()
        await self._tools.until_event("Page.loadEventFired")

    def _keep_events(self) -> None:
        self._seen += self._tools.events
        self._tools.events = []

    async def value(self, expression: str) -> Any:
        """The JSON-able value of a JavaScript expression in a completely loaded page (a
        page that reloads itself may be part-way through loading again)."""
        for _ in range(300):
            answer = await self._tools.call(
                "Runtime.evaluate", returnByValue=True,
                expression=f"document.readyState === 'complete' ? [({expression})] : null")
            if "exceptionDetails" in answer:
                raise AssertionError(f"{expression}: {answer['exceptionDetails']}")
            loaded = answer["result"].get("value")
            if loaded is not None:
                return loaded[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"the page did not finish loading to evaluate {expression}")

    async def screenshot(self, path: Path, *, whole_page: bool = True) -> None:
        """The whole page, beyond the viewport (or only what the viewport shows)."""
        shot = await self._tools.call("Page.captureScreenshot", format="png",
                                      captureBeyondViewport=whole_page)
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries of every page loaded."""
        return _errors([*self._seen, *self._tools.events])


@contextlib.asynccontextmanager
async def browser_page(port: int, *, width: int = 1400, height: int = 900,
                       headers: Mapping[str, str] | None = None,
                       javascript: bool = True) -> AsyncIterator[BrowserTab]:
    """The first tab of the chromium on `port`, at this viewport size; `headers` go with
    every request it makes (e.g. Authorization); `javascript` False: the page's scripts do
    not run (DevTools' own queries still do)."""
    async with _first_tab(port, ("Runtime", "Log", "Page", "Network"), width, height) as tools:
        if headers:
            await tools.call("Network.setExtraHTTPHeaders", headers=dict(headers))
        if not javascript:
            await tools.call("Emulation.setScriptExecutionDisabled", value=True)
        yield BrowserTab(tools)
