"""No driver blocks the event loop: a broker call waits for a slow store while the loop
goes on serving.

Each broker call runs on an asyncio loop in debug mode, which reports any step of the
loop slower than ``SLOW_STEP``, while the store is stalled for ``STALL`` seconds: SQLite
by another connection's write transaction, mongomock by holding the lock every one of its
operations takes, Swift by stopping its proxy server (SIGSTOP), Redis by ``CLIENT
PAUSE``. A call made blocking on the loop waits out the stall inside one step and is
reported; an awaited or offloaded call lets the loop run meanwhile.

The offloaded stores run with their calls in threads; SQLite's ``auto`` mode runs brief
calls inline by design (``delayq.offload``, tested in ``test_offload.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from delayq.broker import Broker
from delayq.offload import THREADS
from delayq.storage.base import Driver
from delayq.storage.base.offloaded import OffloadedDriver
from delayq.validation import Limits, PostedMessage
from tests.contract.drivers import DriverSpec, open_driver
from tests.mongo_backend import MONGO, mongomock_stalled
from tests.redis_servers import SERVERS
from tests.swift_server import SWIFT

PROJECT = "loop"
CLIENT = str(uuid.uuid4())
STALL = 0.8  # seconds the store answers nothing
# A step of the loop this long blocked: far above what a busy machine delays one, well
# below the stall a blocking call waits out.
SLOW_STEP = 0.4

Stall = Callable[[], contextlib.AbstractContextManager[None]]

CALLS = {
    "create_queue": lambda b: b.create_queue(PROJECT, "made", {}),
    "queue_metadata": lambda b: b.queue_metadata(PROJECT, "q"),
    "list_queues": lambda b: b.list_queues(PROJECT, None, 10),
    "count_queues": lambda b: b.count_queues(PROJECT),
    "stats": lambda b: b.stats(PROJECT, "q"),
    "post": lambda b: b.post(PROJECT, "q", CLIENT, [PostedMessage({"n": 2}, 600, None)], 10),
    "claim": lambda b: b.claim(PROJECT, "q", ttl=60, grace=60, limit=1),
    "available_in": lambda b: b.available_in(PROJECT, "q"),
    "create_subscription": lambda b: b.create_subscription(
        PROJECT, "q", "http://127.0.0.1:9/hook", 600, {}),
    "delete_queue": lambda b: b.delete_queue(PROJECT, "gone"),
    "ping": lambda b: b.ping(),
}


@contextlib.contextmanager
def sqlite_locked(path: str) -> Iterator[None]:
    """Another connection holds the write lock for STALL seconds."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(STALL, other.rollback)
    release.start()
    try:
        yield
    finally:
        release.join()
        other.close()


@contextlib.contextmanager
def redis_paused(port: int) -> Iterator[None]:
    with redis.Redis(port=port) as observer:
        observer.client_pause(int(STALL * 1000))  # every command waits, then runs
    yield


@pytest.fixture(params=["sqlite", "mongodb-mock", "swift", "redis"])
def store(request, tmp_path) -> Iterator[tuple[Driver, Stall]]:
    """A driver, and how to stall its store."""
    name = request.param
    if name == "sqlite":
        path = str(tmp_path / "loop.sqlite")
        driver = open_driver(DriverSpec("sqlite", {"path": path}))
        stall: Stall = lambda: sqlite_locked(path)  # noqa: E731
    elif name == "mongodb-mock":
        driver = open_driver(DriverSpec("mongodb", {"database": MONGO.new_database(),
                                                    "mongomock": True}))
        stall = lambda: mongomock_stalled(STALL)  # noqa: E731
    elif name == "swift":
        auth = SWIFT.auth()
        driver = open_driver(DriverSpec("swift", {
            "auth_url": auth.auth_url, "user": auth.user, "key": auth.key,
            "prefix": f"t{uuid.uuid4().hex[:12]}"}))
        stall = lambda: SWIFT.proxy_stopped(STALL)  # noqa: E731
    else:
        server = SERVERS.fresh()
        request.addfinalizer(server.stop)
        driver = open_driver(DriverSpec("redis", {"uri": server.uri,
                                                  "namespace": f"t{uuid.uuid4().hex[:12]}"}))
        stall = lambda: redis_paused(server.port)  # noqa: E731
    if isinstance(driver, OffloadedDriver):
        driver.offload.set_mode(THREADS)
    yield driver, stall


@pytest.mark.parametrize("call", sorted(CALLS))
def test_no_broker_call_blocks_the_loop_while_the_store_stalls(store, call, caplog):
    driver, stall = store
    broker = Broker(driver, Limits())

    async def prepare() -> None:  # connects on this loop, and makes what the calls use
        await broker.create_queue(PROJECT, "q", {})
        await broker.create_queue(PROJECT, "gone", {})
        await broker.post(PROJECT, "q", CLIENT, [PostedMessage({"n": 1}, 600, None)], 10)

    async def timed() -> float:
        started = time.monotonic()
        await CALLS[call](broker)
        return time.monotonic() - started

    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = SLOW_STEP
    try:
        loop.run_until_complete(prepare())
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            caplog.clear()
            with stall():
                waited = loop.run_until_complete(timed())
            slow = [r.getMessage() for r in caplog.records
                    if r.name == "asyncio" and "Executing" in r.getMessage()]
    finally:
        loop.run_until_complete(driver.close())
        loop.close()
    # A blocking call waits inside one step of the loop: debug mode reports it.
    assert slow == [], slow
    if call == "post":  # a write waits for every store stalled so: the stall is real
        assert waited >= STALL - 0.1
