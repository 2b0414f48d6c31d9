"""The Swift driver's tallies (the /metrics gauges): counted in memory, written under a
leased writer slot, read by ``Queues.counts``.

Tallies
    ``Queues.counts`` reads ``delayq.tallies`` pages, never the messages. Swift has no
    atomic increment, so each process keeps running sums of its own in memory
    (``TallyBook``) and writes the pages it changed every ``tally_flush_interval`` (and on
    ``close``) as ``t/<level>/<page>/<slot>`` (``layout.py``), objects only it writes; a
    count sums every slot's objects of the pages it reads, plus its own changes not
    written yet. A transition is counted once, by the request whose step made it take
    effect (``Tallies.tally`` says which); whoever completes another's half-done change
    (a repair, the completion of a move) counts nothing. A purge or queue deletion drops
    the tally objects with the rest; a process finding its own gone starts its sums
    again. Not exact: a process killed loses its changes since its last write (or one it
    won and had not counted yet), a delete by ids racing a claim or edit of the same
    message may count the state before it, a purge racing other processes' writes may
    keep or drop their last interval. Each such error is confined to those messages'
    instants and disappears by itself once they would have expired.
Writer slots
    The pages of the coarse levels live for years, so tallies named by a token of each
    process would leave a count more objects to read with every process ever started. A
    process writes under a *slot* instead, the lowest one no live process holds: it bids
    for ``slot/<n>`` in the writers container (``layout.py``) with ``X-Delete-After`` of
    ``tally_writer_lease``, at its first write of a tally (not at start: a process that
    changes nothing holds none), renews it with a ``POST`` every fifth of the lease and
    reads it back (an exclusive create racing the ``POST`` could have replaced it), and
    deletes it on ``close``. Before it first writes a page under a slot it reads the
    slot's object of that page (its earlier holders' sums) and goes on from there, so the
    objects a count reads are bounded by the processes alive at once. It never writes
    under a slot it may have lost: the lease's deadline is kept on the monotonic clock,
    and once less than a third of the lease is left unrenewed (Swift failing, or the
    object found gone or another's) it writes nothing more under it, forgets what it knew
    of the slot's objects (not its pending changes) and takes a slot again at its next
    write. Left: a process paused (SIGSTOP, a VM frozen) past its lease between that check
    and its ``PUT`` may still land one write after another process took the slot,
    overwriting the newer sums of that page; like the errors above, that is confined to
    the instants of the messages counted in between.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from swiftclient.exceptions import ClientException

from delayq import errors, tallies
from delayq.queue import QueueCounts
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Record
from delayq.storage.swift.objects import (
    DELETE_AFTER,
    Objects,
    is_status,
    unavailable,
)

LOG = logging.getLogger(__name__)

# Swift keeps an X-Delete-At beyond this (year 2286) as this: the pages of the last tally
# level end thousands of years ahead.
LATEST_DELETE_AT = 9_999_999_999
# A tally page ending sooner than this (plus HINDSIGHT) is not written: no count reads it
# again, and Swift refuses an X-Delete-At in the past.
TALLY_PAGE_MARGIN = 60
TALLY_CLOSE_WAIT = 30.0  # seconds close() waits for a flush under way
# A tally writer slot's lease (tally_writer_lease) is renewed once a LEASE_RENEWAL-th of it
# has passed since the last renewal, retried every other LEASE_RENEWAL-th while that
# fails, and no tally is written under it once less than a LEASE_MARGIN-th is left: time
# for a write already sent to land before Swift may let another process take the slot.
LEASE_RENEWAL = 5
LEASE_MARGIN = 3
# Swift turns X-Delete-After into a whole-second X-Delete-At, truncated: a lease may end up
# to this much sooner than asked.
LEASE_ROUNDING = 1.0
MIN_LEASE = 2  # seconds; a shorter lease would be over before its first write

QueueKey = tuple[str, str]  # (project, queue)
Page = tuple[int, int]  # (level, page)


def marks(record: Record) -> tallies.Marks:
    """What the message's tally instants depend on, in seconds."""
    return tallies.Marks(created=record.created / US, due=record.due / US,
                         expires=record.expires / US,
                         claim_expires=record.claim_expires / US)


def page_of(block: tallies.Block) -> Page:
    _, level, number = block
    return level, tallies.page(level, number)


