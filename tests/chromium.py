"""A page rendered by headless Chromium (Debian's ``chromium``), to test what it shows.

``rendered(path)`` opens a local HTML file in a fresh headless Chromium and returns a
``Page`` whose ``evaluate`` runs JavaScript in it (the DevTools protocol over
``--remote-debugging-pipe``: JSON messages ending in a NUL byte, commands on file
descriptor 3, answers on 4). ``Page.text`` is ``document.body.innerText``: the text as
laid out, after CSS (hidden elements left out, ``text-transform`` applied).

The README test command (``scripts/test.sh``) installs ``chromium``; without it the
tests that need it are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--remote-debugging-pipe", "--window-size=1280,900")
LOAD_TIMEOUT = 30.0


def require_chromium() -> str:
    path = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if path is None:
        pytest.skip("no chromium: the rendered-report tests need Debian's chromium "
                    "(bash scripts/test.sh installs it)")
    return path


class Page:
    """One page open in a headless Chromium, driven over the DevTools pipe."""

    def __init__(self, writer: Any, reader: Any, session: str) -> None:
        self._writer = writer
        self._reader = reader
        self._session = session
        self._next_id = 0
        self._pending = b""

    def _send(self, method: str, params: dict[str, Any], session: str | None) -> Any:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self._writer.write(json.dumps(message).encode() + b"\0")
        self._writer.flush()
        while True:  # events arrive in between: skip them
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._pending:
            chunk = os.read(self._reader.fileno(), 65536)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._pending += chunk
        message, self._pending = self._pending.split(b"\0", 1)
        return json.loads(message)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self._send("Runtime.evaluate", {"expression": expression,
                                                 "returnByValue": True}, self._session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    @property
    def text(self) -> str:
        return self.evaluate("document.body.innerText")

    @classmethod
    def open(cls, writer: Any, reader: Any, url: str) -> Page:
        page = cls(writer, reader, "")
        target = page._send("Target.createTarget", {"url": url}, None)["targetId"]
        page._session = page._send("Target.attachToTarget",
                                   {"targetId": target, "flatten": True}, None)["sessionId"]
        deadline = time.monotonic() + LOAD_TIMEOUT
        while page.evaluate("location.href + ' ' + document.readyState") != f"{url} complete":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not load in {LOAD_TIMEOUT} s")
            time.sleep(0.05)
        return page

    def close(self) -> None:
        self._send("Browser.close", {}, None)


@contextmanager
def rendered(path: Path) -> Iterator[Page]:
    """*path* open in a fresh headless Chromium (its own profile directory)."""
    binary = require_chromium()
    profile = tempfile.mkdtemp(prefix="delayq-chromium-")
    commands_r, commands_w = os.pipe()
    answers_r, answers_w = os.pipe()
    # Chromium reads the pipe on descriptors 3 and 4: bash moves them there (through
    # descriptors it picks, so that neither end is overwritten before it is moved).
    script = (f'exec {{r}}<&{commands_r} {{w}}>&{answers_w} {commands_r}<&- {answers_w}>&-; '
              'exec 3<&"$r" 4>&"$w" {r}<&- {w}>&- "$@"')
    proc = subprocess.Popen(["bash", "-c", script, "chromium", binary, *FLAGS,
                             f"--user-data-dir={profile}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, pass_fds=(commands_r, answers_w))
    os.close(commands_r)
    os.close(answers_w)
    writer, reader = os.fdopen(commands_w, "wb"), os.fdopen(answers_r, "rb")
    try:
        page = Page.open(writer, reader, path.resolve().as_uri())
        yield page
        page.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        writer.close()
        reader.close()
        shutil.rmtree(profile, ignore_errors=True)
