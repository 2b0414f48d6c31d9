"""Signals: how the processes sharing one store learn at once that a queue changed.

Every process serving the API keeps long-poll waiters and a pusher per queue; a post
served by one process must wake those of all. A store's writes signal by themselves:
the script or transaction that stores a post, a release, a hand-back or a redrive
signals ``MESSAGES`` for its queue, and one that creates, changes or deletes a
subscription signals ``SUBSCRIPTIONS``. Each process listens (``Signals.listen``) and
wakes its own waiters and pusher (``delayq.wakeups``).

A signal is a hint, never the message: it carries no message and may be lost (a
reconnect, a full buffer, a process that dies between its commit and its signal). The
long-poll watchers and the pusher still ask the store on their poll intervals, so a lost
signal costs at most that interval. A process receives the signals of its own writes
too; a duplicate wake-up costs one cheap question to the store.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import enum
from collections.abc import Callable
from dataclasses import dataclass


class Change(enum.Enum):
    """What a signal says changed in its queue."""

    # Messages may have become claimable, now or at a new time: a post, a release, a
    # hand-back or a redrive into the queue.
    MESSAGES = "m"
    # A subscription of the queue was created, changed or deleted.
    SUBSCRIPTIONS = "s"


@dataclass(frozen=True, slots=True)
class Signal:
    """One change of one queue, as a listener receives it."""

    change: Change
    project: str
    queue: str


Receive = Callable[[Signal], None]


class Signals(abc.ABC):
    """The signals of one store, as one process receives them.

    ``listen`` is run by one task of the process's event loop (``delayq.wakeups``),
    which runs it again when it ends or fails. The consumers of signals say which queues
    they have waiters or pushes for (``follow``/``unfollow``): a store whose signals go
    per queue (a Redis cluster's shard channels) listens to those queues only; the
    others deliver every queue's and ignore this.
    """

    # A store no other process writes to, or that cannot signal (Swift): ``listen``
    # waits for nothing, and the poll intervals alone bound how late a change is seen.
    signals = True

    def __init__(self) -> None:
        self._followed: collections.Counter[tuple[str, str]] = collections.Counter()

    @abc.abstractmethod
    async def listen(self, receive: Receive) -> None:
        """Call *receive* with every signal of the store (the followed queues' at least,
        ``SUBSCRIPTIONS`` of every queue) until cancelled. It returns or raises when the
        store's connection ends; the caller listens again after a pause. *receive*
        never blocks and never raises."""

    def follow(self, project: str, queue: str) -> None:
        """A waiter or a pusher of this process wants *queue*'s signals, until the
        matching ``unfollow``."""
        key = (project, queue)
        self._followed[key] += 1
        if self._followed[key] == 1:
            self.followed(project, queue, True)

    def unfollow(self, project: str, queue: str) -> None:
        """Undo one ``follow`` of *queue*."""
        key = (project, queue)
        if self._followed[key] <= 1:
            if self._followed.pop(key, 0):
                self.followed(project, queue, False)
            return
        self._followed[key] -= 1

    def following(self) -> list[tuple[str, str]]:
        """The queues some consumer of this process follows now."""
        return list(self._followed)

    def followed(self, project: str, queue: str, wanted: bool) -> None:  # noqa: B027
        """*queue* became followed (*wanted*) or no longer is: a store whose signals go
        per queue starts or stops listening to it. By default, nothing."""


class NoSignals(Signals):
    """A store whose writes do not signal: changes made through other processes are
    seen on the poll intervals (``claim_wait_poll_interval``, ``push_scan_interval``)."""

    signals = False

    async def listen(self, receive: Receive) -> None:
        await asyncio.get_running_loop().create_future()  # until cancelled
