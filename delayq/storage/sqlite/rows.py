"""The rows the SQLite controllers share: a message row as a ``Message``, the queue a
transition needs (found, created, counted against a quota), a message's claim state, the
claimable messages of a queue, and the parameters of an event or a retry policy."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from delayq import errors, events, jsontext
from delayq.message import Message
from delayq.retry import Backoff
from delayq.storage.sqlite import sql

if TYPE_CHECKING:
    from delayq.storage.sqlite.database import Database

SEQ = sql.MESSAGE_COLUMNS.index("seq")
ID = sql.MESSAGE_COLUMNS.index("id")
BODY = sql.MESSAGE_COLUMNS.index("body")
TTL = sql.MESSAGE_COLUMNS.index("ttl")
CREATED = sql.MESSAGE_COLUMNS.index("created")
EXPIRES = sql.MESSAGE_COLUMNS.index("expires")
CLAIM_COUNT = sql.MESSAGE_COLUMNS.index("claim_count")
SOURCE = sql.MESSAGE_COLUMNS.index("source_queue")
NO_EVENT = dict.fromkeys(sql.EVENT_COLUMNS)


def event_params(**fields: Any) -> dict[str, Any]:
    """Parameters of sql.EVENT_INSERT: the given fields, None for the rest."""
    return {**NO_EVENT, **fields}


def backoff_params(backoff: Backoff | None) -> dict[str, Any]:
    """Parameters of the statements that apply a retry policy's waits (``sql._WAIT``)."""
    if backoff is None:
        return {"delays": None, "dead_letter_at": None}
    return {"delays": json.dumps(backoff.delays), "dead_letter_at": backoff.dead_letter_at}


def message(row: tuple, as_of: float) -> Message:
    """The message of a row of ``sql.MESSAGE_COLUMNS``, read at *as_of*."""
    (_seq, id_, body, ttl, created, expires, due, client_id, claim_id, claim_expires,
     claim_count, source_queue, moved_at) = row
    return Message(id=id_, body=jsontext.loads(body), ttl=ttl, created=created,
                   expires=expires, due=due, client_id=client_id, claim_id=claim_id,
                   claim_expires=claim_expires, claim_count=claim_count, as_of=as_of,
                   source_queue=source_queue, moved_at=moved_at)


def queue_id(db: sqlite3.Connection, project: str, name: str) -> int | None:
    """The queue's id, or None when it does not exist."""
    row = db.execute(sql.QUEUE_ID, (project, name)).fetchone()
    return row[0] if row else None


def refuse_queue_past(db: sqlite3.Connection, project: str, quota: int) -> None:
    """Raise QuotaExceeded when *project* holds *quota* queues (0: no limit). Called
    in the creating transaction, which holds the write lock: exact."""
    if quota:
        held = db.execute(sql.QUEUE_COUNT, (project,)).fetchone()[0]
        if held >= quota:
            raise errors.QuotaExceeded.queues(held, quota)


def ensure_queue(db: sqlite3.Connection, project: str, name: str, now: float,
                 quota: int = 0) -> int:
    """The queue's id, the queue created (empty metadata) when missing, refused past
    *quota* (``refuse_queue_past``)."""
    found = queue_id(db, project, name)
    if found is not None:
        return found
    refuse_queue_past(db, project, quota)
    db.execute(sql.QUEUE_INSERT, (project, name, "{}", now))
    created = queue_id(db, project, name)
    assert created is not None  # inserted just now, in this transaction
    return created


def claim_state(db: sqlite3.Connection, project: str, queue: str, message_id: str,
                now: float) -> tuple[int, tuple]:
    """The queue's id and the live message's row ``(seq, claim_id, claim_expires,
    claim_count)``; raises MessageNotFound when either is missing."""
    found = queue_id(db, project, queue)
    row = None
    if found is not None:
        row = db.execute(sql.MESSAGE_CLAIM_STATE, (found, message_id, now)).fetchone()
    if found is None or row is None:
        raise errors.MessageNotFound.with_id(message_id)
    return found, row


def claimable(database: Database, db: sqlite3.Connection, project: str, queue: str,
              queue_id: int, now: float, batch: int) -> Iterator[tuple]:
    """Claimable rows, oldest availability first, skipping (and deleting) expired ones.

    The caller must take each yielded row out of the claimable range (claim, move or
    delete it) before asking for the next, and stop when it has enough; that is what
    makes re-querying in batches safe and cheap. *db* is in a write transaction of
    *database*.
    """
    while True:
        rows = db.execute(sql.CLAIMABLE, (queue_id, now, batch)).fetchall()
        if not rows:
            return
        for row in rows:
            if row[EXPIRES] <= now:
                db.execute(sql.MESSAGE_DELETE, (row[SEQ],))
                database.record(db, [event_params(
                    project=project, queue=queue, kind=events.EXPIRED,
                    time=row[EXPIRES], message_id=row[ID],
                    claim_count=row[CLAIM_COUNT], expires=row[EXPIRES])])
                continue
            yield row
