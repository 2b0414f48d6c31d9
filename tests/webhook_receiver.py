"""A webhook receiver for the push tests: a real HTTP server on loopback that records
every request it gets, with its arrival time, and answers as the test says."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    at: float  # time.time() when its body had arrived
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


# How to answer a request: (status, seconds to wait first), or (status, wait, headers
# sent with it); the wait happens before the status line, so a wait past the pusher's
# timeout is a timeout.
Answer = Callable[[Received], tuple[int, float] | tuple[int, float, dict[str, str]]]


def succeed(received: Received) -> tuple[int, float]:
    return 204, 0.0


@dataclass
class Receiver:
    url: str
    answer: Answer
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float) -> list[Received]:
        """The requests, once *count* have arrived; fails after *timeout* seconds."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.received)} of {count} pushes arrived "
                                         f"within {timeout} s")
                self.arrived.wait(left)
            return list(self.received)


@contextmanager
def receiver(answer: Answer = succeed) -> Iterator[Receiver]:
    """A receiver on a free loopback port, stopped on exit."""
    box: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got = Received(time.time(), self.path, dict(self.headers.items()), body)
            me = box["receiver"]
            with me.arrived:
                me.received.append(got)
                me.arrived.notify_all()
            status, wait, *headers = me.answer(got)
            if wait:
                time.sleep(wait)
            try:
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                pass  # the pusher gave up waiting and closed the connection

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box["receiver"] = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hook", answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box["receiver"]
    finally:
        server.shutdown()
        server.server_close()
