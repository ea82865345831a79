"""A headless Chromium driven over the DevTools protocol, for the UI tests and
the screenshots in docs/img: open a page, wait until it shows some text,
click a tab by its label, read the page's text, take a screenshot.

Chromium comes from Debian's packages (CI installs it); the protocol client
is the ``websockets`` package Prefect already depends on."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Page:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def eval(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def text(self) -> str:
        return str(self.eval("document.body ? document.body.innerText : ''") or "")

    def html(self) -> str:
        return str(self.eval("document.documentElement.outerHTML") or "")

    def wait_for_text(self, *needles: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if all(n in text for n in needles):
                return text
            if time.monotonic() > deadline:
                missing = [n for n in needles if n not in text]
                raise AssertionError(f"page never showed {missing}; it shows: {text[:2000]}")
            time.sleep(0.3)

    def click_text(self, label: str) -> bool:
        """Click the first button, tab or link whose text is ``label``."""
        js = f"""(() => {{
            const want = {json.dumps(label)};
            const els = [...document.querySelectorAll('button, a, [role=tab], li, span, div')];
            const el = els.find(e => e.children.length === 0 && e.textContent.trim() === want)
                    || els.find(e => e.textContent.trim() === want);
            if (!el) return false;
            (el.closest('button, a, [role=tab]') || el).click();
            return true;
        }})()"""
        return bool(self.eval(js))

    def screenshot(self, path: Path, width: int = 1500, height: int = 950) -> None:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        time.sleep(0.8)  # let the page lay out again at this size
        shot = self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def browser(width: int = 1500, height: int = 950) -> Iterator[Page]:
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("no chromium installed")
    port = _free_port()
    profile = tempfile.mkdtemp(prefix="milepost-chromium-")
    proc = subprocess.Popen(
        [
            exe,
            *FLAGS,
            f"--remote-debugging-port={port}",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    targets = [t for t in json.loads(r.read()) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert targets, "chromium did not open its debugging port"
        with connect(targets[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024) as ws:
            page = Page(ws)
            page.send("Page.enable")
            page.send("Runtime.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
