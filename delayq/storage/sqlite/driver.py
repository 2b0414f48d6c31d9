"""The SQLite driver.

Every state change runs in one ``BEGIN IMMEDIATE`` transaction, which takes SQLite's
single write lock up front: across threads and processes sharing the file, a message is
claimed, moved or deleted by exactly one transaction. Reads run outside write
transactions and, thanks to WAL mode, never wait for writers.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from oslo_config import cfg

from delayq import errors, events, idempotency, jsontext, validation
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.conf import events_settings
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import operation
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats
from delayq.retry import Backoff
from delayq.storage import base
from delayq.storage.sqlite import sql
from delayq.storage.sqlite import tallies as sqlite_tallies
from delayq.storage.sqlite.options import GROUP
from delayq.storage.sqlite.subscriptions import Subscriptions
from delayq.storage.base.unavailable import Unavailability
from delayq.subscription import Subscription, SubscriptionChange

NAME = "sqlite"  # the store a 503 names
# SQLite's 503s are conditions the driver finds (a file it cannot open, a lock it cannot
# take in time), each raised with what failed.
unavailable = Unavailability(NAME, lambda exc: None)

SEQ = sql.MESSAGE_COLUMNS.index("seq")
ID = sql.MESSAGE_COLUMNS.index("id")
BODY = sql.MESSAGE_COLUMNS.index("body")
TTL = sql.MESSAGE_COLUMNS.index("ttl")
CREATED = sql.MESSAGE_COLUMNS.index("created")
EXPIRES = sql.MESSAGE_COLUMNS.index("expires")
CLAIM_COUNT = sql.MESSAGE_COLUMNS.index("claim_count")
SOURCE = sql.MESSAGE_COLUMNS.index("source_queue")
NO_EVENT = dict.fromkeys(sql.EVENT_COLUMNS)


def event_row(**fields: Any) -> dict[str, Any]:
    """Parameters of sql.EVENT_INSERT: the given fields, None for the rest."""
    return {**NO_EVENT, **fields}


def backoff_params(backoff: Backoff | None) -> dict[str, Any]:
    """Parameters of the statements that apply a retry policy's waits (``sql._WAIT``)."""
    if backoff is None:
        return {"delays": None, "dead_letter_at": None}
    return {"delays": json.dumps(backoff.delays), "dead_letter_at": backoff.dead_letter_at}


