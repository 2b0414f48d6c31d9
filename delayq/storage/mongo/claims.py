"""The MongoDB driver's claims (``delayq.storage.base.claims``): made by the claimer's
pinned bulk write (``claimer.py``), then read, renewed, released, and one message handed
back from one.

A claim is a document of the ``claims`` collection (ttl, grace, expiry); its messages are
the documents bearing its id ``c`` with ``ce`` (the claim's expiry) ahead
(``layout.held``). Renewing or releasing changes each with a ``find_one_and_update`` of
its own, filtered on the claim and on the due time read, which returns the document as
written over: the tallies need the state each update changed, and a multi-document
update does not tell it when a concurrent request changed some of the same messages. A
hand-back is one such update of one message, its filter the rule a delete with a claim id
follows, so that it applies only while that claim holds the message.

Under a retry policy (``retry.Backoff``) each message's new due time is its attempt's
wait (``claimer.due_again``) after the claim's new expiry (a renewal) or after now (a
release); its availability ``a`` stays ``max(d, ce)``. Without one, a renewal keeps the
due time and a release makes the message due at once, its due time as it was before the
claim.
"""

from __future__ import annotations

from typing import Any

from pymongo import ReturnDocument

from delayq import errors, events
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.message import Message
from delayq.queue import DeadLetterPolicy
from delayq.retry import Backoff
from delayq.storage.mongo import claimer, tallies
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.database import Database

# What a renewal or release reads of each message: enough for its new due time.
DUE_FIELDS = {lay.CREATED: 1, lay.DUE: 1, lay.CLAIM_COUNT: 1}


