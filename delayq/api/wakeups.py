"""Wake-ups: the store's signals (``delayq.storage.base.signals``) turned into this
process's wake-ups.

A post, a release, a hand-back or a redrive served by any process sharing the store
wakes this process's long-poll waiters of the queue (``LongPoll.notify``) and puts the
queue on its pusher's agenda (``Pusher.notify``); a subscription created, changed or
deleted anywhere makes the pusher read the queue's subscriptions again
(``Pusher.subscriptions_changed``). The API also wakes its own process directly as it
answers, so a store whose writes do not signal (Swift) still wakes the process that took
the write at once.

One task of the worker's loop listens; when the store's connection ends it listens
again after a pause, and then wakes every followed queue once, since signals sent
meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from delayq.api.longpoll import LongPoll
from delayq.push.pusher import Pusher
from delayq.storage.base.signals import Change, Signal, Signals

LOG = logging.getLogger(__name__)

# The pause before listening again after the store's connection ended, doubling up to
# MAX_PAUSE while it keeps failing.
FIRST_PAUSE = 0.1
MAX_PAUSE = 5.0
RECANCEL_AFTER = 0.1  # seconds a stopping listener has to end before it is cancelled again


class Wakeups:
    """Listens to the store's signals for this worker process (``start``/``stop``)."""

    def __init__(self, signals: Signals, longpoll: LongPoll, pusher: Pusher) -> None:
        self.signals = signals
        self.longpoll = longpoll
        self.pusher = pusher
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.signals.signals and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="delayq-wakeups")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        # Cancelled again until it ends: on Python 3.11 a store library's own
        # asyncio.wait_for swallows a cancellation that arrives as its operation
        # completes (redis-py connecting, say), and the listener would go on.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=RECANCEL_AFTER)
        if not task.cancelled():
            with contextlib.suppress(Exception):  # its failure was logged
                task.result()

    def receive(self, signal: Signal) -> None:
        """Wake what this process keeps for *signal*'s queue."""
        if signal.change is Change.MESSAGES:
            self.longpoll.notify(signal.project, signal.queue)
            self.pusher.notify(signal.project, signal.queue)
        else:
            self.pusher.subscriptions_changed(signal.project, signal.queue)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pause = FIRST_PAUSE
        warned = False
        while True:
            started = loop.time()
            failure: Exception | None = None
            try:
                await self.signals.listen(self.receive)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the poll intervals cover the gap
                failure = exc
            if loop.time() - started > MAX_PAUSE:  # it listened a while: a new outage
                pause, warned = FIRST_PAUSE, False
            if failure is not None and not warned:
                LOG.warning("Cannot listen to the store's signals (%s); waiters and pushes "
                            "see other processes' writes on their poll intervals until "
                            "it answers", failure)
                warned = True
            await asyncio.sleep(pause)
            pause = min(2 * pause, MAX_PAUSE)
            self._wake_followed()

    def _wake_followed(self) -> None:
        for project, queue in self.signals.following():
            self.longpoll.notify(project, queue)
            self.pusher.notify(project, queue)
