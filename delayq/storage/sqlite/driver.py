"""The SQLite driver: one database file (``database.py``) shared by every worker process,
and its controllers (``queues.py``, ``messages.py``, ``claims.py``, ``subscriptions.py``,
``trail.py``), which block and run through the driver's offload; ``signals.py`` tells
the other processes of the host what each write changed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from oslo_config import cfg

from delayq import errors, events
from delayq.conf import events_settings
from delayq.offload import AUTO
from delayq.storage import base
from delayq.storage.base.offloaded import OffloadedDriver
from delayq.storage.sqlite.claims import Claims
from delayq.storage.sqlite.database import NAME, Database
from delayq.storage.sqlite.messages import Messages
from delayq.storage.sqlite.options import GROUP
from delayq.storage.sqlite.queues import Queues
from delayq.storage.sqlite.signals import Signals
from delayq.storage.sqlite.subscriptions import Subscriptions
from delayq.storage.sqlite.trail import Trail


class Driver(OffloadedDriver):
    """Queues, messages and claims in one SQLite database file."""

    name = NAME
    # A call is one brief transaction on a local file: inline on the loop costs less
    # than a thread hand-off, until one is slow (a busy lock, a slow disk).
    calls = AUTO

    def __init__(self, path: str, *, busy_timeout: int = 30000, synchronous: str = "NORMAL",
                 expiry_batch: int = 64, clock: Callable[[], float] = time.time,
                 events_settings: events.Settings = events.ON,
                 endings: base.Endings = base.ignore_endings) -> None:
        super().__init__(endings=endings)
        self.path = path
        self.signals = signals = Signals(path)
        # Read at each commit, so that endings set on the driver later are told.
        self.database = Database(path, busy_timeout=busy_timeout, synchronous=synchronous,
                                 expiry_batch=expiry_batch, clock=clock,
                                 events_settings=events_settings,
                                 endings=lambda kinds: self.endings(kinds),
                                 send=signals.send)
        self.database.install()
        self.offload_controllers(queues=Queues(self.database),
                                 messages=Messages(self.database),
                                 claims=Claims(self.database),
                                 subscriptions=Subscriptions(self.database))
        self.trail = Trail(self.database)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        return cls(group.path, busy_timeout=group.busy_timeout,
                   synchronous=group.synchronous, expiry_batch=group.expiry_batch,
                   events_settings=events_settings(conf), endings=endings)

    def now_blocking(self) -> float:
        return self.database.now()

    def ping_blocking(self) -> bool:
        try:
            self.database.db().execute("SELECT 1").fetchone()
        except (sqlite3.Error, errors.StorageUnavailable):
            return False
        return True

    def reap_blocking(self) -> None:
        """Every write reaps a batch of the whole database's expired messages (any
        queue's); this goes on in batches until none is left."""
        while True:
            with self.database.write() as db:
                if self.database.expire(db, self.database.now()) < self.database.expiry_batch:
                    return

    def close_blocking(self) -> None:
        self.database.close()
        if isinstance(self.signals, Signals):
            self.signals.close()
