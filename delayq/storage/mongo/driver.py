"""The MongoDB driver: the storage interface (``delayq.storage.base``) on MongoDB.

MongoDB updates one document atomically and re-checks an update's filter against the
document it writes, so every transition here is a set of single-document updates whose
filters pin the state the driver read (claims, dead-letter moves and redrives:
``claimer.py``).

- A delete by ids, the end of a pop, a renewal's and a release's changes to the claimed
  messages (``claims.py``) are one ``find_one_and_delete`` or ``find_one_and_update`` per
  message: each returns the state it changed, which the tallies and the trail need, and
  which a multi-document write or a bulk of them cannot tell when a concurrent request
  changed some of the same messages. That costs one round trip per message (at most
  ``max_messages_per_claim_or_pop`` or ``max_messages_per_page``).
- Posts, claims, dead-letter moves, and the writes above are retryable writes (inserts,
  single-document updates and deletes, and bulk writes of them), so a failover in the
  middle of a claim is retried by pymongo, not doubled. Purging or deleting a queue
  (multi-document deletes) is not retryable: interrupted, it answers 503, and repeating
  the request completes it.

Time is the primary's clock (``delayq.storage.clock``), so API hosts whose own clocks are
skewed agree on when a message is due.

Each other concern has a module of its own: ``layout.py`` (documents, fields, index
definitions), ``claimer.py`` (a claim's bulk write and what it won), ``claims.py`` (a
claim once made: read, renewed, released, one message handed back), ``tallies.py`` (the
/metrics gauges' counts), ``event_log.py`` (the event trail), ``expiry.py`` (removing expired
messages, the reaper's lease), ``subscriptions.py`` (the webhook subscriptions),
``indexes.py`` (creating the indexes), ``post_keys.py`` (idempotent posts),
``quotas.py`` (the quotas, each checked in the transaction of the write it admits) and
``client.py`` (the pymongo client, and which failures are a 503).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pymongo.errors
from oslo_config import cfg
from pymongo import ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from delayq import errors, events, validation
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.conf import events_settings
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import operation
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats
from delayq.retry import Backoff
from delayq.storage import base
from delayq.storage.clock import ServerClock, timed
from delayq.storage.mongo import claimer, claims, tallies
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import (
    NAME,
    make_client,
    parse_write_concern,
    unavailable,
)
from delayq.storage.mongo.expiry import Expiry
from delayq.storage.mongo.indexes import Indexes, backend_call
from delayq.storage.mongo.options import GROUP
from delayq.storage.mongo.post_keys import PostKeys
from delayq.storage.mongo.quotas import Quotas
from delayq.storage.mongo.subscriptions import Subscriptions
from delayq.storage.mongo.event_log import EventLog
from delayq.subscription import Subscription, SubscriptionChange

LOG = logging.getLogger(__name__)

# A pop marks its messages with a claim of this many milliseconds before deleting them: a
# process dying in between leaves them claimable again after it, not lost.
POP_LEASE_MS = 60_000

class Driver(base.Driver):
    """Queues, messages and claims in a MongoDB replica set or sharded cluster."""

    name = NAME
    # Requests do not reap as they write (a post would pay a round trip for it): the
    # reaper does, and claims and pops remove the expired messages they meet.
    reaps_on_write = False

    def __init__(self, client: pymongo.MongoClient, database: str = "delayq", *,
                 write_concern: int | str = "majority", journal: bool = True,
                 write_timeout: float = 10.0, clock_sync_interval: float = 30.0,
                 reap_interval: int = 0, expired_retention: int = 3600,
                 clock: Callable[[], float] | None = None, owns_client: bool = False,
                 events_settings: events.Settings = events.ON,
                 endings: base.Endings = base.ignore_endings) -> None:
        """*clock* replaces the primary's clock (tests); *owns_client* closes *client*
        with the driver; *events_settings* turns the event trail on or off.

        *reap_interval* seconds apart, a background thread reaps every queue (0: none;
        tests call ``reap`` themselves); *expired_retention* is how long MongoDB keeps
        an expired message before its TTL monitor drops it unseen (``layout.py``).
        """
        super().__init__(endings=endings)
        self._client = client
        self._owns_client = owns_client
        concern = WriteConcern(w=write_concern, j=journal,
                               wtimeout=int(write_timeout * 1000) or None)
        db = client.get_database(database, write_concern=concern,
                                 read_preference=ReadPreference.PRIMARY)
        self._queues: Collection = db[lay.QUEUES]
        self._messages: Collection = db[lay.MESSAGES]
        self._claim_docs: Collection = db[lay.CLAIMS]
        # The clock's write needs no replication: waiting for it would skew the reading.
        self._clock_collection = db.get_collection(lay.CLOCK, write_concern=WriteConcern(w=1))
        self._clock = clock or ServerClock(timed(self._server_time_ms),
                                            clock_sync_interval)
        self._tallies = tallies.Tallies(db[lay.TALLIES])
        self._trail = EventLog(db[lay.EVENTS], events_settings, endings)
        self._expiry = Expiry(self._messages, db[lay.LOCKS], self._now_ms, self._delete_each,
                              self._tallies, self._trail)
        self._claimer = claimer.Claimer(self._messages, self._allocate, self._expiry.reap_each)
        self._claims = claims.Claims(self._messages, self._claim_docs, self._tallies,
                                     self._trail)
        self._subscriptions = Subscriptions(db[lay.SUBSCRIPTIONS])
        self._post_keys = PostKeys(client, db[lay.POST_KEYS], self._messages)
        self._quotas = Quotas(client, db[lay.PROJECTS], self._queues, self._messages)
        self._indexes = Indexes(db, expired_retention, self._trail.enabled)
        try:
            with unavailable:
                self._indexes.ensure()
        except errors.StorageUnavailable as exc:
            LOG.warning("%s; creating the indexes at the next request.", exc.description)
        self.start_reaper(reap_interval, self._expiry.lease)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        client = make_client(group.uri, server_selection_timeout=group.server_selection_timeout,
                             connect_timeout=group.connect_timeout,
                             socket_timeout=group.socket_timeout,
                             max_pool_size=group.max_pool_size)
        return cls(client, group.database, write_concern=parse_write_concern(group.write_concern),
                   journal=group.journal, write_timeout=group.write_timeout,
                   clock_sync_interval=group.clock_sync_interval,
                   reap_interval=group.reap_interval,
                   expired_retention=group.expired_retention, owns_client=True,
                   events_settings=events_settings(conf), endings=endings)

    # Time

    def _server_time_ms(self) -> int:
        doc = self._clock_collection.find_one_and_update(
            {lay.ID: lay.CLOCK}, {"$currentDate": {lay.CLOCK_TIME: True}}, upsert=True,
            return_document=ReturnDocument.AFTER)
        return lay.ms(doc[lay.CLOCK_TIME])

    @operation
    def now(self) -> float:
        with unavailable:
            return lay.to_ms(self._clock()) / 1000

    def _now_ms(self) -> int:
        return lay.to_ms(self._clock())

    @operation
    def ping(self) -> bool:
        try:
            self._client.admin.command("ping")
        except pymongo.errors.PyMongoError:
            return False
        return True

    def close(self) -> None:
        # The reaper first: a pass under way finishes before the client goes.
        self.stop_reaper()
        if self._owns_client:
            self._client.close()

    # Expiry: expired messages are invisible at once; the reaper removes and reports them

    @operation
    @backend_call
    def reap(self) -> None:
        """One pass of the reaper over every queue (``Expiry.reap``)."""
        self._expiry.reap()

    # Queues

    @operation
    @backend_call
    def create_queue(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        """Under *queue_quota*, in a transaction that counts the project's queues
        (``quotas.py``)."""
        doc = {lay.PROJECT: project, lay.QUEUE: name, lay.METADATA: lay.encode_json(metadata),
               lay.SEQ: 0, lay.CREATED: lay.date(self._now_ms())}

        def create(session: ClientSession | None = None) -> bool:
            if queue_quota and self._quotas.admit_queue(project, name, queue_quota, session):
                return False
            self._queues.insert_one(doc, session=session)
            return True

        try:
            return self._quotas.run(create) if queue_quota else create()
        except pymongo.errors.DuplicateKeyError:
            return False

    @operation
    @backend_call
    def get_queue(self, project: str, name: str) -> dict[str, Any] | None:
        doc = self._queues.find_one({lay.PROJECT: project, lay.QUEUE: name},
                                    {lay.METADATA: 1, lay.ID: 0})
        return json.loads(doc[lay.METADATA]) if doc else None

    @operation
    @backend_call
    def set_queue_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        result = self._queues.update_one({lay.PROJECT: project, lay.QUEUE: name},
                                         {"$set": {lay.METADATA: lay.encode_json(metadata)}})
        if result.matched_count == 0:
            raise errors.QueueNotFound.named(name)

    @operation
    @backend_call
    def delete_queue(self, project: str, name: str) -> None:
        now = self._now_ms()
        where = {lay.PROJECT: project, lay.QUEUE: name}
        # Messages first: a crash part way leaves the queue, and deleting it again
        # finishes the job. The second sweep takes what a post racing the delete stored.
        gone = self._messages.delete_many(where).deleted_count
        self._claim_docs.delete_many(where)
        existed = self._queues.delete_one(where).deleted_count
        gone += self._messages.delete_many(where).deleted_count
        self._post_keys.forget(project, name)
        self._tallies.drop(project, name)
        if existed or gone:  # deleting an absent queue changes nothing
            self._trail.purged(project, name, now)

    @operation
    @backend_call
    def purge_queue(self, project: str, name: str) -> None:
        now = self._now_ms()
        where = {lay.PROJECT: project, lay.QUEUE: name}
        gone = self._messages.delete_many(where).deleted_count
        self._claim_docs.delete_many(where)
        self._post_keys.forget(project, name)
        self._tallies.drop(project, name)
        # An empty queue is purged too, an absent one not: the queue is looked up only
        # when the trail needs to know.
        if self._trail.enabled and (gone or self._queues.find_one(where, {lay.ID: 1})):
            self._trail.purged(project, name, now)

    @operation
    @backend_call
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> list[tuple[str, dict[str, Any]]]:
        cursor = self._queues.find(
            {lay.PROJECT: project, lay.QUEUE: {"$gt": marker or ""}},
            {lay.QUEUE: 1, lay.METADATA: 1, lay.ID: 0}
        ).sort(lay.QUEUE, pymongo.ASCENDING).limit(limit)
        return [(doc[lay.QUEUE], json.loads(doc[lay.METADATA])) for doc in cursor]

    @operation
    @backend_call
    def count_queues(self, project: str) -> int:
        return self._queues.count_documents({lay.PROJECT: project})

    @operation
    @backend_call
    def queue_stats(self, project: str, name: str) -> QueueStats:
        now = self._now_ms()
        live = {lay.PROJECT: project, lay.QUEUE: name, lay.EXPIRES: {"$gt": lay.date(now)}}
        total = self._messages.count_documents(live)
        if not total:
            return QueueStats(0, 0, 0, None, None)
        # A live claim's message is claimed whatever its due time (a retry policy's wait).
        delayed = self._messages.count_documents(
            {**live, lay.DUE: {"$gt": lay.date(now)}, **lay.not_held(now)})
        claimed = self._messages.count_documents(
            {**live, lay.CLAIM_EXPIRES: {"$gt": lay.date(now)}})
        ends = []
        for direction in (pymongo.ASCENDING, pymongo.DESCENDING):
            doc = self._messages.find_one(live, sort=[(lay.SEQ, direction)])
            ends.append(lay.message(doc, now) if doc else None)
        return QueueStats(free=max(0, total - delayed - claimed), claimed=claimed,
                          delayed=delayed, oldest=ends[0], newest=ends[1])

    @operation
    @backend_call
    def queue_counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (``tallies.py``): one read of at most ``delayq.tallies.LEVELS``
        documents, however many messages the queue holds."""
        return self._tallies.read(project, name, self._now_ms())

    def _allocate(self, project: str, queue: str, count: int, now: int,
                  session: ClientSession | None = None, queue_quota: int = 0) -> int:
        """Reserve *count* sequence numbers of the queue, creating it if needed; the first
        (within *session*'s transaction, when given).

        Creating it is refused past *queue_quota* (``Quotas.admit_queue``): in
        *session*'s transaction, or else in one of its own, taken only when the queue
        is missing.

        Two first posts to a new queue may both try to insert it; MongoDB retries such an
        upsert itself, and so does this for servers that don't (outside a transaction:
        an error ends one; ``Quotas.run`` runs it again).
        """
        where = {lay.PROJECT: project, lay.QUEUE: queue}
        if queue_quota and session is None:
            doc = self._queues.find_one_and_update(
                where, {"$inc": {lay.SEQ: count}}, {lay.SEQ: 1},
                return_document=ReturnDocument.AFTER)
            if doc is not None:
                return doc[lay.SEQ] - count + 1
            return self._quotas.run(lambda session: self._allocate(
                project, queue, count, now, session, queue_quota))
        if queue_quota:
            self._quotas.admit_queue(project, queue, queue_quota, session)
        update = {"$inc": {lay.SEQ: count},
                  "$setOnInsert": {lay.METADATA: "{}", lay.CREATED: lay.date(now)}}
        # In a transaction an error ends it: no second attempt there.
        for attempt in (1, 2) if session is None else (2,):
            try:
                doc = self._queues.find_one_and_update(
                    where, update, {lay.SEQ: 1}, upsert=True,
                    return_document=ReturnDocument.AFTER, session=session)
                return doc[lay.SEQ] - count + 1
            except pymongo.errors.DuplicateKeyError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # Messages

    @operation
    @backend_call
    def post_messages(self, project: str, queue: str, client_id: str,
                      messages: list[NewMessage], *, metadata_token: Any = None,
                      message_quota: int = 0, queue_quota: int = 0,
                      key: PostKey | None = None) -> list[str]:
        """With a key, one transaction stores the key and the messages (``post_keys.py``);
        with a message quota, one transaction counts the queue and stores them
        (``quotas.py``); both checked there, as is the queue quota, in that order."""
        now = self._now_ms()
        if key is not None:
            kept = self._post_keys.kept(project, queue, key.key, now)
            if kept is not None:
                raise KeyTaken(kept)

        def make(first: int) -> list[dict[str, Any]]:
            return [lay.new_message(project, queue, first + i, m.body, m.ttl, m.delay,
                                    client_id, now)
                    for i, m in enumerate(messages)]

        def reserve(session: ClientSession) -> int:
            """The first sequence number, in *session*'s transaction, past the quotas."""
            if message_quota:
                self._quotas.admit_messages(project, queue, len(messages), message_quota,
                                            now, session)
            return self._allocate(project, queue, len(messages), now, session, queue_quota)

        def insert(session: ClientSession) -> list[dict[str, Any]]:
            docs = make(reserve(session))
            self._messages.insert_many(docs, ordered=True, session=session)
            return docs

        changes = tallies.Changes()
        if key is not None:
            docs = self._post_keys.post(project, queue, key, now, reserve, make)
            if isinstance(docs, StoredKey):
                raise KeyTaken(docs)
            return self._posted(project, queue, now, docs, changes)
        if message_quota:
            return self._posted(project, queue, now, self._quotas.run(insert), changes)
        # The queue quota alone needs a transaction only to create the queue.
        docs = make(self._allocate(project, queue, len(messages), now, queue_quota=queue_quota))
        try:
            self._messages.insert_many(docs, ordered=True)
        except pymongo.errors.BulkWriteError as exc:
            # In order: the first nInserted are stored, and count, though the post fails.
            for doc in docs[:(exc.details or {}).get("nInserted", 0)]:
                changes.add(queue, None, doc)
            self._tallies.write(project, changes)
            raise
        return self._posted(project, queue, now, docs, changes)

    def _posted(self, project: str, queue: str, now: int, docs: list[dict[str, Any]],
                changes: tallies.Changes) -> list[str]:
        """Count and record the stored message documents *docs* of a post; their ids."""
        for doc in docs:
            changes.add(queue, None, doc)
        self._tallies.write(project, changes)
        self._trail.record([
            self._trail.event(project, queue, events.POSTED, now, message_id=doc[lay.ID],
                              due=lay.due_ms(doc), ttl=doc[lay.TTL],
                              expires=lay.ms(doc[lay.EXPIRES]))
            for doc in docs])
        return [str(doc[lay.ID]) for doc in docs]

    @operation
    @backend_call
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> tuple[list[Message], str | None]:
        after = validation.sequence_marker(marker)
        now = self._now_ms()
        query: dict[str, Any] = {lay.PROJECT: project, lay.QUEUE: queue, lay.SEQ: {"$gt": after},
                                 lay.EXPIRES: {"$gt": lay.date(now)}}
        if exclude_client is not None:
            query[lay.CLIENT] = {"$ne": exclude_client}
        if not include_claimed:
            query.update(lay.not_held(now))
        if not include_delayed:
            due = {lay.DUE: {"$not": {"$gt": lay.date(now)}}}
            # A live claim's message is claimed, not delayed, whatever its due time.
            query.update(due if not include_claimed else
                         {"$or": [due, {lay.CLAIM_EXPIRES: {"$gt": lay.date(now)}}]})
        docs = list(self._messages.find(query).sort(lay.POST_ORDER).limit(limit)
                    .hint(lay.LISTING_INDEX))
        next_marker = str(docs[-1][lay.SEQ]) if docs else None
        return [lay.message(doc, now) for doc in docs], next_marker

    @operation
    @backend_call
    def get_messages(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        now = self._now_ms()
        docs = self._messages.find(
            {lay.ID: {"$in": [lay.object_id(i) for i in ids]}, lay.PROJECT: project,
             lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)}}).sort(lay.POST_ORDER)
        return [lay.message(doc, now) for doc in docs]

    @operation
    @backend_call
    def delete_message(self, project: str, queue: str, message_id: str,
                       claim_id: str | None) -> None:
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        while True:
            now = self._now_ms()
            if claim_id is not None:
                held = {**claims.held(project, queue, lay.object_id(claim_id), now), **where}
                deleted = self._messages.find_one_and_delete(
                    held, {lay.CLAIM: 1, lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS})
                if deleted is not None:
                    self._tallies.removed(project, queue, [deleted])
                    self._trail.record([self._trail.deleted(project, queue, now, deleted,
                                                            deleted[lay.CLAIM])])
                    return
            doc = self._messages.find_one({**where, lay.EXPIRES: {"$gt": lay.date(now)}},
                                          {lay.CLAIM: 1, lay.CLAIM_EXPIRES: 1, lay.AVAILABLE: 1})
            if doc is None:
                return
            holder = doc.get(lay.CLAIM)
            live = holder is not None and lay.ms(doc[lay.CLAIM_EXPIRES]) > now
            refuse_delete(delete_refusal(claim_id, str(holder) if live else None),
                          message_id, claim_id)
            # Unclaimed as read: delete it unless a claim took it meanwhile (a claim
            # always moves its availability), else look again.
            if claim_id is None:
                deleted = self._messages.find_one_and_delete(
                    {**where, lay.AVAILABLE: doc[lay.AVAILABLE]},
                    {lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS})
                if deleted is not None:
                    self._tallies.removed(project, queue, [deleted])
                    self._trail.record([self._trail.deleted(project, queue, now, deleted)])
                    return

    @operation
    @backend_call
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> None:
        now = self._now_ms()
        deleted = self._delete_each(
            [{lay.ID: message_id, lay.PROJECT: project, lay.QUEUE: queue}
             for message_id in dict.fromkeys(lay.object_id(i) for i in ids)])
        self._tallies.removed(project, queue, deleted)
        # One that had expired already (not reaped yet) ended with its expiry: reported
        # as that, by this request, which removed it (as the reaper would have).
        self._trail.record([self._trail.deleted(project, queue, now, doc)
                            if lay.ms(doc[lay.EXPIRES]) > now
                            else self._trail.expired(project, queue, doc) for doc in deleted])

    def _delete_each(self, filters: list[dict[str, Any]], *fields: str
                     ) -> list[dict[str, Any]]:
        """Delete the message each filter matches; the documents, as deleted, of those
        this request deleted (claim count and tally fields, and *fields*).

        One ``find_one_and_delete`` each: only it tells which request deleted a message
        two deleted at once, and in which state (the claim count of the trail, the
        instants of the tallies). A pinned bulk delete would save round trips but not
        tell, when some vanished under a concurrent delete, which of them it deleted.
        """
        kept = {lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS, **dict.fromkeys(fields, 1)}
        found = (self._messages.find_one_and_delete(where, kept) for where in filters)
        return [doc for doc in found if doc is not None]

    @operation
    @backend_call
    def pop_messages(self, project: str, queue: str, limit: int) -> list[Message]:
        now = self._now_ms()
        pop_id = lay.new_id()
        took = self._claimer.take(project, queue, now, limit, pop_id, now + POP_LEASE_MS, 0, None)
        taken = took.claimed
        changes = claimer.tally_changes(queue, took, pop_id, now + POP_LEASE_MS, 0)
        # A concurrent delete by id may take one first: it records and tallies that
        # message's end, this pop those it deleted itself.
        gone = {doc[lay.ID]: doc for doc in self._delete_each(
            [{lay.ID: doc[lay.ID], lay.PROJECT: project, lay.CLAIM: pop_id} for doc in taken])}
        for doc in gone.values():
            changes.add(queue, doc, None)
        self._tallies.write(project, changes)
        self._trail.record([self._trail.expired(project, queue, doc) for doc in took.reaped] + [
            self._trail.event(project, queue, events.POPPED, now, message_id=doc[lay.ID],
                              claim_count=doc.get(lay.CLAIM_COUNT, 0))
            for doc in taken if doc[lay.ID] in gone])
        return [lay.message(doc, now) for doc in taken]

    @operation
    @backend_call
    def edit_message(self, project: str, queue: str, message_id: str, *,
                     body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                     ) -> Message:
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        while True:
            now = self._now_ms()
            live = {**where, lay.EXPIRES: {"$gt": lay.date(now)}}
            # The filter is the rule: no live claim holds it. A claim sets the claim
            # expiry ahead of now, so a concurrent claim and this edit exclude each other.
            free = {**live, **lay.not_held(now)}
            changes: dict[str, Any] = {}
            if body is not NO_CHANGE:
                changes[lay.BODY] = lay.encode_json(body)
            if delay is not None:
                # Free, so available when due (an expired claim's expiry is behind now).
                due = lay.date(now + round(delay * 1000))
                changes.update({lay.DUE: due, lay.AVAILABLE: due})
            if changes:
                # The document as written over, for the tallies; the edit is its $set.
                before = self._messages.find_one_and_update(
                    free, {"$set": changes, "$inc": {lay.EDITS: 1}},
                    return_document=ReturnDocument.BEFORE)
                doc = None if before is None else {
                    **before, **changes, lay.EDITS: before.get(lay.EDITS, 0) + 1}
                if before is not None:
                    tally = tallies.Changes()
                    tally.add(queue, before, doc)
                    self._tallies.write(project, tally)
            else:
                doc = self._messages.find_one(free)
            if doc is not None:
                self._trail.record([self._trail.event(
                    project, queue, events.EDITED, now, message_id=doc[lay.ID],
                    due=lay.due_ms(doc), claim_count=doc.get(lay.CLAIM_COUNT, 0))])
                return lay.message(doc, now)
            state = self._messages.find_one(live, {lay.CLAIM_EXPIRES: 1})
            if state is None:
                raise errors.MessageNotFound.with_id(message_id)
            if lay.ms(state.get(lay.CLAIM_EXPIRES) or lay.EPOCH) > now:
                raise errors.MessageHeld.editing(message_id)
            # Its claim expired between the two reads: edit it now.

    @operation
    @backend_call
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int, queue_quota: int = 0) -> int:
        now = self._now_ms()
        where: dict[str, Any] = {
            lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)},
            **lay.not_held(now)}
        if destination is None:
            where[lay.SOURCE] = {"$exists": True}
        docs = list(self._messages.find(where).sort(lay.CLAIMABLE_ORDER).limit(limit)
                    .hint(lay.CLAIMABLE_INDEX))
        moves = self._claimer.redrive(project, queue, docs, destination, now, queue_quota)
        if not moves:
            return 0
        changes = tallies.Changes()
        for move in moves:
            changes.add(queue, move.doc, None)
            changes.add(move.target, None,
                        lay.unclaimed(move.doc, **claimer.due_at_once(move, now)))
        self._tallies.write(project, changes)
        self._trail.record([self._trail.event(project, queue, events.REDRIVEN, now,
                                              message_id=move.doc[lay.ID],
                                              claim_count=move.doc.get(lay.CLAIM_COUNT, 0),
                                              source=queue, target=move.target,
                                              expires=move.expires)
                            for move in moves])
        return len(moves)

    # Claims

    @operation
    @backend_call
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
              backoff: Backoff | None = None) -> Claim | None:
        now = self._now_ms()
        claim_id = lay.new_id()
        expires = now + ttl * 1000
        took = self._claimer.take(project, queue, now, limit, claim_id, expires, grace,
                                  dead_letter, backoff)
        self._tallies.write(project, claimer.tally_changes(queue, took, claim_id, expires,
                                                          grace, backoff))
        trail = [self._trail.expired(project, queue, doc) for doc in took.reaped]
        # Recorded in the source queue's trail, with the message as the target holds it.
        trail += [self._trail.event(project, queue, events.DEAD_LETTERED, now,
                                    message_id=move.doc[lay.ID],
                                    claim_count=move.doc.get(lay.CLAIM_COUNT, 0), source=queue,
                                    target=move.target, ttl=move.ttl, expires=move.expires,
                                    body=move.doc[lay.BODY])
                  for move in took.moved]
        if not took.claimed:
            self._trail.record(trail)
            return None
        self._claim_docs.insert_one({lay.ID: claim_id, lay.PROJECT: project,
                                     lay.QUEUE: queue, lay.TTL: ttl, lay.GRACE: grace,
                                     lay.CREATED: lay.date(now), lay.EXPIRES: lay.date(expires)})
        claimed = []
        for doc in took.claimed:
            doc = claimer.claimed(doc, claim_id, expires, grace, backoff)
            claimed.append(lay.message(doc, now))
            trail.append(self._trail.event(project, queue, events.CLAIMED, now,
                                           message_id=doc[lay.ID], claim_id=claim_id,
                                           claim_count=doc[lay.CLAIM_COUNT],
                                           expires=lay.ms(doc[lay.EXPIRES])))
        self._trail.record(trail)
        return Claim(id=str(claim_id), ttl=ttl, grace=grace, created=now / 1000,
                     expires=expires / 1000, as_of=now / 1000, messages=claimed)

    @operation
    @backend_call
    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        return self._claims.get(project, queue, claim_id, self._now_ms())

    @operation
    @backend_call
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        self._claims.renew(project, queue, claim_id, ttl, grace, backoff, self._now_ms())

    @operation
    @backend_call
    def release_claim(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        self._claims.release(project, queue, claim_id, backoff, self._now_ms())

    @operation
    @backend_call
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        return self._claims.hand_back(project, queue, message_id, claim_id, delay,
                                     self._now_ms)

    # Subscriptions (subscriptions.py)

    @operation
    @backend_call
    def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                            options: dict[str, Any]) -> str | None:
        return self._subscriptions.create(project, queue, subscriber, ttl, options,
                                          self._now_ms())

    @operation
    @backend_call
    def get_subscription(self, project: str, queue: str, subscription_id: str
                         ) -> Subscription | None:
        return self._subscriptions.get(project, queue, subscription_id, self._now_ms())

    @operation
    @backend_call
    def list_subscriptions(self, project: str, queue: str, marker: str | None,
                           limit: int) -> list[Subscription]:
        return self._subscriptions.page(project, queue, marker, limit, self._now_ms())

    @operation
    @backend_call
    def update_subscription(self, project: str, queue: str, subscription_id: str,
                            change: SubscriptionChange) -> None:
        self._subscriptions.update(project, queue, subscription_id, change, self._now_ms())

    @operation
    @backend_call
    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        self._subscriptions.delete(project, queue, subscription_id)

    @operation
    @backend_call
    def purge_subscriptions(self, project: str, queue: str) -> None:
        self._subscriptions.purge(project, queue)

    @operation
    @backend_call
    def subscribed_queues(self) -> list[tuple[str, str]]:
        return self._subscriptions.queues(self._now_ms())

    # Long-poll claims

    @operation
    @backend_call
    def available_in(self, project: str, queue: str) -> float | None:
        # Covered by the claimable index: its first key of the queue, no document read.
        head = list(self._messages.find({lay.PROJECT: project, lay.QUEUE: queue},
                                        {lay.AVAILABLE: 1, lay.ID: 0})
                    .sort(lay.CLAIMABLE_ORDER).limit(1).hint(lay.CLAIMABLE_INDEX))
        if not head:
            return None
        return max(0, lay.ms(head[0][lay.AVAILABLE]) - self._now_ms()) / 1000

    # Audit reads: whole queues, for delayq.spark_jobs

    @backend_call
    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        where = {} if project is None else {lay.PROJECT: project}
        found = {(doc[lay.PROJECT], doc[lay.QUEUE])
                 for doc in self._queues.find(where, {lay.PROJECT: 1, lay.QUEUE: 1, lay.ID: 0})}
        return sorted(found | self._trail.queues(project))

    def read_events(self, project: str, queue: str) -> Iterator[events.Event]:
        with unavailable:
            yield from self._trail.read(project, queue)

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        with unavailable:
            now = self._now_ms()
            cursor = self._messages.find(
                {lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)}}
            ).sort(lay.POST_ORDER)
            for doc in cursor:
                yield lay.message(doc, now)