class Claims:
    """The claims of the ``claims`` collection and the messages they hold; every change
    counted in the tallies, a claim and a hand-back recorded in the trail (blocking: the
    driver offloads it)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
               dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
               backoff: Backoff | None = None) -> Claim | None:
        db, log = self._db, self._db.event_log
        with db.request():
            now = db.now_ms()
            claim_id = lay.new_id()
            expires = now + ttl * 1000
            took = db.claimer.take(project, queue, now, limit, claim_id, expires, grace,
                                   dead_letter, backoff)
            db.tallies.write(project, claimer.tally_changes(queue, took, claim_id, expires,
                                                            grace, backoff))
            trail = [log.expired(project, queue, doc) for doc in took.reaped]
            # Recorded in the source queue's trail, with the message as the target holds
            # it.
            trail += [log.event(project, queue, events.DEAD_LETTERED, now,
                                message_id=move.doc[lay.ID],
                                claim_count=move.doc.get(lay.CLAIM_COUNT, 0), source=queue,
                                target=move.target, ttl=move.ttl, expires=move.expires,
                                body=move.doc[lay.BODY])
                      for move in took.moved]
            if not took.claimed:
                log.record(trail)
                return None
            db.claims.insert_one({lay.ID: claim_id, lay.PROJECT: project, lay.QUEUE: queue,
                                  lay.TTL: ttl, lay.GRACE: grace, lay.CREATED: lay.date(now),
                                  lay.EXPIRES: lay.date(expires)})
            claimed = []
            for doc in took.claimed:
                doc = claimer.claimed(doc, claim_id, expires, grace, backoff)
                claimed.append(lay.message(doc, now))
                trail.append(log.event(project, queue, events.CLAIMED, now,
                                       message_id=doc[lay.ID], claim_id=claim_id,
                                       claim_count=doc[lay.CLAIM_COUNT],
                                       expires=lay.ms(doc[lay.EXPIRES])))
            log.record(trail)
            return Claim(id=str(claim_id), ttl=ttl, grace=grace, created=now / 1000,
                         expires=expires / 1000, as_of=now / 1000, messages=claimed)

    def get(self, project: str, queue: str, claim_id: str) -> Claim:
        """The live claim with its messages; raises ClaimNotFound."""
        db = self._db
        with db.request():
            now = db.now_ms()
            doc = db.claims.find_one({lay.ID: lay.object_id(claim_id),
                                      lay.PROJECT: project, lay.QUEUE: queue,
                                      lay.EXPIRES: {"$gt": lay.date(now)}})
            if doc is None:
                raise errors.ClaimNotFound.with_id(claim_id)
            messages = db.messages.find(lay.held(project, queue, doc[lay.ID], now)
                                        ).sort(lay.POST_ORDER).hint(lay.CLAIM_INDEX)
            return Claim(id=str(doc[lay.ID]), ttl=doc[lay.TTL], grace=doc[lay.GRACE],
                         created=lay.ms(doc[lay.CREATED]) / 1000,
                         expires=lay.ms(doc[lay.EXPIRES]) / 1000,
                         as_of=now / 1000, messages=[lay.message(m, now) for m in messages])

    def renew(self, project: str, queue: str, claim_id: str, ttl: int, grace: int,
              backoff: Backoff | None = None) -> None:
        """Restart the claim's ttl from now; raises ClaimNotFound."""
        db = self._db
        with db.request():
            now = db.now_ms()
            expires = now + ttl * 1000
            doc = db.claims.find_one_and_update(
                {lay.ID: lay.object_id(claim_id), lay.PROJECT: project, lay.QUEUE: queue,
                 lay.EXPIRES: {"$gt": lay.date(now)}},
                {"$set": {lay.TTL: ttl, lay.GRACE: grace, lay.EXPIRES: lay.date(expires)}},
                {lay.ID: 1})
            if doc is None:
                raise errors.ClaimNotFound.with_id(claim_id)
            where = lay.held(project, queue, doc[lay.ID], now)
            lives = lay.date(expires + grace * 1000)
            renewals = []
            for message in db.messages.find(where, DUE_FIELDS).hint(lay.CLAIM_INDEX):
                due = claimer.due_again(backoff, message.get(lay.CLAIM_COUNT, 0), expires)
                changes = {} if due is None else {lay.DUE: lay.date(due)}
                available = max(expires, lay.due_ms(message) if due is None else due)
                renewals.append((
                    {**where, lay.ID: message[lay.ID], lay.DUE: message.get(lay.DUE)},
                    {"$set": {lay.CLAIM_EXPIRES: lay.date(expires), **changes,
                              lay.AVAILABLE: lay.date(available)},
                     "$max": {lay.EXPIRES: lives}}))
            self._update_each(project, queue, renewals)

    def release(self, project: str, queue: str, claim_id: str,
                backoff: Backoff | None = None) -> None:
        """Free the claim's messages and delete the claim; an absent claim is not an
        error."""
        db = self._db
        with db.request():
            now = db.now_ms()
            where = lay.held(project, queue, lay.object_id(claim_id), now)
            releases = []
            for message in db.messages.find(
                    where, {**DUE_FIELDS, lay.CLAIM: 1, lay.CLAIM_EXPIRES: 1}
            ).hint(lay.CLAIM_INDEX):
                was_due = lay.due_ms(message)
                due = claimer.due_again(backoff, message.get(lay.CLAIM_COUNT, 0), now)
                due = min(was_due, now) if due is None else due
                changes = {} if due == was_due else {lay.DUE: lay.date(due)}
                releases.append((
                    {lay.ID: message[lay.ID], lay.PROJECT: project,
                     lay.CLAIM: message[lay.CLAIM],
                     lay.CLAIM_EXPIRES: message[lay.CLAIM_EXPIRES],
                     lay.DUE: message.get(lay.DUE)},
                    {"$set": {lay.AVAILABLE: lay.date(due), **changes},
                     "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: ""}}))
            self._update_each(project, queue, releases)
            db.claims.delete_one({lay.ID: lay.object_id(claim_id), lay.PROJECT: project,
                                  lay.QUEUE: queue})

    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        """Take one message out of claim *claim_id*, due *delay* seconds from now, in one
        conditional update; the message as released. Refused as a delete with a claim
        id is (``delayq.claim.delete_refusal``)."""
        db, log = self._db, self._db.event_log
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        with db.request():
            while True:
                now = db.now_ms()
                due = lay.date(now + round(delay * 1000))
                update = {"$set": {lay.DUE: due, lay.AVAILABLE: due},
                          "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: ""}}
                before = db.messages.find_one_and_update(
                    {**lay.held(project, queue, lay.object_id(claim_id), now), **where},
                    update, return_document=ReturnDocument.BEFORE)
                if before is not None:
                    after = lay.applied(before, update)
                    changes = tallies.Changes()
                    changes.add(queue, before, after)
                    db.tallies.write(project, changes)
                    log.record([log.event(
                        project, queue, events.RELEASED, now, message_id=after[lay.ID],
                        due=lay.ms(due), claim_count=after.get(lay.CLAIM_COUNT, 0))])
                    return lay.message(after, now)
                state = db.messages.find_one({**where, lay.EXPIRES: {"$gt": lay.date(now)}},
                                             {lay.CLAIM: 1, lay.CLAIM_EXPIRES: 1})
                if state is None:
                    raise errors.MessageNotFound.with_id(message_id)
                holder = state.get(lay.CLAIM)
                live = holder is not None and lay.ms(state[lay.CLAIM_EXPIRES]) > now
                refuse_delete(delete_refusal(claim_id, str(holder) if live else None),
                              message_id, claim_id)
                # Held by that claim as read now, though not as updated: try again.

    def available_in(self, project: str, queue: str) -> float | None:
        db = self._db
        with db.request():
            # Covered by the claimable index: its first key of the queue, no document read.
            head = list(db.messages.find({lay.PROJECT: project, lay.QUEUE: queue},
                                         {lay.AVAILABLE: 1, lay.ID: 0})
                        .sort(lay.CLAIMABLE_ORDER).limit(1).hint(lay.CLAIMABLE_INDEX))
            if not head:
                return None
            return max(0, lay.ms(head[0][lay.AVAILABLE]) - db.now_ms()) / 1000

    def _update_each(self, project: str, queue: str,
                     updates: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Apply each (filter, update) to the one message the filter matches, and count
        the changes of those this request updated.

        One ``find_one_and_update`` each: only it tells the state each update changed.
        """
        changes = tallies.Changes()
        for where, update in updates:
            before = self._db.messages.find_one_and_update(
                where, update, lay.TALLY_FIELDS, return_document=ReturnDocument.BEFORE)
            if before is not None:
                changes.add(queue, before, lay.applied(before, update))
        self._db.tallies.write(project, changes)
