"""The SQLite driver's claims, in the ``claims`` table and their messages' rows: the
claim transition (with its dead-letter move), renew, release, and the long-poll hint."""

from __future__ import annotations

import uuid
from typing import Any

from delayq import errors, events
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.message import Message
from delayq.queue import DeadLetterPolicy
from delayq.retry import Backoff
from delayq.storage.base.signals import Change
from delayq.storage.sqlite import rows, sql
from delayq.storage.sqlite.database import Database
from delayq.storage.sqlite.rows import (
    BODY,
    CLAIM_COUNT,
    CREATED,
    EXPIRES,
    ID,
    SEQ,
    TTL,
    backoff_params,
    event_params,
)


class Claims:
    """Claims of every queue, blocking (``base.offloaded.BlockingClaims``)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
               dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
               backoff: Backoff | None = None) -> Claim | None:
        claim_id = uuid.uuid4().hex
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return None
            expires = now + ttl
            target_id = None
            claimed = []
            trail = []
            for row in rows.claimable(self.database, db, project, queue, queue_id, now,
                                      limit):
                seq, claim_count = row[SEQ], row[CLAIM_COUNT]
                if dead_letter and claim_count >= dead_letter.max_claim_count:
                    if target_id is None:
                        target_id = rows.ensure_queue(db, project, dead_letter.queue, now)
                    db.execute(sql.MESSAGE_DEAD_LETTER, {
                        "target": target_id, "now": now, "source": queue,
                        "ttl": dead_letter.messages_ttl, "seq": seq})
                    if dead_letter.messages_ttl is None:  # kept: its original expiry
                        moved_ttl, moved_expires = row[TTL], row[CREATED] + row[TTL]
                    else:
                        moved_ttl = dead_letter.messages_ttl
                        moved_expires = now + dead_letter.messages_ttl
                    trail.append(event_params(
                        project=project, queue=queue, kind=events.DEAD_LETTERED, time=now,
                        message_id=row[ID], claim_count=claim_count, source=queue,
                        target=dead_letter.queue, ttl=moved_ttl, expires=moved_expires,
                        body=row[BODY]))
                    continue
                due = None if backoff is None else expires + backoff.after(claim_count + 1)
                claimed.append(db.execute(sql.MESSAGE_CLAIM, {
                    "claim_id": claim_id, "claim_expires": expires, "grace": grace,
                    "due": due, "seq": seq}).fetchone())
                if len(claimed) == limit:
                    break
            trail += [event_params(project=project, queue=queue, kind=events.CLAIMED,
                                   time=now, message_id=row[ID], claim_id=claim_id,
                                   claim_count=row[CLAIM_COUNT], expires=row[EXPIRES])
                      for row in claimed]
            self.database.record(db, trail)
            if target_id is not None and dead_letter is not None:
                self.database.signal(Change.MESSAGES, project, dead_letter.queue)
            self.database.expire(db, now)
            if not claimed:
                return None
            db.execute(sql.CLAIM_INSERT, (claim_id, queue_id, ttl, grace, now, expires))
            return Claim(id=claim_id, ttl=ttl, grace=grace, created=now, expires=expires,
                         as_of=now, messages=[rows.message(row, now) for row in claimed])

    def get(self, project: str, queue: str, claim_id: str) -> Claim:
        db = self.database.db()
        now = self.database.now()
        queue_id = rows.queue_id(db, project, queue)
        row = None
        if queue_id is not None:
            row = db.execute(sql.CLAIM_GET, (claim_id, queue_id, now)).fetchone()
        if row is None:
            raise errors.ClaimNotFound.with_id(claim_id)
        id_, ttl, grace, created, expires = row
        messages = db.execute(sql.CLAIM_MESSAGES, (claim_id, queue_id, now, now))
        return Claim(id=id_, ttl=ttl, grace=grace, created=created, expires=expires,
                     as_of=now, messages=[rows.message(r, now) for r in messages])

    def renew(self, project: str, queue: str, claim_id: str, ttl: int, grace: int,
              backoff: Backoff | None = None) -> None:
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None or db.execute(
                    sql.CLAIM_GET, (claim_id, queue_id, now)).fetchone() is None:
                raise errors.ClaimNotFound.with_id(claim_id)
            expires = now + ttl
            db.execute(sql.CLAIM_RENEW, (ttl, grace, expires, claim_id))
            db.execute(sql.CLAIM_RENEW_MESSAGES, {"expires": expires, "grace": grace,
                                                  "claim_id": claim_id, "queue_id": queue_id,
                                                  "now": now, **backoff_params(backoff)})

    def release(self, project: str, queue: str, claim_id: str,
                backoff: Backoff | None = None) -> None:
        with self.database.write() as db:
            now = self.database.now()
            queue_id = rows.queue_id(db, project, queue)
            if queue_id is None:
                return
            released = db.execute(sql.CLAIM_RELEASE_MESSAGES, {
                "claim_id": claim_id, "queue_id": queue_id, "now": now,
                **backoff_params(backoff)})
            if released.rowcount:
                self.database.signal(Change.MESSAGES, project, queue)
            db.execute(sql.CLAIM_DELETE, (claim_id, queue_id))

    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        with self.database.write() as db:
            now = self.database.now()
            _, row = rows.claim_state(db, project, queue, message_id, now)
            seq, holder, claim_expires, _ = row
            live_holder = holder if holder is not None and claim_expires > now else None
            refuse_delete(delete_refusal(claim_id, live_holder), message_id, claim_id)
            released = rows.message(db.execute(
                sql.MESSAGE_RELEASE, {"due": now + delay, "seq": seq}).fetchone(), now)
            self.database.signal(Change.MESSAGES, project, queue)
            self.database.record(db, [event_params(
                project=project, queue=queue, kind=events.RELEASED, time=now,
                message_id=message_id, due=released.due, claim_count=released.claim_count)])
            return released

    def available_in(self, project: str, queue: str) -> float | None:
        row = self.database.db().execute(sql.NEXT_AVAILABLE, (project, queue)).fetchone()
        if row is None:
            return None
        return max(0.0, row[0] - self.database.now())
