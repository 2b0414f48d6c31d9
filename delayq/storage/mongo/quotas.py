"""The MongoDB driver's quotas (``[quotas]``): each checked in the multi-document
transaction that makes the write it admits, on the primary of the replica set (or
sharded cluster) delayq needs anyway.

What makes a check and its write one atomic step is how MongoDB runs transactions: a
transaction reads one snapshot, taken at its first operation, and writing a document
that another write changed after that snapshot, or that another open transaction has
written, fails it with a write conflict (``TransientTransactionError``), which
``with_transaction`` answers by running it again from the start, on a new snapshot.
Two transactions that each read a count and then write one same document therefore
never both commit on counts that miss each other's write: the second to write it runs
again and counts again. Each quota has such a document:

- ``max_queues_per_project``: a creation under the quota finds the queue missing,
  counts the project's queues and then increments ``v`` of the project's document in
  ``projects`` (``layout.py``; its only use is to be written), before it inserts the
  queue. A queue deleted meanwhile only makes the count high for that instant (the
  creation comes before the deletion).
- ``max_messages_per_queue``: a post under the quota counts the queue's live messages
  (expiry ahead of now: expired ones do not count, reaped or not) and then reserves its
  sequence numbers in the queue's document (``Database.allocate``), before it
  inserts them. Every write that adds messages to a queue reserves their positions
  there first: posts, dead-letter moves and redrives.

Writes without a quota (dead-letter moves, redrives back to their source, posts with
the quota off) take no transaction: they are never refused, and whatever they add
counts as coming after the quota'd write they race. A refusal writes nothing: its
transaction aborts. Nothing is counted apart from the documents themselves, so no
failure or crash between steps leaves a count wrong: there is no counter to settle.

The message count reads at most the quota's worth of the queue's documents when the
post fits (``count_documents`` with a limit), and counts them all only to word a
refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pymongo.errors
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from delayq import errors
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import snapshot_transaction

T = TypeVar("T")


class Quotas:
    """Quota checks inside a transaction: *projects* is the ``projects`` collection,
    *queues* and *messages* the collections counted."""

    def __init__(self, client: MongoClient, projects: Collection, queues: Collection,
                 messages: Collection) -> None:
        self._client = client
        self._projects = projects
        self._queues = queues
        self._messages = messages

    def run(self, write: Callable[[ClientSession], T]) -> T:
        """``write(session)`` as one transaction on a snapshot, committed as the
        messages are written (``write_concern``); what it returns.

        Run a second time when it failed on a duplicate key: a queue another request
        created after the snapshot, which servers report as a write conflict (run again
        by ``with_transaction``) or, some, as a duplicate key. The new snapshot has it.
        """
        for attempt in (1, 2):
            try:
                return snapshot_transaction(self._client, write,
                                            self._messages.write_concern)
            except pymongo.errors.DuplicateKeyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def admit_queue(self, project: str, queue: str, quota: int,
                    session: ClientSession) -> bool:
        """Whether the queue exists already, in *session*'s transaction; when it does
        not, raise QuotaExceeded if *project* holds *quota* queues, else mark the
        project's document so that creations racing this one conflict with it.
        """
        where = {lay.PROJECT: project, lay.QUEUE: queue}
        if self._queues.find_one(where, {lay.ID: 1}, session=session) is not None:
            return True
        held = self._queues.count_documents({lay.PROJECT: project}, session=session)
        if held >= quota:
            raise errors.QuotaExceeded.queues(held, quota)
        self._projects.update_one({lay.ID: project}, {"$inc": {lay.VERSION: 1}},
                                  upsert=True, session=session)
        return False

    def admit_messages(self, project: str, queue: str, posted: int, quota: int, now: int,
                       session: ClientSession) -> None:
        """Raise QuotaExceeded when *posted* messages more would take the queue past
        *quota* live messages at *now* (ms), counted in *session*'s transaction, which
        then reserves positions in the queue's document (``Database.allocate``)."""
        live = {lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)}}
        room = quota - posted
        if room >= 0 and self._messages.count_documents(
                live, limit=room + 1, session=session) <= room:
            return
        held = self._messages.count_documents(live, session=session)
        raise errors.QuotaExceeded.messages(queue, held, posted, quota)
