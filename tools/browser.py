"""Headless Chromium driven through the DevTools protocol over a pipe (standard library only).

    with Chromium() as browser:
        page = browser.open("http://127.0.0.1:8000/index.html")
        page.evaluate("document.title")
        page.screenshot(Path("home.png"))

Chromium reads commands on its fd 3 and writes replies on fd 4 (``--remote-debugging-pipe``):
no port, no websocket, no driver binary. Every host but 127.0.0.1 is made unresolvable, so a
page is checked as it works offline.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def find_chromium() -> str | None:
    """The Chromium executable ($CHROMIUM, else chromium / chromium-browser on PATH)."""
    names = [os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"]
    return next((found for n in names if n and (found := shutil.which(n))), None)


class BrowserError(Exception):
    pass


class Chromium:
    def __init__(self, executable: str | None = None, timeout: float = 60):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise BrowserError("no Chromium found: apt-get install chromium, or set $CHROMIUM")
        self.timeout = timeout
        self._id = 0
        self._buffer = b""
        self._events: list[dict] = []

    def __enter__(self) -> Chromium:
        self.profile = tempfile.mkdtemp(prefix="course-chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        def wire():  # in the child: fd 3 reads our commands, fd 4 writes the replies
            os.dup2(to_child, 1000)  # out of the way first: either end may be fd 3 or 4
            os.dup2(from_child, 1001)
            os.dup2(1000, 3)
            os.dup2(1001, 4)  # the rest is closed by Popen (close_fds) before exec

        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            pass_fds=(3, 4), preexec_fn=wire,
        )
        os.close(to_child)
        os.close(from_child)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._write)
        os.close(self._read)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                self.log.seek(0)
                raise BrowserError(f"Chromium exited: {self.log.read()[-2000:].decode()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._message(deadline))

    def open(self, url: str, width: int = 1280, height: int = 900) -> Page:
        """A new tab showing ``url``, once its load event has fired."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", session)
        self.send("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.send("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session)


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (a promise is awaited)."""
        result = self.browser.send("Runtime.evaluate", self.session, expression=expression,
                                   returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:60]}...: {result['exceptionDetails']['text']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The visible part of the page as a PNG."""
        data = self.browser.send("Page.captureScreenshot", self.session, format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
