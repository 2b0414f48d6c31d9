"""Idle connections cannot lock clients out of the real ``delayq-server``: the first-byte
timeout, the bounded keep-alive, eviction at the connection cap and its order, and the
idle-socket attack against two workers (``delayq/http_protocol.py``,
``[drivers:transport:wsgi]``).

Requests go over raw sockets where the test must own each byte and the moment it is
sent (tests/test_http_limits.py's helpers). Time bounds are generous where the machine's
load can only delay, and exact where the server cannot act before a time.
"""

from __future__ import annotations

import http.client
import json
import re
import resource
import select
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from delayq.http_protocol import LOG_INTERVAL
from tests.server import delayq_server
from tests.test_http_limits import (
    PROJECT,
    SOON,
    TIMER_SLACK,
    Connection,
    assert_refused,
    claim_request,
    head,
    ping_on,
)

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parent.parent
FIRST_BYTE_TIMEOUT = 1.0
REQUEST_TIMEOUT = 6.0
KEEPALIVE_TIMEOUT = 2
# The eviction-order server's cap, and the attacked server's. Under the attack a worker
# closes one connection per connection it accepts, as fast as it can (about 7,000 a
# second here); a new connection then waits in the kernel's accept queue behind the
# attack's connections not yet accepted (those beyond both caps), and once accepted has
# until ATTACKED_CAP more have been accepted to send its request. A client thread on a
# loaded machine may wait tens of milliseconds for a core between its connect and its
# send: the cap leaves it about 70 ms.
CAP = 4
WORKERS = 2
ATTACKED_CAP = 500
# Silent connections of the attack: one and a half times both workers' caps together.
ATTACKERS = 3 * WORKERS * ATTACKED_CAP // 2
ATTACK_SECONDS = 8.0
# What a well-behaved client's request may take during the attack.
PROMPT = 1.0
# The kernel's counters that tell a connection's SYN was dropped and sent again.
SYN_COUNTERS = ("ListenOverflows", "ListenDrops", "TCPSynRetrans")


