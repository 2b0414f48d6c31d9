"""The Swift driver.

``layout.py`` describes the objects; ``objects.py`` the requests and what Swift's answers
need before they can be trusted (bids, 404 rechecks, the proxy's clock); ``trail.py``
the event trail, ``tallies.py`` the tallies behind ``queue_counts``. The protocol is:

Claim
    List the queue's availability index (``a/``) up to now: the claimable messages, oldest
    first. For each, create its next generation marker ``c/<id>/<n+1>`` conditionally:
    of concurrent claimers exactly one wins the bid, and that marker *is* the claim, claim
    count included. The winner then rewrites the message's state headers and moves its
    index entry to the claim's expiry (new entry first, old one deleted after). A claimer
    that loses (412) looks at the markers and repairs a stale entry left by a process that
    died half way, so nothing stays stuck.
Dead-letter move
    The n+1-th marker says "move" instead. The winner first marks the source message as
    moving (a header), then copies it into the dead-letter queue's container
    (``If-None-Match: *``, same id), writes its index entry there, and only then deletes
    it from the source. Every read of the source that meets a message marked moving
    completes the move first and does not report it; a claim that meets the stale index
    entry of a move whose mover died completes it too. Every step can be repeated, so a
    process dying anywhere loses nothing, and a message is never read in both queues.
Edit
    The n+1-th marker says "edit" and carries the edit (new due time, new body), so the
    result is the same whoever completes it. The editor bids like a claimer, for a
    message whose record shows no live claim; the winner rewrites the message (``PUT``
    when the body changes, else a ``POST`` of its state) at generation n+1 and moves its
    index entry. A claimer that meets the stale entry of an edit whose editor died loses
    its bid and completes the edit (``_repair``); an edit is never counted as a claim.
Expiry
    Every read compares expiry with now: an expired message is never shown, counted,
    claimed, edited, redriven or deleted. It stays stored (``X-Delete-At`` is its expiry
    plus ``expired_retention``) until delayq removes it, so that it is reported once
    (``expired`` event, ``endings``, tallies): Swift has no delete-if (two racing DELETEs
    may both get 204), so the right to remove and report it is the marker
    ``c/<id>/<n+1>`` of kind ``expire``, bid for like a claim's. Claims (and pops) bid
    for the expired messages they meet at the head of the index, so the next ones do not
    meet them again; ``reap`` (the background reaper, one process per pass by a lease in
    the writers container) for every queue's. Losers repair the entry as a claim's loser
    does; a claim that won the generation first keeps the message, which was live when
    it bid. An entry's availability is never after its message's expiry
    (``layout.free_entry``), so listing the index up to now finds every expired message.
    A message being moved is completed by ``_finish_move``, never reaped. Left: a
    ``DELETE ?ids=`` that read a message just before it expired and a removal of it may
    both report it.
"""

from __future__ import annotations

import json
import logging
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from oslo_config import cfg
from swiftclient import client as swift
from swiftclient.exceptions import ClientException

from delayq import errors, events
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.conf import events_settings
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import operation
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats, dead_lettered_ttl
from delayq.storage import base
from delayq.storage.clock import ServerClock
from delayq.storage.reaper import Reaper
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Entry, Record
from delayq.storage.swift.objects import (
    DELETE_AFTER,
    EXPIRED_RETENTION,
    LISTING_PAGE,
    NAME,
    Objects,
    delete_at,
    is_status,
    unavailable_as_503,
)
from delayq.storage.swift.options import GROUP
from delayq.storage.swift.tallies import Tallies
from delayq.storage.swift.trail import Trail

LOG = logging.getLogger(__name__)

CLAIM_BATCH = 32  # index entries read per listing while claiming
REAP_BATCH = 64  # expired index entries a reaper pass handles at once
REAPER_POOL = "delayq-swift-reaper"  # the reaper's threads for per-message requests
# A repairer meeting an expire marker (beyond the record) completes the removal only once
# the marker is this old (µs of the driver's clock): before, its winner is alive and
# deleting, and the winner reports the expiry only when its DELETE found the message.
EXPIRY_ABANDONED = 60 * 1_000_000
POP_LEASE = 60  # seconds a pop holds messages before deleting them (a crash frees them)
MESSAGES_BATCH = 100  # messages read at once by read_messages
# Bids an edit makes for a message that other requests keep changing before it answers
# 409: each lost bid means another claim, move or edit of it won meanwhile.
EDIT_ATTEMPTS = 5


@dataclass(frozen=True)
class Moved:
    """A dead-letter move (or redrive) this request won and completed."""

    message_id: str
    record: Record  # the source's record, marked moving
    body: bytes
    marker: dict[str, Any]  # the move's marker: target queue, ttl, time


class Lost:
    """What a claim attempt gives when another claimer won the message's marker."""


LOST = Lost()