def tally_page_kept(level: int, page: int, now: float) -> bool:
    """False for a page no count reads any more, which Swift drops (or soon will)."""
    return tallies.page_end(level, page) + tallies.HINDSIGHT > now + TALLY_PAGE_MARGIN


def tally_delete_at(level: int, page: int) -> str:
    return str(min(LATEST_DELETE_AT,
                   math.ceil(tallies.page_end(level, page)) + tallies.HINDSIGHT))


class TallyBook:
    """This process's tallies, in memory: per queue, the changes it counted and has not
    written yet (*pending*), and the sums its writer slot's object of each page holds
    (*written*: last written, or read when the slot was taken), which the next write of
    the page adds to (a tally object holds the slot's running sum). A page absent from
    *written* is unknown: the slot's earlier holders may have written it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[QueueKey, Counter[tallies.Block]] = {}
        self._written: dict[QueueKey, dict[Page, Counter[tallies.Block]]] = {}
        # The pages of *written* whose object is known to be in Swift (a page read as
        # absent is not), which ``probe`` chooses from.
        self._stored: dict[QueueKey, set[Page]] = {}

    def add(self, key: QueueKey, deltas: Counter[tallies.Block]) -> None:
        if deltas:
            with self._lock:
                self._pending.setdefault(key, Counter()).update(deltas)

    def pending(self, key: QueueKey) -> Counter[tallies.Block]:
        with self._lock:
            return Counter(self._pending.get(key, {}))

    def take(self) -> dict[QueueKey, Counter[tallies.Block]]:
        """Everything pending, which the caller writes (or hands back with ``add``)."""
        with self._lock:
            taken, self._pending = self._pending, {}
        return taken

    def written(self, key: QueueKey, page: Page) -> Counter[tallies.Block] | None:
        """The sums the slot's object of *page* holds; None when unknown."""
        with self._lock:
            sums = self._written.get(key, {}).get(page)
            return None if sums is None else Counter(sums)

    def wrote(self, key: QueueKey, page: Page, sums: Counter[tallies.Block], *,
              stored: bool = True) -> None:
        """*sums* are what the slot's object of *page* holds (*stored* False: there is
        no such object, read as absent)."""
        with self._lock:
            self._written.setdefault(key, {})[page] = sums
            stored_pages = self._stored.setdefault(key, set())
            if stored:
                stored_pages.add(page)
            else:
                stored_pages.discard(page)

    def probe(self, key: QueueKey) -> Page | None:
        """A page of the queue in Swift under the slot that Swift keeps longest: gone, it
        tells that the queue was purged or deleted since (with every tally object in
        it)."""
        with self._lock:
            return max(self._stored.get(key, ()), default=None)

    def forget_written(self, key: QueueKey | None = None) -> None:
        """Forget what the slot's objects of the queue (of every queue: None) hold."""
        with self._lock:
            if key is None:
                self._written.clear()
                self._stored.clear()
            else:
                self._written.pop(key, None)
                self._stored.pop(key, None)

    def forget(self, key: QueueKey) -> None:
        with self._lock:
            self._written.pop(key, None)
            self._stored.pop(key, None)
            self._pending.pop(key, None)

    def prune(self, now: float) -> None:
        """Forget the sums of pages Swift has removed (``page_end`` + ``HINDSIGHT``)."""
        with self._lock:
            for key, pages in self._written.items():
                for page in [p for p in pages if not tally_page_kept(*p, now)]:
                    del pages[page]
                    self._stored.get(key, set()).discard(page)


@dataclass
class Lease:
    """The tally writer slot this process holds (``slot/<n>`` in the writers container).

    Times are ``time.monotonic()``'s, which a step of the wall clock does not move.
    """

    slot: int
    holder: str  # the nonce in the lease object: it is this process's while it holds it
    renewed: float  # when its last (re)newal was sent
    deadline: float  # from then on, Swift may have expired it and another process taken it
    tried: float = 0.0  # when a renewal was last tried

    def left(self) -> float:
        return self.deadline - time.monotonic()


