"""Long-poll claims: a claim that waits up to ``?wait=`` seconds for a message.

A waiting claim holds neither a thread nor a stream of backend requests. In each worker
process the waiters of one queue share one watcher task on the event loop. The watcher
asks the backend one cheap question, ``Broker.available_in`` (when may a claim next find
a message?), and sleeps until that time or the poll interval, whichever is sooner: the
interval bounds how late a change is noticed when its signal is lost. A post or a release
served by this process, or by any process sharing a store whose writes signal
(``delayq.api.wakeups``), wakes the watcher at once (``LongPoll.notify``); a watched
queue is followed (``Signals.follow``) while its watcher lives.

When a message may be claimable the watcher hands the turn to its waiters one at a time,
oldest first. A waiter whose claim came back full passes the turn straight on (more may
be left); any other outcome sends the watcher back to the backend before anyone else
claims. One new message thus costs one claim, not one per waiter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable

from delayq.broker import Broker
from delayq.claim import Claim
from delayq.storage.base.signals import NoSignals, Signals

LOG = logging.getLogger(__name__)

# After a claim found nothing where the backend said a message was claimable (another
# process took it, or it had expired), the watcher waits this long before asking again,
# doubling up to the poll interval, so a stale hint never turns into a busy loop.
FIRST_BACKOFF = 0.05

Attempt = Callable[[], Awaitable[Claim | None]]


class Outcome(enum.Enum):
    """What a waiter's turn came to; it tells the watcher what to do next."""

    FULL = "full"  # claimed as many as asked: more may be left, the next waiter claims
    PARTIAL = "partial"  # claimed fewer: ask the backend before anyone else claims
    EMPTY = "empty"  # claimed nothing: the hint was stale, back off before asking again
    LEFT = "left"  # gave the turn up unused (its wait ended): the next waiter claims


class _Waiter:
    """One waiting claim request: told when to claim, it tells how it went."""

    __slots__ = ("turn", "outcome", "attempted")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.turn: asyncio.Future[None] = loop.create_future()
        self.outcome: asyncio.Future[Outcome] = loop.create_future()
        self.attempted = False

    def report(self, outcome: Outcome) -> None:
        if not self.outcome.done():
            self.outcome.set_result(outcome)


