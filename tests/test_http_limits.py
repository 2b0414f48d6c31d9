"""HTTP limits of the real ``delayq-server`` (one gunicorn worker): header size and count,
request timeout, keep-alive timeout, connection cap and access log
(``delayq/http_protocol.py``, ``[drivers:transport:wsgi]``).

Requests go over raw sockets, so that every byte of a head (and when it is sent) is the
test's: each size below is that of the bytes on the wire. Limits and timeouts are set
small, so that every test takes seconds; time bounds are generous where the machine's
load can only delay, and exact where the server cannot act before a time.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from delayq.http_protocol import LOG_INTERVAL
from tests.server import delayq_server

pytestmark = pytest.mark.timeout(120)

PROJECT = "http-limits"
MAX_REQUEST_LINE = 1024
MAX_FIELD = 1024
MAX_FIELDS = 20
MAX_HEAD = 4096
REQUEST_TIMEOUT = 2.0
KEEPALIVE_TIMEOUT = 2
MAX_CONNECTIONS = 3
# The head of GET /v2/ping with a Host field and nothing else, and the fields it has.
PING = b"GET /v2/ping HTTP/1.1\r\nHost: delayq\r\n"
# How early the server's timers may fire: its event loop counts milliseconds.
TIMER_SLACK = 0.05
# Bounds for what only the machine's load can delay, far above what it takes.
SOON = 10.0


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool = field(default=False)  # the server closed the connection after it

    def json(self):
        return json.loads(self.body)


class Connection:
    """A raw client connection to the server, reading its responses."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self.sock.makefile("rb")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_in_pieces(self, data: bytes, piece: int = 100) -> None:
        """Send *data* in *piece*-byte writes a few milliseconds apart, so that the
        server reads most of them separately."""
        for offset in range(0, len(data), piece):
            self.sock.sendall(data[offset:offset + piece])
            time.sleep(0.003)

    def response(self, *, until_closed: bool = False) -> Response:
        """Read one response; with *until_closed*, also wait for the server to close the
        connection (and record whether it did)."""
        status_line = self._file.readline()
        if not status_line:
            raise AssertionError("connection closed before a response")
        headers = {}
        while (line := self._file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.lower()] = value.strip()
        body = self._file.read(int(headers.get("content-length", "0")))
        response = Response(int(status_line.split()[1]), headers, body)
        if until_closed:
            response.closed = self._file.read(1) == b""
        return response


def exchange(port: int, request: bytes) -> Response:
    """Send *request* on a new connection; the response and whether the server closed."""
    with Connection(port) as conn:
        conn.send(request)
        return conn.response(until_closed=True)


def assert_refused(response: Response, status: int) -> None:
    """A refusal: *status*, a JSON error document, and the connection closed."""
    assert response.status == status, response
    assert response.headers["content-type"] == "application/json"
    assert set(response.json()) == {"title", "description"}
    assert response.headers["connection"] == "close"
    assert response.closed


def head(*fields: bytes, start: bytes = PING) -> bytes:
    """A complete request head: *start*, *fields* (each without its CRLF), a blank line."""
    return start + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


def fill(name: bytes, size: int) -> bytes:
    """A header field whose name and value together take *size* bytes."""
    return name + b": " + b"v" * (size - len(name))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("http-limits")
    config = {"drivers:transport:wsgi": {
        "workers": 1, "max_request_line": MAX_REQUEST_LINE,
        "max_header_field_size": MAX_FIELD, "max_header_fields": MAX_FIELDS,
        "max_header_size": MAX_HEAD, "request_timeout": REQUEST_TIMEOUT,
        "keepalive_timeout": KEEPALIVE_TIMEOUT, "access_log": cwd / "access.log"}}
    with delayq_server(cwd, config=config) as running:
        yield running


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """A server whose one worker holds at most MAX_CONNECTIONS connections, logging
    accesses to standard output."""
    cwd = tmp_path_factory.mktemp("http-capped")
    config = {"drivers:transport:wsgi": {"workers": 1, "max_connections": MAX_CONNECTIONS,
                                         "access_log": "-"}}
    with delayq_server(cwd, config=config) as running:
        yield running


# Header limits


