"""Expiry in the MongoDB driver: removing the expired messages, each reported once, and
the reaper's lease.

Every query compares ``e`` with now, so an expired message is gone for every read, count
and change from the millisecond it expires. It stays stored until a request removes it
and reports it ``expired`` (to ``endings``, and to the trail stamped with the instant it
expired): the background reaper (``Expiry.reap``, every ``reap_interval`` seconds, in the
one process holding the lease in ``locks``), a claim or pop meeting it at the head of its
queue, or a delete by ids. Each removal is a ``find_one_and_delete`` pinned on the
expiry, which returns the document to the one request that deleted it: however they
race, each expired message is reported once. Posts do not reap (``reaps_on_write``): it
would cost each a round trip. The TTL index on ``e`` is only a backstop,
``expired_retention`` after the expiry; what it drops, it drops unseen (no count, no
event), and the audits then infer the expiry from the trail.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pymongo.errors
from pymongo.collection import Collection

from delayq.storage.mongo import layout as lay
from delayq.storage.mongo import tallies
from delayq.storage.mongo.client import unavailable
from delayq.storage.mongo.event_log import EventLog

# Expired messages a reaper pass reads (and then deletes, one by one) at a time.
REAP_BATCH = 500

DeleteEach = Callable[..., list[dict[str, Any]]]


class Expiry:
    """Removes expired messages: a reaper pass over every queue, or those a request met.

    *delete_each* is ``Database.delete_each``: one ``find_one_and_delete`` per filter,
    returning the documents this request deleted; *now_ms* the primary's clock (ms).
    """

    def __init__(self, messages: Collection, locks: Collection, now_ms: Callable[[], int],
                 delete_each: DeleteEach, tally: tallies.Tallies, trail: EventLog) -> None:
        self._messages = messages
        self._locks = locks
        self._now_ms = now_ms
        self._delete_each = delete_each
        self._tallies = tally
        self._trail = trail
        self._holder = f"{socket.gethostname()}:{os.getpid()}"

    def lease(self, seconds: float) -> bool:
        """True when this process may reap for the next *seconds*: it took the lease
        from a holder whose own had ended (or there was none).

        The update matches only a lapsed lease; when it matches nothing, the upsert
        tries to insert the lease's document, which exists: the duplicate key is the
        answer "held". Of processes racing for a lapsed lease, one updates it and the
        others' filters no longer match. A lease needs no clock of its own: every
        process keeps the primary's (``ServerClock``).
        """
        with unavailable:
            now = self._now_ms()
            try:
                self._locks.find_one_and_update(
                    {lay.ID: lay.REAPER_LEASE, lay.EXPIRES: {"$lte": lay.date(now)}},
                    {"$set": {lay.EXPIRES: lay.date(now + round(seconds * 1000)),
                              lay.HOLDER: self._holder}},
                    {lay.ID: 1}, upsert=True)
            except pymongo.errors.DuplicateKeyError:
                return False
        return True

    def reap(self) -> None:
        """Remove every expired message of every queue, oldest expiry first, in batches
        read by the ``expiry`` index; each deleted on its own (``reap_each``), so that
        with claims or other processes' reapers removing the same messages meanwhile,
        each is still reported once in all."""
        while True:
            now = self._now_ms()
            found = list(self._messages.find({lay.EXPIRES: {"$lte": lay.date(now)}},
                                             {lay.ID: 1, lay.PROJECT: 1})
                         .sort(lay.EXPIRY_ORDER).limit(REAP_BATCH).hint(lay.EXPIRY_INDEX))
            gone = self.reap_each(found, now)
            changes: defaultdict[str, tallies.Changes] = defaultdict(tallies.Changes)
            for doc in gone:
                changes[doc[lay.PROJECT]].add(doc[lay.QUEUE], doc, None)
            for project, change in changes.items():
                self._tallies.write(project, change)
            self._trail.record([self._trail.expired(doc[lay.PROJECT], doc[lay.QUEUE], doc)
                                for doc in gone])
            if len(found) < REAP_BATCH:
                return

    def reap_each(self, docs: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
        """Delete each of the message documents *docs* that has expired at *now*; the
        documents, as deleted, of those this request deleted (the caller reports them).

        Pinned on the expiry: of a claim, a pop, a delete by id and reapers removing the
        same message, only the one that deleted it gets it back, and reports it.
        """
        return self._delete_each(
            [{lay.ID: doc[lay.ID], lay.PROJECT: doc[lay.PROJECT],
              lay.EXPIRES: {"$lte": lay.date(now)}} for doc in docs], lay.PROJECT, lay.QUEUE)
