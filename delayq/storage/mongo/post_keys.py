"""The MongoDB driver's idempotency keys (``delayq.idempotency``), in the ``post_keys``
collection (``layout.py``).

A keyed post writes its key and its messages in one multi-document transaction, on the
primary (a replica set or a sharded cluster: delayq needs one anyway): the key document,
the queue's sequence numbers and the messages commit together or not at all, whatever
fails or dies part way. Two posts under one key racing each insert the key document: the
unique index lets one commit, and the other's transaction fails on it (retried by
pymongo while the first is still open) and stores nothing. Tallies and events follow
the commit, as for any post (``tallies.py``, ``trail.py``). A post without a key takes
no transaction and never reads this collection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymongo.errors
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from delayq.idempotency import PostKey, StoredKey
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import snapshot_transaction

# The first sequence number of a post → its message documents.
MakeMessages = Callable[[int], list[dict[str, Any]]]
# Reserve a post's sequence numbers in the session's transaction (creating the queue,
# checking the quotas: ``quotas.py``) → the first.
Reserve = Callable[[ClientSession], int]


class PostKeys:
    """The keys of every queue; *messages* is the messages collection a keyed post
    inserts into."""

    def __init__(self, client: MongoClient, collection: Collection, messages: Collection
                 ) -> None:
        self._client = client
        self._collection = collection
        self._messages = messages

    @staticmethod
    def _named(project: str, queue: str, key: str) -> dict[str, Any]:
        return {lay.PROJECT: project, lay.QUEUE: queue, lay.POST_KEY: key}

    def kept(self, project: str, queue: str, key: str, now: int) -> StoredKey | None:
        """What the queue keeps of *key* at *now* (ms), or None."""
        doc = self._collection.find_one(
            {**self._named(project, queue, key), lay.FORGET_AT: {"$gt": lay.date(now)}})
        return None if doc is None else StoredKey(doc[lay.POST_DIGEST], doc[lay.POST_IDS])

    def post(self, project: str, queue: str, key: PostKey, now: int, reserve: Reserve,
             make: MakeMessages) -> list[dict[str, Any]] | StoredKey:
        """Store *key* and the messages *make* gives from the first sequence number
        *reserve* gives, in one transaction; their documents. What is kept instead when
        a post under the same key committed first.
        """
        named = self._named(project, queue, key.key)

        def write(session: ClientSession) -> list[dict[str, Any]]:
            # A key whose window is over may still be stored (the TTL monitor runs once
            # a minute): it gives way.
            self._collection.delete_one({**named, lay.FORGET_AT: {"$lte": lay.date(now)}},
                                        session=session)
            docs = make(reserve(session))
            self._collection.insert_one({
                **named, lay.POST_DIGEST: key.digest,
                lay.POST_IDS: [str(doc[lay.ID]) for doc in docs],
                lay.FORGET_AT: lay.date(now + key.window * 1000)}, session=session)
            self._messages.insert_many(docs, ordered=True, session=session)
            return docs

        try:
            return snapshot_transaction(self._client, write, self._messages.write_concern)
        except pymongo.errors.DuplicateKeyError:
            kept = self.kept(project, queue, key.key, now)
            if kept is None:  # committed, then its window ended at once: not for us
                raise
            return kept

    def forget(self, project: str, queue: str) -> None:
        """Forget every key of the queue (it is purged or deleted)."""
        self._collection.delete_many({lay.PROJECT: project, lay.QUEUE: queue})
