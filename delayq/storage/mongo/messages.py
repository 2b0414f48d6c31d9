"""The MongoDB driver's messages (``delayq.storage.base.messages``): one document each
in the ``messages`` collection (``layout.py``), every queue of every project in it.

A delete by ids and the end of a pop are one ``find_one_and_delete`` per message
(``Database.delete_each``; why: ``driver.py``); a pop takes its messages as a claim does
(``claimer.py``), then deletes them.
"""

from __future__ import annotations

from typing import Any

import pymongo.errors
from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.client_session import ClientSession

from delayq import errors, events
from delayq.claim import delete_refusal, refuse_delete
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged
from delayq.storage.mongo import claimer, tallies
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.database import Database

# A pop marks its messages with a claim of this many milliseconds before deleting them: a
# process dying in between leaves them claimable again after it, not lost.
POP_LEASE_MS = 60_000


class Messages:
    """Messages of every queue (blocking: the driver offloads it)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def post(self, project: str, queue: str, client_id: str, messages: list[NewMessage],
             *, metadata_token: Any = None, message_quota: int = 0, queue_quota: int = 0,
             key: PostKey | None = None) -> list[str]:
        """With a key, one transaction stores the key and the messages (``post_keys.py``);
        with a message quota, one transaction counts the queue and stores them
        (``quotas.py``); both checked there, as is the queue quota, in that order."""
        db = self._db
        with db.request():
            now = db.now_ms()
            if key is not None:
                kept = db.post_keys.kept(project, queue, key.key, now)
                if kept is not None:
                    raise KeyTaken(kept)

            def make(first: int) -> list[dict[str, Any]]:
                return [lay.new_message(project, queue, first + i, m.body, m.ttl, m.delay,
                                        client_id, now)
                        for i, m in enumerate(messages)]

            def reserve(session: ClientSession) -> int:
                """The first sequence number, in *session*'s transaction, past the
                quotas."""
                if message_quota:
                    db.quotas.admit_messages(project, queue, len(messages), message_quota,
                                             now, session)
                return db.allocate(project, queue, len(messages), now, session, queue_quota)

            def insert(session: ClientSession) -> list[dict[str, Any]]:
                docs = make(reserve(session))
                db.messages.insert_many(docs, ordered=True, session=session)
                return docs

            changes = tallies.Changes()
            if key is not None:
                stored = db.post_keys.post(project, queue, key, now, reserve, make)
                if isinstance(stored, StoredKey):
                    raise KeyTaken(stored)
                return self._posted(project, queue, now, stored, changes)
            if message_quota:
                return self._posted(project, queue, now, db.quotas.run(insert), changes)
            # The queue quota alone needs a transaction only to create the queue.
            docs = make(db.allocate(project, queue, len(messages), now,
                                    queue_quota=queue_quota))
            try:
                db.messages.insert_many(docs, ordered=True)
            except pymongo.errors.BulkWriteError as exc:
                # In order: the first nInserted are stored, and count, though the post
                # fails.
                for doc in docs[:(exc.details or {}).get("nInserted", 0)]:
                    changes.add(queue, None, doc)
                db.tallies.write(project, changes)
                raise
            return self._posted(project, queue, now, docs, changes)

    def _posted(self, project: str, queue: str, now: int, docs: list[dict[str, Any]],
                changes: tallies.Changes) -> list[str]:
        """Count and record the stored message documents *docs* of a post; their ids."""
        log = self._db.event_log
        for doc in docs:
            changes.add(queue, None, doc)
        self._db.tallies.write(project, changes)
        log.record([
            log.event(project, queue, events.POSTED, now, message_id=doc[lay.ID],
                      due=lay.due_ms(doc), ttl=doc[lay.TTL], expires=lay.ms(doc[lay.EXPIRES]))
            for doc in docs])
        return [str(doc[lay.ID]) for doc in docs]

    def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
             exclude_client: str | None, include_claimed: bool, include_delayed: bool
             ) -> tuple[list[Message], str | None]:
        with self._db.request():
            after = marker.position
            if marker.message_id is not None:
                # Expired messages keep their documents (and place) until the expiry
                # index drops them; a deleted one leaves nothing, and its random id tells
                # no place: the listing then starts at the start (base.Messages).
                found = self._db.messages.find_one(
                    {lay.ID: lay.object_id(marker.message_id), lay.PROJECT: project,
                     lay.QUEUE: queue}, {lay.SEQ: True})
                after = found[lay.SEQ] if found is not None else 0
            now = self._db.now_ms()
            query: dict[str, Any] = {lay.PROJECT: project, lay.QUEUE: queue,
                                     lay.SEQ: {"$gt": after},
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
            docs = list(self._db.messages.find(query).sort(lay.POST_ORDER).limit(limit)
                        .hint(lay.LISTING_INDEX))
            next_marker = str(docs[-1][lay.SEQ]) if docs else None
            return [lay.message(doc, now) for doc in docs], next_marker

    @staticmethod
    def is_message_id(text: str) -> bool:
        """An ObjectId's 24 hexadecimal digits (``layout.new_id``)."""
        return len(text) == 24 and ObjectId.is_valid(text)

    def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        with self._db.request():
            now = self._db.now_ms()
            docs = self._db.messages.find(
                {lay.ID: {"$in": [lay.object_id(i) for i in ids]}, lay.PROJECT: project,
                 lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)}}).sort(lay.POST_ORDER)
            return [lay.message(doc, now) for doc in docs]

    def delete(self, project: str, queue: str, message_id: str,
               claim_id: str | None) -> None:
        db, log = self._db, self._db.event_log
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        with db.request():
            while True:
                now = db.now_ms()
                if claim_id is not None:
                    held = {**lay.held(project, queue, lay.object_id(claim_id), now),
                            **where}
                    deleted = db.messages.find_one_and_delete(
                        held, {lay.CLAIM: 1, lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS})
                    if deleted is not None:
                        db.tallies.removed(project, queue, [deleted])
                        log.record([log.deleted(project, queue, now, deleted,
                                                deleted[lay.CLAIM])])
                        return
                doc = db.messages.find_one(
                    {**where, lay.EXPIRES: {"$gt": lay.date(now)}},
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
                    deleted = db.messages.find_one_and_delete(
                        {**where, lay.AVAILABLE: doc[lay.AVAILABLE]},
                        {lay.CLAIM_COUNT: 1, **lay.TALLY_FIELDS})
                    if deleted is not None:
                        db.tallies.removed(project, queue, [deleted])
                        log.record([log.deleted(project, queue, now, deleted)])
                        return

    def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        db, log = self._db, self._db.event_log
        with db.request():
            now = db.now_ms()
            deleted = db.delete_each(
                [{lay.ID: message_id, lay.PROJECT: project, lay.QUEUE: queue}
                 for message_id in dict.fromkeys(lay.object_id(i) for i in ids)])
            db.tallies.removed(project, queue, deleted)
            # One that had expired already (not reaped yet) ended with its expiry:
            # reported as that, by this request, which removed it (as the reaper would
            # have).
            log.record([log.deleted(project, queue, now, doc)
                        if lay.ms(doc[lay.EXPIRES]) > now
                        else log.expired(project, queue, doc) for doc in deleted])

    def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        db, log = self._db, self._db.event_log
        with db.request():
            now = db.now_ms()
            pop_id = lay.new_id()
            took = db.claimer.take(project, queue, now, limit, pop_id, now + POP_LEASE_MS,
                                   0, None)
            taken = took.claimed
            changes = claimer.tally_changes(queue, took, pop_id, now + POP_LEASE_MS, 0)
            # A concurrent delete by id may take one first: it records and tallies that
            # message's end, this pop those it deleted itself.
            gone = {doc[lay.ID]: doc for doc in db.delete_each(
                [{lay.ID: doc[lay.ID], lay.PROJECT: project, lay.CLAIM: pop_id}
                 for doc in taken])}
            for doc in gone.values():
                changes.add(queue, doc, None)
            db.tallies.write(project, changes)
            log.record([log.expired(project, queue, doc) for doc in took.reaped] + [
                log.event(project, queue, events.POPPED, now, message_id=doc[lay.ID],
                          claim_count=doc.get(lay.CLAIM_COUNT, 0))
                for doc in taken if doc[lay.ID] in gone])
            return [lay.message(doc, now) for doc in taken]

    def edit(self, project: str, queue: str, message_id: str, *,
             body: Any | Unchanged = NO_CHANGE, delay: float | None = None) -> Message:
        db, log = self._db, self._db.event_log
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        with db.request():
            while True:
                now = db.now_ms()
                live = {**where, lay.EXPIRES: {"$gt": lay.date(now)}}
                # The filter is the rule: no live claim holds it. A claim sets the claim
                # expiry ahead of now, so a concurrent claim and this edit exclude each
                # other.
                free = {**live, **lay.not_held(now)}
                changes: dict[str, Any] = {}
                if body is not NO_CHANGE:
                    changes[lay.BODY] = lay.encode_json(body)
                if delay is not None:
                    # Free, so available when due (an expired claim's expiry is behind
                    # now).
                    due = lay.date(now + round(delay * 1000))
                    changes.update({lay.DUE: due, lay.AVAILABLE: due})
                if changes:
                    # The document as written over, for the tallies; the edit is its $set.
                    before = db.messages.find_one_and_update(
                        free, {"$set": changes, "$inc": {lay.EDITS: 1}},
                        return_document=ReturnDocument.BEFORE)
                    doc = None if before is None else {
                        **before, **changes, lay.EDITS: before.get(lay.EDITS, 0) + 1}
                    if before is not None:
                        tally = tallies.Changes()
                        tally.add(queue, before, doc)
                        db.tallies.write(project, tally)
                else:
                    doc = db.messages.find_one(free)
                if doc is not None:
                    log.record([log.event(
                        project, queue, events.EDITED, now, message_id=doc[lay.ID],
                        due=lay.due_ms(doc), claim_count=doc.get(lay.CLAIM_COUNT, 0))])
                    return lay.message(doc, now)
                state = db.messages.find_one(live, {lay.CLAIM_EXPIRES: 1})
                if state is None:
                    raise errors.MessageNotFound.with_id(message_id)
                if lay.ms(state.get(lay.CLAIM_EXPIRES) or lay.EPOCH) > now:
                    raise errors.MessageHeld.editing(message_id)
                # Its claim expired between the two reads: edit it now.

    def redrive(self, project: str, queue: str, *, destination: str | None, limit: int,
                queue_quota: int = 0) -> int:
        db, log = self._db, self._db.event_log
        with db.request():
            now = db.now_ms()
            where: dict[str, Any] = {
                lay.PROJECT: project, lay.QUEUE: queue, lay.EXPIRES: {"$gt": lay.date(now)},
                **lay.not_held(now)}
            if destination is None:
                where[lay.SOURCE] = {"$exists": True}
            docs = list(db.messages.find(where).sort(lay.CLAIMABLE_ORDER).limit(limit)
                        .hint(lay.CLAIMABLE_INDEX))
            moves = db.claimer.redrive(project, queue, docs, destination, now, queue_quota)
            if not moves:
                return 0
            changes = tallies.Changes()
            for move in moves:
                changes.add(queue, move.doc, None)
                changes.add(move.target, None,
                            lay.unclaimed(move.doc, **claimer.due_at_once(move, now)))
            db.tallies.write(project, changes)
            log.record([log.event(project, queue, events.REDRIVEN, now,
                                  message_id=move.doc[lay.ID],
                                  claim_count=move.doc.get(lay.CLAIM_COUNT, 0),
                                  source=queue, target=move.target, expires=move.expires)
                        for move in moves])
            return len(moves)
