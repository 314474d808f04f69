"""A small headless-Chromium driver over the DevTools protocol (aiohttp's websocket client).

Enough to open a page of a React app, wait until a condition on its rendered DOM holds (polled
with `Runtime.evaluate`, never a fixed sleep), read text and take screenshots. Chromium comes from
the Debian package (`apt-get install -y chromium`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")


class Page:
    """One page (tab) of a running headless Chromium."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self.console: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result."""
        msg_id = next(self._ids)
        await self._ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = await self._ws.receive(timeout=60)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools connection closed: {msg.type}")
            data = json.loads(msg.data)
            if data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", "")) for a in args))
            if data.get("id") == msg_id:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return dict(data.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def goto(self, url: str) -> None:
        """Navigate (returns once navigation starts; wait for content with `wait_for`)."""
        await self.call("Page.navigate", url=url)

    async def wait_for(self, expression: str, *, within: float = 60.0) -> Any:
        """Poll a JavaScript expression until it is truthy (for `within` s); returns its value."""
        deadline = time.monotonic() + within
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = await self.evaluate("document.body ? document.body.innerText : ''")
                raise TimeoutError(f"{expression!r} not true in {within} s; page:\n{text[:3000]}")
            await asyncio.sleep(0.25)

    async def text(self) -> str:
        """The page's rendered text."""
        return str(await self.evaluate("document.body.innerText"))

    async def screenshot(self, path: Path) -> None:
        """A PNG of the viewport."""
        result = await self.call("Page.captureScreenshot", format="png")
        await asyncio.to_thread(path.write_bytes, base64.b64decode(result["data"]))


def _launch(profile_dir: Path, width: int, height: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--window-size={width},{height}",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile_dir}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@contextlib.asynccontextmanager
async def chromium(
    profile_dir: Path, *, width: int = 1600, height: int = 1000
) -> AsyncIterator[Page]:
    """Start headless Chromium (no network beyond 127.0.0.1) and yield its first page."""
    proc = _launch(profile_dir, width, height)
    try:
        assert proc.stderr is not None
        endpoint = None
        deadline = time.monotonic() + 60
        while endpoint is None and time.monotonic() < deadline:
            line = await asyncio.to_thread(proc.stderr.readline)
            if not line and proc.poll() is not None:
                raise RuntimeError(f"chromium exited with code {proc.returncode}")
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            endpoint = found.group(1) if found else None
        if endpoint is None:
            raise RuntimeError("chromium did not open its DevTools endpoint in 60 s")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # never let it block
        http = "http://" + endpoint.split("/")[2]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{http}/json/list") as resp:
                targets = await resp.json()
            page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(page_url, max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Runtime.enable")
                yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
