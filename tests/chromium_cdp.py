"""Drive headless Chromium over the DevTools protocol on a pipe (no Python packages, no ports).

With --remote-debugging-pipe Chromium reads commands from fd 3 and writes replies and events to fd 4,
each a JSON message ended by a NUL byte.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e_utils import HANG_S


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, binary: str, profile: Path, width: int = 1400, height: int = 900) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def as_fds_3_and_4() -> None:
            # copies first: either end may already be fd 3 or 4, and dup2 onto itself would keep it
            # close-on-exec
            read_end, write_end = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--no-first-run", "about:blank"],
            preexec_fn=as_fds_3_and_4, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.send(f"{domain}.enable", page=True)
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics, page=True)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            data = os.read(self._from_chrome, 1 << 16)
            if not data:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += data
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, page: bool = False) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, event: str) -> dict[str, Any]:
        for e in self.events:
            if e.get("method") == event:
                self.events.remove(e)
                return e
        while True:
            e = self._read()
            if e.get("method") == event:
                return e
            self.events.append(e)

    def open(self, url: str) -> None:
        self.send("Page.navigate", {"url": url}, page=True)
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, page=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse press and release at the centre of the first element matching `selector`."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
            "return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            event = {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1}
            self.send("Input.dispatchMouseEvent", event, page=True)

    def key(self, name: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            event = {"type": kind, "key": name, "code": name, "windowsVirtualKeyCode": code}
            self.send("Input.dispatchKeyEvent", event, page=True)

    def screenshot(self, path: Path) -> None:
        png = self.send("Page.captureScreenshot", {"format": "png"}, page=True)["data"]
        path.write_bytes(base64.b64decode(png))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except RuntimeError:
            pass  # it may close the pipe before replying
        self.proc.wait(timeout=HANG_S)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