class Pinger:
    """Pings the server back to back on one keep-alive connection, timing each ping."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pings: list[tuple[float, float]] = []  # (start, end), monotonic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                assert client.get("/v2/ping").status_code == 204
                self.pings.append((start, time.monotonic()))

    def __enter__(self) -> Pinger:
        self._thread.start()
        deadline = time.monotonic() + SOON
        while len(self.pings) < 10:  # connected and answered: the worker is warm
            assert time.monotonic() < deadline and self._thread.is_alive()
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(SOON)

    def longest_during(self, start: float, end: float) -> float:
        """The longest ping that overlapped [start, end]."""
        return max(e - s for s, e in self.pings if e >= start and s <= end)


def test_a_100_mb_header_is_refused_at_once_and_others_see_no_stall(server):
    flood = Connection(server.port, timeout=60)
    sent = {}

    def send_flood() -> None:
        chunk = b"a" * (1 << 20)
        try:
            flood.send(PING + b"X-Flood: ")
            for _ in range(100):
                flood.send(chunk)
            flood.send(b"\r\n\r\n")
        except OSError:
            pass  # the server closed the connection after its answer
        sent["end"] = time.monotonic()

    with Pinger(server.url) as pinger:
        start = time.monotonic()
        sender = threading.Thread(target=send_flood, daemon=True)
        sender.start()
        response = flood.response()
        answered = time.monotonic()
        sender.join(60)
        assert not sender.is_alive()
        time.sleep(0.3)  # pings after the flood: the worker has nothing left to chew on
        flood.close()
        longest = pinger.longest_during(start, max(answered, sent["end"]) + 0.3)
    assert response.status == 431, response
    assert response.json()["title"] == "Request header fields too large"
    assert response.headers["connection"] == "close"
    # With uvicorn's own protocol the answer (a 204) took 12-18 s and a ping up to
    # 1.7-3.8 s (docs/performance.md, "A huge request header").
    assert answered - start < 5.0
    assert longest < 1.0, f"a ping took {longest:.3f} s during the flood"


def test_too_many_header_fields_are_refused(server):
    # PING has 1 field (Host): MAX_FIELDS in all is served, one more refused.
    fields = [b"X-Field-%d: x" % n for n in range(MAX_FIELDS - 2)] + [b"Connection: close"]
    assert exchange(server.port, head(*fields)).status == 204
    response = exchange(server.port, head(b"X-One-More: x", *fields))
    assert_refused(response, 431)
    assert str(MAX_FIELDS) in response.json()["description"]


def test_a_header_field_longer_than_the_limit_is_refused(server):
    assert exchange(server.port, head(fill(b"X-Long", MAX_FIELD), b"Connection: close")
                    ).status == 204
    response = exchange(server.port, head(fill(b"X-Long", MAX_FIELD + 1)))
    assert_refused(response, 431)
    assert "x-long" in response.json()["description"]  # as received, lowercased


def test_a_request_line_longer_than_the_limit_is_refused(server):
    def start(size: int) -> bytes:
        # "GET " + target + " HTTP/1.1", the target /v2/ping?q=... padded to *size*.
        target = b"/v2/ping?q=" + b"x" * (size - len(b"GET  HTTP/1.1") - len(b"/v2/ping?q="))
        line = b"GET " + target + b" HTTP/1.1"
        assert len(line) == size
        return line + b"\r\nHost: delayq\r\n"

    assert exchange(server.port, head(b"Connection: close", start=start(MAX_REQUEST_LINE))
                    ).status == 204
    assert_refused(exchange(server.port, head(start=start(MAX_REQUEST_LINE + 1))), 414)
    with Connection(server.port) as conn:  # 1 MB of target, never ending: refused on the way
        conn.send(b"GET /v2/ping?q=" + b"x" * (1 << 20))
        assert_refused(conn.response(until_closed=True), 414)


def test_a_head_larger_than_the_limit_is_refused(server):
    # Fields within their limits, the head as a whole exactly at the limit, then over.
    fields = [fill(b"X-A", 1000), fill(b"X-B", 1000), fill(b"X-C", 1000), b"Connection: close"]
    size = len(head(*fields, b"X-D: "))
    at_limit = head(*fields, fill(b"X-D", MAX_HEAD - size + 3))
    assert len(at_limit) == MAX_HEAD
    assert exchange(server.port, at_limit).status == 204
    over = head(*fields, fill(b"X-D", MAX_HEAD - size + 4))
    assert_refused(exchange(server.port, over), 431)


def test_a_head_at_the_limit_arriving_in_pieces_after_a_body_is_served(server):
    """The server counts a head's bytes by the read: the read in which it begins also
    holds the end of the previous request (here a 3000-byte body), which is not part of
    it."""
    first = PING + b"Content-Length: 3000\r\n\r\n" + b"b" * 3000
    fields = [fill(b"X-A", 1000), fill(b"X-B", 1000), fill(b"X-C", 1000), b"Connection: close"]
    size = len(head(*fields, b"X-D: "))
    second = head(*fields, fill(b"X-D", MAX_HEAD - size + 3))
    assert len(second) == MAX_HEAD
    with Connection(server.port) as conn:
        conn.send(first + second[:100])
        conn.send_in_pieces(second[100:])
        assert conn.response().status == 204
        assert conn.response(until_closed=True).status == 204


def test_a_head_over_the_limit_is_refused_before_its_end(server):
    with Connection(server.port) as conn:
        # Fields within their limits, never ending (no blank line): only the count of
        # the head's bytes can refuse it.
        conn.send_in_pieces(PING + b"".join(fill(b"X-%d" % n, 900) + b"\r\n"
                                                  for n in range(8)))
        response = conn.response(until_closed=True)
    assert_refused(response, 431)


def test_a_request_that_is_not_http_gets_a_json_400(server):
    assert_refused(exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n"), 400)


# Timeouts


def trickle(port: int, data: bytes, interval: float) -> tuple[float, Response | None]:
    """Open a connection and send *data* a byte every *interval* seconds (nothing if it
    is empty) until the server answers or closes: the seconds from the connection's
    opening to the answer (or close), and the answer (None for a close without one)."""
    with Connection(port) as conn:
        opened = time.monotonic()
        for byte in [data[i:i + 1] for i in range(len(data))]:
            if select.select([conn.sock], [], [], interval)[0]:
                break
            conn.send(byte)
        if not select.select([conn.sock], [], [], 30)[0]:
            raise AssertionError("neither answered nor closed in 30 s")
        elapsed = time.monotonic() - opened
        if conn.sock.recv(1, socket.MSG_PEEK) == b"":
            return elapsed, None
        return elapsed, conn.response(until_closed=True)


def test_incomplete_requests_time_out_while_a_long_poll_claim_waits(server):
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    queue = f"wait-{uuid.uuid4().hex[:8]}"
    client = httpx.Client(base_url=server.url, headers=headers, timeout=60)
    assert client.put(f"/v2/queues/{queue}").status_code == 201
    fields = [f"{name}: {value}".encode() for name, value in headers.items()]
    claim_body = b'{"ttl": 60, "grace": 60}'
    waiting = Connection(server.port)
    waiting.send(head(*fields, b"Content-Type: application/json",
                      b"Content-Length: %d" % len(claim_body), b"Connection: close",
                      start=f"POST /v2/queues/{queue}/claims?wait=20 HTTP/1.1\r\n"
                            "Host: delayq\r\n".encode()) + claim_body)
    claim_sent = time.monotonic()

    slow_head = b"GET /v2/ping HTTP/1.1\r\nHost: delayq\r\nX-Slow: " + b"s" * 1000
    slow_body = head(*fields, b"Content-Type: application/json", b"Content-Length: 100",
                     start=f"POST /v2/queues/{queue}/messages HTTP/1.1\r\n"
                           "Host: delayq\r\n".encode()) + b'{"messages": [' + b" " * 1000
    results = {}
    cases = {"head": (slow_head, 0.1), "body": (slow_body, 0.1), "silent": (b"", 0)}
    threads = [threading.Thread(target=lambda k=k, a=a: results.setdefault(k, trickle(
        server.port, *a)), daemon=True) for k, a in cases.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    for case in ("head", "body"):
        elapsed, response = results[case]
        assert response is not None, f"{case}: closed without an answer"
        assert_refused(response, 408)
        assert REQUEST_TIMEOUT - TIMER_SLACK <= elapsed < REQUEST_TIMEOUT + SOON, case
    elapsed, response = results["silent"]
    assert response is None  # nothing was asked: nothing is answered
    assert REQUEST_TIMEOUT - TIMER_SLACK <= elapsed < REQUEST_TIMEOUT + SOON

    # The claim, received whole, has waited longer than the timeout (which would have cut
    # its connection, opened before it was sent): a message now ends its wait.
    time.sleep(max(0.0, claim_sent + REQUEST_TIMEOUT + 0.5 - time.monotonic()))
    assert client.post(f"/v2/queues/{queue}/messages",
                       json={"messages": [{"body": "late", "ttl": 300}]}).status_code == 201
    claimed = waiting.response(until_closed=True)
    waiting.close()
    assert claimed.status == 201, claimed
    assert [m["body"] for m in claimed.json()["messages"]] == ["late"]
    # The body cut short never became a message.
    listed = client.get(f"/v2/queues/{queue}/messages?include_claimed=true&echo=true")
    assert [m["body"] for m in listed.json()["messages"]] == ["late"]
    client.close()


def test_an_idle_keepalive_connection_is_closed_after_the_keepalive_timeout(server):
    with Connection(server.port) as conn:
        asked = time.monotonic()
        conn.send(head())
        assert conn.response().status == 204
        assert conn.sock.recv(1) == b""  # blocks until the server closes the connection
        idle = time.monotonic() - asked
    # The server's timer starts once it has answered, after the request was sent.
    assert KEEPALIVE_TIMEOUT - TIMER_SLACK <= idle < KEEPALIVE_TIMEOUT + SOON


# Connection cap and access log


@pytest.fixture
def connections(capped) -> Iterator[list[Connection]]:
    opened: list[Connection] = []
    yield opened
    for conn in opened:
        conn.close()


def ping_on(conn: Connection, path: str = "/v2/ping") -> Response:
    conn.send(head(start=PING.replace(b"/v2/ping", path.encode())))
    return conn.response()


def served_connection(port: int, path: str = "/v2/ping") -> Connection:
    """A connection the worker serves, with *path* pinged on it: the long-poll claims of
    an earlier test, closed, may still count until the worker has read their end."""
    deadline = time.monotonic() + SOON
    while True:
        conn = Connection(port)
        if (status := ping_on(conn, path).status) == 204:
            return conn
        conn.close()
        assert status == 503 and time.monotonic() < deadline, status
        time.sleep(0.05)


def claim_request(queue: str, wait: int, limit: int = 10) -> bytes:
    """A long-poll claim of up to *limit* messages on *queue*, waiting up to *wait*
    seconds, as sent on the wire."""
    body = b'{"ttl": 60, "grace": 60}'
    return head(f"Client-ID: {uuid.uuid4()}".encode(), f"X-Project-ID: {PROJECT}".encode(),
                b"Content-Type: application/json", b"Content-Length: %d" % len(body),
                start=f"POST /v2/queues/{queue}/claims?wait={wait}&limit={limit} "
                      "HTTP/1.1\r\nHost: delayq\r\n".encode()) + body


def refusal_lines(server) -> list[int]:
    """The counts of the server's log lines about refused connections, in order."""
    return [int(m) for m in re.findall(r"\] delayq\.http_protocol: (\d+) connection\(s\) "
                                       r"refused \(answered 503\)", server.stderr())]


