"""Signals (``delayq.storage.base.signals``): a write through one driver reaches a
listener on another driver of the same store, as it reaches another process.

Each write that may make messages claimable signals MESSAGES for the queue they are
claimable in; each subscription change signals SUBSCRIPTIONS. Stores whose writes do
not signal (Swift, and mongomock, which has no change streams) are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as queues
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from delayq.storage.base import Change, Signal
from delayq.subscription import SubscriptionChange
from tests.contract.drivers import DriverSpec, open_driver, skip_unless_shared_across_processes
from tests.contract.helpers import PROJECT, claim, create, post

WAIT = 10.0  # seconds a signal may take, at most: far longer than it should


class Listener:
    """Another driver of the store, listening on a loop of its own thread."""

    def __init__(self, spec: DriverSpec) -> None:
        self.driver = open_driver(spec)
        self.received: queues.Queue[Signal] = queues.Queue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(WAIT)

    async def _start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self.driver.signals.listen(self.received.put))

    def follow(self, queue: str, broker) -> None:
        """Follow *queue*, and return once its posts through *broker* are heard: a store
        may subscribe in the background (a Redis cluster's shard channels). The probes
        posted meanwhile stay in the queue; their signals are drained."""
        self._call(self.driver.signals.follow, PROJECT, queue)
        heard = Signal(Change.MESSAGES, PROJECT, queue)
        deadline = time.monotonic() + WAIT
        while heard not in self.drain():
            assert time.monotonic() < deadline, f"the listener never heard {queue}"
            post(broker, queue, "probe")
            time.sleep(0.05)
        time.sleep(0.05)
        self.drain()

    def _call(self, function, *args) -> None:
        done = threading.Event()

        def call() -> None:
            function(*args)
            done.set()

        self.loop.call_soon_threadsafe(call)
        assert done.wait(WAIT)

    def expect(self, change: Change, queue: str) -> None:
        """Wait for *change* of *queue*; fail after WAIT seconds."""
        wanted = Signal(change, PROJECT, queue)
        deadline = time.monotonic() + WAIT
        seen = []
        while time.monotonic() < deadline:
            with contextlib.suppress(queues.Empty):
                signal = self.received.get(timeout=0.05)
                if signal == wanted:
                    return
                seen.append(signal)
        pytest.fail(f"no {wanted} within {WAIT} s; received {seen}")

    def drain(self) -> list[Signal]:
        found = []
        with contextlib.suppress(queues.Empty):
            while True:
                found.append(self.received.get_nowait())
        return found

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)

    async def _close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.driver.close()


@pytest.fixture
def listener(spec, live_broker) -> Iterator[Listener]:
    """A listener that hears the writes of ``live_broker``: ready once a probe posted
    through the broker reached it (a listener connects in the background)."""
    skip_unless_shared_across_processes(spec)
    listening = Listener(spec)
    try:
        if not listening.driver.signals.signals:
            pytest.skip(f"{spec.name}'s writes do not signal: the poll intervals apply")
        listening.start()
        listening.follow(f"probe-{uuid.uuid4().hex[:8]}", live_broker)
        yield listening
    finally:
        listening.close()


def test_a_post_signals_its_queue(listener, live_broker):
    listener.follow("posted", live_broker)
    post(live_broker, "posted", "a")
    listener.expect(Change.MESSAGES, "posted")


def claimed(listener: Listener, broker, queue: str):
    """A claim of the messages posted to *queue*, followed, its signals drained."""
    listener.follow(queue, broker)
    post(broker, queue, "a")
    taken = claim(broker, queue)
    listener.drain()
    return taken


def test_a_released_claim_signals_its_queue(listener, live_broker):
    taken = claimed(listener, live_broker, "released")
    live_broker.release_claim(PROJECT, "released", taken.id)
    listener.expect(Change.MESSAGES, "released")


def test_a_message_handed_back_signals_its_queue(listener, live_broker):
    taken = claimed(listener, live_broker, "handed")
    live_broker.release_message(PROJECT, "handed", taken.messages[0].id, taken.id, 0)
    listener.expect(Change.MESSAGES, "handed")


def test_a_dead_letter_move_signals_the_dead_letter_queue(listener, live_broker):
    create(live_broker, "dlq")
    create(live_broker, "source", _dead_letter_queue="dlq", _max_claim_count=1)
    listener.follow("dlq", live_broker)
    post(live_broker, "source", "a")
    taken = claim(live_broker, "source", ttl=60)
    live_broker.release_claim(PROJECT, "source", taken.id)
    listener.drain()
    assert claim(live_broker, "source") is None  # moved, not claimed
    listener.expect(Change.MESSAGES, "dlq")


def test_a_redrive_signals_the_queue_it_fills(listener, live_broker):
    create(live_broker, "dlq")
    create(live_broker, "source", _dead_letter_queue="dlq", _max_claim_count=1)
    post(live_broker, "source", "a")
    taken = claim(live_broker, "source", ttl=60)
    live_broker.release_claim(PROJECT, "source", taken.id)
    assert claim(live_broker, "source") is None
    listener.follow("source", live_broker)
    listener.drain()
    assert live_broker.redrive(PROJECT, "dlq") == 1
    listener.expect(Change.MESSAGES, "source")


def test_subscription_changes_signal_their_queue(listener, live_broker):
    subscription_id = live_broker.create_subscription(
        PROJECT, "subscribed", "http://127.0.0.1:9/hook", 3600, {})
    listener.expect(Change.SUBSCRIPTIONS, "subscribed")
    live_broker.update_subscription(PROJECT, "subscribed", subscription_id,
                                    SubscriptionChange(ttl=7200))
    listener.expect(Change.SUBSCRIPTIONS, "subscribed")
    live_broker.delete_subscription(PROJECT, "subscribed", subscription_id)
    listener.expect(Change.SUBSCRIPTIONS, "subscribed")