class Tallies:
    """This process's tallies: counted, written by a flusher thread, and read."""

    def __init__(self, objects: Objects, now_us: Callable[[], int], stop: threading.Event,
                 *, flush_interval: float, lease_time: int) -> None:
        """*now_us* is the driver's clock; *stop* is set when the driver closes;
        *flush_interval* the seconds between writes, *lease_time* the seconds of the
        lease on the writer slot (at least ``MIN_LEASE``)."""
        if lease_time < MIN_LEASE:
            raise ValueError(f"tally_writer_lease must be at least {MIN_LEASE} s")
        self._objects = objects
        self._now_us = now_us
        self._stop = stop
        self._book = TallyBook()
        self._flush_interval = flush_interval
        self._lease_time = lease_time
        self._lease: Lease | None = None  # taken at the first write of a tally
        # Held while tallies are written, while a count reads them (so a count never sees
        # a page both in Swift and still pending here) and while the lease changes.
        self._flush_lock = threading.Lock()
        self._lock = threading.Lock()  # guards _flusher
        self._flusher: threading.Thread | None = None

    def tally(self, project: str, queue: str, before: Record | None,
              after: Record | None) -> None:
        """Count a message going from *before* to *after* (None: not in *queue*).

        Called once per transition, by the request whose step made it take effect, with
        the states that step knows: the post's PUT, the winner of a marker (claim, move,
        edit, redrive), a claim's renewal or release by its holder, the DELETE that found
        the message. Whoever completes another request's half-done change counts nothing.
        """
        deltas = tallies.change(None if before is None else marks(before),
                                None if after is None else marks(after))
        if not deltas:
            return
        self._book.add((project, queue), deltas)
        with self._lock:
            if self._flusher is None and not self._stop.is_set():
                self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                                 name="delayq-swift-tallies")
                self._flusher.start()

    def count(self, project: str, queue: str) -> QueueCounts:
        """The queue's counts: one listing per level (``tallies.reading``) and one GET per
        writer slot's object found (at most the processes alive at once), however many
        messages the queue holds; this process's own changes not written yet are added
        from memory."""
        objects = self._objects
        container = objects.container(project, queue)
        with unavailable:
            now = self._now_us() / US
            with self._flush_lock:
                names = [found for listing in objects.parallel(
                    lambda page: objects.names(container, lay.tally_page_prefix(*page)),
                    tallies.reading(now)) for found in listing]
                bodies = objects.parallel(lambda n: objects.get(container, n), names)
                tally = self._book.pending((project, queue))
        for object_name, found in zip(names, bodies, strict=True):
            if found is None:  # removed since the listing (X-Delete-At, a purge)
                continue
            level = lay.tally_level(object_name)
            for kind, block, n in lay.decode_tally(found[1]):
                tally[(kind, level, block)] += n
        return tallies.counts(tally, now)

    @contextmanager
    def dropping(self, project: str, queue: str) -> Iterator[None]:
        """Around a purge or deletion of the queue, whose tally objects go with its other
        objects: no write of this process's tallies overlaps (one could put back a page
        it had taken before), and once done, what it counted of the queue is forgotten
        (other processes find theirs gone at their next write)."""
        with self._flush_lock:
            yield
            self._book.forget((project, queue))

    def drop_stray(self, container: str) -> None:
        """Delete the tally objects of a container that holds no queue and no message.

        Another process's tally write racing a deletion can bring the deleted container
        back (Swift adds the object's row to the deleted container's database) holding
        only that write: sums of the queue that was, which a queue created again under
        the name must not count. The writer finds its object gone at its next write and
        starts again from what it counts after, as after a purge.
        """
        stray = self._objects.names(container, lay.TALLY_PREFIX)
        # Checked again just before: a queue created meanwhile keeps its tallies.
        if stray and self._objects.get(container, lay.META) is None:
            self._objects.delete_objects(container, stray)

    def close(self) -> None:
        """Write the tallies still pending (after a flush under way), then free the
        writer slot. Called once *stop* is set."""
        with self._lock:
            flusher = self._flusher
        if flusher is not None:
            flusher.join(TALLY_CLOSE_WAIT)
        try:
            with unavailable:
                self.flush()
        except errors.StorageUnavailable as exc:
            LOG.warning("Tallies not written on close, lost: %s", exc.description)
        self._release_slot()

    # Writing

    def _flush_loop(self) -> None:
        # Wakes to flush every tally_flush_interval and, in between, often enough to renew
        # the lease on time (and to retry a renewal that failed) however long that is.
        wake = min(self._flush_interval, self._lease_time / (2 * LEASE_RENEWAL))
        next_flush = time.monotonic() + self._flush_interval
        while not self._stop.wait(max(0.0, min(wake, next_flush - time.monotonic()))):
            try:
                with unavailable:
                    with self._flush_lock:
                        self._held_lease()
                    if time.monotonic() >= next_flush:
                        next_flush = time.monotonic() + self._flush_interval
                        self.flush()
            except errors.StorageUnavailable as exc:
                LOG.warning("Tallies not written, retried in %.1f s: %s",
                            self._flush_interval, exc.description)
            except Exception:
                LOG.exception("Tallies not written")

    def flush(self) -> None:
        """Write every tally page this process changed since it last wrote it."""
        with self._flush_lock:
            batch = self._book.take()
            if not batch:
                return
            now = self._now_us() / US
            self._book.prune(now)
            for number, (key, deltas) in enumerate(batch.items()):
                try:
                    self._flush_queue(key, deltas, now)
                except Exception:
                    for later in list(batch.items())[number + 1:]:
                        self._book.add(*later)
                    raise

    def _flush_queue(self, key: QueueKey, deltas: Counter[tallies.Block], now: float
                     ) -> None:
        """Write *deltas* into the queue's tally pages; on failure, keep what is not
        written for the next flush."""
        objects = self._objects
        container = objects.container(*key)
        pages: dict[Page, Counter[tallies.Block]] = {}
        for block, n in deltas.items():
            if n and tally_page_kept(*page_of(block), now):
                pages.setdefault(page_of(block), Counter())[block] = n
        unwritten = list(pages)
        try:
            if not pages:
                return
            slot = self._writer_slot()
            probe = self._book.probe(key)
            if probe is not None and not objects.exists(container,
                                                        lay.tally_name(*probe, slot)):
                # A purge or deletion of the queue since the last write dropped every
                # tally object in it: this process's sums start again from what it
                # counted since.
                self._book.forget_written(key)
            # What the slot's earlier holders left in the pages not known yet, read at
            # once rather than one before each write.
            objects.parallel(lambda page: self._slot_sums(container, key, page, slot), pages)
            for page in list(unwritten):
                # Renewed when due; another slot (whose sums are read again) if this one
                # can no longer be relied on: never a write under a slot possibly lost.
                slot = self._writer_slot()
                sums = self._slot_sums(container, key, page, slot)
                sums.update(pages[page])
                try:
                    objects.swift.put_object(
                        container, lay.tally_name(*page, slot),
                        lay.encode_tally((kind, block, n)
                                         for (kind, _, block), n in sums.items() if n),
                        headers={"X-Delete-At": tally_delete_at(*page)})
                except ClientException as exc:
                    if not is_status(exc, 404):
                        raise
                    # The queue was deleted: nothing of it is counted any more.
                    self._book.forget(key)
                    unwritten.clear()
                    return
                self._book.wrote(key, page, sums)
                unwritten.remove(page)
        finally:
            for page in unwritten:
                self._book.add(key, pages[page])

    def _slot_sums(self, container: str, key: QueueKey, page: Page, slot: int
                   ) -> Counter[tallies.Block]:
        """The sums writer slot *slot*'s object of *page* holds: known, or read (a slot
        taken holds what its earlier holders wrote, which this process continues)."""
        known = self._book.written(key, page)
        if known is not None:
            return known
        level = page[0]
        try:
            # Newest: the last holder's last write, whichever replica has it. Only the
            # slot's holder writes the object, so a 404 here races no write of it.
            _, body = self._objects.swift.get_object(container, lay.tally_name(*page, slot),
                                                     headers={"X-Newest": "true"})
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            self._book.wrote(key, page, Counter(), stored=False)
            return Counter()
        sums = Counter({(kind, level, block): n
                        for kind, block, n in lay.decode_tally(body) if n})
        self._book.wrote(key, page, sums)
        return Counter(sums)

    # Writer slots: the names tallies are written under, leased

    def _writer_slot(self) -> int:
        """The slot this process may write tallies under now: the one it holds (renewed
        when due), or one taken now. Called with the flush lock held."""
        lease = self._held_lease()
        if lease is None:
            lease = self._lease = self._take_slot()
        return lease.slot

    def _held_lease(self) -> Lease | None:
        """The lease held, renewed when due; None when none is, or when it can no longer
        be relied on: then what this process knew of its slot's objects is forgotten
        (its counts still pending are not), to be read again under the next slot. Called
        with the flush lock held."""
        lease = self._lease
        if lease is None:
            return None
        now = time.monotonic()
        if (now - lease.renewed >= self._lease_time / LEASE_RENEWAL
                and now - lease.tried >= self._lease_time / (2 * LEASE_RENEWAL)):
            self._renew(lease)
        if lease.left() > self._lease_time / LEASE_MARGIN:
            return lease
        LOG.warning("Tally writer slot %d given up: its lease was lost or not renewed in "
                    "time; this process's tallies go on under a slot taken again",
                    lease.slot)
        self._lease = None
        self._book.forget_written()
        return None

    def _take_slot(self) -> Lease:
        """Lease the lowest writer slot no live process holds (one whose lease expired,
        or was deleted by a process that closed, is free)."""
        objects = self._objects
        container = lay.writers_container(objects.prefix)
        holder = secrets.token_hex(8)
        headers = {DELETE_AFTER: str(self._lease_time)}
        for slot in itertools.count():
            sent = time.monotonic()
            name = lay.slot_name(slot)
            try:
                # A bid, like a marker's: If-None-Match alone lets racers both succeed.
                won = objects.bid(container, name, lay.lease_body(holder), headers)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
                objects.swift.put_container(container)  # the deployment's first lease
                won = objects.bid(container, name, lay.lease_body(holder), headers)
            if not won:
                continue
            lease = Lease(slot, holder, renewed=sent,
                          deadline=sent + self._lease_time - LEASE_ROUNDING, tried=sent)
            if lease.left() <= self._lease_time / LEASE_MARGIN:
                raise unavailable.error(
                    f"Tally writer slot {slot} taken too slowly for its lease of "
                    f"{self._lease_time} s; tallies retried at the next flush.")
            LOG.info("Tally writer slot %d taken", slot)
            return lease
        raise AssertionError("unreachable")  # itertools.count() never ends

    def _renew(self, lease: Lease) -> None:
        """Push the lease's expiry forward, then check the lease object is still this
        process's. A failure leaves the lease as it was (it is retried); a lease found
        gone or someone else's is over (its deadline passed)."""
        objects = self._objects
        container = lay.writers_container(objects.prefix)
        name = lay.slot_name(lease.slot)
        lease.tried = sent = time.monotonic()
        try:
            with unavailable:
                renewed = objects.unless_absent(lambda _: objects.swift.post_object(
                    container, name, headers={DELETE_AFTER: str(self._lease_time)}) or True)
                # An exclusive create racing the POST (a process taking a slot) may have
                # found the object absent and replaced it: then the slot is its.
                found = objects.get(container, name, newest=True) if renewed else None
        except errors.StorageUnavailable as exc:
            LOG.warning("Tally writer slot %d not renewed, %.0f s of its lease left: %s",
                        lease.slot, lease.left(), exc.description)
            return
        if found is None or json.loads(found[1]).get("holder") != lease.holder:
            LOG.warning("Tally writer slot %d lost: its lease is gone or another "
                        "process's", lease.slot)
            lease.deadline = -math.inf
            return
        lease.renewed = sent
        lease.deadline = sent + self._lease_time - LEASE_ROUNDING

    def _release_slot(self) -> None:
        """Delete the lease (on close), so that the next process takes the slot at once;
        a lease this process cannot be sure it still holds is left to expire."""
        with self._flush_lock:
            lease, self._lease = self._lease, None
            self._book.forget_written()
        if lease is None or lease.left() <= self._lease_time / LEASE_MARGIN:
            return
        container = lay.writers_container(self._objects.prefix)
        name = lay.slot_name(lease.slot)
        try:
            with unavailable:
                found = self._objects.get(container, name, newest=True)
                if found is not None and json.loads(found[1]).get("holder") == lease.holder:
                    self._objects.delete(container, name)
        except errors.StorageUnavailable as exc:
            LOG.warning("Tally writer slot %d not freed, free once its lease expires: %s",
                        lease.slot, exc.description)
