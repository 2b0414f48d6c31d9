"""The SQLite driver's messages, in the ``messages`` table: post (with its idempotency
key and quotas), read, edit, delete, pop, redrive."""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from delayq import errors, events, idempotency, jsontext
from delayq.claim import delete_refusal, refuse_delete
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged
from delayq.storage.base.signals import Change
from delayq.storage.sqlite import rows, sql
from delayq.storage.sqlite import tallies as sqlite_tallies
from delayq.storage.sqlite.database import Database
from delayq.storage.sqlite.rows import CLAIM_COUNT, EXPIRES, ID, SEQ, SOURCE, event_params

HEX = frozenset("0123456789abcdef")


class Messages:
    """Messages of every queue, blocking (``base.offloaded.BlockingMessages``)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def post(self, project: str, queue: str, client_id: str, messages: list[NewMessage], *,
             metadata_token: Any = None, message_quota: int = 0, queue_quota: int = 0,
             key: PostKey | None = None) -> list[str]:
        """A key is looked up, and kept, in the post's transaction; so are the quotas
        checked."""
        ids = [uuid.uuid4().hex for _ in messages]
        with self.database.write() as db:
            now = self.database.now()
            if key is not None:
                self._refuse_kept_key(db, project, queue, key, now)
            if message_quota:
                self._check_message_quota(db, project, queue, len(messages), message_quota,
                                          now)
            queue_id = rows.ensure_queue(db, project, queue, now, queue_quota)
            db.executemany(sql.MESSAGE_INSERT, [
                (id_, queue_id, jsontext.dumps(m.body), m.ttl, now, now + m.ttl,
                 now + m.delay, now + m.delay, client_id)
                for id_, m in zip(ids, messages, strict=True)])
            self.database.record(db, [
                event_params(project=project, queue=queue, kind=events.POSTED, time=now,
                             message_id=id_, due=now + m.delay, ttl=m.ttl,
                             expires=now + m.ttl)
                for id_, m in zip(ids, messages, strict=True)])
            self.database.signal(Change.MESSAGES, project, queue)
            if key is not None:
                db.execute(sql.POST_KEY_KEEP, (queue_id, key.key, key.digest,
                                               idempotency.encode_ids(ids), now + key.window))
                db.execute(sql.POST_KEYS_FORGET, (now, self.database.expiry_batch))
            self.database.expire(db, now)
        return ids

    @staticmethod
    def _refuse_kept_key(db: sqlite3.Connection, project: str, queue: str, key: PostKey,
                         now: float) -> None:
        """Raise KeyTaken when the queue keeps *key* (its row not expired at *now*)."""
        queue_id = rows.queue_id(db, project, queue)
        row = None if queue_id is None else db.execute(
            sql.POST_KEY, (queue_id, key.key, now)).fetchone()
        if row is not None:
            raise KeyTaken(StoredKey(row[0], idempotency.decode_ids(row[1])))

    @staticmethod
    def _check_message_quota(db: sqlite3.Connection, project: str, queue: str, posted: int,
                             quota: int, now: float) -> None:
        """Refuse a post of *posted* messages that would take the queue past *quota*
        live messages. In the post's transaction, from the queue's tallies: exact
        whatever the concurrency, O(log n) (``Queues.counts``), and to the millisecond
        (a message with under a millisecond left to live no longer counts)."""
        queue_id = rows.queue_id(db, project, queue)
        held = 0 if queue_id is None else sqlite_tallies.live(db, queue_id, now)
        if held + posted > quota:
            raise errors.QuotaExceeded.messages(queue, held, posted, quota)

    def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
             exclude_client: str | None, include_claimed: bool, include_delayed: bool
             ) -> tuple[list[Message], str | None]:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, queue)
        if queue_id is None:
            return [], None
        after = marker.position
        if marker.message_id is not None:
            # A deleted (or reaped) message leaves no trace of its place, nor does its
            # random id tell it: the listing then starts at the start (base.Messages).
            row = db.execute(sql.MESSAGE_SEQ, (queue_id, marker.message_id)).fetchone()
            after = row[0] if row is not None else 0
        query = sql.messages_page(exclude_client=exclude_client is not None,
                                  include_claimed=include_claimed,
                                  include_delayed=include_delayed)
        found = db.execute(query, {"queue_id": queue_id, "marker": after, "now": now,
                                   "client_id": exclude_client, "limit": limit}).fetchall()
        next_marker = str(found[-1][0]) if found else None
        return [rows.message(row, now) for row in found], next_marker

    @staticmethod
    def is_message_id(text: str) -> bool:
        """A UUID's 32 lowercase hexadecimal digits, as ``post`` makes them."""
        return len(text) == 32 and set(text) <= HEX

    def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, queue)
        if queue_id is None:
            return []
        found = db.execute(sql.MESSAGES_BY_ID, (queue_id, now, json.dumps(ids)))
        return [rows.message(row, now) for row in found]

    def delete(self, project: str, queue: str, message_id: str,
               claim_id: str | None) -> None:
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return
            row = db.execute(sql.MESSAGE_CLAIM_STATE, (queue_id, message_id, now)).fetchone()
            if row is None:
                return
            seq, holder, claim_expires, claim_count = row
            live_holder = holder if holder is not None and claim_expires > now else None
            refuse_delete(delete_refusal(claim_id, live_holder), message_id, claim_id)
            db.execute(sql.MESSAGE_DELETE, (seq,))
            self.database.record(db, [event_params(
                project=project, queue=queue, kind=events.DELETED, time=now,
                message_id=message_id, claim_id=claim_id, claim_count=claim_count)])

    def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        with self.database.write() as db:
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return
            now = self.database.now()
            deleted = db.execute(sql.MESSAGES_DELETE_BY_ID,
                                 (queue_id, json.dumps(ids))).fetchall()
            # One that expired already (not yet reaped) is recorded as the expiry it was.
            self.database.record(db, [
                event_params(project=project, queue=queue, kind=events.DELETED, time=now,
                             message_id=id_, claim_count=count) if expires > now else
                event_params(project=project, queue=queue, kind=events.EXPIRED,
                             time=expires, message_id=id_, claim_count=count,
                             expires=expires)
                for id_, count, expires in deleted])

    def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return []
            popped = []
            for row in rows.claimable(self.database, db, project, queue, queue_id, now,
                                      limit):
                db.execute(sql.MESSAGE_DELETE, (row[SEQ],))
                popped.append(rows.message(row, now))
                if len(popped) == limit:
                    break
            self.database.record(db, [event_params(
                project=project, queue=queue, kind=events.POPPED, time=now, message_id=m.id,
                claim_count=m.claim_count) for m in popped])
            return popped

    def edit(self, project: str, queue: str, message_id: str, *,
             body: Any | Unchanged = NO_CHANGE, delay: float | None = None) -> Message:
        with self.database.write() as db:
            now = self.database.now()
            _, row = rows.claim_state(db, project, queue, message_id, now)
            edited = db.execute(sql.MESSAGE_EDIT, {
                "body": None if body is NO_CHANGE else json.dumps(body),
                "due": None if delay is None else now + delay, "seq": row[0],
                "now": now}).fetchone()
            if edited is None:
                raise errors.MessageHeld.editing(message_id)
            message = rows.message(edited, now)
            if delay is not None:
                self.database.signal(Change.MESSAGES, project, queue)
            self.database.record(db, [event_params(
                project=project, queue=queue, kind=events.EDITED, time=now,
                message_id=message_id, due=message.due, claim_count=message.claim_count)])
            return message

    def redrive(self, project: str, queue: str, *, destination: str | None, limit: int,
                queue_quota: int = 0) -> int:
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return 0
            movable = db.execute(sql.REDRIVABLE, {"queue": queue_id, "now": now,
                                                  "anything": destination is not None,
                                                  "limit": limit}).fetchall()
            targets: dict[str, int] = {}
            trail = []
            for row in movable:
                target = destination or row[SOURCE]
                if target not in targets:
                    # A source queue comes back whatever the quota (Broker.redrive).
                    targets[target] = rows.ensure_queue(
                        db, project, target, now, queue_quota if destination else 0)
                db.execute(sql.MESSAGE_REDRIVE,
                           {"target": targets[target], "now": now, "seq": row[SEQ]})
                trail.append(event_params(
                    project=project, queue=queue, kind=events.REDRIVEN, time=now,
                    message_id=row[ID], claim_count=row[CLAIM_COUNT], source=queue,
                    target=target, expires=row[EXPIRES]))
            self.database.record(db, trail)
            for target in targets:
                self.database.signal(Change.MESSAGES, project, target)
            self.database.expire(db, now)
            return len(movable)
