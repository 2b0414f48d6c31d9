"""The Swift driver's requests: objects and containers of one account, with what Swift's
answers need before they can be trusted.

Connections
    swiftclient's connections are not shared between threads: each thread makes its own
    (``connect``), and ``close`` closes them all. Per-message requests of one API request
    run in parallel, ``concurrency`` threads at once (``parallel``); the reaper's passes
    use a pool of their own, so that their bids, which each wait the settle time, do not
    hold up the API's.
Bids
    Swift has no transactions and no compare-and-swap. ``PUT`` with ``If-None-Match: *``
    creates an object only if it does not exist — but the object server checks and then
    writes without a lock, so racing PUTs may all get 201; the write with the latest
    timestamp (set by the proxy) is the one that stays. A bid (``bid``) therefore creates
    the object conditionally with a nonce, waits ``claim_settle_time`` (longer than any
    racer's check-to-write window, after which every racing write has landed), then reads
    it back (``X-Newest``) and has won only if its nonce is there. Every racer reads the
    same final object, so exactly one wins. Generation markers, writer slots and the
    reaper's lease are all won this way.
404 is not always "gone"
    A GET, HEAD or POST that races a POST of the same object may be answered 404 (the
    object server opens the .meta file the other POST has just replaced). Every read of
    an object and every rewrite of a message's state asks again, four times, before
    taking a 404 for absence (``ABSENCE_RECHECKS``): a winner that took one for
    "deleted" dropped the message it had won, which then stayed claimed by a claim that
    did not list it.
Time
    The Swift proxy's clock (``delayq.storage.clock`` over ``proxy_stamp``), so API
    hosts whose own clocks are skewed agree on when a message is due.
Unavailable
    Swift failing (5xx, a refused or timed-out connection, refused credentials) is
    ``StorageUnavailable`` (``unavailable``); the other 4xx answers are the driver's to
    read.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import requests
from swiftclient import client as swift
from swiftclient.exceptions import ClientException

from delayq.storage.base.unavailable import Unavailability
from delayq.storage.clock import Stamp
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Entry, Record

NAME = "swift"  # the store a 503 names

LISTING_PAGE = 10_000  # Swift's largest listing page
# Markers outlive their message's object by this much, so a late claimer still finds them.
MARKER_MARGIN = 86_400
EXPIRED_RETENTION = 3600  # seconds an expired message stays stored (expired_retention)
API_POOL = "delayq-swift"  # threads for the per-message requests of API requests
# A queue container being deleted is filled again by writes racing the deletion, and a
# round of deletion per refill follows. Posts may go on for ever: rounds refilled with any
# object but a tally answer 503 once DELETE_PAUSES are spent, each pause longer. Another
# process's tally flush is a burst that ends (it writes what it counted, then finds the
# container gone): rounds refilled with tally objects only go on, TALLY_REFILL_PAUSE
# apart, for up to DELETE_DEADLINE.
DELETE_PAUSES = (0.05, 0.1, 0.2, 0.4, 0.8)
TALLY_REFILL_PAUSE = 0.05
DELETE_DEADLINE = 10.0
# Pauses before asking again when Swift answers 404 for an object that may well exist.
# The object server answers 404 to a GET, HEAD or POST that races a POST of the same
# object (it opens the .meta file the other POST has just replaced); taken for "deleted",
# such an answer would make a claim drop a message it had won. Only a 404 every time is
# "gone". Each asking again races the next POST afresh: the number of askings, not the
# pauses, makes a false "gone" rare, and the pauses stay short since a real absence waits
# for all of them.
ABSENCE_RECHECKS = (0.002, 0.005, 0.01, 0.02)
DELETE_AFTER = "X-Delete-After"  # Swift sets X-Delete-At from the proxy's own clock
# Seconds a clock object outlives its last write: every reading rewrites it, so only the
# objects of processes gone are ever removed by it.
CLOCK_OBJECT_LIFETIME = 3600

T = TypeVar("T")


def describe_unavailable(exc: BaseException) -> str | None:
    """What failed, when *exc* means Swift cannot serve now (a 5xx, a refused or
    timed-out connection, refused credentials, throttling); None for any other answer,
    which is the driver's to read."""
    if isinstance(exc, ClientException):
        if exc.http_status is not None and exc.http_status < 500 and exc.http_status not in (
                401, 403, 408, 429):
            return None
        return f"Swift is unavailable: {exc}"
    if isinstance(exc, requests.exceptions.RequestException | OSError):
        return f"Swift is unavailable: {exc}"
    return None


unavailable = Unavailability(NAME, describe_unavailable)


def is_status(exc: ClientException, *statuses: int) -> bool:
    return exc.http_status in statuses


