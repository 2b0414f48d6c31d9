"""A driver: one connected backend, its controllers and its background reaper."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable

from oslo_config import cfg

from delayq.storage.base.claims import Claims
from delayq.storage.base.messages import Messages
from delayq.storage.base.queues import Queues
from delayq.storage.base.signals import NoSignals, Signals
from delayq.storage.base.subscriptions import Subscriptions
from delayq.storage.base.trail import Trail
from delayq.storage.reaper import Reaper

Endings = Callable[[Iterable[str]], None]


def ignore_endings(kinds: Iterable[str]) -> None:
    """The endings of a store nobody counts."""


class Driver(abc.ABC):
    """A storage backend for the queues, messages, claims and subscriptions of every
    project: its controllers do the work, one per resource.

    A store stores and transitions atomically; it decides nothing else: limits, defaults,
    delay resolution and validation live in ``delayq.validation`` and ``delayq.broker``
    and reach it already applied. Every controller method (but the trail's) is a
    coroutine that never blocks the event loop; it may be awaited from several loops,
    threads and processes sharing one backend at once.
    """

    name: str
    # True when requests remove the expired messages they meet as they write (each
    # reported as ``expired``), so any write after an expiry reaps a batch of it; False
    # when only ``reap`` (the background reaper) does, because a request doing it would
    # cost one more round trip.
    reaps_on_write: bool = True

    queues: Queues
    messages: Messages
    claims: Claims
    subscriptions: Subscriptions
    trail: Trail
    # How this process hears of the queues other processes change; a driver whose writes
    # signal sets its own.
    signals: Signals

    def __init__(self, *, endings: Endings = ignore_endings, reap_interval: float = 0.0
                 ) -> None:
        # Told, once a transition is stored, the kind of each message that left a queue
        # by it (deleted, popped, dead_lettered, expired: one kind per message), whether
        # or not the event trail is on: the API counts them for /metrics.
        self.endings = endings
        self.reap_interval = reap_interval
        self.signals = NoSignals()
        self._reaper: Reaper | None = None

    @classmethod
    @abc.abstractmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *, endings: Endings = ignore_endings
                  ) -> Driver:
        """A store configured from its ``[drivers:message_store:NAME]`` group, telling
        *endings* of the messages leaving queues."""

    @abc.abstractmethod
    async def now(self) -> float:
        """The backend's clock, in POSIX seconds."""

    @abc.abstractmethod
    async def ping(self) -> bool:
        """True when the backend answers."""

    async def close(self) -> None:  # noqa: B027 - a store without resources needs none
        """Stop the reaper and release connections. A store used again reconnects."""
        await self.stop_reaper()

    @abc.abstractmethod
    async def reap(self) -> None:
        """Remove the expired messages of every queue of every project, now, each
        reported as ``expired`` (to ``endings`` and the trail) exactly once: the work of
        one background reaper pass."""

    async def reap_lease(self, seconds: float) -> bool:
        """True when this process may reap for the next *seconds* and no other process
        of the deployment will (``delayq.storage.reaper``). This default grants every
        pass: a store that takes no lease is reaped by each process."""
        return True

    def start_reaper(self) -> None:
        """Run ``reap`` every ``reap_interval`` seconds as a task of the running loop;
        nothing when the interval is 0 or the reaper runs already."""
        if self.reap_interval > 0 and (self._reaper is None or not self._reaper.running):
            self._reaper = Reaper(f"delayq-{self.name}-reaper", self.reap,
                                  self.reap_lease, self.reap_interval)
            self._reaper.start()

    async def stop_reaper(self) -> None:
        """Stop the reaper after its current pass."""
        if self._reaper is not None:
            await self._reaper.stop()
            self._reaper = None
