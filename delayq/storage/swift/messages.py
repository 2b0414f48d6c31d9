"""The Swift driver's messages: an object per message, its state in its headers and an
entry in its queue's availability index (``layout.py``); what decides between requests
racing for one message is a bid for its next generation marker (``markers.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import errors, events
from delayq.claim import delete_refusal, refuse_delete
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Entry, Record
from delayq.storage.swift.live_messages import LiveMessages
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.message_ids import MessageIds
from delayq.storage.swift.objects import Objects, is_status, unavailable
from delayq.storage.swift.post_keys import PostKeys
from delayq.storage.swift.queue_creation import QueueCreation
from delayq.storage.swift.quotas import Lease, Quotas
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.tallies import Tallies

POP_LEASE = 60  # seconds a pop holds messages before deleting them (a crash frees them)


class Messages:
    """The messages of every queue under the driver's prefix (``BlockingMessages``);
    *now_us* is the driver's clock (µs)."""

    def __init__(self, objects: Objects, tallies: Tallies, recorder: Recorder,
                 markers: Markers, quotas: Quotas, post_keys: PostKeys,
                 creation: QueueCreation, live: LiveMessages, ids: MessageIds,
                 now_us: Callable[[], int]) -> None:
        self._objects = objects
        self._tallies = tallies
        self._recorder = recorder
        self._markers = markers
        self._quotas = quotas
        self._post_keys = post_keys
        self._creation = creation
        self._live = live
        self._ids = ids
        self._now_us = now_us

    # Posts

    def post(self, project: str, queue: str, client_id: str, messages: list[NewMessage],
             *, metadata_token: Any = None, message_quota: int = 0, queue_quota: int = 0,
             key: PostKey | None = None) -> list[str]:
        """With a key, its key object decides the post and holds it whole
        (``post_keys.py``). With a message quota, the post is counted and written under
        the queue's post lease (``quotas.py``); a queue it creates, under the project's
        creation lease."""
        with unavailable:
            if key is not None:
                kept = self._post_keys.kept(project, queue, key.key, self._now_us())
                if kept is not None:
                    raise KeyTaken(kept)
            if message_quota:
                return self._quotas.post(
                    project, queue, len(messages), message_quota,
                    lambda lease: self._post(project, queue, client_id, messages, key,
                                             queue_quota, lease))
            return self._post(project, queue, client_id, messages, key, queue_quota)

    def _post(self, project: str, queue: str, client_id: str, messages: list[NewMessage],
              key: PostKey | None, queue_quota: int, lease: Lease | None = None
              ) -> list[str]:
        """Store the post, creating its queue (under *queue_quota*) when missing; under
        *lease* (the queue's post lease), checked again before the messages are written
        after the queue was created."""
        container = self._objects.container(project, queue)
        now = self._now_us()

        def create_queue() -> None:
            self._creation.ensure(project, queue, {}, queue_quota)
            if lease is not None:
                lease.check()

        if key is not None:
            posted = self._post_keys.post(project, queue, client_id, messages, key, now,
                                          create_queue)
            if isinstance(posted, StoredKey):
                raise KeyTaken(posted)
            return posted
        records = [(self._ids.new(now), m,
                    Record(ttl=m.ttl, created=now, due=now + round(m.delay * US),
                           client=client_id, expires=now + m.ttl * US))
                   for m in messages]

        counted: set[str] = set()  # stored again after a 404: counted once

        def store(item: tuple[str, NewMessage, Record]) -> None:
            message_id, message, record = item
            # The message first: an index entry never points at nothing yet.
            self._objects.put_message(container, message_id, record,
                                      lay.encode(message.body))
            try:
                self._objects.put_entry(container, record.entry(message_id))
            except Exception:
                # Without its entry no claim would ever find the message: the post
                # fails, so the message must not stay either.
                self._objects.delete(container, lay.message_name(message_id))
                raise
            if message_id not in counted:
                counted.add(message_id)
                self._tallies.tally(project, queue, None, record)

        try:
            self._objects.parallel(store, records)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            create_queue()
            self._objects.parallel(store, records)
        self._recorder.record(project, queue, now, [
            self._recorder.event(project, queue, events.POSTED, now, message_id=message_id,
                                 due=record.due / US, ttl=record.ttl,
                                 expires=record.expires / US)
            for message_id, _, record in records])
        return [message_id for message_id, _, _ in records]

    # Reads

    def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
             exclude_client: str | None, include_claimed: bool, include_delayed: bool
             ) -> tuple[list[Message], str | None]:
        """Ids sort in post order, so the marker is an id, and next links hand ids out:
        a deleted message's id still says where to go on. A position, which no listing
        here hands out, names no place: refused, as it always was."""
        if marker.position:
            raise errors.ValidationError(
                f"marker {str(marker.position)[:40]!r} is not valid: this store's "
                "listings take message ids.")
        after = marker.message_id
        page: list[Message] = []
        last = None
        with unavailable:
            now = self._now_us()
            for ids in self._listing_candidates(project, queue, after, limit, now,
                                                include_claimed, include_delayed):
                for message in self._live.read(project, queue, ids, now):
                    if ((exclude_client is not None and message.client_id == exclude_client)
                            or (not include_claimed and message.is_claimed)
                            or (not include_delayed and message.is_delayed)):
                        continue
                    page.append(message)
                    last = message.id
                    if len(page) == limit:
                        return page, last
        return page, last

    def _listing_candidates(self, project: str, queue: str, marker: str | None, limit: int,
                            now: int, include_claimed: bool, include_delayed: bool
                            ) -> Iterator[list[str]]:
        """Batches of ids after *marker*, in post order, that a listing should read.

        With every message wanted, the batches come from listing ``m/``. When claimed or
        delayed ones are left out, the index already tells which to skip, so a page
        behind many hidden messages reads the index (a request per 10,000 entries), not
        each hidden message. The messages read decide in the end (an entry may be stale).
        """
        container = self._objects.container(project, queue)
        batch = max(limit, 20)
        if include_claimed and include_delayed:
            after = lay.message_name(marker) if marker else lay.MESSAGE_PREFIX
            while names := self._objects.names(container, lay.MESSAGE_PREFIX, marker=after,
                                               limit=batch):
                after = names[-1]
                yield [n[len(lay.MESSAGE_PREFIX):] for n in names]
            return
        # Without claimed and delayed ones, only what is available now can qualify.
        end = None if include_claimed or include_delayed else lay.index_end(now)
        wanted = set()
        for name in self._objects.names(container, lay.INDEX_PREFIX, end=end):
            entry = Entry.parse(name)
            if entry is None or entry.expires <= now or entry.message_id <= (marker or ""):
                continue
            available = entry.available <= now
            claimed = not available and entry.is_claimed(now)
            delayed = not available and not claimed
            if (include_claimed or not claimed) and (include_delayed or not delayed):
                wanted.add(entry.message_id)
        ids = sorted(wanted)
        for start in range(0, len(ids), limit):
            yield ids[start:start + limit]

    @staticmethod
    def is_message_id(text: str) -> bool:
        return lay.is_message_id(text)

    def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        with unavailable:
            now = self._now_us()
            wanted = sorted({i for i in ids if lay.is_message_id(i)})
            return self._live.read(project, queue, wanted, now)

    # Deletions

    def _forget(self, container: str, message_id: str, record: Record) -> bool:
        """Delete a message and its index entry; False if the message was gone already
        (another request deleted it, and records that)."""
        deleted = self._objects.delete(container, lay.message_name(message_id))
        self._objects.delete(container, record.entry(message_id).name)
        return deleted

    def delete(self, project: str, queue: str, message_id: str,
               claim_id: str | None) -> None:
        container = self._objects.container(project, queue)
        with unavailable:
            now = self._now_us()
            found = (self._objects.read(container, message_id)
                     if lay.is_message_id(message_id) else None)
            if found is None or found[0].expires <= now:
                return
            record = found[0]
            holder = record.claim if record.is_claimed(now) else None
            refuse_delete(delete_refusal(claim_id, holder), message_id, claim_id)
            # A message marked moving has left this queue already: its move is recorded
            # and counted.
            if self._forget(container, message_id, record) and not record.moving:
                self._tallies.tally(project, queue, record, None)
                self._recorder.record(project, queue, now, [
                    self._recorder.deleted(project, queue, now, message_id, record, holder)])

    def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        container = self._objects.container(project, queue)
        with unavailable:
            now = self._now_us()

            def forget(message_id: str) -> events.Event | None:
                found = (self._objects.read(container, message_id)
                         if lay.is_message_id(message_id) else None)
                if found is None:
                    return None
                record = found[0]
                if record.expires <= now and not record.moving:
                    # It ended with its expiry, which the winner of its expire marker
                    # removes and reports: deleted here too, it would go unreported.
                    return None
                deleted = self._forget(container, message_id, record)
                if deleted and not record.moving:
                    self._tallies.tally(project, queue, record, None)
                # A moving one ended with its move.
                if not deleted or record.moving:
                    return None
                return self._recorder.deleted(project, queue, now, message_id, record)

            trail = self._objects.parallel(forget, sorted(set(ids)))
            self._recorder.record(project, queue, now, [event for event in trail if event])

    def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        container = self._objects.container(project, queue)
        with unavailable:
            now = self._now_us()
            pop_id = uuid.uuid4().hex
            taken, _, expired = self._markers.take(project, queue, now, limit, pop_id,
                                                   now + POP_LEASE * US, 0, None)
            forgotten = self._objects.parallel(lambda t: self._forget(container, t[0], t[1]),
                                               taken)
            for (_, record, _, _), deleted in zip(taken, forgotten, strict=True):
                if deleted:
                    self._tallies.tally(project, queue, record, None)
            # Popped as it was before the pop marked it; one a concurrent delete took
            # first is that delete's to record.
            self._recorder.record(project, queue, now, expired + [
                self._recorder.event(project, queue, events.POPPED, now,
                                     message_id=message_id, claim_count=before.count)
                for (message_id, _, _, before), deleted in zip(taken, forgotten, strict=True)
                if deleted])
            return [before.message(i, body, now) for i, _, body, before in taken]

    # Edits and redrives

    def edit(self, project: str, queue: str, message_id: str, *,
             body: Any | Unchanged = NO_CHANGE, delay: float | None = None) -> Message:
        with unavailable:
            return self._markers.edit(project, queue, message_id, body, delay, self._now_us)

    def redrive(self, project: str, queue: str, *, destination: str | None, limit: int,
                queue_quota: int = 0) -> int:
        """A *destination* that is missing is created, under *queue_quota*, before the
        first message is bid for: refused, nothing moves."""
        prepare = None
        if destination is not None and queue_quota:
            def prepare() -> None:
                self._creation.ensure(project, destination, {}, queue_quota)
        with unavailable:
            now = self._now_us()
            moved = self._markers.redrive(project, queue, now, destination, limit,
                                          uuid.uuid4().hex, prepare)
            self._recorder.record(project, queue, now,
                                  [move.redriven(project, queue, now) for move in moved])
        return len(moved)
