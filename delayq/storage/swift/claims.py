"""The Swift driver's claims: making one, the claim object ``k/<claim id>``, the messages
it still holds, and what its holder does with them — renew the claim, release it, or hand
one message back.

A claim wins its messages by bidding for their generation markers (``markers.py``); what
its holder does afterwards stays within those generations and bids for nothing. Per
message it rewrites the claim's marker (the new expiry; 0 once released), then the
message's state, then its index entry (``Objects.move_entry``: the new one first, the old
one deleted after). A process dying between two of those steps leaves the message's
entry where it was, so no claim takes the message before the time that entry says (the
claim's expiry, or its due time when later), and then exactly one does, by bidding for
the next generation; the message's state may already show what the holder decided.
Nothing is lost, and the state names one claim at a time.

Nothing here is conditional (Swift has none): each acts on a claim live when the request
started, so a renewal, release or hand-back made in the last instant of a claim's ttl can
overwrite the state a new claim of the same message has just written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from delayq import errors, events
from delayq.claim import MESSAGE_NOT_CLAIMED, Claim, delete_refusal, refuse_delete
from delayq.message import Message
from delayq.queue import DeadLetterPolicy
from delayq.retry import Backoff
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Entry, Marker, Record
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.objects import Objects, delete_at, unavailable
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.tallies import Tallies

Held = tuple[str, Record, bytes]  # (id, record, body) of a message a claim holds


class Claims:
    """The claims of the queues under the driver's prefix (``BlockingClaims``); *now_us*
    is the driver's clock (µs)."""

    def __init__(self, objects: Objects, tallies: Tallies, recorder: Recorder,
                 markers: Markers, now_us: Callable[[], int]) -> None:
        self._objects = objects
        self._tallies = tallies
        self._recorder = recorder
        self._markers = markers
        self._now_us = now_us

    def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
               dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
               backoff: Backoff | None = None) -> Claim | None:
        """The messages are won by bidding for their generation markers
        (``markers.Markers.take``); the claim object then lists them."""
        container = self._objects.container(project, queue)
        with unavailable:
            now = self._now_us()
            claim_id = uuid.uuid4().hex
            expires = now + ttl * US
            taken, moved, expired = self._markers.take(project, queue, now, limit, claim_id,
                                                       expires, grace, dead_letter, backoff)
            trail = expired + [move.dead_lettered(project, queue, now) for move in moved]
            if not taken:
                self._recorder.record(project, queue, now, trail)
                return None
            claim = {"ttl": ttl, "grace": grace, "created": now, "expires": expires,
                     "messages": [[i, record.generation] for i, record, _, _ in taken]}
            self.put(container, claim_id, claim)
            self._recorder.record(project, queue, now, trail + [
                self._recorder.event(project, queue, events.CLAIMED, now,
                                     message_id=message_id, claim_id=claim_id,
                                     claim_count=record.count, expires=record.expires / US)
                for message_id, record, _, _ in taken])
        return Claim(id=claim_id, ttl=ttl, grace=grace, created=now / US,
                     expires=expires / US, as_of=now / US,
                     messages=[record.message(i, body, now) for i, record, body, _ in taken])

    def available_in(self, project: str, queue: str) -> float | None:
        # The index's first entry: names sort by availability. A queue that does not
        # exist lists nothing.
        with unavailable:
            head = self._objects.names(self._objects.container(project, queue),
                                       lay.INDEX_PREFIX, limit=1)
            entry = Entry.parse(head[0]) if head else None
            if entry is None:
                return None
            return max(0, entry.available - self._now_us()) / US

    def put(self, container: str, claim_id: str, claim: dict[str, Any]) -> None:
        """Write the claim object: ttl, grace, times and the ``[id, generation]`` pairs
        the claim took."""
        self._objects.swift.put_object(container, lay.claim_name(claim_id),
                                       lay.encode(claim),
                                       headers={"X-Delete-At": delete_at(claim["expires"])})

    def _live(self, container: str, claim_id: str, now: int) -> dict[str, Any]:
        """The claim object of a live claim; raises ClaimNotFound."""
        found = None
        if lay.is_uuid_hex(claim_id):
            found = self._objects.get(container, lay.claim_name(claim_id))
        claim = json.loads(found[1]) if found else None
        if claim is None or claim["expires"] <= now:
            raise errors.ClaimNotFound.with_id(claim_id)
        return claim

    def _held(self, container: str, claim_id: str, claim: dict[str, Any], now: int
              ) -> list[Held]:
        """The live messages of *claim* that it still holds (the message's state names
        it, unexpired)."""
        objects = self._objects
        found = objects.parallel(lambda pair: (pair[0], objects.read(container, pair[0])),
                                 claim["messages"])
        return [(i, read[0], read[1]) for i, read in found
                if read is not None and read[0].claim == claim_id
                and read[0].is_claimed(now) and read[0].expires > now]

    def get(self, project: str, queue: str, claim_id: str) -> Claim:
        with unavailable:
            now = self._now_us()
            container = self._objects.container(project, queue)
            claim = self._live(container, claim_id, now)
            held = self._held(container, claim_id, claim, now)
            return Claim(id=claim_id, ttl=claim["ttl"], grace=claim["grace"],
                         created=claim["created"] / US, expires=claim["expires"] / US,
                         as_of=now / US,
                         messages=[r.message(i, b, now) for i, r, b in sorted(held)])

    def renew(self, project: str, queue: str, claim_id: str, ttl: int, grace: int,
              backoff: Backoff | None = None) -> None:
        """Restart the claim's ttl from now; with *backoff*, each message is due
        ``backoff.after(its claim count)`` after the new expiry. Raises ClaimNotFound."""
        with unavailable:
            now = self._now_us()
            container = self._objects.container(project, queue)
            claim = self._live(container, claim_id, now)
            expires = now + ttl * US
            self._objects.parallel(
                lambda held: self._renew_one(project, queue, held, claim_id, expires, grace,
                                             backoff, now),
                self._held(container, claim_id, claim, now))
            self.put(container, claim_id, {**claim, "ttl": ttl, "grace": grace,
                                           "expires": expires})

    def _renew_one(self, project: str, queue: str, held: Held, claim_id: str, expires: int,
                   grace: int, backoff: Backoff | None, now: int) -> None:
        """Extend the claim of one message it holds to *expires*: its marker, its
        record, its index entry."""
        objects = self._objects
        container = objects.container(project, queue)
        message_id, record, _ = held
        due = None if backoff is None else expires + backoff.after(record.count) * US
        renewed = Record(**{**vars(record), "claim_expires": expires,
                            "due": record.due if due is None else due,
                            "expires": max(record.expires, expires + grace * US)})
        marker = Marker(kind=lay.CLAIM, at=now, claim=claim_id, expires=expires, grace=grace,
                        due=due)
        objects.swift.put_object(
            container, lay.marker_name(message_id, record.generation),
            lay.encode(marker.stored()),
            headers={"X-Delete-At": objects.marker_until(renewed.expires)})
        objects.write_record(container, message_id, renewed)
        self._tallies.tally(project, queue, record, renewed)
        objects.move_entry(container, message_id, record.entry(message_id),
                           renewed.entry(message_id))

    def release(self, project: str, queue: str, claim_id: str,
                backoff: Backoff | None = None) -> None:
        """Free the claim's messages: at once (due no later than now), or with
        *backoff* each due ``backoff.after(its claim count)`` from now; then delete
        the claim object. An absent claim is not an error."""
        with unavailable:
            now = self._now_us()
            container = self._objects.container(project, queue)
            try:
                claim = self._live(container, claim_id, now)
            except errors.ClaimNotFound:
                return

            def release_one(held: Held) -> None:
                record = held[1]
                due = (min(record.due, now) if backoff is None
                       else now + backoff.after(record.count) * US)
                self._release_one(project, queue, held[0], record, due, now)

            self._objects.parallel(release_one, self._held(container, claim_id, claim, now))
            self._objects.delete(container, lay.claim_name(claim_id))

    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        """Take one message out of claim *claim_id*, due *delay* seconds from now:
        checked as a delete with a claim id is, then released as
        a release frees each of its messages. Records a ``released`` event."""
        with unavailable:
            now = self._now_us()
            objects = self._objects
            container = objects.container(project, queue)
            found = (objects.read(container, message_id) if lay.is_message_id(message_id)
                     else None)
            if found is not None and found[0].moving:
                # It has left this queue: its move is completed, not reported.
                self._markers.finish_move(project, queue, message_id, found[0], found[1],
                                          found[0].move(), now)
                found = None
            if found is None or found[0].expires <= now:
                raise errors.MessageNotFound.with_id(message_id)
            record, body = found
            holder = record.claim if record.is_claimed(now) else None
            refuse_delete(delete_refusal(claim_id, holder), message_id, claim_id)
            released = self._release_one(project, queue, message_id, record,
                                         now + round(delay * US), now)
            if released is None:
                # Its marker says the claim no longer holds it: a release of the claim
                # rewrote it just now.
                refuse_delete(MESSAGE_NOT_CLAIMED, message_id, claim_id)
            assert released is not None  # refuse_delete raised for MESSAGE_NOT_CLAIMED
            self._recorder.record(project, queue, now, [self._recorder.event(
                project, queue, events.RELEASED, now, message_id=message_id,
                due=released.due / US, claim_count=released.count)])
            return released.message(message_id, body, now)

    def _release_one(self, project: str, queue: str, message_id: str, record: Record,
                     due: int, now: int) -> Record | None:
        """Free a message its claim holds, due at *due* (claim count kept): the released
        record, or None when the claim's marker no longer holds it (nothing changed)."""
        objects = self._objects
        container = objects.container(project, queue)
        name = lay.marker_name(message_id, record.generation)
        found = objects.get(container, name)
        if found is None:
            return None
        marker = Marker.parse(found[1])
        if marker.claim != record.claim or marker.expires <= now:
            return None
        objects.swift.put_object(container, name,
                                 lay.encode(replace(marker, expires=0).stored()),
                                 headers={"X-Delete-At": objects.marker_until(record.expires)})
        released = Record(**{**vars(record), "claim": "", "claim_expires": 0, "due": due})
        objects.write_record(container, message_id, released)
        self._tallies.tally(project, queue, record, released)
        objects.move_entry(container, message_id, record.entry(message_id),
                           released.entry(message_id))
        return released