def delete_at(expires_us: int, margin: int = 0) -> str:
    """``X-Delete-At`` (whole seconds, rounded up: Swift must never drop a live object)."""
    return str(-(-expires_us // US) + margin)


class Objects:
    """The account's objects under the driver's *prefix*, through one connection per
    thread (*connect* makes one)."""

    def __init__(self, connect: Callable[[], swift.Connection], *, prefix: str,
                 concurrency: int, claim_settle_time: float, expired_retention: int
                 ) -> None:
        """*claim_settle_time* is a bid's wait before reading back (see the module);
        *expired_retention* the seconds an expired message stays stored for the reaper."""
        self.prefix = prefix
        self.concurrency = concurrency
        self.settle_time = claim_settle_time
        self._retention = expired_retention
        self._connect = connect
        self._local = threading.local()
        self._connections: list[swift.Connection] = []
        self._lock = threading.Lock()
        self._pools: dict[str, ThreadPoolExecutor] = {}

    @property
    def swift(self) -> swift.Connection:
        """This thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            with self._lock:
                self._connections.append(conn)
        return conn

    def parallel(self, work: Callable[[Any], T], items: Iterable[Any], *,
                 pool: str = API_POOL) -> list[T]:
        """``work`` of each item, in *pool*'s threads (``concurrency`` of them)."""
        items = list(items)
        if len(items) <= 1:
            return [work(item) for item in items]
        with self._lock:
            if pool not in self._pools:
                self._pools[pool] = ThreadPoolExecutor(max_workers=self.concurrency,
                                                       thread_name_prefix=pool)
            executor = self._pools[pool]
        return list(executor.map(work, items))

    def close(self) -> None:
        """Stop the pools and close every thread's connection."""
        with self._lock:
            for executor in self._pools.values():
                executor.shutdown(wait=False)
            self._pools.clear()
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def proxy_stamp(self, clock_object: str) -> Stamp:
        """The proxy's clock: the time it stamps *clock_object* (this process's own
        object in the clock container) with when the ``PUT`` storing it reaches it, read
        back by a ``HEAD``. The stamp was taken within the ``PUT``'s round trip, whatever
        the ``HEAD`` takes."""
        container = lay.clock_container(self.prefix)
        expiry = {DELETE_AFTER: str(CLOCK_OBJECT_LIFETIME)}
        try:
            sent = time.monotonic()
            self.swift.put_object(container, clock_object, b"", headers=expiry)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            self.swift.put_container(container)
            sent = time.monotonic()
            self.swift.put_object(container, clock_object, b"", headers=expiry)
        received = time.monotonic()
        headers = self.swift.head_object(container, clock_object)
        return Stamp(round(float(headers["x-timestamp"]) * 1000), sent, received)

    def container(self, project: str, queue: str) -> str:
        """The queue's container."""
        return lay.container(self.prefix, project, queue)

    def stored_until(self, expires_us: int) -> str:
        """``X-Delete-At`` of a message and its index entry: past its expiry by the
        retention, so that this driver, not Swift's expirer, removes (and reports) it."""
        return delete_at(expires_us, self._retention)

    def marker_until(self, expires_us: int) -> str:
        """``X-Delete-At`` of a marker: it outlives the message's object, so a late
        claimer or reaper still finds it."""
        return delete_at(expires_us, self._retention + MARKER_MARGIN)

    # Objects

    @staticmethod
    def unless_absent(request: Callable[[bool], T]) -> T | None:
        """``request(recheck)``'s answer; None only when Swift answers 404 each time.

        *recheck* is True for the requests after a 404 (``ABSENCE_RECHECKS``).
        """
        for attempt, pause in enumerate((0.0, *ABSENCE_RECHECKS)):
            time.sleep(pause)
            try:
                return request(attempt > 0)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
        return None

    def get(self, container: str, name: str, *, newest: bool = False
            ) -> tuple[dict[str, str], bytes] | None:
        """The object's headers and body; None when it is absent."""
        return self.unless_absent(lambda recheck: self.swift.get_object(
            container, name, headers={"X-Newest": "true"} if newest or recheck else None))

    def head(self, container: str, name: str) -> dict[str, str] | None:
        """The object's headers; None when it is absent."""
        return self.unless_absent(lambda recheck: self.swift.head_object(
            container, name, headers={"X-Newest": "true"} if recheck else None))

    def exists(self, container: str, name: str) -> bool:
        return self.head(container, name) is not None

    def delete(self, container: str, name: str) -> bool:
        """Delete the object; False when it was not there (deleted by someone else)."""
        try:
            self.swift.delete_object(container, name)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            return False
        return True

    def delete_objects(self, container: str, names: list[str]) -> None:
        self.parallel(lambda name: self.delete(container, name), names)

    def create(self, container: str, name: str, body: bytes, headers: dict[str, str]
               ) -> bool:
        """Create the object unless it exists; False when it did."""
        try:
            self.swift.put_object(container, name, body,
                                  headers={**headers, "If-None-Match": "*"})
        except ClientException as exc:
            if is_status(exc, 412):
                return False
            raise
        return True

    def bid(self, container: str, name: str, body: dict[str, Any], headers: dict[str, str]
            ) -> bool:
        """Create object *name* (JSON *body* and a nonce) if nobody else does; True for
        the one winner of a race."""
        return self.won(container, name, body, headers) is not None

    def won(self, container: str, name: str, body: dict[str, Any], headers: dict[str, str]
            ) -> dict[str, str] | None:
        """``bid``: the object's headers as read back when this bid won, else None."""
        nonce = secrets.token_hex(8)
        if not self.create(container, name, lay.encode({**body, "nonce": nonce}), headers):
            return None
        time.sleep(self.settle_time)
        found = self.get(container, name, newest=True)
        if found is None or json.loads(found[1]).get("nonce") != nonce:
            return None
        return found[0]

    def names(self, container: str, prefix: str, *, marker: str = "", end: str | None = None,
             limit: int | None = None) -> list[str]:
        """Object names under *prefix* after *marker* (before *end*); [] for no container."""
        names: list[str] = []
        while True:
            page = LISTING_PAGE if limit is None else min(LISTING_PAGE, limit - len(names))
            try:
                _, listing = self.swift.get_container(container, prefix=prefix,
                                                      marker=marker, end_marker=end,
                                                      limit=page)
            except ClientException as exc:
                if is_status(exc, 404):
                    return names
                raise
            names += [item["name"] for item in listing]
            if len(listing) < page or (limit is not None and len(names) >= limit):
                return names
            marker = names[-1]

    def account(self, start: str) -> list[str]:
        """Every container of the account whose name begins with *start*."""
        names: list[str] = []
        while True:
            _, listing = self.swift.get_account(prefix=start, marker=names[-1] if names
                                                else "", limit=LISTING_PAGE)
            names += [item["name"] for item in listing]
            if len(listing) < LISTING_PAGE:
                return names

    def delete_container(self, container: str, queue: str) -> bool:
        """Delete a queue's container and everything in it; False if there was none
        (see ``DELETE_PAUSES`` for writes racing the deletion)."""
        existed = False
        pauses = iter(DELETE_PAUSES)
        deadline = time.monotonic() + DELETE_DEADLINE
        names = self.names(container, "")
        while True:
            existed = existed or bool(names)
            self.delete_objects(container, names)
            try:
                self.swift.delete_container(container)
                return True
            except ClientException as exc:
                if is_status(exc, 404):
                    return existed
                if not is_status(exc, 409):  # 409: an object written since the listing
                    raise
            names = self.names(container, "")
            tallies_only = bool(names) and all(n.startswith(lay.TALLY_PREFIX) for n in names)
            pause = TALLY_REFILL_PAUSE if tallies_only else next(pauses, None)
            if pause is None or time.monotonic() + pause > deadline:
                raise unavailable.error(f"Queue {queue!r} keeps receiving messages while "
                                        "being deleted; retry.")
            time.sleep(pause)
            names = self.names(container, "")

    # Messages and their index entries

    def put_entry(self, container: str, entry: Entry) -> None:
        try:
            self.swift.put_object(container, entry.name, b"",
                                  headers={"X-Delete-At": self.stored_until(entry.expires)})
        except ClientException as exc:
            if not is_status(exc, 409):  # the same entry, written a moment later
                raise

    def move_entry(self, container: str, message_id: str, old: Entry, new: Entry) -> bool:
        """Replace the message's index entry *old* by *new*; False if the message is gone.

        The new entry is written first (the message is never without one), then the old
        one deleted. A delete of the message racing this may have removed the old entry
        only: looking for the message afterwards, and removing the new entry if it is
        gone, leaves no entry pointing at nothing.
        """
        if new.name != old.name:
            self.put_entry(container, new)
            self.delete(container, old.name)
        if not self.exists(container, lay.message_name(message_id)):
            self.delete(container, new.name)
            return False
        return True

    def write_record(self, container: str, message_id: str, record: Record) -> None:
        """Rewrite the message's state; nothing when the message is gone (deleted)."""
        headers = {**record.headers(), "X-Delete-At": self.stored_until(record.expires)}
        try:
            self.unless_absent(lambda _: self.swift.post_object(
                container, lay.message_name(message_id), headers=headers))
        except ClientException as exc:
            # A newer write of the record landed first (a repairer and the claimer it
            # repairs for write the same state).
            if not is_status(exc, 409):
                raise

    def put_message(self, container: str, message_id: str, record: Record, body: bytes
                    ) -> None:
        """Write the message whole: its body and its state."""
        self.swift.put_object(container, lay.message_name(message_id), body,
                              content_type="application/json",
                              headers={**record.headers(),
                                       "X-Delete-At": self.stored_until(record.expires)})

    def read(self, container: str, message_id: str) -> tuple[Record, bytes] | None:
        """The message's record and body; None when it is absent."""
        found = self.get(container, lay.message_name(message_id))
        if found is None:
            return None
        headers, body = found
        return Record.from_headers(headers), body

    def read_record(self, container: str, message_id: str) -> Record | None:
        """The message's record, without its body; None when it is absent."""
        headers = self.head(container, lay.message_name(message_id))
        return None if headers is None else Record.from_headers(headers)