def dead_lettered(record: Record, marker: dict[str, Any]) -> tuple[int, int]:
    """The ttl and expiry (µs) of a message the move *marker* takes to its queue."""
    return dead_lettered_ttl(marker["ttl"], record.ttl, record.created, marker["at"], US)


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
                 expired_retention: int = EXPIRED_RETENTION, reap_interval: int = 0
                 ) -> None:
        """*connect* makes a connection (one per thread: swiftclient's are not shared);
        *clock* replaces the proxy's clock (tests); *events_settings* turns the event
        trail on or off; *tally_flush_interval* is the seconds between writes of this
        process's tallies, *tally_writer_lease* the seconds of the lease on its writer
        slot (at least ``tallies.MIN_LEASE``: tests use a few seconds, the option at
        least 30);
        *expired_retention* the seconds an expired message stays stored for the reaper;
        *reap_interval* the seconds between passes of the background reaper (0: none,
        as tests want: they call ``reap`` themselves)."""
        self._objects = Objects(connect, prefix=prefix, concurrency=concurrency,
                                claim_settle_time=claim_settle_time,
                                expired_retention=expired_retention)
        # Set on close: the flusher and a reaper pass under way stop.
        self._stop = threading.Event()
        self._tallies = Tallies(self._objects, self._now_us, self._stop,
                                flush_interval=tally_flush_interval,
                                lease_time=tally_writer_lease)
        # ``endings`` is looked up at each call: the API sets it once the driver is made.
        self._trail = Trail(self._objects, events_settings,
                            lambda kinds: self.endings(kinds))
        self._last_id_us = 0
        self._lock = threading.Lock()  # guards _last_id_us
        clock_object = lay.clock_object(secrets.token_hex(8))
        self._clock = clock or ServerClock(
            lambda: self._objects.proxy_time_ms(clock_object), clock_sync_interval)
        self._reaper: Reaper | None = None
        if reap_interval > 0:
            self._reaper = Reaper("delayq-swift-reaper", self.reap, self._reaper_lease,
                                  reap_interval)
            self._reaper.start()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Driver:
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
                   reap_interval=group.reap_interval)

    @operation
    def now(self) -> float:
        with unavailable_as_503():
            return self._now_us() / US

    def _now_us(self) -> int:
        return round(self._clock() * US)

    @operation
    def ping(self) -> bool:
        try:
            with unavailable_as_503():
                self._objects.swift.head_account()
        except errors.StorageUnavailable:
            return False
        return True

    def close(self) -> None:
        """Stop the reaper, write the tallies still pending (its own among them), free
        the writer slot, then let go of the connections."""
        # Set first: a reaper pass under way stops at its next batch (and the flusher).
        self._stop.set()
        if self._reaper is not None:
            self._reaper.stop()
        self._tallies.close()
        self._objects.close()

    # The reaper

    def _reaper_lease(self, seconds: float) -> bool:
        """Bid for this pass of the background reaper: True for the one process of the
        deployment that won it. The lease is never renewed nor deleted: it lapses before
        the next pass is due (``delayq.storage.reaper``)."""
        container = lay.writers_container(self._objects.prefix)
        body = lay.lease_body(secrets.token_hex(8))
        # Whole seconds, as Swift keeps them; a lease of less than one would be none.
        headers = {DELETE_AFTER: str(max(1, int(seconds)))}
        with unavailable_as_503():
            try:
                return self._objects.bid(container, lay.REAPER, body, headers)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
                self._objects.swift.put_container(container)  # the deployment's first lease
                return self._objects.bid(container, lay.REAPER, body, headers)

    @operation
    def reap(self) -> None:
        """One pass: the expired messages of every queue container under this driver's
        prefix, each removed and reported by whoever wins its expire marker (so passes
        and claims racing report each once)."""
        with unavailable_as_503():
            containers = self._objects.account(f"{self._objects.prefix}:")
        for part, queue in filter(None, (lay.parse_container(self._objects.prefix, name)
                                         for name in containers)):
            if self._stop.is_set():
                return  # closing: the next pass, of whichever process, goes on
            try:
                with unavailable_as_503():
                    project = lay.project_of_part(part)
                    if project is None:
                        project = self._trail.project_of_queue(part, queue)
                    if project is None:
                        LOG.debug("Queue %s of a hashed project part %s left unreaped: "
                                  "no event of its trail names the project", queue, part)
                        continue
                    self.reap_queue(project, queue)
            except (errors.StorageUnavailable, ClientException) as exc:
                # One queue failing (Swift, or the queue deleted under the pass) leaves
                # the others theirs.
                LOG.warning("Expired messages of queue %s not reaped in this pass: %s",
                            queue, getattr(exc, "description", exc))

    def reap_queue(self, project: str, queue: str) -> None:
        """Remove the queue's expired messages: every index entry available by now whose
        expiry has passed (``layout.free_entry``: an expired message's entry is listed),
        a listing at a time, its entries in batches of ``REAP_BATCH``, each batch's
        events one object."""
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            end = lay.index_end(now)
            after = lay.INDEX_PREFIX
            while True:
                names = self._objects.names(container, lay.INDEX_PREFIX, marker=after, end=end,
                                            limit=LISTING_PAGE)
                expired = [entry for entry in map(Entry.parse, names)
                           if entry is not None and entry.expires <= now]
                for start in range(0, len(expired), REAP_BATCH):
                    if self._stop.is_set():
                        return
                    trail = self._objects.parallel(
                        lambda entry: self._expire(project, queue, entry, now),
                        expired[start:start + REAP_BATCH], pool=REAPER_POOL)
                    self._trail.record(project, queue, now, [event for event in trail if event])
                if len(names) < LISTING_PAGE:
                    return
                after = names[-1]

    @staticmethod
    def _message(message_id: str, record: Record, body: bytes, now: int) -> Message:
        return Message(
            id=message_id, body=json.loads(body), ttl=record.ttl, created=record.created / US,
            expires=record.expires / US, due=record.due / US, client_id=record.client,
            claim_id=record.claim or None, claim_expires=record.claim_expires / US,
            claim_count=record.count, as_of=now / US, source_queue=record.source or None,
            moved_at=record.moved / US if record.moved else None)

    # Tallies

    def flush_tallies(self) -> None:
        """Write every tally page this process changed since it last wrote it."""
        self._tallies.flush()

    @operation
    def queue_counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (``tallies.Tallies.count``), never the messages."""
        return self._tallies.count(project, name)

    # Queues

    def _ensure_queue(self, project: str, queue: str, metadata: dict[str, Any]) -> bool:
        """Create the queue's container and metadata; False if the queue existed.

        With the trail on, the queue's events container too, so that writing events is
        one PUT from the first request on.
        """
        container = self._objects.container(project, queue)
        self._objects.swift.put_container(container)
        if self._trail.enabled:
            self._objects.swift.put_container(
                lay.events_container(self._objects.prefix, project, queue))
        # The metadata object is what makes a queue exist for readers; a creation
        # interrupted before it is completed by the next one.
        return self._objects.create(container, lay.META, lay.encode(metadata), {})

    @operation
    def create_queue(self, project: str, name: str, metadata: dict[str, Any]) -> bool:
        with unavailable_as_503():
            return self._ensure_queue(project, name, metadata)

    @operation
    def get_queue(self, project: str, name: str) -> dict[str, Any] | None:
        container = self._objects.container(project, name)
        with unavailable_as_503():
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
        with unavailable_as_503():
            if self._objects.get(container, lay.META) is None:
                raise errors.QueueNotFound(f"Queue {name!r} does not exist.")
            self._objects.swift.put_object(container, lay.META, lay.encode(metadata))

    @operation
    def delete_queue(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable_as_503():
            now = self._now_us()
            with self._tallies.dropping(project, name):
                deleted = self._objects.delete_container(container, name)
            if deleted:
                self._trail.record(project, name, now,
                                   [self._trail.event(project, name, events.PURGED, now)])

    @operation
    def purge_queue(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable_as_503():
            now = self._now_us()
            # The tally objects too: an empty queue counts nothing.
            with self._tallies.dropping(project, name):
                listing = self._objects.names(container, "")
                self._objects.delete_objects(container, [n for n in listing if n != lay.META])
            if listing:  # an absent queue is not purged
                self._trail.record(project, name, now,
                                   [self._trail.event(project, name, events.PURGED, now)])

    @operation
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> list[tuple[str, dict[str, Any]]]:
        start = lay.queue_prefix(self._objects.prefix, project)
        with unavailable_as_503():
            _, listing = self._objects.swift.get_account(
                prefix=start, marker=start + (marker or ""), limit=limit)
            names = [item["name"][len(start):] for item in listing]
            metadata = self._objects.parallel(
                lambda n: self._objects.get(self._objects.container(project, n), lay.META),
                names)
        return [(name, json.loads(found[1])) for name, found in zip(names, metadata,
                                                                    strict=True) if found]

    @operation
    def count_queues(self, project: str) -> int:
        start = lay.queue_prefix(self._objects.prefix, project)
        with unavailable_as_503():
            _, listing = self._objects.swift.get_account(prefix=start, full_listing=True)
        return len(listing)

    @operation
    def queue_stats(self, project: str, name: str) -> QueueStats:
        container = self._objects.container(project, name)
        with unavailable_as_503():
            now = self._now_us()
            free = claimed = delayed = 0
            seen = set()
            for entry_name in self._objects.names(container, lay.INDEX_PREFIX):
                entry = Entry.parse(entry_name)
                # A message may briefly have two entries (a claim moves its entry by
                # writing the new one first): count it once.
                if entry is None or entry.expires <= now or entry.message_id in seen:
                    continue
                seen.add(entry.message_id)
                if entry.available <= now:
                    free += 1
                elif entry.state == lay.CLAIMED:
                    claimed += 1
                else:
                    delayed += 1
            oldest = newest = None
            if seen:
                ids = sorted(seen)
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
                      message_quota: int = 0) -> list[str]:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            if message_quota:
                self._check_message_quota(project, queue, len(messages), message_quota)
            records = [(self._new_id(now), m,
                        Record(ttl=m.ttl, created=now, due=now + round(m.delay * US),
                               client=client_id, expires=now + m.ttl * US))
                       for i, m in enumerate(messages)]

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
                self._ensure_queue(project, queue, {})
                self._objects.parallel(store, records)
            self._trail.record(project, queue, now, [
                self._trail.event(project, queue, events.POSTED, now, message_id=message_id,
                                  due=record.due / US, ttl=record.ttl, expires=record.expires / US)
                for message_id, _, record in records])
        return [message_id for message_id, _, _ in records]

    def _check_message_quota(self, project: str, queue: str, posted: int, quota: int
                             ) -> None:
        """Refuse a post of *posted* messages that would take the queue past *quota*
        live messages, counted from the tallies (``queue_counts``) just before the
        post writes.

        Swift has no atomic step to check it in: posts running at the same time each
        count the queue before the others' messages are counted, and other processes'
        changes reach the count within ``tally_flush_interval`` (their posts may pass
        the quota meanwhile; room their deletions make is seen only then). A tally
        change lost (``tallies.py``) miscounts its messages until they would
        have expired.
        """
        held = self.queue_counts(project, queue)
        if held.total + posted > quota:
            raise errors.QuotaExceeded.messages(queue, held.total, posted, quota)

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
                self._finish_move(project, queue, message_id, read[0], read[1],
                                  json.loads(read[0].moving), now)
                continue
            if read[0].expires > now:
                live.append(self._message(message_id, *read, now))
        return live

    @operation
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> tuple[list[Message], str | None]:
        if marker and not lay.is_message_id(marker):
            raise errors.ValidationError(f"marker {marker[:40]!r} is not valid.")
        page: list[Message] = []
        last = None
        with unavailable_as_503():
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
            claimed = entry.state == lay.CLAIMED and not available
            delayed = entry.state == lay.FREE and not available
            if (include_claimed or not claimed) and (include_delayed or not delayed):
                wanted.add(entry.message_id)
        ids = sorted(wanted)
        for start in range(0, len(ids), limit):
            yield ids[start:start + limit]


    @operation
    def get_messages(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        with unavailable_as_503():
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
        with unavailable_as_503():
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
                self._trail.record(project, queue, now, [
                    self._trail.deleted(project, queue, now, message_id, record, holder)])

    @operation
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> None:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
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
                return self._trail.deleted(project, queue, now, message_id, record)

            trail = self._objects.parallel(forget, sorted(set(ids)))
            self._trail.record(project, queue, now, [event for event in trail if event])

    @operation
    def pop_messages(self, project: str, queue: str, limit: int) -> list[Message]:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            pop_id = uuid.uuid4().hex
            taken, _, expired = self._take(project, queue, now, limit, pop_id,
                                           now + POP_LEASE * US, 0, None)
            forgotten = self._objects.parallel(lambda t: self._forget(container, t[0], t[1]), taken)
            for (_, record, _, _), deleted in zip(taken, forgotten, strict=True):
                if deleted:
                    self._tallies.tally(project, queue, record, None)
            # Popped as it was before the pop marked it; one a concurrent delete took
            # first is that delete's to record.
            self._trail.record(project, queue, now, expired + [
                self._trail.event(project, queue, events.POPPED, now, message_id=message_id,
                                  claim_count=before.count)
                for (message_id, _, _, before), deleted in zip(taken, forgotten, strict=True)
                if deleted])
            return [self._message(i, before, body, now) for i, _, body, before in taken]

    # Claims

    def _take(self, project: str, queue: str, now: int, limit: int, claim_id: str,
              claim_expires: int, grace: int, dead_letter: DeadLetterPolicy | None
              ) -> tuple[list[tuple[str, Record, bytes, Record]], list[Moved],
                         list[events.Event]]:
        """Claim up to *limit* claimable messages; ``(id, new record, body, old record)``
        of each, the dead-letter moves made on the way, and the ``expired`` events of the
        expired messages met on the way that this request removed."""
        container = self._objects.container(project, queue)
        taken: list[tuple[str, Record, bytes, Record]] = []
        moved: list[Moved] = []
        expired: list[events.Event] = []
        after = lay.INDEX_PREFIX
        end = lay.index_end(now)
        dlq_ready = False
        contended = False
        entries: list[Entry] = []
        while len(taken) < limit:
            if not entries:
                names = self._objects.names(container, lay.INDEX_PREFIX, marker=after, end=end,
                                            limit=CLAIM_BATCH)
                if not names:
                    break
                after = names[-1]
                entries = [e for e in map(Entry.parse, names) if e is not None]
            if contended:
                # Other claimers bid for the same oldest entries: going on in order would
                # meet them again at every step, each loss costing every loser a round of
                # requests. At random through the rest of the batch, most bids win.
                random.shuffle(entries)
            if dead_letter and not dlq_ready and any(
                    e.count >= dead_letter.max_claim_count for e in entries):
                self._ensure_queue(project, dead_letter.queue, {})
                dlq_ready = True
            # No more attempts at once than messages still wanted: each success is a
            # claim (and a claim count) that cannot be taken back.
            attempt, entries = entries[:limit - len(taken)], entries[limit - len(taken):]
            for result in self._objects.parallel(
                    lambda e: self._take_one(project, queue, e, now, claim_id, claim_expires,
                                             grace, dead_letter), attempt):
                if result is LOST:
                    contended = True
                elif isinstance(result, Moved):
                    moved.append(result)
                elif isinstance(result, events.Event):
                    expired.append(result)
                elif result is not None:
                    taken.append(result)
        return taken, moved, expired

    def _take_one(self, project: str, queue: str, entry: Entry, now: int, claim_id: str,
                  claim_expires: int, grace: int, dead_letter: DeadLetterPolicy | None
                  ) -> tuple[str, Record, bytes, Record] | Moved | Lost | events.Event | None:
        container = self._objects.container(project, queue)
        message_id = entry.message_id
        if entry.expires <= now:
            # Removed here (reported once, by the winner of its expire marker), so that
            # the next claims do not meet it again.
            return self._expire(project, queue, entry, now)
        move = dead_letter is not None and entry.count >= dead_letter.max_claim_count
        marker = {"kind": lay.MOVE if move else lay.CLAIM, "claim": claim_id,
                  "expires": claim_expires, "grace": grace, "at": now,
                  "queue": dead_letter.queue if move else None,
                  "ttl": dead_letter.messages_ttl if move else None}
        won = self._win(project, queue, entry, marker, now)
        if not isinstance(won, tuple):
            return won
        before, body = won
        if move:
            return self._move(project, queue, entry, before, body, marker, now)
        record = Record(**{**vars(before), "count": entry.count + 1,
                           "generation": entry.generation + 1, "claim": claim_id,
                           "claim_expires": claim_expires,
                           "expires": max(before.expires, claim_expires + grace * US)})
        self._tallies.tally(project, queue, before, record)  # the bid won made it a claim
        self._objects.write_record(container, message_id, record)
        if not self._objects.move_entry(container, message_id, entry, record.entry(message_id)):
            # Deleted (without a claim id) while being claimed: that delete counted the
            # end of the state it read, unclaimed (a delete without a claim id refuses
            # a claimed message).
            self._tallies.tally(project, queue, record, before)
            return None
        return message_id, record, body, before

    def _win(self, project: str, queue: str, entry: Entry, marker: dict[str, Any], now: int
             ) -> tuple[Record, bytes] | Lost | None:
        """Bid for the next generation of *entry*'s message with *marker*: the message's
        record and body when won, LOST (after repairing the entry) when another took it,
        None when the message is gone."""
        container = self._objects.container(project, queue)
        message_id = entry.message_id
        won = self._objects.bid(container, lay.marker_name(message_id, entry.generation + 1),
                                marker, {"X-Delete-At": self._objects.marker_until(entry.expires)})
        if not won:
            self._repair(project, queue, entry, now)
            return LOST
        found = self._objects.read(container, message_id)
        if found is None:  # deleted (or expired) since the listing
            self._objects.delete(container, entry.name)
        return found

    def _move(self, project: str, queue: str, entry: Entry, before: Record, body: bytes,
              marker: dict[str, Any], now: int) -> Moved:
        """Complete the move (or redrive) whose *marker* this request won."""
        message_id = entry.message_id
        move = self._moving(project, message_id, marker)
        moving = Record(**{**vars(before), "count": entry.count, "moving": json.dumps(move)})
        # Counted by the winner, in both queues: whoever completes the move counts nothing.
        self._tallies.tally(project, queue, before, None)
        self._tallies.tally(project, move["queue"], None,
                            self._arrival(queue, moving, move)[0])
        self._objects.write_record(self._objects.container(project, queue), message_id, moving)
        self._finish_move(project, queue, message_id, moving, body, move, now, entry)
        return Moved(message_id, moving, body, move)

    def _moving(self, project: str, message_id: str, marker: dict[str, Any]
                ) -> dict[str, Any]:
        """The move's description kept on the source record until the move is done.

        It fixes the generation the message starts from in the dead-letter queue: past
        any markers an earlier stay there left (a message can come back to a queue
        through a cycle of dead-letter policies), so its first claim there is not taken
        for one of its old ones.
        """
        target = self._objects.container(project, marker["queue"])
        old = self._objects.names(target, lay.marker_prefix(message_id))
        return {**marker, "base": int(old[-1].rsplit("/", 1)[1]) if old else 0}

    def _finish_move(self, project: str, queue: str, message_id: str, record: Record,
                     body: bytes, marker: dict[str, Any], now: int,
                     met: Entry | None = None) -> None:
        """Copy the message into the dead-letter queue, then delete it from *queue*.

        Every step can be repeated: the copy is conditional, the entry's name depends
        only on the marker, deletes of absent objects are fine. A message whose
        dead-letter expiry has passed by the time the move completes is just deleted.
        *met* is the source index entry the mover met, when it knows it.
        """
        source = self._objects.container(project, queue)
        target = self._objects.container(project, marker["queue"])
        moved, available = self._arrival(queue, record, marker)
        entry = lay.free_entry(available, message_id, moved.count, moved.generation,
                               moved.expires)
        expires = moved.expires
        if expires > now:
            headers = {**moved.headers(), "X-Delete-At": self._objects.stored_until(expires)}
            try:
                self._objects.create(target, lay.message_name(message_id), body, headers)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
                self._ensure_queue(project, marker["queue"], {})
                self._objects.create(target, lay.message_name(message_id), body, headers)
            self._objects.put_entry(target, entry)
        self._leave_source(source, message_id, record, met)

    @staticmethod
    def _arrival(queue: str, record: Record, marker: dict[str, Any]) -> tuple[Record, int]:
        """The record a move (or redrive) *marker* gives the message leaving *queue* as
        *record*, in its new queue, and when it is available there (µs)."""
        moved_at = marker["at"]
        base = marker.get("base", 0)
        if marker.get("redrive"):
            moved = Record(ttl=record.ttl, created=record.created,
                           due=min(record.due, moved_at), client=record.client,
                           expires=record.expires, generation=base)
            return moved, moved.due
        ttl, expires = dead_lettered(record, marker)
        return Record(ttl=ttl, created=record.created, due=record.due, client=record.client,
                      expires=expires, count=record.count, generation=base, source=queue,
                      moved=moved_at), moved_at

    def _leave_source(self, source: str, message_id: str, record: Record,
                      met: Entry | None) -> None:
        """The last step of a move: delete the message and its index entries from *source*.

        Entries first, the message last: until the message is gone it stays marked moving,
        and whoever meets it completes the move again.
        """
        for name in {record.entry(message_id).name, *([met.name] if met else [])}:
            self._objects.delete(source, name)
        self._objects.delete(source, lay.message_name(message_id))

    # Redrive

    @operation
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int) -> int:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            redrive_id = uuid.uuid4().hex
            moved: list[Moved] = []
            after = lay.INDEX_PREFIX
            while len(moved) < limit:
                names = self._objects.names(container, lay.INDEX_PREFIX, marker=after,
                                            limit=CLAIM_BATCH)
                if not names:
                    break
                after = names[-1]
                # Entries of live claims are skipped; delayed ones are taken.
                entries = [e for e in map(Entry.parse, names)
                           if e is not None and (e.state == lay.FREE or e.available <= now)]
                while entries and len(moved) < limit:
                    # No more moves at once than still wanted: each won bid is a move.
                    take = min(self._objects.concurrency, limit - len(moved))
                    batch, entries = entries[:take], entries[take:]
                    moved += [result for result in self._objects.parallel(
                        lambda e: self._redrive_one(project, queue, e, now, redrive_id,
                                                    destination), batch)
                              if isinstance(result, Moved)]
            self._trail.record(project, queue, now, [
                self._trail.event(project, queue, events.REDRIVEN, now, message_id=move.message_id,
                                  claim_count=move.record.count, source=queue,
                                  target=move.marker["queue"], expires=move.record.expires / US)
                for move in moved])
        return len(moved)

    def _redrive_one(self, project: str, queue: str, entry: Entry, now: int,
                     redrive_id: str, destination: str | None) -> Moved | Lost | None:
        """Move one message back, bidding for its next generation like a claim."""
        container = self._objects.container(project, queue)
        message_id = entry.message_id
        if entry.expires <= now:
            return None  # a claim or the object expirer takes care of it
        found = self._objects.read(container, message_id)
        if found is None:
            self._objects.delete(container, entry.name)  # left by a move that a reader completed
            return None
        if found[0].moving:
            # A move (or redrive) whose mover died: completed here, entry included.
            self._finish_move(project, queue, message_id, found[0], found[1],
                              json.loads(found[0].moving), now, entry)
            return None
        if found[0].expires <= now:
            return None
        target = destination or found[0].source
        if not target:
            return None  # never dead-lettered: it stays unless a destination is given
        marker = {"kind": lay.MOVE, "claim": redrive_id, "expires": 0, "grace": 0,
                  "at": now, "queue": target, "ttl": None, "redrive": True}
        won = self._win(project, queue, entry, marker, now)
        if not isinstance(won, tuple):
            return won
        return self._move(project, queue, entry, *won, marker, now)

    # Edits

    @operation
    def edit_message(self, project: str, queue: str, message_id: str, *,
                     body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                     ) -> Message:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            for _ in range(EDIT_ATTEMPTS):
                now = self._now_us()
                record, old_body = self._editable(project, queue, message_id, now)
                generation = record.generation + 1
                marker = {"kind": lay.EDIT, "claim": None, "expires": 0, "grace": 0,
                          "at": now, "queue": None, "ttl": None,
                          "due": None if delay is None else now + round(delay * US),
                          "body": None if body is NO_CHANGE else lay.encode(body).decode()}
                if self._objects.bid(container, lay.marker_name(message_id, generation), marker,
                                     {"X-Delete-At": self._objects.marker_until(record.expires)}):
                    counted = self._edited(record, marker, generation)
                    self._tallies.tally(project, queue, record, counted)
                    edited = self._complete_edit(container, message_id, record, old_body,
                                                 marker, generation,
                                                 record.entry(message_id))
                    if edited is None:
                        # Deleted meanwhile: the delete counted the end of the state it
                        # read, most likely the one before this edit.
                        self._tallies.tally(project, queue, counted, record)
                        raise errors.MessageNotFound(f"Message {message_id} does not exist.")
                    self._trail.record(project, queue, now, [self._trail.event(
                        project, queue, events.EDITED, now, message_id=message_id,
                        due=edited[0].due / US, claim_count=edited[0].count)])
                    return self._message(message_id, *edited, now)
                # Another claim, move or edit took this generation: bring the record up to
                # date with it (completing it if its maker died), then look again.
                self._repair(project, queue, record.entry(message_id), now)
                time.sleep(self._objects.settle)
        raise errors.Conflict(f"Message {message_id} is being changed by other requests; "
                              "retry.")

    def _editable(self, project: str, queue: str, message_id: str, now: int
                  ) -> tuple[Record, bytes]:
        """The message's record and body, when an edit may bid for it now; raises
        MessageNotFound (absent, expired, or moving away) or MessageHeld."""
        container = self._objects.container(project, queue)
        found = self._objects.read(container, message_id) if lay.is_message_id(message_id) else None
        if found is not None and found[0].moving:
            self._finish_move(project, queue, message_id, found[0], found[1],
                              json.loads(found[0].moving), now)
            found = None
        if found is None or found[0].expires <= now:
            raise errors.MessageNotFound(f"Message {message_id} does not exist.")
        if found[0].is_claimed(now):
            raise errors.MessageHeld.editing(message_id)
        return found

    @staticmethod
    def _edited(record: Record, marker: dict[str, Any], generation: int) -> Record:
        """The record after the edit *marker* of *generation*: the same for every
        process that applies it to the same record."""
        edited = Record(**{**vars(record), "generation": generation})
        if marker["due"] is not None:
            # A message edited is free: a claim that expired no longer sets when it is
            # available, its new due time does (its claim count stays).
            edited.due = marker["due"]
            edited.claim = ""
            edited.claim_expires = 0
        return edited

    def _complete_edit(self, container: str, message_id: str, record: Record, body: bytes,
                       marker: dict[str, Any], generation: int, met: Entry
                       ) -> tuple[Record, bytes] | None:
        """Apply the won edit *marker* to the message read as *record* and *body*, then
        move its index entry from *met*; the new record and body, or None when the
        message is gone (deleted meanwhile)."""
        edited = self._edited(record, marker, generation)
        name = lay.message_name(message_id)
        if marker["body"] is None:
            self._objects.write_record(container, message_id, edited)
        else:
            body = marker["body"].encode()
            # Swift has no conditional overwrite: a PUT would bring back a message a
            # delete has just removed, so absence is checked first (operator guide).
            if not self._objects.exists(container, name):
                self._objects.delete(container, met.name)
                return None
            self._objects.put_message(container, message_id, edited, body)
        if not self._objects.move_entry(container, message_id, met, edited.entry(message_id)):
            return None
        return edited, body

    def _expire(self, project: str, queue: str, entry: Entry, now: int
                ) -> events.Event | None:
        """Remove the message of *entry*, an index entry whose expiry has passed, when it
        has indeed expired; its ``expired`` event when this request is the one to report
        it: the winner of its ``expire`` marker, whose DELETE found the message.

        Swift has no delete-if: two racing DELETEs may both answer 204, so a DELETE alone
        cannot tell who reports. The marker bid can: claims and reapers that meet the
        same expired message bid for its next generation, and only one wins it (a claim
        or move that won it first leaves the message to live on, as it should).
        """
        container = self._objects.container(project, queue)
        message_id = entry.message_id
        record = self._objects.read_record(container, message_id)
        if record is None:
            self._objects.delete(container, entry.name)  # its message was removed or moved
            return None
        if record.moving or record.expires > now:
            # A move to complete, or an entry older than the record (a claim extended the
            # message's expiry): brought in line like any stale entry.
            self._repair(project, queue, entry, now)
            return None
        if not self._objects.bid(container, lay.marker_name(message_id, record.generation + 1),
                                 {"kind": lay.EXPIRE, "at": now},
                                 {"X-Delete-At": self._objects.marker_until(record.expires)}):
            # Another reaper or claim removes it; or a claim, move or edit won the
            # generation before the record showed it (its maker may have died).
            self._repair(project, queue, entry, now)
            return None
        if not self._remove(container, message_id, record, entry):
            return None  # deleted by another request (a delete by ids that read it live)
        self._tallies.tally(project, queue, record, None)
        return self._trail.event(project, queue, events.EXPIRED, record.expires,
                                 message_id=message_id, claim_count=record.count,
                                 expires=record.expires / US)

    def _remove(self, container: str, message_id: str, record: Record, met: Entry) -> bool:
        """Delete an expired message, then its index entries; False if it was gone.

        The message first: an entry left by a process dying in between points at
        nothing and is dropped by whoever meets it, while a message left without an entry
        would be found by no reaper.
        """
        found = self._objects.delete(container, lay.message_name(message_id))
        for name in {record.entry(message_id).name, met.name}:
            self._objects.delete(container, name)
        return found

    def _repair(self, project: str, queue: str, entry: Entry, now: int) -> None:
        """Bring a stale index entry in line with the message's markers and record.

        A process that died between winning a marker and updating the message leaves the
        record and entry a generation behind: this completes what the marker says (a claim
        is honoured until its expiry, a move is finished). A leftover old entry is
        replaced by the one the record calls for.
        """
        container = self._objects.container(project, queue)
        message_id = entry.message_id
        found = self._objects.read(container, message_id)
        if found is None:
            self._objects.delete(container, entry.name)
            return
        record, body = found
        markers = self._objects.names(container, lay.marker_prefix(message_id))
        generation = int(markers[-1].rsplit("/", 1)[1]) if markers else 0
        if generation > record.generation and not record.moving:
            latest = self._objects.get(container, markers[-1], newest=True)
            if latest is None:
                return
            marker = json.loads(latest[1])
            if now - marker["at"] < self._objects.settle * US:
                return  # a bid still settling: its winner is alive and finishes the job
            if marker["kind"] == lay.EXPIRE:
                # Its winner removes the message and reports it; one that died before
                # its DELETE left the rest to whoever comes much later, uncounted.
                if now - marker["at"] >= EXPIRY_ABANDONED:
                    self._remove(container, message_id, record, entry)
                return
            # Every generation past the record's was a claim, but a final move or edit
            # (an edit bids only for the generation right after a record it read).
            claims = generation - record.generation - (marker["kind"] != lay.CLAIM)
            record = Record(**{**vars(record), "count": record.count + claims})
            if marker["kind"] == lay.EDIT:
                # An editor that died after winning: its edit is completed as it would.
                self._complete_edit(container, message_id, record, body, marker, generation,
                                    entry)
                return
            if marker["kind"] == lay.MOVE:
                record.moving = json.dumps(self._moving(project, message_id, marker))
            else:
                record.generation = generation
                record.claim = marker["claim"]
                record.claim_expires = marker["expires"]
                record.expires = max(record.expires,
                                     marker["expires"] + marker["grace"] * US)
            self._objects.write_record(container, message_id, record)
        if record.moving:
            self._finish_move(project, queue, message_id, record, body,
                              json.loads(record.moving), now, entry)
            return
        self._objects.move_entry(container, message_id, entry, record.entry(message_id))

    def _release_one(self, project: str, queue: str, message_id: str, record: Record,
                     now: int) -> None:
        """Put a claimed message back at its due time (claim count kept)."""
        container = self._objects.container(project, queue)
        marker = lay.marker_name(message_id, record.generation)
        found = self._objects.get(container, marker)
        if found is None:
            return
        state = json.loads(found[1])
        if state.get("claim") != record.claim or state.get("expires", 0) <= now:
            return
        self._objects.swift.put_object(
            container, marker, lay.encode({**state, "expires": 0}),
            headers={"X-Delete-At": self._objects.marker_until(record.expires)})
        released = Record(**{**vars(record), "claim": "", "claim_expires": 0})
        self._objects.write_record(container, message_id, released)
        self._tallies.tally(project, queue, record, released)
        self._objects.move_entry(container, message_id, record.entry(message_id),
                                 released.entry(message_id))

    @operation
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None
              ) -> Claim | None:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            claim_id = uuid.uuid4().hex
            expires = now + ttl * US
            taken, moved, expired = self._take(project, queue, now, limit, claim_id,
                                               expires, grace, dead_letter)
            trail = expired + [self._dead_lettered(project, queue, now, move)
                               for move in moved]
            if not taken:
                self._trail.record(project, queue, now, trail)
                return None
            claim = {"ttl": ttl, "grace": grace, "created": now, "expires": expires,
                     "messages": [[i, record.generation] for i, record, _, _ in taken]}
            self._objects.swift.put_object(container, lay.claim_name(claim_id), lay.encode(claim),
                                           headers={"X-Delete-At": delete_at(expires)})
            self._trail.record(project, queue, now, trail + [
                self._trail.event(project, queue, events.CLAIMED, now, message_id=message_id,
                                  claim_id=claim_id, claim_count=record.count,
                                  expires=record.expires / US)
                for message_id, record, _, _ in taken])
        return Claim(id=claim_id, ttl=ttl, grace=grace, created=now / US,
                     expires=expires / US, as_of=now / US,
                     messages=[self._message(i, record, body, now)
                               for i, record, body, _ in taken])

    def _dead_lettered(self, project: str, queue: str, now: int, move: Moved
                       ) -> events.Event:
        """The event of a move, for the source's trail, with the message as the target
        queue holds it."""
        ttl, expires = dead_lettered(move.record, move.marker)
        return self._trail.event(project, queue, events.DEAD_LETTERED, now,
                                 message_id=move.message_id, claim_count=move.record.count,
                                 source=queue, target=move.marker["queue"], ttl=ttl,
                                 expires=expires / US, body=move.body.decode())

    def _live_claim(self, container: str, claim_id: str, now: int) -> dict[str, Any]:
        found = None
        if lay.is_claim_id(claim_id):
            found = self._objects.get(container, lay.claim_name(claim_id))
        claim = json.loads(found[1]) if found else None
        if claim is None or claim["expires"] <= now:
            raise errors.ClaimNotFound(f"Claim {claim_id} does not exist or has expired.")
        return claim

    def _held(self, container: str, claim_id: str, claim: dict[str, Any], now: int
              ) -> list[tuple[str, Record, bytes]]:
        found = self._objects.parallel(
            lambda pair: (pair[0], self._objects.read(container, pair[0])), claim["messages"])
        return [(i, read[0], read[1]) for i, read in found
                if read is not None and read[0].claim == claim_id
                and read[0].is_claimed(now) and read[0].expires > now]

    @operation
    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            claim = self._live_claim(container, claim_id, now)
            held = self._held(container, claim_id, claim, now)
        return Claim(id=claim_id, ttl=claim["ttl"], grace=claim["grace"],
                     created=claim["created"] / US, expires=claim["expires"] / US,
                     as_of=now / US,
                     messages=[self._message(i, r, b, now) for i, r, b in sorted(held)])

    @operation
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int) -> None:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            claim = self._live_claim(container, claim_id, now)
            expires = now + ttl * US

            def renew(item: tuple[str, Record, bytes]) -> None:
                message_id, record, _ = item
                marker = lay.marker_name(message_id, record.generation)
                renewed = Record(**{**vars(record), "claim_expires": expires,
                                    "expires": max(record.expires, expires + grace * US)})
                self._objects.swift.put_object(
                    container, marker, lay.encode({"kind": lay.CLAIM, "claim": claim_id,
                                                   "expires": expires, "grace": grace,
                                                   "at": now, "queue": None, "ttl": None}),
                    headers={"X-Delete-At": self._objects.marker_until(renewed.expires)})
                self._objects.write_record(container, message_id, renewed)
                self._tallies.tally(project, queue, record, renewed)
                self._objects.move_entry(container, message_id, record.entry(message_id),
                                         renewed.entry(message_id))

            self._objects.parallel(renew, self._held(container, claim_id, claim, now))
            claim = {**claim, "ttl": ttl, "grace": grace, "expires": expires}
            self._objects.swift.put_object(container, lay.claim_name(claim_id), lay.encode(claim),
                                           headers={"X-Delete-At": delete_at(expires)})

    @operation
    def release_claim(self, project: str, queue: str, claim_id: str) -> None:
        container = self._objects.container(project, queue)
        with unavailable_as_503():
            now = self._now_us()
            try:
                claim = self._live_claim(container, claim_id, now)
            except errors.ClaimNotFound:
                return
            self._objects.parallel(lambda item: self._release_one(project, queue, item[0], item[1],
                                                                  now),
                                   self._held(container, claim_id, claim, now))
            self._objects.delete(container, lay.claim_name(claim_id))

    # Long-poll claims

    @operation
    def available_in(self, project: str, queue: str) -> float | None:
        # The index's first entry: names sort by availability. A queue that does not
        # exist lists nothing.
        with unavailable_as_503():
            head = self._objects.names(self._objects.container(project, queue),
                                       lay.INDEX_PREFIX, limit=1)
            entry = Entry.parse(head[0]) if head else None
            if entry is None:
                return None
            return max(0, entry.available - self._now_us()) / US

    # Audit reads: whole queues, for delayq.spark_jobs. The listings are Swift's, which
    # may lag a little behind the latest writes.

    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        return self._trail.queues(project)

    def read_events(self, project: str, queue: str) -> Iterator[events.Event]:
        return self._trail.read(project, queue)

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        container = self._objects.container(project, queue)
        after = lay.MESSAGE_PREFIX
        with unavailable_as_503():
            now = self._now_us()
        while True:
            with unavailable_as_503():
                names = self._objects.names(container, lay.MESSAGE_PREFIX, marker=after,
                                            limit=MESSAGES_BATCH)
                if not names:
                    return
                ids = [name[len(lay.MESSAGE_PREFIX):] for name in names]
                live = self._live(project, queue, ids, now)
            yield from live
            after = names[-1]