class Driver(base.Driver):
    """Queues, messages and claims in one SQLite database file."""

    name = NAME
    calls_are_brief = True

    def __init__(self, path: str, *, busy_timeout: int = 30000, synchronous: str = "NORMAL",
                 expiry_batch: int = 64, clock: Callable[[], float] = time.time,
                 events_settings: events.Settings = events.ON,
                 endings: base.Endings = base.ignore_endings) -> None:
        super().__init__(endings=endings)
        self.path = path
        self._events = events_settings
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._expiry_batch = expiry_batch
        self._clock = clock
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # executescript commits on its own; each CREATE ... IF NOT EXISTS is idempotent,
        # so workers starting together may all run it.
        self._subscriptions = Subscriptions(self._db, self._write, self._clock,
                                            expiry_batch)
        self._db().executescript(sql.SCHEMA)
        with self._write() as db:
            sqlite_tallies.install(db)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        return cls(group.path, busy_timeout=group.busy_timeout,
                   synchronous=group.synchronous, expiry_batch=group.expiry_batch,
                   events_settings=events_settings(conf), endings=endings)

    # Connections and transactions

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
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

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; commits on success, rolls back on any error."""
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise unavailable.error(f"SQLite database {self.path} is busy: {exc}") from exc
        self._local.ended = []
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        # Counted only once committed: a rolled-back transition ended nothing.
        if self._local.ended:
            self.endings(self._local.ended)

    @operation
    def now(self) -> float:
        return self._clock()

    @operation
    def ping(self) -> bool:
        try:
            self._db().execute("SELECT 1").fetchone()
        except (sqlite3.Error, errors.StorageUnavailable):
            return False
        return True

    def close(self) -> None:
        with self._lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()

    @operation
    def reap(self) -> None:
        """Every write reaps a batch of the whole database's expired messages (any
        queue's); this goes on in batches until none is left."""
        while True:
            with self._write() as db:
                now = self._clock()
                if self._expire(db, now) < self._expiry_batch:
                    return

    def _expire(self, db: sqlite3.Connection, now: float) -> int:
        """Remove a batch of expired messages and claims; how many messages."""
        gone = db.execute(sql.EXPIRED_MESSAGES_DELETE, (now, self._expiry_batch)).fetchall()
        db.execute(sql.EXPIRED_CLAIMS_DELETE, (now, self._expiry_batch))
        db.execute(sql.EXPIRED_SUBSCRIPTIONS_DELETE, (now, self._expiry_batch))
        if not self._events.enabled:
            self._local.ended += [events.EXPIRED] * len(gone)
            sqlite_tallies.forget(db, now, self._expiry_batch * 4)
            return len(gone)
        if gone:
            names = {id_: (project, name) for id_, project, name in db.execute(
                sql.QUEUE_NAMES_BY_ID, (json.dumps(sorted({r[0] for r in gone})),))}
            self._record(db, [
                event_row(project=names[queue_id][0], queue=names[queue_id][1],
                          kind=events.EXPIRED, time=expires, message_id=id_,
                          claim_count=count, expires=expires)
                for queue_id, id_, count, expires in gone if queue_id in names])
        sqlite_tallies.forget(db, now, self._expiry_batch * 4)
        # Events leave in batches as new ones arrive, like expired messages.
        db.execute(sql.EVENTS_FORGET, (now - self._events.retention, self._expiry_batch * 4))
        return len(gone)

    def _record(self, db: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
        """Append event rows (made by event_row) to the trail, when it is on; note the
        messages they end for ``endings`` either way."""
        self._local.ended += [row["kind"] for row in rows if row["kind"] in events.ENDINGS]
        if rows and self._events.enabled:
            db.executemany(sql.EVENT_INSERT, rows)

    @staticmethod
    def _queue_id(db: sqlite3.Connection, project: str, name: str) -> int | None:
        row = db.execute(sql.QUEUE_ID, (project, name)).fetchone()
        return row[0] if row else None

    def _claim_state(self, db: sqlite3.Connection, project: str, queue: str,
                     message_id: str, now: float) -> tuple[int, tuple]:
        """The queue's id and the live message's row ``(seq, claim_id, claim_expires,
        claim_count)``; raises MessageNotFound when either is missing."""
        queue_id = self._queue_id(db, project, queue)
        row = None
        if queue_id is not None:
            row = db.execute(sql.MESSAGE_CLAIM_STATE, (queue_id, message_id, now)).fetchone()
        if row is None:
            raise errors.MessageNotFound.with_id(message_id)
        return queue_id, row

    def _ensure_queue(self, db: sqlite3.Connection, project: str, name: str,
                      now: float, quota: int = 0) -> int:
        """The queue's id, the queue created (empty metadata) when missing, refused past
        *quota* (``_refuse_queue_past``)."""
        queue_id = self._queue_id(db, project, name)
        if queue_id is not None:
            return queue_id
        self._refuse_queue_past(db, project, quota)
        db.execute(sql.QUEUE_INSERT, (project, name, "{}", now))
        return self._queue_id(db, project, name)

    @staticmethod
    def _refuse_queue_past(db: sqlite3.Connection, project: str, quota: int) -> None:
        """Raise QuotaExceeded when *project* holds *quota* queues (0: no limit). Called
        in the creating transaction, which holds the write lock: exact."""
        if quota:
            held = db.execute(sql.QUEUE_COUNT, (project,)).fetchone()[0]
            if held >= quota:
                raise errors.QuotaExceeded.queues(held, quota)

    @staticmethod
    def _message(row: tuple, as_of: float) -> Message:
        (_seq, id_, body, ttl, created, expires, due, client_id, claim_id, claim_expires,
         claim_count, source_queue, moved_at) = row
        return Message(id=id_, body=jsontext.loads(body), ttl=ttl, created=created,
                       expires=expires, due=due, client_id=client_id, claim_id=claim_id,
                       claim_expires=claim_expires, claim_count=claim_count, as_of=as_of,
                       source_queue=source_queue, moved_at=moved_at)

    # Queues

    @operation
    def create_queue(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        with self._write() as db:
            if queue_quota and self._queue_id(db, project, name) is None:
                self._refuse_queue_past(db, project, queue_quota)
            cursor = db.execute(sql.QUEUE_INSERT,
                                (project, name, json.dumps(metadata), self.now()))
            return cursor.rowcount == 1

    @operation
    def get_queue(self, project: str, name: str) -> dict[str, Any] | None:
        row = self._db().execute(sql.QUEUE_METADATA, (project, name)).fetchone()
        return json.loads(row[0]) if row else None

    @operation
    def set_queue_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        with self._write() as db:
            cursor = db.execute(sql.QUEUE_SET_METADATA, (json.dumps(metadata), project, name))
            if cursor.rowcount == 0:
                raise errors.QueueNotFound.named(name)

    @operation
    def delete_queue(self, project: str, name: str) -> None:
        self._empty_queue(project, name, drop=True)

    @operation
    def purge_queue(self, project: str, name: str) -> None:
        self._empty_queue(project, name, drop=False)

    def _empty_queue(self, project: str, name: str, *, drop: bool) -> None:
        with self._write() as db:
            queue_id = self._queue_id(db, project, name)
            if queue_id is None:
                return
            db.execute(sql.MESSAGES_DELETE_QUEUE, (queue_id,))
            db.execute(sql.CLAIMS_DELETE_QUEUE, (queue_id,))
            db.execute(sql.POST_KEYS_DELETE_QUEUE, (queue_id,))
            self._record(db, [event_row(project=project, queue=name, kind=events.PURGED,
                                        time=self.now())])
            if drop:
                db.execute(sql.QUEUE_DELETE, (queue_id,))
                # A new queue may get the same id.
                db.execute(sql.TALLIES_DELETE_QUEUE, (queue_id,))

    @operation
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> list[tuple[str, dict[str, Any]]]:
        rows = self._db().execute(sql.QUEUE_LIST, (project, marker or "", limit))
        return [(name, json.loads(metadata)) for name, metadata in rows]

    @operation
    def count_queues(self, project: str) -> int:
        return self._db().execute(sql.QUEUE_COUNT, (project,)).fetchone()[0]

    @operation
    def queue_stats(self, project: str, name: str) -> QueueStats:
        db = self._db()
        now = self.now()
        queue_id = self._queue_id(db, project, name)
        if queue_id is None:
            return QueueStats(0, 0, 0, None, None)
        delayed, claimed, free = db.execute(
            sql.QUEUE_STATS, {"now": now, "queue_id": queue_id}).fetchone()
        oldest = newest = None
        if delayed + claimed + free:
            row = db.execute(sql.MESSAGES_OLDEST, (queue_id, now)).fetchone()
            oldest = self._message(row, now) if row else None
            row = db.execute(sql.MESSAGES_NEWEST, (queue_id, now)).fetchone()
            newest = self._message(row, now) if row else None
        return QueueStats(free=free, claimed=claimed, delayed=delayed, oldest=oldest,
                          newest=newest)

    @operation
    def queue_counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (tallies.py): O(log n)."""
        db = self._db()
        queue_id = self._queue_id(db, project, name)
        if queue_id is None:
            return QueueCounts(0, 0, 0)
        return sqlite_tallies.counts(db, queue_id, self.now())

    # Messages

    @operation
    def post_messages(self, project: str, queue: str, client_id: str,
                      messages: list[NewMessage], *, metadata_token: Any = None,
                      message_quota: int = 0, queue_quota: int = 0,
                      key: PostKey | None = None) -> list[str]:
        """A key is looked up, and kept, in the post's transaction; so are the quotas
        checked."""
        ids = [uuid.uuid4().hex for _ in messages]
        with self._write() as db:
            now = self.now()
            if key is not None:
                self._refuse_kept_key(db, project, queue, key, now)
            if message_quota:
                self._check_message_quota(db, project, queue, len(messages), message_quota,
                                          now)
            queue_id = self._ensure_queue(db, project, queue, now, queue_quota)
            db.executemany(sql.MESSAGE_INSERT, [
                (id_, queue_id, jsontext.dumps(m.body), m.ttl, now, now + m.ttl,
                 now + m.delay, now + m.delay, client_id)
                for id_, m in zip(ids, messages, strict=True)])
            self._record(db, [
                event_row(project=project, queue=queue, kind=events.POSTED, time=now,
                          message_id=id_, due=now + m.delay, ttl=m.ttl, expires=now + m.ttl)
                for id_, m in zip(ids, messages, strict=True)])
            if key is not None:
                db.execute(sql.POST_KEY_KEEP, (queue_id, key.key, key.digest,
                                               idempotency.encode_ids(ids), now + key.window))
                db.execute(sql.POST_KEYS_FORGET, (now, self._expiry_batch))
            self._expire(db, now)
        return ids

    def _refuse_kept_key(self, db: sqlite3.Connection, project: str, queue: str,
                         key: PostKey, now: float) -> None:
        """Raise KeyTaken when the queue keeps *key* (its row not expired at *now*)."""
        queue_id = self._queue_id(db, project, queue)
        row = None if queue_id is None else db.execute(
            sql.POST_KEY, (queue_id, key.key, now)).fetchone()
        if row is not None:
            raise KeyTaken(StoredKey(row[0], idempotency.decode_ids(row[1])))

    def _check_message_quota(self, db: sqlite3.Connection, project: str, queue: str,
                             posted: int, quota: int, now: float) -> None:
        """Refuse a post of *posted* messages that would take the queue past *quota*
        live messages. In the post's transaction, from the queue's tallies: exact
        whatever the concurrency, O(log n) (``queue_counts``), and to the millisecond
        (a message with under a millisecond left to live no longer counts)."""
        queue_id = self._queue_id(db, project, queue)
        held = 0 if queue_id is None else sqlite_tallies.live(db, queue_id, now)
        if held + posted > quota:
            raise errors.QuotaExceeded.messages(queue, held, posted, quota)

    @operation
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> tuple[list[Message], str | None]:
        after = validation.sequence_marker(marker)
        db = self._db()
        now = self.now()
        queue_id = self._queue_id(db, project, queue)
        if queue_id is None:
            return [], None
        query = sql.messages_page(exclude_client=exclude_client is not None,
                                  include_claimed=include_claimed,
                                  include_delayed=include_delayed)
        rows = db.execute(query, {"queue_id": queue_id, "marker": after, "now": now,
                                  "client_id": exclude_client, "limit": limit}).fetchall()
        next_marker = str(rows[-1][0]) if rows else None
        return [self._message(row, now) for row in rows], next_marker

    @operation
    def get_messages(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        db = self._db()
        now = self.now()
        queue_id = self._queue_id(db, project, queue)
        if queue_id is None:
            return []
        rows = db.execute(sql.MESSAGES_BY_ID, (queue_id, now, json.dumps(ids)))
        return [self._message(row, now) for row in rows]

    @operation
    def delete_message(self, project: str, queue: str, message_id: str,
                       claim_id: str | None) -> None:
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return
            row = db.execute(sql.MESSAGE_CLAIM_STATE, (queue_id, message_id, now)).fetchone()
            if row is None:
                return
            seq, holder, claim_expires, claim_count = row
            live_holder = holder if holder is not None and claim_expires > now else None
            refuse_delete(delete_refusal(claim_id, live_holder), message_id, claim_id)
            db.execute(sql.MESSAGE_DELETE, (seq,))
            self._record(db, [event_row(project=project, queue=queue, kind=events.DELETED,
                                        time=now, message_id=message_id,
                                        claim_id=claim_id, claim_count=claim_count)])

    @operation
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> None:
        with self._write() as db:
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return
            now = self.now()
            deleted = db.execute(sql.MESSAGES_DELETE_BY_ID,
                                 (queue_id, json.dumps(ids))).fetchall()
            # One that expired already (not yet reaped) is recorded as the expiry it was.
            self._record(db, [
                event_row(project=project, queue=queue, kind=events.DELETED, time=now,
                          message_id=id_, claim_count=count) if expires > now else
                event_row(project=project, queue=queue, kind=events.EXPIRED, time=expires,
                          message_id=id_, claim_count=count, expires=expires)
                for id_, count, expires in deleted])

    @operation
    def pop_messages(self, project: str, queue: str, limit: int) -> list[Message]:
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return []
            popped = []
            for row in self._claimable(db, project, queue, queue_id, now, limit):
                db.execute(sql.MESSAGE_DELETE, (row[SEQ],))
                popped.append(self._message(row, now))
                if len(popped) == limit:
                    break
            self._record(db, [event_row(project=project, queue=queue, kind=events.POPPED,
                                        time=now, message_id=m.id, claim_count=m.claim_count)
                              for m in popped])
            return popped

    @operation
    def edit_message(self, project: str, queue: str, message_id: str, *,
                     body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                     ) -> Message:
        with self._write() as db:
            now = self.now()
            queue_id, row = self._claim_state(db, project, queue, message_id, now)
            edited = db.execute(sql.MESSAGE_EDIT, {
                "body": None if body is NO_CHANGE else json.dumps(body),
                "due": None if delay is None else now + delay, "seq": row[0],
                "now": now}).fetchone()
            if edited is None:
                raise errors.MessageHeld.editing(message_id)
            message = self._message(edited, now)
            self._record(db, [event_row(project=project, queue=queue, kind=events.EDITED,
                                        time=now, message_id=message_id, due=message.due,
                                        claim_count=message.claim_count)])
            return message

    @operation
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int, queue_quota: int = 0) -> int:
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return 0
            rows = db.execute(sql.REDRIVABLE, {"queue": queue_id, "now": now,
                                               "anything": destination is not None,
                                               "limit": limit}).fetchall()
            targets: dict[str, int] = {}
            trail = []
            for row in rows:
                target = destination or row[SOURCE]
                if target not in targets:
                    # A source queue comes back whatever the quota (Broker.redrive).
                    targets[target] = self._ensure_queue(
                        db, project, target, now, queue_quota if destination else 0)
                db.execute(sql.MESSAGE_REDRIVE,
                           {"target": targets[target], "now": now, "seq": row[SEQ]})
                trail.append(event_row(
                    project=project, queue=queue, kind=events.REDRIVEN, time=now,
                    message_id=row[ID], claim_count=row[CLAIM_COUNT], source=queue,
                    target=target, expires=row[EXPIRES]))
            self._record(db, trail)
            self._expire(db, now)
            return len(rows)

    def _claimable(self, db: sqlite3.Connection, project: str, queue: str, queue_id: int,
                   now: float, batch: int) -> Iterator[tuple]:
        """Claimable rows, oldest availability first, skipping (and deleting) expired ones.

        The caller must take each yielded row out of the claimable range (claim, move or
        delete it) before asking for the next, and stop when it has enough; that is what
        makes re-querying in batches safe and cheap.
        """
        while True:
            rows = db.execute(sql.CLAIMABLE, (queue_id, now, batch)).fetchall()
            if not rows:
                return
            for row in rows:
                if row[EXPIRES] <= now:
                    db.execute(sql.MESSAGE_DELETE, (row[SEQ],))
                    self._record(db, [event_row(
                        project=project, queue=queue, kind=events.EXPIRED,
                        time=row[EXPIRES], message_id=row[ID],
                        claim_count=row[CLAIM_COUNT], expires=row[EXPIRES])])
                    continue
                yield row

    # Claims

    @operation
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
              backoff: Backoff | None = None) -> Claim | None:
        claim_id = uuid.uuid4().hex
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return None
            expires = now + ttl
            target_id = None
            claimed = []
            trail = []
            for row in self._claimable(db, project, queue, queue_id, now, limit):
                seq, claim_count = row[SEQ], row[CLAIM_COUNT]
                if dead_letter and claim_count >= dead_letter.max_claim_count:
                    if target_id is None:
                        target_id = self._ensure_queue(db, project, dead_letter.queue, now)
                    db.execute(sql.MESSAGE_DEAD_LETTER, {
                        "target": target_id, "now": now, "source": queue,
                        "ttl": dead_letter.messages_ttl, "seq": seq})
                    kept = dead_letter.messages_ttl is None
                    trail.append(event_row(
                        project=project, queue=queue, kind=events.DEAD_LETTERED, time=now,
                        message_id=row[ID], claim_count=claim_count, source=queue,
                        target=dead_letter.queue,
                        ttl=row[TTL] if kept else dead_letter.messages_ttl,
                        expires=row[CREATED] + row[TTL] if kept
                        else now + dead_letter.messages_ttl,
                        body=row[BODY]))
                    continue
                due = None if backoff is None else expires + backoff.after(claim_count + 1)
                claimed.append(db.execute(sql.MESSAGE_CLAIM, {
                    "claim_id": claim_id, "claim_expires": expires, "grace": grace,
                    "due": due, "seq": seq}).fetchone())
                if len(claimed) == limit:
                    break
            trail += [event_row(project=project, queue=queue, kind=events.CLAIMED, time=now,
                                message_id=row[ID], claim_id=claim_id,
                                claim_count=row[CLAIM_COUNT], expires=row[EXPIRES])
                      for row in claimed]
            self._record(db, trail)
            self._expire(db, now)
            if not claimed:
                return None
            db.execute(sql.CLAIM_INSERT, (claim_id, queue_id, ttl, grace, now, expires))
            return Claim(id=claim_id, ttl=ttl, grace=grace, created=now, expires=expires,
                         as_of=now, messages=[self._message(row, now) for row in claimed])

    @operation
    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        db = self._db()
        now = self.now()
        queue_id = self._queue_id(db, project, queue)
        row = None
        if queue_id is not None:
            row = db.execute(sql.CLAIM_GET, (claim_id, queue_id, now)).fetchone()
        if row is None:
            raise errors.ClaimNotFound.with_id(claim_id)
        id_, ttl, grace, created, expires = row
        messages = db.execute(sql.CLAIM_MESSAGES, (claim_id, queue_id, now, now))
        return Claim(id=id_, ttl=ttl, grace=grace, created=created, expires=expires,
                     as_of=now, messages=[self._message(r, now) for r in messages])

    @operation
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None or db.execute(
                    sql.CLAIM_GET, (claim_id, queue_id, now)).fetchone() is None:
                raise errors.ClaimNotFound.with_id(claim_id)
            expires = now + ttl
            db.execute(sql.CLAIM_RENEW, (ttl, grace, expires, claim_id))
            db.execute(sql.CLAIM_RENEW_MESSAGES, {"expires": expires, "grace": grace,
                                                  "claim_id": claim_id, "queue_id": queue_id,
                                                  "now": now, **backoff_params(backoff)})

    @operation
    def release_claim(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        with self._write() as db:
            now = self.now()
            queue_id = self._queue_id(db, project, queue)
            if queue_id is None:
                return
            db.execute(sql.CLAIM_RELEASE_MESSAGES, {
                "claim_id": claim_id, "queue_id": queue_id, "now": now,
                **backoff_params(backoff)})
            db.execute(sql.CLAIM_DELETE, (claim_id, queue_id))

    @operation
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        with self._write() as db:
            now = self.now()
            queue_id, row = self._claim_state(db, project, queue, message_id, now)
            seq, holder, claim_expires, _ = row
            live_holder = holder if holder is not None and claim_expires > now else None
            refuse_delete(delete_refusal(claim_id, live_holder), message_id, claim_id)
            released = self._message(db.execute(
                sql.MESSAGE_RELEASE, {"due": now + delay, "seq": seq}).fetchone(), now)
            self._record(db, [event_row(project=project, queue=queue, kind=events.RELEASED,
                                        time=now, message_id=message_id, due=released.due,
                                        claim_count=released.claim_count)])
            return released

    # Subscriptions (subscriptions.py)

    @operation
    def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                            options: dict[str, Any]) -> str | None:
        return self._subscriptions.create(project, queue, subscriber, ttl, options)

    @operation
    def get_subscription(self, project: str, queue: str, subscription_id: str
                         ) -> Subscription | None:
        return self._subscriptions.get(project, queue, subscription_id)

    @operation
    def list_subscriptions(self, project: str, queue: str, marker: str | None,
                           limit: int) -> list[Subscription]:
        return self._subscriptions.page(project, queue, marker, limit)

    @operation
    def update_subscription(self, project: str, queue: str, subscription_id: str,
                            change: SubscriptionChange) -> None:
        self._subscriptions.update(project, queue, subscription_id, change)

    @operation
    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        self._subscriptions.delete(project, queue, subscription_id)

    @operation
    def purge_subscriptions(self, project: str, queue: str) -> None:
        self._subscriptions.purge(project, queue)

    @operation
    def subscribed_queues(self) -> list[tuple[str, str]]:
        return self._subscriptions.queues()

    # Long-poll claims

    @operation
    def available_in(self, project: str, queue: str) -> float | None:
        row = self._db().execute(sql.NEXT_AVAILABLE, (project, queue)).fetchone()
        if row is None:
            return None
        return max(0.0, row[0] - self.now())

    # Audit reads

    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        return [tuple(row) for row in self._db().execute(sql.QUEUE_NAMES, (project,))]

    def read_events(self, project: str, queue: str) -> Iterator[events.Event]:
        for row in self.read_event_rows(project, queue):
            yield events.Event(*row)

    def read_event_rows(self, project: str, queue: str) -> Iterator[tuple]:
        return iter(self._db().execute(sql.EVENTS_OF_QUEUE, (project, queue)))

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        db = self._db()
        now = self.now()
        queue_id = self._queue_id(db, project, queue)
        if queue_id is None:
            return
        for row in db.execute(sql.MESSAGES_OF_QUEUE, (queue_id, now)):
            yield self._message(row, now)
