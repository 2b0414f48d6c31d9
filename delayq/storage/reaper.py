"""The background reaper: removes expired messages of queues no request touches.

Requests reap the queues they write to as they go where that is cheap (SQLite, Redis),
but a queue nobody writes to would keep its expired messages, uncounted, until the
store dropped them by itself. A ``Reaper`` task on each API process's loop runs its
store's ``reap`` every *interval* seconds; of all the processes of a deployment only the
one holding the deployment-wide *lease* for that pass does the work, so passes do not
pile up with the number of workers. A lease lapses before the next pass is due: a reaper
that died is replaced by another process's at the next one.

Each store takes its lease in its own backend (a key with a time to live in Redis, a
document in MongoDB, a bid object in Swift); this module only keeps the rhythm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

LOG = logging.getLogger(__name__)

# A lease lasts this fraction of the interval, so it has lapsed when the next pass is due.
LEASE_SHARE = 0.9


class Reaper:
    """Awaits *reap* every *interval* seconds while ``await lease(seconds)`` grants the
    pass.

    *lease* returns True when this process may reap for the next *seconds* (no other
    process will); it may raise: a failed pass is logged and the next one tried.
    """

    def __init__(self, name: str, reap: Callable[[], Awaitable[None]],
                 lease: Callable[[float], Awaitable[bool]], interval: float) -> None:
        self.name = name
        self._reap = reap
        self._lease = lease
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._passing = False
        self._stopping = False

    @property
    def lease_seconds(self) -> float:
        return self._interval * LEASE_SHARE

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Stop after the current pass (waits for it, so the store can be closed)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        self._stopping = True
        loop = task.get_loop()
        if loop is not asyncio.get_running_loop():
            # A task of another loop (the synchronous facade's) is stopped by that loop.
            loop.call_soon_threadsafe(task.cancel)
            return
        if not self._passing:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
            await asyncio.wait_for(task, 30)

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._interval)
            self._passing = True
            try:
                if await self._lease(self.lease_seconds):
                    await self._reap()
            except Exception:  # noqa: BLE001 - the reaper must outlive any one failure
                LOG.exception("%s: a pass failed; the next one is in %s s", self.name,
                              self._interval)
            finally:
                self._passing = False
