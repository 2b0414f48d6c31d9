"""The SQLite driver's tallies (``delayq.tallies``): kept by triggers in the transaction
of every change to ``messages`` (``sql.py`` spells ``tallies.instants`` in SQL), read by
range, and forgotten in batches once in the past."""

from __future__ import annotations

import sqlite3

from delayq import tallies
from delayq.queue import QueueCounts
from delayq.storage.sqlite import sql


def ranges(now: float, kinds: tuple[int, ...] = tallies.KINDS) -> dict[str, int]:
    """Parameters of ``sql.TALLIES_AFTER`` (or of a query of some *kinds*, made by
    ``sql.tallies_after``): ``tallies.ranges`` of each kind."""
    params = {}
    for level, start, end in tallies.ranges(now):
        for kind in kinds:
            params[f"s{kind}_{level}"] = start
            if end is not None:
                params[f"e{kind}_{level}"] = end
    return params


def install(db: sqlite3.Connection) -> None:
    """Create the tallies and their triggers, counting the messages already stored,
    once per database; *db* is in a write transaction, so a worker starting alongside
    neither counts a message twice nor misses one. A database whose triggers predate
    the ``held`` term has them replaced."""
    db.execute(sql.SCHEMA_MARKS)
    if db.execute(sql.TALLIES_MARKED, (sql.TALLY_TRIGGERS_MARK,)).fetchone():
        return
    if db.execute(sql.TALLIES_MARKED, (sql.TALLIES_MARK,)).fetchone():
        for statement in sql.TALLY_TRIGGERS_DROP:
            db.execute(statement)
    else:
        for statement in sql.TALLY_SCHEMA:
            db.execute(statement)
        db.execute(sql.TALLIES_BACKFILL)
        db.execute(sql.TALLIES_MARK_SET, (sql.TALLIES_MARK,))
    for statement in sql.TALLY_TRIGGERS:
        db.execute(statement)
    db.execute(sql.TALLIES_MARK_SET, (sql.TALLY_TRIGGERS_MARK,))


def counts(db: sqlite3.Connection, queue_id: int, now: float) -> QueueCounts:
    """The queue's counts at *now*: O(log n), to the millisecond (a message due, or a
    claim ending, later in the current millisecond already counts as free)."""
    after = db.execute(sql.TALLIES_AFTER, {"queue_id": queue_id, **ranges(now)}).fetchone()
    # The query's columns are the kinds in order (sql.tallies_after).
    return tallies.from_sums(dict(zip(tallies.KINDS, after, strict=True)))


def live(db: sqlite3.Connection, queue_id: int, now: float) -> int:
    """The queue's live messages at *now*."""
    return db.execute(sql.TALLIES_LIVE_AFTER, {
        "queue_id": queue_id, **ranges(now, (tallies.LIVE,))}).fetchone()[0]


def forget(db: sqlite3.Connection, now: float, batch: int) -> None:
    """Remove up to *batch* tally blocks per level that ended an hour or more before
    *now*: no count reads them again (the hour allows for a clock stepping back)."""
    db.execute(sql.TALLIES_FORGET, {
        "limit": batch,
        **{f"b{level}": block for level, block in tallies.forgettable(now).items()}})
