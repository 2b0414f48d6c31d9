"""No Redis operation blocks the event loop: every call it makes is awaited.

Each operation runs on an asyncio loop in debug mode, which reports any step of the loop
slower than ``slow_callback_duration``, while Redis is paused (``CLIENT PAUSE``): a call
made blocking waits out the pause inside one step and is reported; an awaited call lets
the loop run meanwhile. The same holds over TLS (``rediss://``).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time

import pytest
import redis

from delayq.message import NewMessage
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from tests.redis_servers import SERVERS, free_ports
from tests.test_redis_on_loop import CLIENT, PROJECT, namespace, warm

PAUSE_MS = 1000
# A step of the loop this long blocked: far above what a busy machine delays one, far
# below the pause a blocking call waits out.
SLOW_STEP = 0.3


@pytest.fixture
def server():
    """A Redis of the test's own: the tests pause it."""
    server = SERVERS.fresh()
    yield server
    server.stop()


@pytest.fixture
def driver(server):
    driver = Synchronous(Driver(server.uri, namespace=namespace()))
    yield driver
    driver.close()


@pytest.fixture
def debug_loop(caplog):
    """Run a coroutine on a new asyncio loop in debug mode; the callbacks it reports
    slower than SLOW_STEP (a step of the loop that blocked)."""
    slow: list[str] = []

    def run(coroutine):
        loop = asyncio.new_event_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = SLOW_STEP
        try:
            with caplog.at_level(logging.WARNING, logger="asyncio"):
                caplog.clear()
                result = loop.run_until_complete(coroutine)
                slow.extend(r.getMessage() for r in caplog.records
                            if r.name == "asyncio" and "Executing" in r.getMessage())
            return result
        finally:
            loop.close()

    run.slow = slow
    return run


OPERATIONS = {
    "get_queue": lambda d: d.queues.get(PROJECT, "q"),
    "list_queues": lambda d: d.queues.page(PROJECT, None, 10),
    "count_queues": lambda d: d.queues.count(PROJECT),
    "delete_queue": lambda d: d.queues.delete(PROJECT, "gone"),
    # Its first call reads the queue's outbox of dead-letter moves (moves.py).
    "purge_queue": lambda d: d.queues.purge(PROJECT, "q"),
    "queue_stats": lambda d: d.queues.stats(PROJECT, "q"),
    "post_messages": lambda d: d.messages.post(PROJECT, "q", CLIENT,
                                                      [NewMessage(1, 600, 0)]),
    "claim": lambda d: d.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                     dead_letter=None),
    "ping": lambda d: d.ping(),
    "now": lambda d: d.now(),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_no_operation_blocks_the_loop_while_redis_is_slow(server, driver, debug_loop,
                                                          name):
    driver.queues.create(PROJECT, "q", {})
    driver.queues.create(PROJECT, "gone", {})

    async def main() -> None:
        await warm(driver)
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(PAUSE_MS)  # every command waits, then runs
        started = time.monotonic()
        await OPERATIONS[name](driver.target)
        # The operation waited for Redis, whichever way.
        assert time.monotonic() - started >= PAUSE_MS / 1000 - 0.1

    debug_loop(main())
    # A blocking call waits inside one step of the loop: debug mode reports it.
    assert debug_loop.slow == [], debug_loop.slow



@pytest.fixture
def tls_server(tmp_path):
    """A Redis that also listens with TLS (a self-signed certificate for 127.0.0.1);
    its TLS port."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    [port] = free_ports(1)
    server = SERVERS.fresh("--tls-port", str(port), "--tls-cert-file", str(cert),
                           "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
                           "--tls-auth-clients", "no")
    yield server, port, cert
    server.stop()


def test_over_tls_operations_are_awaited_without_blocking_the_loop(tls_server, debug_loop,
                                                                   monkeypatch):
    server, port, cert = tls_server
    # The documented way to trust a private CA (docs/redis.md, TLS).
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    driver = Synchronous(Driver(f"rediss://127.0.0.1:{port}/0", namespace=namespace()))

    async def main() -> tuple[list[str], object]:
        await warm(driver)
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(PAUSE_MS)
        started = time.monotonic()
        ids = await driver.target.messages.post(PROJECT, "q", CLIENT,
                                                [NewMessage("over TLS", 600, 0)])
        assert time.monotonic() - started >= PAUSE_MS / 1000 - 0.1
        taken = await driver.target.claims.create(PROJECT, "q", ttl=60, grace=60,
                                                  limit=5, dead_letter=None)
        return ids, taken

    try:
        ids, taken = debug_loop(main())
        assert [(m.id, m.body) for m in taken.messages] == [(ids[0], "over TLS")]
        assert debug_loop.slow == [], debug_loop.slow
    finally:
        driver.close()