def test_a_connection_over_the_cap_is_answered_503_when_none_is_idle(capped, connections):
    """A connection at the cap makes room by closing an idle one (tests/
    test_idle_connections.py); it is refused when every connection of the worker has a
    request under way, here a long-poll claim. Refusals are logged once per interval."""
    queue = f"cap-{uuid.uuid4().hex[:8]}"
    assert httpx.put(f"{capped.url}/v2/queues/{queue}", timeout=SOON, headers={
        "Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}).status_code == 201
    for _ in range(MAX_CONNECTIONS):
        connections.append(Connection(capped.port))
        connections[-1].send(claim_request(queue, 20))
    logged_before = refusal_lines(capped)
    response = exchange(capped.port, head(start=b"GET /v2/ping?over=1 HTTP/1.1\r\n"))
    assert_refused(response, 503)
    assert '"GET /v2/ping?over=1 HTTP/1.1" 503' in capped.stderr()  # its access-log line

    # More refusals in the same interval: counted, not logged one by one.
    more = 30
    for _ in range(more):
        assert exchange(capped.port, head()).status == 503
    assert refusal_lines(capped)[len(logged_before):] == [1]
    deadline = time.monotonic() + LOG_INTERVAL + SOON
    while len(refusal_lines(capped)) < len(logged_before) + 2:
        assert time.monotonic() < deadline, capped.stderr()
        time.sleep(0.1)
    assert refusal_lines(capped)[len(logged_before):] == [1, more]

    # A claim's connection closes: a new connection is served once the worker has seen
    # it go (or once a claim's wait is over, its connection idle).
    connections.pop().close()
    deadline = time.monotonic() + SOON
    while (status := exchange(capped.port, head(b"Connection: close")).status) == 503:
        assert time.monotonic() < deadline, "the worker never saw the connection close"
        time.sleep(0.05)
    assert status == 204


def test_the_access_log_has_a_line_per_response(server, capped):
    path = f"/v2/ping?access={uuid.uuid4().hex}"
    assert exchange(server.port, head(b"Connection: close", start=PING.replace(
        b"/v2/ping", path.encode()))).status == 204
    served_connection(capped.port, path).close()
    refused = head(fill(b"X-Long", MAX_FIELD + 1),
                   start=f"GET {path}&refused=1 HTTP/1.1\r\nHost: delayq\r\n".encode())
    assert_refused(exchange(server.port, refused), 431)
    # Written before the response is sent.
    logged = (server.cwd / "access.log").read_text()
    assert f'"GET {path} HTTP/1.1" 204' in logged
    assert f'"GET {path}&refused=1 HTTP/1.1" 431' in logged
    assert f'"GET {path} HTTP/1.1" 204' in capped.stderr()  # "-": standard output
