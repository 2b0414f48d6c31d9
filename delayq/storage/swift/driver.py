"""The Swift driver: queues, messages and claims in an OpenStack Swift account.

``layout.py`` describes the objects. The driver's requests and what Swift's answers need
before they can be trusted (bids, 404 rechecks, the proxy's clock) are ``objects.py``'s;
claims, moves, redrives, edits and expiries are won by bidding for generation markers
(``markers.py``), and what a claim's holder does then is ``claims.py``'s; the event trail
is ``recorder.py``'s, the tallies behind ``queue_counts`` ``tallies.py``'s, the reaper's
passes ``expiry.py``'s, subscriptions ``subscriptions.py``'s, the leases that make the
quotas exact ``quotas.py``'s. This module answers the storage interface with them.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from oslo_config import cfg
from swiftclient import client as swift
from swiftclient.exceptions import ClientException

from delayq import errors, events
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.conf import events_settings
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import operation
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats
from delayq.retry import Backoff
from delayq.storage import base
from delayq.storage.clock import ServerClock
from delayq.storage.swift import layout as lay
from delayq.storage.swift.claims import Claims
from delayq.storage.swift.expiry import Expiry
from delayq.storage.swift.layout import US, Entry, Record
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.objects import (
    EXPIRED_RETENTION,
    NAME,
    Objects,
    is_status,
    unavailable,
)
from delayq.storage.swift.options import GROUP
from delayq.storage.swift.post_keys import PostKeys
from delayq.storage.swift.quotas import Lease, Quotas
from delayq.storage.swift.subscriptions import Subscriptions
from delayq.storage.swift.tallies import Tallies
from delayq.storage.swift.recorder import Recorder
from delayq.subscription import Subscription, SubscriptionChange

POP_LEASE = 60  # seconds a pop holds messages before deleting them (a crash frees them)
MESSAGES_BATCH = 100  # messages read at once by read_messages


class Driver(base.Driver):
    """Queues, messages and claims in an OpenStack Swift account."""

    name = NAME
    # A post removes nothing: reaping would cost it a listing of the index. Claims remove
    # the expired messages they meet at the head of the index, the reaper the others.
    reaps_on_write = False

    def __init__(self, connect: Callable[[], swift.Connection], *, prefix: str = "dq",
                 concurrency: int = 16, claim_settle_time: float = 0.1,
                 clock_sync_interval: float = 30.0,
                 clock: Callable[[], float] | None = None,
                 events_settings: events.Settings = events.ON,
                 tally_flush_interval: float = 1.0, tally_writer_lease: int = 300,
                 expired_retention: int = EXPIRED_RETENTION, reap_interval: int = 0,
                 endings: base.Endings = base.ignore_endings) -> None:
        """*connect* makes a connection (one per thread: swiftclient's are not shared);
        *clock* replaces the proxy's clock (tests); *events_settings* turns the event
        trail on or off; *tally_flush_interval* is the seconds between writes of this
        process's tallies, *tally_writer_lease* the seconds of the lease on its writer
        slot (at least ``tallies.MIN_LEASE``: tests use a few seconds, the option at least
        30); *expired_retention* the seconds an expired message stays stored for the
        reaper; *reap_interval* the seconds between passes of the background reaper (0:
        none, as tests want: they call ``reap`` themselves)."""
        super().__init__(endings=endings)
        self._objects = Objects(connect, prefix=prefix, concurrency=concurrency,
                                claim_settle_time=claim_settle_time,
                                expired_retention=expired_retention)
        # Set on close: the flusher and a reaper pass under way stop.
        self._stop = threading.Event()
        self._tallies = Tallies(self._objects, self._now_us, self._stop,
                                flush_interval=tally_flush_interval,
                                lease_time=tally_writer_lease)
        self._recorder = Recorder(self._objects, events_settings, endings)
        self._markers = Markers(self._objects, self._tallies, self._recorder,
                                self._ensure_queue)
        self._claims = Claims(self._objects, self._tallies, self._recorder, self._markers)
        self._subscriptions = Subscriptions(self._objects)
        self._expiry = Expiry(self._objects, self._markers, self._recorder, self._now_us,
                              self._stop)
        self._post_keys = PostKeys(self._objects, self._tallies, self._recorder, self._new_id,
                                   self._now_us)
        self._quotas = Quotas(self._objects, self._now_us)
        self._last_id_us = 0
        self._lock = threading.Lock()  # guards _last_id_us
        clock_object = lay.clock_object(secrets.token_hex(8))
        self._clock = clock or ServerClock(
            lambda: self._objects.proxy_stamp(clock_object), clock_sync_interval)
        self.start_reaper(reap_interval, self._expiry.lease)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        os_options = {}
        if group.auth_version == "3":
            os_options = {"project_name": group.project_name,
                          "project_domain_name": group.project_domain_name,
                          "user_domain_name": group.user_domain_name,
                          "project_domain_id": group.project_domain_id,
                          "user_domain_id": group.user_domain_id,
                          "region_name": group.region_name,
                          "interface": group.interface, "endpoint_type": group.interface}

        def connect() -> swift.Connection:
            # No retries inside swiftclient: a conditional PUT retried after a lost reply
            # would read its own success as a lost race.
            return swift.Connection(authurl=group.auth_url, user=group.user, key=group.key,
                                    auth_version=group.auth_version, os_options=os_options,
                                    insecure=group.insecure, cacert=group.cacert,
                                    timeout=group.timeout, retries=0)

        return cls(connect, prefix=group.container_prefix, concurrency=group.concurrency,
                   claim_settle_time=group.claim_settle_time,
                   clock_sync_interval=group.clock_sync_interval,
                   events_settings=events_settings(conf),
                   tally_flush_interval=group.tally_flush_interval,
                   tally_writer_lease=group.tally_writer_lease,
                   expired_retention=group.expired_retention,
                   reap_interval=group.reap_interval, endings=endings)

    @operation
    def now(self) -> float:
        with unavailable:
            return self._now_us() / US

    def _now_us(self) -> int:
        return round(self._clock() * US)

    @operation
    def ping(self) -> bool:
        try:
            with unavailable:
                self._objects.swift.head_account()
        except errors.StorageUnavailable:
            return False
        return True

    def close(self) -> None:
        """Stop the reaper, write the tallies still pending (its own among them), free
        the writer slot, then let go of the connections."""
        # Set first: a reaper pass under way stops at its next batch (and the flusher).
        self._stop.set()
        self.stop_reaper()
        self._tallies.close()
        self._objects.close()

    # The reaper

    @operation
    def reap(self) -> None:
        """One pass: the expired messages of every queue container under this driver's
        prefix, each removed and reported by whoever wins its expire marker (so passes
        and claims racing report each once); then the expired subscriptions."""
        self._expiry.reap()
        with unavailable:
            self._subscriptions.reap(self._now_us())

    def reap_queue(self, project: str, queue: str) -> None:
        """Remove the queue's expired messages (``expiry.Expiry.reap_queue``)."""
        self._expiry.reap_queue(project, queue)

    # Tallies

    def flush_tallies(self) -> None:
        """Write every tally page this process changed since it last wrote it."""
        self._tallies.flush()

    @operation
    def queue_counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (``tallies.Tallies.count``), never the messages."""
        return self._tallies.count(project, name)

    # Queues

    def _ensure_queue(self, project: str, queue: str, metadata: dict[str, Any],
                      quota: int = 0) -> bool:
        """Create the queue's container and metadata; False if the queue existed.

        *quota*, above 0, is the project's queue quota: a queue to create past it is
        refused (``quotas.Quotas.create_queue``). 0 (dead-letter moves, redrives back to
        source queues) creates whatever the count.
        """
        if quota:
            return self._quotas.create_queue(
                project, queue, quota, lambda: self._make_queue(project, queue, metadata))
        return self._make_queue(project, queue, metadata)

    def _make_queue(self, project: str, queue: str, metadata: dict[str, Any]) -> bool:
        """``_ensure_queue`` once decided.

        With the trail on, the queue's events container too, so that writing events is
        one PUT from the first request on.
        """
        objects = self._objects
        container = objects.container(project, queue)
        objects.swift.put_container(container)
        if self._recorder.enabled:
            objects.swift.put_container(lay.events_container(objects.prefix, project, queue))
        # The metadata object is what makes a queue exist for readers; a creation
        # interrupted before it is completed by the next one.
        return objects.create(container, lay.META, lay.encode(metadata), {})

    @operation
    def create_queue(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        with unavailable:
            return self._ensure_queue(project, name, metadata, queue_quota)

    @operation
    def get_queue(self, project: str, name: str) -> dict[str, Any] | None:
        container = self._objects.container(project, name)
        with unavailable:
            found = self._objects.get(container, lay.META)
            if found is None:
                # A container without metadata holding messages is a creation that died
                # half way after a post stored them: finish it. One holding no message is
                # no queue: an unfinished creation, or a deleted queue's container that a
                # racing tally write brought back (see Tallies.drop_stray).
                try:
                    _, held = self._objects.swift.get_container(
                        container, prefix=lay.MESSAGE_PREFIX, limit=1)
                except ClientException as exc:
                    if is_status(exc, 404):
                        return None  # no container: nothing to tidy either
                    raise
                if not held:
                    self._tallies.drop_stray(container)
                    return None
                self._objects.create(container, lay.META, lay.encode({}), {})
                found = self._objects.get(container, lay.META)
        return json.loads(found[1]) if found else None

    @operation
    def set_queue_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            if self._objects.get(container, lay.META) is None:
                raise errors.QueueNotFound.named(name)
            self._objects.swift.put_object(container, lay.META, lay.encode(metadata))

    @operation
    def delete_queue(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            now = self._now_us()
            with self._tallies.dropping(project, name):
                deleted = self._objects.delete_container(container, name)
            if deleted:
                self._recorder.record(project, name, now,
                                   [self._recorder.event(project, name, events.PURGED, now)])

    @operation
    def purge_queue(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            now = self._now_us()
            # The tally objects too: an empty queue counts nothing.
            with self._tallies.dropping(project, name):
                listing = self._objects.names(container, "")
                self._objects.delete_objects(container, [n for n in listing if n != lay.META])
            if listing:  # an absent queue is not purged
                self._recorder.record(project, name, now,
                                   [self._recorder.event(project, name, events.PURGED, now)])

    @operation
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> list[tuple[str, dict[str, Any]]]:
        objects = self._objects
        start = lay.queue_prefix(objects.prefix, project)
        with unavailable:
            _, listing = objects.swift.get_account(prefix=start, marker=start + (marker or ""),
                                                   limit=limit)
            names = [item["name"][len(start):] for item in listing]
            metadata = objects.parallel(
                lambda n: objects.get(objects.container(project, n), lay.META), names)
        return [(name, json.loads(found[1])) for name, found in zip(names, metadata,
                                                                    strict=True) if found]

    @operation
    def count_queues(self, project: str) -> int:
        start = lay.queue_prefix(self._objects.prefix, project)
        with unavailable:
            _, listing = self._objects.swift.get_account(prefix=start, full_listing=True)
        return len(listing)

    @operation
    def queue_stats(self, project: str, name: str) -> QueueStats:
        container = self._objects.container(project, name)
        with unavailable:
            now = self._now_us()
            free = claimed = delayed = 0
            live = lay.live_entries(self._objects.names(container, lay.INDEX_PREFIX), now)
            for entry in live:
                if entry.available <= now:
                    free += 1
                elif entry.is_claimed(now):
                    claimed += 1
                else:
                    delayed += 1
            oldest = newest = None
            if live:
                ids = sorted(entry.message_id for entry in live)
                oldest = self._first_live(project, name, ids, now)
                newest = self._first_live(project, name, reversed(ids), now)
        return QueueStats(free=free, claimed=claimed, delayed=delayed, oldest=oldest,
                          newest=newest)

    def _first_live(self, project: str, queue: str, ids: Iterable[str], now: int
                    ) -> Message | None:
        for message_id in ids:
            found = self._live(project, queue, [message_id], now)
            if found:
                return found[0]
        return None

    # Messages

    @operation
    def post_messages(self, project: str, queue: str, client_id: str,
                      messages: list[NewMessage], *, metadata_token: Any = None,
                      message_quota: int = 0, queue_quota: int = 0,
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
            self._ensure_queue(project, queue, {}, queue_quota)
            if lease is not None:
                lease.check()

        if key is not None:
            posted = self._post_keys.post(project, queue, client_id, messages, key, now,
                                     create_queue)
            if isinstance(posted, StoredKey):
                raise KeyTaken(posted)
            return posted
        records = [(self._new_id(now), m,
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

    def _new_id(self, now: int) -> str:
        """An id after every id this process made before, so its posts list in order."""
        with self._lock:
            self._last_id_us = max(now, self._last_id_us + 1)
            return lay.new_message_id(self._last_id_us)

    def _live(self, project: str, queue: str, ids: Iterable[str], now: int
              ) -> list[Message]:
        """The live messages among *ids*; moves under way are completed, not reported."""
        container = self._objects.container(project, queue)
        found = self._objects.parallel(lambda i: (i, self._objects.read(container, i)), ids)
        live = []
        for message_id, read in found:
            if read is None:
                continue
            if read[0].moving:
                # Its expiry here does not matter: the move decides whether it lives on
                # in the queue it was moving to.
                self._markers.finish_move(project, queue, message_id, read[0], read[1],
                                          read[0].move(), now)
                continue
            if read[0].expires > now:
                live.append(read[0].message(message_id, read[1], now))
        return live

    @operation
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> tuple[list[Message], str | None]:
        if marker and not lay.is_message_id(marker):
            raise errors.ValidationError(f"marker {marker[:40]!r} is not valid.")
        page: list[Message] = []
        last = None
        with unavailable:
            now = self._now_us()
            for ids in self._listing_candidates(project, queue, marker, limit, now,
                                                include_claimed, include_delayed):
                for message in self._live(project, queue, ids, now):
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

    @operation
    def get_messages(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        with unavailable:
            now = self._now_us()
            wanted = sorted({i for i in ids if lay.is_message_id(i)})
            return self._live(project, queue, wanted, now)

    def _forget(self, container: str, message_id: str, record: Record) -> bool:
        """Delete a message and its index entry; False if the message was gone already
        (another request deleted it, and records that)."""
        deleted = self._objects.delete(container, lay.message_name(message_id))
        self._objects.delete(container, record.entry(message_id).name)
        return deleted

    @operation
    def delete_message(self, project: str, queue: str, message_id: str,
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

    @operation
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> None:
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

    @operation
    def pop_messages(self, project: str, queue: str, limit: int) -> list[Message]:
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
                self._recorder.event(project, queue, events.POPPED, now, message_id=message_id,
                                  claim_count=before.count)
                for (message_id, _, _, before), deleted in zip(taken, forgotten, strict=True)
                if deleted])
            return [before.message(i, body, now) for i, _, body, before in taken]

    # Claims

    @operation
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
              backoff: Backoff | None = None) -> Claim | None:
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
            self._claims.put(container, claim_id, claim)
            self._recorder.record(project, queue, now, trail + [
                self._recorder.event(project, queue, events.CLAIMED, now, message_id=message_id,
                                  claim_id=claim_id, claim_count=record.count,
                                  expires=record.expires / US)
                for message_id, record, _, _ in taken])
        return Claim(id=claim_id, ttl=ttl, grace=grace, created=now / US,
                     expires=expires / US, as_of=now / US,
                     messages=[record.message(i, body, now) for i, record, body, _ in taken])

    @operation
    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        with unavailable:
            return self._claims.get(project, queue, claim_id, self._now_us())

    @operation
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        with unavailable:
            self._claims.renew(project, queue, claim_id, ttl, grace, backoff, self._now_us())

    @operation
    def release_claim(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        with unavailable:
            self._claims.release(project, queue, claim_id, backoff, self._now_us())

    @operation
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        with unavailable:
            return self._claims.hand_back(project, queue, message_id, claim_id, delay,
                                          self._now_us())

    # Subscriptions (subscriptions.py)

    @operation
    def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                            options: dict[str, Any]) -> str | None:
        with unavailable:
            return self._subscriptions.create(project, queue, subscriber, ttl, options,
                                              self._now_us())

    @operation
    def get_subscription(self, project: str, queue: str, subscription_id: str
                         ) -> Subscription | None:
        with unavailable:
            return self._subscriptions.get(project, queue, subscription_id, self._now_us())

    @operation
    def list_subscriptions(self, project: str, queue: str, marker: str | None,
                           limit: int) -> list[Subscription]:
        with unavailable:
            return self._subscriptions.list(project, queue, marker, limit, self._now_us())

    @operation
    def update_subscription(self, project: str, queue: str, subscription_id: str,
                            change: SubscriptionChange) -> None:
        with unavailable:
            self._subscriptions.update(project, queue, subscription_id, change,
                                       self._now_us)

    @operation
    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        with unavailable:
            self._subscriptions.delete(project, queue, subscription_id)

    @operation
    def purge_subscriptions(self, project: str, queue: str) -> None:
        with unavailable:
            self._subscriptions.purge(project, queue)

    @operation
    def subscribed_queues(self) -> list[tuple[str, str]]:
        with unavailable:
            return self._subscriptions.subscribed_queues(self._now_us())

    # Redrive and edits

    @operation
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int, queue_quota: int = 0) -> int:
        """A *destination* that is missing is created, under *queue_quota*, before the
        first message is bid for: refused, nothing moves."""
        prepare = None
        if destination is not None and queue_quota:
            def prepare() -> None:
                self._ensure_queue(project, destination, {}, queue_quota)
        with unavailable:
            now = self._now_us()
            moved = self._markers.redrive(project, queue, now, destination, limit,
                                          uuid.uuid4().hex, prepare)
            self._recorder.record(project, queue, now,
                               [move.redriven(project, queue, now) for move in moved])
        return len(moved)

    @operation
    def edit_message(self, project: str, queue: str, message_id: str, *,
                     body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                     ) -> Message:
        with unavailable:
            return self._markers.edit(project, queue, message_id, body, delay, self._now_us)

    # Long-poll claims

    @operation
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

    # Audit reads: whole queues, for delayq.spark_jobs. The listings are Swift's, which
    # may lag a little behind the latest writes.

    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        return self._recorder.queues(project)

    def read_events(self, project: str, queue: str) -> Iterator[events.Event]:
        return self._recorder.read(project, queue)

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        container = self._objects.container(project, queue)
        after = lay.MESSAGE_PREFIX
        with unavailable:
            now = self._now_us()
        while True:
            with unavailable:
                names = self._objects.names(container, lay.MESSAGE_PREFIX, marker=after,
                                            limit=MESSAGES_BATCH)
                if not names:
                    return
                ids = [name[len(lay.MESSAGE_PREFIX):] for name in names]
                live = self._live(project, queue, ids, now)
            yield from live
            after = names[-1]
