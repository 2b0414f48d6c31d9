"""The background reaper: removes expired messages of queues no request touches.

Requests reap the queues they write to as they go where that is cheap (SQLite, Redis),
but a queue nobody writes to would keep its expired messages, uncounted, until the
store dropped them by itself. A ``Reaper`` thread in each API process runs its driver's
``reap`` every *interval* seconds; of all the processes of a deployment only the one
holding the deployment-wide *lease* for that pass does the work, so passes do not pile
up with the number of workers. A lease lapses before the next pass is due: a reaper that
died is replaced by another process's at the next one.

Each driver takes its lease in its own store (a key with a time to live in Redis, a
document in MongoDB, a bid object in Swift); this module only keeps the rhythm.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

LOG = logging.getLogger(__name__)

# A lease lasts this fraction of the interval, so it has lapsed when the next pass is due.
LEASE_SHARE = 0.9


class Reaper(threading.Thread):
    """Calls *reap* every *interval* seconds while ``lease(seconds)`` grants the pass.

    *lease* returns True when this process may reap for the next *seconds* (no other
    process will); it may raise: a failed pass is logged and the next one tried.
    """

    def __init__(self, name: str, reap: Callable[[], None],
                 lease: Callable[[float], bool], interval: float) -> None:
        super().__init__(name=name, daemon=True)
        self._reap = reap
        self._lease = lease
        self._interval = interval
        self._stopped = threading.Event()

    @property
    def lease_seconds(self) -> float:
        return self._interval * LEASE_SHARE

    def stop(self) -> None:
        """Stop after the current pass (waits for it, so the store can be closed)."""
        self._stopped.set()
        if self.is_alive():
            self.join(timeout=30)

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                if self._lease(self.lease_seconds):
                    self._reap()
            except Exception:  # noqa: BLE001 - the reaper must outlive any one failure
                LOG.exception("%s: a pass failed; the next one is in %s s", self.name,
                              self._interval)
