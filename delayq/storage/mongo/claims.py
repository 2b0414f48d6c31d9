"""The MongoDB driver's claims once made: read, renewed, released, and one message handed
back from one.

A claim's messages are the documents bearing its id ``c`` with ``ce`` (the claim's
expiry) ahead (``held``). Renewing or releasing changes each with a
``find_one_and_update`` of its own, filtered on the claim and on the due time read,
which returns the document as written over: the tallies need the state each update
changed, and a multi-document update does not tell it when a concurrent request changed
some of the same messages. A hand-back is one such update of one message, its filter the
rule a delete with a claim id follows, so that it applies only while that claim holds
the message.

Under a retry policy (``retry.Backoff``) each message's new due time is its attempt's
wait (``claimer.due_again``) after the claim's new expiry (a renewal) or after now (a
release); its availability ``a`` stays ``max(d, ce)``. Without one, a renewal keeps the
due time and a release makes the message due at once, its due time as it was before the
claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.collection import Collection

from delayq import errors, events
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.message import Message
from delayq.retry import Backoff
from delayq.storage.mongo import claimer, tallies
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.event_log import EventLog

# What a renewal or release reads of each message: enough for its new due time.
DUE_FIELDS = {lay.CREATED: 1, lay.DUE: 1, lay.CLAIM_COUNT: 1}


def held(project: str, queue: str, claim_id: ObjectId | str, now: int) -> dict[str, Any]:
    """The filter of the messages a claim holds now.

    A held message cannot have expired (a claim pushes the expiry past its own),
    but saying so keeps an expired one, reaped or not, out of every use of it.
    """
    return {lay.CLAIM: claim_id, lay.PROJECT: project, lay.QUEUE: queue,
            lay.CLAIM_EXPIRES: {"$gt": lay.date(now)}, lay.EXPIRES: {"$gt": lay.date(now)}}


class Claims:
    """The claims of the ``claims`` collection and the messages they hold; every change
    counted in the tallies, a hand-back recorded in the trail."""

    def __init__(self, messages: Collection, claim_docs: Collection, tally: tallies.Tallies,
                 trail: EventLog) -> None:
        self._messages = messages
        self._claim_docs = claim_docs
        self._tallies = tally
        self._trail = trail

    def get(self, project: str, queue: str, claim_id: str, now: int) -> Claim:
        """The live claim with its messages at *now* (ms); raises ClaimNotFound."""
        doc = self._claim_docs.find_one({lay.ID: lay.object_id(claim_id),
                                         lay.PROJECT: project, lay.QUEUE: queue,
                                         lay.EXPIRES: {"$gt": lay.date(now)}})
        if doc is None:
            raise errors.ClaimNotFound.with_id(claim_id)
        messages = self._messages.find(held(project, queue, doc[lay.ID], now)
                                       ).sort(lay.POST_ORDER).hint(lay.CLAIM_INDEX)
        return Claim(id=str(doc[lay.ID]), ttl=doc[lay.TTL], grace=doc[lay.GRACE],
                     created=lay.ms(doc[lay.CREATED]) / 1000,
                     expires=lay.ms(doc[lay.EXPIRES]) / 1000,
                     as_of=now / 1000, messages=[lay.message(m, now) for m in messages])

    def renew(self, project: str, queue: str, claim_id: str, ttl: int, grace: int,
              backoff: Backoff | None, now: int) -> None:
        """Restart the claim's ttl at *now* (ms); raises ClaimNotFound."""
        expires = now + ttl * 1000
        doc = self._claim_docs.find_one_and_update(
            {lay.ID: lay.object_id(claim_id), lay.PROJECT: project, lay.QUEUE: queue,
             lay.EXPIRES: {"$gt": lay.date(now)}},
            {"$set": {lay.TTL: ttl, lay.GRACE: grace, lay.EXPIRES: lay.date(expires)}},
            {lay.ID: 1})
        if doc is None:
            raise errors.ClaimNotFound.with_id(claim_id)
        where = held(project, queue, doc[lay.ID], now)
        lives = lay.date(expires + grace * 1000)
        renewals = []
        for message in self._messages.find(where, DUE_FIELDS).hint(lay.CLAIM_INDEX):
            due = claimer.due_again(backoff, message.get(lay.CLAIM_COUNT, 0), expires)
            changes = {} if due is None else {lay.DUE: lay.date(due)}
            available = max(expires, lay.due_ms(message) if due is None else due)
            renewals.append((
                {**where, lay.ID: message[lay.ID], lay.DUE: message.get(lay.DUE)},
                {"$set": {lay.CLAIM_EXPIRES: lay.date(expires), **changes,
                          lay.AVAILABLE: lay.date(available)},
                 "$max": {lay.EXPIRES: lives}}))
        self._update_each(project, queue, renewals)

    def release(self, project: str, queue: str, claim_id: str, backoff: Backoff | None,
                now: int) -> None:
        """Free the claim's messages at *now* (ms) and delete the claim; an absent claim
        is not an error."""
        where = held(project, queue, lay.object_id(claim_id), now)
        releases = []
        for message in self._messages.find(
                where, {**DUE_FIELDS, lay.CLAIM: 1, lay.CLAIM_EXPIRES: 1}
        ).hint(lay.CLAIM_INDEX):
            was_due = lay.due_ms(message)
            due = claimer.due_again(backoff, message.get(lay.CLAIM_COUNT, 0), now)
            due = min(was_due, now) if due is None else due
            changes = {} if due == was_due else {lay.DUE: lay.date(due)}
            releases.append((
                {lay.ID: message[lay.ID], lay.PROJECT: project,
                 lay.CLAIM: message[lay.CLAIM], lay.CLAIM_EXPIRES: message[lay.CLAIM_EXPIRES],
                 lay.DUE: message.get(lay.DUE)},
                {"$set": {lay.AVAILABLE: lay.date(due), **changes},
                 "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: ""}}))
        self._update_each(project, queue, releases)
        self._claim_docs.delete_one({lay.ID: lay.object_id(claim_id), lay.PROJECT: project,
                                     lay.QUEUE: queue})

    def hand_back(self, project: str, queue: str, message_id: str, claim_id: str,
                  delay: float, now_ms: Callable[[], int]) -> Message:
        """Take one message out of claim *claim_id*, due *delay* seconds from now (read
        from *now_ms*), in one conditional update; the message as released. Refused as a
        delete with a claim id is (``delayq.claim.delete_refusal``)."""
        where = {lay.ID: lay.object_id(message_id), lay.PROJECT: project, lay.QUEUE: queue}
        while True:
            now = now_ms()
            due = lay.date(now + round(delay * 1000))
            update = {"$set": {lay.DUE: due, lay.AVAILABLE: due},
                      "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: ""}}
            before = self._messages.find_one_and_update(
                {**held(project, queue, lay.object_id(claim_id), now), **where}, update,
                return_document=ReturnDocument.BEFORE)
            if before is not None:
                after = lay.applied(before, update)
                changes = tallies.Changes()
                changes.add(queue, before, after)
                self._tallies.write(project, changes)
                self._trail.record([self._trail.event(
                    project, queue, events.RELEASED, now, message_id=after[lay.ID],
                    due=lay.ms(due), claim_count=after.get(lay.CLAIM_COUNT, 0))])
                return lay.message(after, now)
            state = self._messages.find_one({**where, lay.EXPIRES: {"$gt": lay.date(now)}},
                                            {lay.CLAIM: 1, lay.CLAIM_EXPIRES: 1})
            if state is None:
                raise errors.MessageNotFound.with_id(message_id)
            holder = state.get(lay.CLAIM)
            live = holder is not None and lay.ms(state[lay.CLAIM_EXPIRES]) > now
            refuse_delete(delete_refusal(claim_id, str(holder) if live else None),
                          message_id, claim_id)
            # Held by that claim as read now, though not as updated: try again.

    def _update_each(self, project: str, queue: str,
                     updates: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Apply each (filter, update) to the one message the filter matches, and count
        the changes of those this request updated.

        One ``find_one_and_update`` each: only it tells the state each update changed.
        """
        changes = tallies.Changes()
        for where, update in updates:
            before = self._messages.find_one_and_update(
                where, update, lay.TALLY_FIELDS, return_document=ReturnDocument.BEFORE)
            if before is not None:
                changes.add(queue, before, lay.applied(before, update))
        self._tallies.write(project, changes)