def new_queue(url: str) -> str:
    queue = f"idle-{uuid.uuid4().hex[:8]}"
    assert httpx.put(f"{url}/v2/queues/{queue}", timeout=SOON, headers={
        "Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}).status_code == 201
    return queue


def post_message(conn: Connection, queue: str, body: str) -> int:
    """Post one message on *conn* (kept alive); the status."""
    data = json.dumps({"messages": [{"body": body, "ttl": 300}]}).encode()
    conn.send(head(f"Client-ID: {uuid.uuid4()}".encode(), f"X-Project-ID: {PROJECT}".encode(),
                   b"Content-Type: application/json", b"Content-Length: %d" % len(data),
                   start=f"POST /v2/queues/{queue}/messages HTTP/1.1\r\n"
                         "Host: delayq\r\n".encode()) + data)
    return conn.response().status


def closed_without_answer(conn: Connection) -> bool:
    """Whether the server closes *conn* (or resets it) without sending a byte."""
    try:
        return conn.sock.recv(1) == b""
    except ConnectionResetError:
        return True


# First-byte and keep-alive timeouts


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("idle-timed")
    config = {"drivers:transport:wsgi": {
        "workers": 1, "first_byte_timeout": FIRST_BYTE_TIMEOUT,
        "request_timeout": REQUEST_TIMEOUT, "keepalive_timeout": KEEPALIVE_TIMEOUT}}
    with delayq_server(cwd, config=config) as running:
        yield running


def test_a_connection_that_begins_no_request_is_closed_after_the_first_byte_timeout(timed):
    silent, blank, begun = (Connection(timed.port) for _ in range(3))
    opened = time.monotonic()
    blank.send(b"\r\n")  # blank lines before a request line are no request
    begun.send(b"G")  # a first byte: the request has REQUEST_TIMEOUT from the opening
    closed = {}
    pending = {silent.sock: "silent", blank.sock: "blank", begun.sock: "begun"}
    while pending:
        ready, _, _ = select.select(list(pending), [], [], REQUEST_TIMEOUT + SOON)
        assert ready, f"still open: {sorted(pending.values())}"
        for sock in ready:
            closed[pending.pop(sock)] = time.monotonic() - opened
    for name in ("silent", "blank"):
        assert FIRST_BYTE_TIMEOUT - TIMER_SLACK <= closed[name] < REQUEST_TIMEOUT, closed
    assert closed_without_answer(silent) and closed_without_answer(blank)
    assert closed["begun"] >= REQUEST_TIMEOUT - TIMER_SLACK, closed
    assert_refused(begun.response(until_closed=True), 408)
    for conn in (silent, blank, begun):
        conn.close()


def test_a_keepalive_connection_is_closed_on_time_whatever_it_sends_short_of_a_request(timed):
    """Blank lines between requests are no request: they do not keep an idle connection
    open beyond keepalive_timeout (uvicorn's own keep-alive timer stops at any byte, after
    which nothing would close the connection)."""
    with Connection(timed.port) as conn:
        asked = time.monotonic()
        assert ping_on(conn).status == 204
        time.sleep(KEEPALIVE_TIMEOUT / 4)
        conn.send(b"\r\n")
        time.sleep(KEEPALIVE_TIMEOUT / 4)
        conn.send(b"\r\n")
        assert select.select([conn.sock], [], [], KEEPALIVE_TIMEOUT + SOON)[0], "never closed"
        idle = time.monotonic() - asked
        assert closed_without_answer(conn)
    assert KEEPALIVE_TIMEOUT - TIMER_SLACK <= idle < KEEPALIVE_TIMEOUT + SOON


# Eviction at the cap


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """One worker holding CAP connections, timing out nothing within a test."""
    cwd = tmp_path_factory.mktemp("idle-capped")
    config = {"drivers:transport:wsgi": {"workers": 1, "max_connections": CAP,
                                         "first_byte_timeout": 60, "request_timeout": 60}}
    with delayq_server(cwd, config=config) as running:
        yield running


@pytest.fixture
def connections() -> Iterator[dict[str, Connection]]:
    opened: dict[str, Connection] = {}
    yield opened
    for conn in opened.values():
        conn.close()


def test_a_worker_at_its_cap_evicts_in_order_and_never_a_request_under_way(capped,
                                                                            connections):
    queue = new_queue(capped.url)
    conns = connections

    def served(name: str) -> None:
        """Open *name* and ping on it: the worker has accepted it (and evicted, if at its
        cap) by the answer."""
        conns[name] = Connection(capped.port)
        assert ping_on(conns[name]).status == 204, name

    # A long-poll claim (whole, under way), a keep-alive connection between requests,
    # a silent one, and one whose first request's body is still arriving: the cap.
    conns["claim"] = Connection(capped.port)
    conns["claim"].send(claim_request(queue, 20))
    served("keepalive")
    conns["silent"] = Connection(capped.port)
    conns["body"] = Connection(capped.port)
    conns["body"].send(head(f"Client-ID: {uuid.uuid4()}".encode(),
                            f"X-Project-ID: {PROJECT}".encode(),
                            b"Content-Type: application/json", b"Content-Length: 100",
                            start=f"POST /v2/queues/{queue}/messages HTTP/1.1\r\n"
                                  "Host: delayq\r\n".encode()) + b'{"messages": ')

    # No response yet goes first, oldest first, before the older keep-alive connection.
    served("new1")
    assert closed_without_answer(conns["silent"])
    served("new2")
    assert closed_without_answer(conns["body"])
    # Then the longest idle: "new1", since "keepalive" has just been used again.
    assert ping_on(conns["keepalive"]).status == 204
    served("new3")
    assert closed_without_answer(conns["new1"])
    # A connection answered with a refusal goes before any idle one: "refused" (its
    # accept evicting "new2", idle longest) is answered 400 and lingers, then "new4"
    # evicts it, where "keepalive" is idle longer.
    conns["refused"] = Connection(capped.port)
    conns["refused"].send(b"NOT HTTP AT ALL\r\n\r\n")
    assert conns["refused"].response().status == 400
    assert closed_without_answer(conns["new2"])
    served("new4")
    assert closed_without_answer(conns["refused"])  # evicted, not lingering LINGER s
    assert ping_on(conns["keepalive"]).status == 204
    assert ping_on(conns["new3"]).status == 204
    # The claim waited through the four evictions: a message posted now is its answer.
    assert post_message(conns["keepalive"], queue, "for the claim") == 201
    claimed = conns["claim"].response()
    assert claimed.status == 201, claimed
    assert [m["body"] for m in claimed.json()["messages"]] == ["for the claim"]
    assert "Traceback" not in capped.stderr()  # the body cut short ended quietly


# The idle-socket attack


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """Two workers of ATTACKED_CAP connections each, timing out no silent connection
    during the attack: every connection closed is then an eviction, which the log counts.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = ATTACKERS + WORKERS * ATTACKED_CAP + 200
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.fail(f"the open-file limit ({hard}) is below the {needed} the attack needs")
    if soft != resource.RLIM_INFINITY and soft < needed:
        # The server's workers and the attack's process inherit it.
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    cwd = tmp_path_factory.mktemp("idle-attacked")
    config = {"drivers:transport:wsgi": {"workers": WORKERS, "max_connections": ATTACKED_CAP,
                                         "first_byte_timeout": 60, "request_timeout": 60}}
    with delayq_server(cwd, config=config) as running:
        yield running


EVICTION_LINE = re.compile(r"\[(\d+)\] \[WARNING\] delayq\.http_protocol: (\d+) idle "
                           r"connection\(s\) closed to make room")


def tcp_counters(*names: str) -> dict[str, int]:
    """The kernel's TCP counters *names* (``/proc/net/netstat``, e.g. ListenDrops: SYNs
    dropped at a full accept queue, which a client retries after a second)."""
    found: dict[str, int] = {}
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=True):
        found.update(zip(header.split()[1:], map(int, values.split()[1:]), strict=True))
    return {name: found.get(name, 0) for name in names}


def eviction_lines(server) -> list[tuple[int, int]]:
    """(worker pid, count) of each log line about evictions."""
    return [(int(pid), int(count)) for pid, count in EVICTION_LINE.findall(server.stderr())]


class Client(threading.Thread):
    """A well-behaved client, timing each of its requests until stopped."""

    def __init__(self, url: str, port: int, queue: str, keepalive: bool) -> None:
        super().__init__(daemon=True)
        self.url, self.port, self.queue, self.keepalive = url, port, queue, keepalive
        self.requests: list[tuple[str, int | str, float]] = []  # (what, status, seconds)
        self.stop = threading.Event()

    def timed(self, what: str, call) -> None:
        start = time.monotonic()
        try:
            status: int | str = call()
        except (OSError, httpx.HTTPError, http.client.HTTPException) as exc:
            status = repr(exc)
        self.requests.append((what, status, time.monotonic() - start))

    def ping_on_new_connection(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=SOON)
        try:
            conn.request("GET", "/v2/ping")
            return conn.getresponse().status
        finally:
            conn.close()

    def run(self) -> None:
        if not self.keepalive:
            while not self.stop.is_set():
                self.timed("ping, new connection", self.ping_on_new_connection)
                time.sleep(0.01)
            return
        headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
        with httpx.Client(base_url=self.url, headers=headers, timeout=SOON) as client:
            messages = f"/v2/queues/{self.queue}/messages"
            while not self.stop.is_set():
                self.timed("post", lambda: client.post(messages, json={
                    "messages": [{"body": "work", "ttl": 300}]}).status_code)
                self.timed("claim", lambda: client.post(
                    f"/v2/queues/{self.queue}/claims", json={"ttl": 60}).status_code)
                self.timed("stats", lambda: client.get(
                    f"/v2/queues/{self.queue}/stats").status_code)


def test_idle_sockets_do_not_lock_well_behaved_clients_out(attacked):
    # Long-poll claims under way before the attack, on either worker: never evicted.
    queue = new_queue(attacked.url)
    claims = [Connection(attacked.port) for _ in range(4)]
    for conn in claims:
        conn.send(claim_request(queue, 20, limit=1))
    counters_before = tcp_counters(*SYN_COUNTERS)
    attack = subprocess.Popen(
        [sys.executable, "-m", "tests.idle_attack", "--port", str(attacked.port),
         "--connections", str(ATTACKERS), "--seconds", str(ATTACK_SECONDS)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert attack.stdout.readline().strip() == "ready"
        # Both workers are at their caps: each has made room for an attacker.
        deadline = time.monotonic() + SOON
        while len({pid for pid, _ in eviction_lines(attacked)}) < WORKERS:
            assert time.monotonic() < deadline, attacked.stderr()
            time.sleep(0.05)
        clients = [Client(attacked.url, attacked.port, new_queue(attacked.url), keepalive)
                   for keepalive in (False, False, True)]
        for client in clients:
            client.start()
        time.sleep(ATTACK_SECONDS - 1.0)
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(SOON)
        counts = json.loads(attack.communicate(timeout=ATTACK_SECONDS + SOON)[0])
    finally:
        if attack.poll() is None:
            attack.kill()
            attack.wait()

    requests = [r for client in clients for r in client.requests]
    failed = [r for r in requests if not (isinstance(r[1], int) and 200 <= r[1] < 300)]
    longest = sorted(requests, key=lambda r: r[2])[-3:]
    slowest = longest[-1][2]
    median = statistics.median(seconds for _, _, seconds in requests)
    counters = {name: count - counters_before[name]
                for name, count in tcp_counters(*SYN_COUNTERS).items()}
    summary = (f"{len(requests)} requests, median {median:.4f} s, slowest {longest}; "
               f"attack {counts}; the machine's TCP counters meanwhile {counters}")
    assert not failed, f"{failed[:5]}; {summary}"
    assert slowest < PROMPT, summary
    for client in clients:  # each client was served all along, not once
        assert len(client.requests) >= 20, summary
    # The attack was real: far more silent connections than both caps, re-opened as the
    # workers closed them.
    assert counts["closed_by_server"] > ATTACKERS, summary

    # The claims waited through it: a message each answers them.
    with Connection(attacked.port) as poster:
        for n in range(len(claims)):
            assert post_message(poster, queue, f"after the attack {n}") == 201
    for conn in claims:
        assert conn.response().status == 201
        conn.close()

    # Tens of thousands of evictions, logged in a few lines with their counts: each
    # worker's first at once, then at most one per LOG_INTERVAL (longer than the attack).
    assert ATTACK_SECONDS < LOG_INTERVAL
    deadline = time.monotonic() + LOG_INTERVAL + SOON
    while len(lines := eviction_lines(attacked)) < 2 * WORKERS:
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    assert sorted(count for _, count in lines)[:WORKERS] == [1] * WORKERS, lines
    assert len(lines) == 2 * WORKERS, lines
    # Every connection the attack saw closed is an eviction; a few more were evicted
    # before the attack, stopping, read their close.
    logged = sum(count for _, count in lines)
    assert counts["closed_by_server"] <= logged <= counts["closed_by_server"] + ATTACKERS, (
        logged, summary)