class _Watch:
    """The waiters of one queue in this process, and the task watching it for them."""

    def __init__(self, longpoll: LongPoll, project: str, queue: str) -> None:
        self.longpoll = longpoll
        self.project = project
        self.queue = queue
        self.loop = asyncio.get_running_loop()
        self.waiters: collections.deque[_Waiter] = collections.deque()
        self.changed = asyncio.Event()
        self.stopped = False
        self.task = self.loop.create_task(self._run(), name=f"delayq-wait:{queue}")

    @property
    def alive(self) -> bool:
        """Whether a new waiter may join: the watcher runs, on the caller's loop."""
        return (not self.stopped and not self.task.done()
                and self.loop is asyncio.get_running_loop())

    def join(self, *, first: bool = False) -> _Waiter:
        waiter = _Waiter(self.loop)
        if first:
            self.waiters.appendleft(waiter)
        else:
            self.waiters.append(waiter)
        return waiter

    def leave(self, waiter: _Waiter) -> None:
        """Take *waiter* out, whatever state it is in; the last one out stops the task."""
        with contextlib.suppress(ValueError):
            self.waiters.remove(waiter)
        if waiter.turn.done():
            waiter.report(Outcome.EMPTY if waiter.attempted else Outcome.LEFT)
        if not self.waiters and not waiter.turn.done():
            # Nobody is left to hand a turn to: the watcher has nothing to do.
            self.stop()

    def stop(self) -> None:
        """End the watcher now; the next waiter of the queue starts a new one."""
        self.stopped = True
        self.longpoll.forget(self)
        self.task.cancel()

    def wake(self) -> None:
        """Ask the backend again now (thread-safe: a post may run on another loop)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.changed.set()
            return
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
            self.loop.call_soon_threadsafe(self.changed.set)

    async def _run(self) -> None:
        poll = self.longpoll.poll_interval
        backoff = 0.0
        try:
            while self.waiters:
                # Cleared before asking, so a wake during the question is not lost.
                self.changed.clear()
                delay = await self._available_in()
                if delay is None or delay > 0:
                    await self._sleep(poll if delay is None else min(delay, poll))
                    continue
                outcome = await self._hand_turns()
                if outcome is Outcome.EMPTY:
                    backoff = min(max(2 * backoff, FIRST_BACKOFF), poll)
                    await self._sleep(backoff)
                else:
                    backoff = 0.0
        finally:
            self.longpoll.forget(self)

    async def _available_in(self) -> float | None:
        longpoll = self.longpoll
        try:
            return await longpoll.broker.available_in(self.project,
                                                      self.queue)
        except Exception:  # noqa: BLE001 - a backend outage must not end the wait early
            LOG.warning("Long-poll watch of queue %s failed; retrying in %s s", self.queue,
                        longpoll.poll_interval, exc_info=True)
            return longpoll.poll_interval

    async def _sleep(self, seconds: float) -> None:
        # asyncio.timeout, not wait_for: wait_for swallows a cancellation that arrives
        # as the event fires.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.changed.wait()

    async def _hand_turns(self) -> Outcome:
        """Hand the turn on, oldest waiter first, while claims come back full or unused;
        the outcome that stopped it (LEFT when no waiter is left)."""
        while self.waiters:
            waiter = self.waiters.popleft()
            waiter.turn.set_result(None)
            outcome = await waiter.outcome
            if outcome not in (Outcome.FULL, Outcome.LEFT):
                return outcome
        return Outcome.LEFT


class LongPoll:
    """The long-poll claims of one worker process, by queue."""

    def __init__(self, broker: Broker, poll_interval: float,
                 signals: Signals | None = None) -> None:
        self.broker = broker
        self.poll_interval = poll_interval
        self.signals = signals if signals is not None else NoSignals()
        self._watches: dict[tuple[str, str], _Watch] = {}

    def notify(self, project: str, queue: str) -> None:
        """Messages of *queue* may have become claimable: its waiters look at once."""
        watch = self._watches.get((project, queue))
        if watch is not None:
            watch.wake()

    def forget(self, watch: _Watch) -> None:
        key = (watch.project, watch.queue)
        if self._watches.get(key) is watch:
            del self._watches[key]
            self.signals.unfollow(*key)

    def _watch(self, project: str, queue: str) -> _Watch:
        watch = self._watches.get((project, queue))
        if watch is None or not watch.alive:
            if watch is None:
                self.signals.follow(project, queue)
            watch = self._watches[(project, queue)] = _Watch(self, project, queue)
        return watch

    async def claim_later(self, project: str, queue: str, attempt: Attempt, *, limit: int,
                          wait: float) -> Claim | None:
        """The claim *attempt* makes within *wait* seconds, once an attempt made at once
        (by the caller) found nothing.

        *attempt* claims up to *limit* messages of *queue* (None when it finds none). It
        runs each time this waiter's turn comes, until it claims something or *wait*
        has passed.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        first = False
        while True:
            watch = self._watch(project, queue)
            waiter = watch.join(first=first)
            try:
                if not await self._turn(waiter, deadline - loop.time()):
                    return None
                waiter.attempted = True
                claim = await attempt()
                if claim is not None:
                    waiter.report(Outcome.FULL if len(claim.messages) >= limit
                                  else Outcome.PARTIAL)
                    return claim
                waiter.report(Outcome.EMPTY)
            finally:
                watch.leave(waiter)
            # Still the oldest waiter: first in line again.
            first = True

    @staticmethod
    async def _turn(waiter: _Waiter, timeout: float) -> bool:
        """Wait for *waiter*'s turn; False when *timeout* passes first."""
        if timeout <= 0:
            return False
        try:
            # shield: a timeout must not cancel the turn the watcher may be handing over.
            await asyncio.wait_for(asyncio.shield(waiter.turn), timeout)
        except TimeoutError:
            return waiter.turn.done()
        return True
