"""A headless Chromium driven over the Chrome DevTools protocol, for the dashboard test (test helper, I/O).

aiohttp (already a dependency) speaks the websocket; no browser-automation package is needed.
Chromium comes from Debian's packages (`apt-get install chromium`; scripts/test installs it
where it can); `chromium_path()` is None where it is missing and the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One tab: navigate, evaluate JavaScript, take a screenshot."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        ident = next(self.ids)
        await self.socket.send_str(  # DevTools wants text frames
            orjson.dumps({"id": ident, "method": method, "params": params or {}}).decode()
        )
        while True:
            message = await asyncio.wait_for(self.socket.receive(), 60)
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools socket closed: {message.type}")
            body = orjson.loads(message.data)
            if body.get("id") == ident:
                if "error" in body:
                    raise RuntimeError(f"{method}: {body['error']}")
                return dict(body.get("result", {}))

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def headless(profile: Path, width: int = 1400, height: int = 1700) -> AsyncIterator[Page]:
    """A fresh headless Chromium (its own --user-data-dir) and its first tab."""
    binary = chromium_path()
    assert binary is not None
    profile.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(profile / "chromium.log").open("wb"),
    )
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(600):
            if port_file.exists() and port_file.read_text().count("\n") >= 1:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited: see {profile / 'chromium.log'}")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        async with aiohttp.ClientSession() as session:
            targets: list[dict[str, Any]] = []
            for _ in range(100):
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = [t for t in await response.json() if t.get("type") == "page"]
                if targets:
                    break
                await asyncio.sleep(0.1)
            async with session.ws_connect(
                targets[0]["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024
            ) as socket:
                page = Page(socket)
                await page.send("Page.enable")
                await page.send(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                )
                yield page
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
