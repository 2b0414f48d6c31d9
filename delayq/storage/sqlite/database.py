"""The SQLite database the controllers share: one connection per thread, write
transactions, and what every transition writes beside its own rows (its events, a batch
of expiry).

Every state change runs in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's
single write lock up front: across threads and processes sharing the file, a message is
claimed, moved or deleted by exactly one transaction. Reads run outside write
transactions and, thanks to WAL mode, never wait for writers.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from delayq import events
from delayq.storage.base import Endings
from delayq.storage.base.signals import Change, Signal
from delayq.storage.base.unavailable import Unavailability
from delayq.storage.sqlite import sql
from delayq.storage.sqlite import tallies as sqlite_tallies
from delayq.storage.sqlite.rows import event_params

NAME = "sqlite"  # the store a 503 names
# SQLite's 503s are conditions the database finds (a file it cannot open, a lock it
# cannot take in time), each raised with what failed.
unavailable = Unavailability(NAME, lambda exc: None)


class Database:
    """The database file at *path*, read and written on the *clock* of the driver.

    *endings* is told, once a write transaction has committed, the kind of each message
    the transaction ended (``Driver.endings``), and *send* the signals of its changes
    (``signal``). *events* is the trail's settings; every
    write removes up to *expiry_batch* expired messages (``expire``).
    """

    def __init__(self, path: str, *, busy_timeout: int, synchronous: str,
                 expiry_batch: int, clock: Callable[[], float], events_settings: events.Settings,
                 endings: Endings, send: Callable[[list[Signal]], None]) -> None:
        self.path = path
        self.clock = clock
        self.events = events_settings
        self.expiry_batch = expiry_batch
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._endings = endings
        self._send = send
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @property
    def busy_timeout(self) -> int:
        """Milliseconds a statement waits for a lock another connection holds."""
        return int(self._busy_timeout)

    def now(self) -> float:
        """The driver's clock."""
        return self.clock()

    def db(self) -> sqlite3.Connection:
        """The calling thread's connection, opened at its first call."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._open()
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def _open(self) -> sqlite3.Connection:
        """A new connection to the database, set up; each thread opens its own, so the
        file (or its directory) may have gone since the start, or the process may have
        run out of file descriptors."""
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                 timeout=self._busy_timeout / 1000)
        except sqlite3.OperationalError as exc:
            raise unavailable.error(
                f"SQLite database {self.path} cannot be opened: {exc}") from exc
        try:
            for pragma in sql.PRAGMAS:
                db.execute(pragma)
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout)}")
        except sqlite3.OperationalError as exc:
            db.close()
            raise unavailable.error(
                f"SQLite database {self.path} cannot be set up: {exc}") from exc
        return db

    def install(self) -> None:
        """Create the schema and the tallies where missing."""
        # executescript commits on its own; each CREATE ... IF NOT EXISTS is idempotent,
        # so workers starting together may all run it.
        self.db().executescript(sql.SCHEMA)
        with self.write() as db:
            # In the write transaction: workers starting together add it once.
            columns = {name for (name,) in db.execute(sql.SUBSCRIPTION_COLUMN_NAMES)}
            if "confirmed" not in columns:
                db.execute(sql.SUBSCRIPTION_CONFIRMED_ADD)
            sqlite_tallies.install(db)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; commits on success, rolls back on any error. A write
        lock not taken within the busy timeout is a 503."""
        db = self.db()
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise unavailable.error(f"SQLite database {self.path} is busy: {exc}") from exc
        self._local.ended = []
        self._local.signals = []
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        # Counted and signalled only once committed: a rolled-back transition changed
        # nothing.
        if self._local.ended:
            self._endings(self._local.ended)
        if self._local.signals:
            self._send(self._local.signals)

    def signal(self, change: Change, project: str, queue: str) -> None:
        """Tell every process, once the current write transaction commits, that
        *queue* changed (``delayq.storage.base.signals``)."""
        signal = Signal(change, project, queue)
        if signal not in self._local.signals:
            self._local.signals.append(signal)

    def close(self) -> None:
        """Close every thread's connection; the next call opens a new one."""
        with self._lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()

    def record(self, db: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
        """Append event rows (made by ``rows.event_params``) to the trail, when it is on;
        note the messages they end for ``endings`` either way. *db* is in a write
        transaction."""
        self._local.ended += [row["kind"] for row in rows if row["kind"] in events.ENDINGS]
        if rows and self.events.enabled:
            db.executemany(sql.EVENT_INSERT, rows)

    def expire(self, db: sqlite3.Connection, now: float) -> int:
        """Remove a batch of the whole database's expired messages (any queue's) and
        claims; how many messages. *db* is in a write transaction."""
        batch = self.expiry_batch
        gone = db.execute(sql.EXPIRED_MESSAGES_DELETE, (now, batch)).fetchall()
        db.execute(sql.EXPIRED_CLAIMS_DELETE, (now, batch))
        db.execute(sql.EXPIRED_SUBSCRIPTIONS_DELETE, (now, batch))
        if not self.events.enabled:
            self._local.ended += [events.EXPIRED] * len(gone)
            sqlite_tallies.forget(db, now, batch * 4)
            return len(gone)
        if gone:
            names = {id_: (project, name) for id_, project, name in db.execute(
                sql.QUEUE_NAMES_BY_ID, (json.dumps(sorted({r[0] for r in gone})),))}
            self.record(db, [
                event_params(project=names[queue_id][0], queue=names[queue_id][1],
                             kind=events.EXPIRED, time=expires, message_id=id_,
                             claim_count=count, expires=expires)
                for queue_id, id_, count, expires in gone if queue_id in names])
        sqlite_tallies.forget(db, now, batch * 4)
        # Events leave in batches as new ones arrive, like expired messages.
        db.execute(sql.EVENTS_FORGET, (now - self.events.retention, batch * 4))
        return len(gone)
