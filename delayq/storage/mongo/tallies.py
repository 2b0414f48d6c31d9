"""The MongoDB driver's tallies: the counts behind the /metrics gauges
(``delayq.tallies``), kept in the ``tallies`` collection (``layout.py``), so
``queue_counts`` reads at most ``delayq.tallies.LEVELS`` small documents and no message,
whatever a queue holds.

Each transition gives its messages' documents before and after (``Changes.add``) as the
driver knows them atomically: the state a pinned filter matched, or what a
``find_one_and_*`` returned; so concurrent requests keep the counts exact. Expiry needs no
write: an instant passing leaves the count by itself. A request's changes are summed and
written in one unordered bulk of ``$inc`` upserts, one per page touched, *after* the
messages' write: no transaction holds both. A crash, or MongoDB failing, in between loses
that request's deltas and only them; each is confined to its messages' own instants, all
at or before their expiry, so the error leaves the counts at the latest when those
messages would have expired (a count only sums instants after now). A lost write is
logged, not answered with 503: the messages' change stands, and a client retrying would
make it again. A purge or queue deletion drops the queue's pages after its messages; a
write to the queue racing it can leave its messages miscounted in the same bounded way.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import pymongo.errors
from pymongo import UpdateOne
from pymongo.collection import Collection

from delayq import tallies
from delayq.queue import QueueCounts
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import is_unavailable

LOG = logging.getLogger(__name__)

DUPLICATE_KEY = 11000

PAGE_BLOCKS = 1 << tallies.BITS
# The last level's page 0 runs to 2^48 ms (year 10895), past what a BSON date written by
# pymongo can hold: it is the only page of that level any message reaches, and it stays.
LAST_LEVEL = tallies.LEVELS - 1


def seconds(ms: int) -> float:
    """POSIX seconds that ``tallies.ms`` maps back to exactly *ms*.

    The middle of the millisecond: ``ms / 1000 * 1000`` falls a hair short of *ms* for
    about one value in 200 and would be truncated to the millisecond before, counting a
    message a millisecond off ``queue_stats``.
    """
    return (ms + 0.5) / 1000


def marks(doc: dict[str, Any]) -> tallies.Marks:
    """The tally marks of a message document (``layout.TALLY_FIELDS`` at least)."""
    claim_expires = doc.get(lay.CLAIM_EXPIRES)
    return tallies.Marks(
        created=seconds(lay.ms(doc[lay.CREATED])), due=seconds(lay.due_ms(doc)),
        expires=seconds(lay.ms(doc[lay.EXPIRES])),
        claim_expires=seconds(lay.ms(claim_expires)) if claim_expires is not None else 0.0)


def key(kind: int, block: int) -> str:
    """The field of ``layout.TALLY`` counting *kind* in *block* (within its page)."""
    return f"{kind}_{block % PAGE_BLOCKS}"


class Changes:
    """The tally changes of one request, per queue."""

    def __init__(self) -> None:
        self._queues: defaultdict[str, list[Counter[tallies.Block]]] = defaultdict(list)

    def add(self, queue: str, before: dict[str, Any] | None,
            after: dict[str, Any] | None) -> None:
        """A message of *queue* went from document *before* to *after* (None: absent)."""
        self._queues[queue].append(tallies.change(
            marks(before) if before is not None else None,
            marks(after) if after is not None else None))

    def ops(self, project: str) -> list[UpdateOne]:
        """One ``$inc`` upsert per page the changes touch (none when they cancel out)."""
        found = []
        for queue, changes in self._queues.items():
            pages: defaultdict[tuple[int, int], dict[str, int]] = defaultdict(dict)
            for (kind, level, block), n in tallies.total(changes).items():
                pages[(level, tallies.page(level, block))][f"{lay.TALLY}.{key(kind, block)}"] = n
            for (level, number), deltas in pages.items():
                update: dict[str, Any] = {"$inc": deltas}
                if level != LAST_LEVEL:
                    forget = tallies.page_end(level, number) + tallies.HINDSIGHT
                    update["$setOnInsert"] = {lay.FORGET_AT: lay.date(lay.to_ms(forget))}
                found.append(UpdateOne(page_id(project, queue, level, number), update,
                                       upsert=True))
        return found


def page_id(project: str, queue: str, level: int, number: int) -> dict[str, Any]:
    """The filter of one page of a queue's tally (unique: ``layout.PAGE_INDEX``)."""
    return {lay.PROJECT: project, lay.QUEUE: queue, lay.LEVEL: level, lay.PAGE: number}


def reading(project: str, queue: str, now: int) -> dict[str, Any]:
    """The filter of the pages a count at *now* (ms) reads: one per level."""
    return {lay.PROJECT: project, lay.QUEUE: queue,
            "$or": [{lay.LEVEL: level, lay.PAGE: number}
                    for level, number in tallies.reading(seconds(now))]}


def counts(docs: Iterable[dict[str, Any]], now: int) -> QueueCounts:
    """The queue's counts at *now* (ms) from the page documents ``reading`` found."""
    tally: Counter[tallies.Block] = Counter()
    for doc in docs:
        level, first = doc[lay.LEVEL], doc[lay.PAGE] * PAGE_BLOCKS
        for name, n in doc.get(lay.TALLY, {}).items():
            kind, _, block = name.partition("_")
            tally[(int(kind), level, first + int(block))] += n
    return tallies.counts(tally, seconds(now))


class Tallies:
    """The ``tallies`` collection: a request's changes written, a queue's counts read."""

    def __init__(self, collection: Collection) -> None:
        self._collection = collection

    def write(self, project: str, changes: Changes) -> None:
        """Apply a request's tally changes, once the messages' writes they follow are
        done; MongoDB failing now loses them (logged), and the request goes on."""
        ops = changes.ops(project)
        for attempt in (1, 2):
            if not ops:
                return
            try:
                self._collection.bulk_write(ops, ordered=False)
                return
            except pymongo.errors.BulkWriteError as exc:
                # Two first upserts of one page: the loser did not apply, and finds the
                # page there the second time (servers from 4.2 retry this themselves).
                failed = (exc.details or {}).get("writeErrors", ())
                if attempt == 2 or not failed or any(
                        err.get("code") != DUPLICATE_KEY for err in failed):
                    if not is_unavailable(exc):
                        raise
                    _log_lost(exc)
                    return
                ops = [ops[err["index"]] for err in failed]
            except pymongo.errors.PyMongoError as exc:
                if not is_unavailable(exc):
                    raise
                _log_lost(exc)
                return

    def removed(self, project: str, queue: str, docs: list[dict[str, Any]]) -> None:
        """Count the message documents *docs* of *queue*, as deleted, gone."""
        changes = Changes()
        for doc in docs:
            changes.add(queue, doc, None)
        self.write(project, changes)

    def read(self, project: str, queue: str, now: int) -> QueueCounts:
        """The queue's counts at *now* (ms): one read of a page per level."""
        return counts(
            self._collection.find(reading(project, queue, now),
                                  {lay.LEVEL: 1, lay.PAGE: 1, lay.TALLY: 1})
            .hint(lay.PAGE_INDEX),
            now)

    def drop(self, project: str, queue: str) -> None:
        """Delete every page of the queue's tally (a purge or queue deletion)."""
        self._collection.delete_many({lay.PROJECT: project, lay.QUEUE: queue})


def _log_lost(exc: pymongo.errors.PyMongoError) -> None:
    LOG.warning("A change of the /metrics gauges' tallies is lost: MongoDB failed "
                "after the messages' write it follows (the gauges are off until "
                "those messages expire): %s", exc)
