"""The Swift driver's quotas (``[quotas]``), exact whatever the requests, threads and API
servers racing: no post takes a queue past ``max_messages_per_queue``, no creation a
project past ``max_queues_per_project``.

Swift has no transaction to count and write in, and no compare-and-swap; its one
exclusive step is a bid (``Objects.bid``: a conditional create, the settle time, the
winner read back), since ``If-None-Match: *`` alone lets racing PUTs all succeed. So each
quota is counted and written under a lease that one request of the deployment holds at a
time, won by a bid with ``X-Delete-After`` of ``LEASE_TIME``. The leases are objects of
the quotas container, ``<prefix>:quotas`` (``layout.quotas_container``):

``q/<project part>``
    The project's queue-creation lease (the project part as in its queue containers'
    names). Its holder counts the project's queue containers (the account listing
    ``Queues.count`` reads: a queue counts from its container's creation to its
    deletion) and creates the queue only when they are fewer than the quota.
``p/<project part>/<queue>``
    The queue's post lease. Its holder counts the queue's live messages (its index
    entries whose expiry, in their names, is to come: what ``Queues.stats`` counts, so an
    expired message no reaper removed yet does not count) and writes the post, index
    entries included, only when the queue stays within the quota.

The body is a lease's (``layout.lease_body``: holder nonce, host, pid). What takes no
lease only adds: dead-letter moves, redrives back to source queues and requests under a
quota of 0 create queues and write messages whatever the counts, as the quotas' rules
say; deletions only make room (a count racing one may not see it yet). A request whose
count finds no room before it bids is refused without bidding (the count it read held
no room); a creation that finds its queue's container listed makes no new queue and
bids for nothing.

Leases
    Within a process, the requests for one lease queue on a lock of the process first
    (``Leases.held``), so that one of them bids at a time, and a request done with the
    lease hands it to the next one waiting, for up to ``HAND_OVER`` seconds after its
    bid: a burst in one process costs Swift about a bid a second, not one per request
    and retry. Across processes a lease is not fair: a bid lost to another process
    is tried again after pauses that double (``FIRST_PAUSE`` to ``LAST_PAUSE``), for up
    to ``WAIT`` seconds, then the request is a 503. The holder deletes its lease when
    done, with ``X-If-Delete-At`` of the lease it read back, so that it never deletes a
    successor's. A holder that dies leaves its lease to expire: Swift answers an object
    past its ``X-Delete-At`` as absent and lets a bid create it again (expirer or not),
    so nobody waits for a dead holder longer than ``LEASE_TIME``. The holder keeps its
    deadline on the monotonic clock and starts no write once less than ``LEASE_MARGIN``
    of it is left (a 503; the request is retried). Left: a holder paused (SIGSTOP, a VM
    frozen) between that check and its writes for longer than the margin may write
    after another holder counted.

Cost: nothing with quotas of 0. A creation under ``max_queues_per_project``: one account
listing when the queue exists or the project is full; else a bid, a second listing and a
DELETE besides the creation. A post under ``max_messages_per_queue``: a bid (the settle
time), one listing of the queue's index (a request per 10,000 messages) and a DELETE;
refused by the count before a bid, one listing; a lease handed on saves the bid and the
DELETE. The posts of one queue are serialised: the deployment's take their turns at its
lease, each holding it for its listing and writes (and the settle time of a bid, unless
handed the lease).
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import requests
from swiftclient.exceptions import ClientException

from delayq import errors
from delayq.storage.swift import layout as lay
from delayq.storage.swift.objects import DELETE_AFTER, Objects, is_status, unavailable

LOG = logging.getLogger(__name__)

QUEUES_PREFIX = "q/"  # a project's queue-creation lease
POSTS_PREFIX = "p/"  # a queue's post lease

LEASE_TIME = 15  # seconds (X-Delete-After) a lease lasts unless deleted first
# Swift turns X-Delete-After into a whole-second X-Delete-At, truncated: a lease may end
# up to this much sooner than asked.
LEASE_ROUNDING = 1.0
LEASE_MARGIN = 5.0  # seconds of its lease a holder must have left to start a write
WAIT = LEASE_TIME + LEASE_MARGIN  # seconds a request bids for a lease other processes hold
# Seconds a request waits for the other requests of its process to be done with a lease:
# a burst of them in one process is served one after another.
LOCAL_WAIT = 120.0
# Seconds after its bid during which a lease is handed from one request of a process to
# the next one waiting, without a DELETE and a bid in between; then it is released, for
# other processes to bid for.
HAND_OVER = 1.0
FIRST_PAUSE = 0.02  # seconds between lost bids, doubling up to LAST_PAUSE
LAST_PAUSE = 0.5

T = TypeVar("T")


@dataclass(frozen=True)
class Lease:
    """A lease this process holds."""

    name: str
    delete_at: str  # its X-Delete-At, as read back by the winning bid
    taken: float  # time.monotonic() when its bid was sent
    deadline: float  # time.monotonic() after which Swift may have expired it

    def check(self) -> None:
        """Raise StorageUnavailable when too little of the lease is left to write under
        it (``LEASE_MARGIN``): another request may hold it by the time a write lands."""
        if self.deadline - time.monotonic() < LEASE_MARGIN:
            raise unavailable.error(f"The quota lease {self.name!r} ran short before the "
                                    "request could write under it; retry.")

    def handed_on(self) -> bool:
        """Whether the next request of this process waiting for it may have it, rather
        than bid (``HAND_OVER``)."""
        return time.monotonic() - self.taken < HAND_OVER


@dataclass
class Local:
    """This process's hold on one lease: the lock its requests take turns on, how many
    hold or wait for it, and the lease a request handed on to the next."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    lease: Lease | None = None


class Leases:
    """The quota leases of the deployment, as this process takes them."""

    def __init__(self, objects: Objects) -> None:
        self._objects = objects
        self._container = lay.quotas_container(objects.prefix)
        self._guard = threading.Lock()  # guards _locals
        self._locals: dict[str, Local] = {}

    @contextmanager
    def held(self, name: str, needed: Callable[[], bool], *, check_first: bool = True
             ) -> Iterator[Lease | None]:
        """The lease *name*, held for the block; None, and no lease taken, once
        ``needed()`` says the request needs none (it raises to refuse the request).

        ``needed`` runs before each bid, but the first when *check_first* is False and no
        other request of this process came first (a request alone is seldom refused, and
        decides again under the lease anyway). A lease handed on by the request before
        is held at once.
        """
        with self._local(name) as (local, waited):
            lease, local.lease = local.lease, None
            check = check_first or waited
            pause = FIRST_PAUSE
            deadline = time.monotonic() + WAIT
            while lease is None:
                if check and not needed():
                    yield None
                    return
                check = True
                lease = self._take(name)
                if lease is not None:
                    break
                if time.monotonic() + pause > deadline:
                    raise unavailable.error(f"The quota lease {name!r} stays taken; retry.")
                time.sleep(random.uniform(pause / 2, pause))
                pause = min(2 * pause, LAST_PAUSE)
            try:
                yield lease
            finally:
                with self._guard:
                    waiting = local.users > 1
                if waiting and lease.handed_on():
                    local.lease = lease  # released by the last request, if none wants it
                else:
                    self._release(lease)

    @contextmanager
    def _local(self, name: str) -> Iterator[tuple[Local, bool]]:
        """This process's hold on lease *name*, its lock held for the block, and whether
        the request had to wait for it."""
        with self._guard:
            local = self._locals.setdefault(name, Local())
            local.users += 1
        try:
            waited = not local.lock.acquire(blocking=False)
            if waited and not local.lock.acquire(timeout=LOCAL_WAIT):
                raise unavailable.error(f"Too many requests of this server wait for the "
                                        f"quota lease {name!r}; retry.")
            try:
                yield local, waited
            finally:
                local.lock.release()
        finally:
            with self._guard:
                local.users -= 1
                left = None
                if not local.users:
                    del self._locals[name]
                    left, local.lease = local.lease, None
            if left is not None:  # handed on to a request that gave up waiting
                self._release(left)

    def _take(self, name: str) -> Lease | None:
        """Bid for the lease; it, when won."""
        objects = self._objects
        body = lay.lease_body(secrets.token_hex(8))
        headers = {DELETE_AFTER: str(LEASE_TIME)}
        sent = time.monotonic()
        try:
            found = objects.won(self._container, name, body, headers)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            objects.swift.put_container(self._container)  # the deployment's first lease
            sent = time.monotonic()
            found = objects.won(self._container, name, body, headers)
        if found is None:
            return None
        return Lease(name, found.get("x-delete-at", ""), sent,
                     sent + LEASE_TIME - LEASE_ROUNDING)

    def _release(self, lease: Lease) -> None:
        """Delete the lease, unless it has expired (and another request may hold it
        now). A failure leaves it to expire: the request's writes are done."""
        try:
            self._objects.swift.delete_object(self._container, lease.name,
                                              headers={"X-If-Delete-At": lease.delete_at})
        except ClientException as exc:
            if not is_status(exc, 404, 412):
                LOG.warning("Quota lease %r not deleted, free once it expires: %s",
                            lease.name, exc)
        except (requests.exceptions.RequestException, OSError) as exc:
            LOG.warning("Quota lease %r not deleted, free once it expires: %s", lease.name,
                        exc)


class Quotas:
    """The quotas of the queues of *objects*; *now_us* reads the driver's clock (µs)."""

    def __init__(self, objects: Objects, now_us: Callable[[], int]) -> None:
        self._objects = objects
        self._now_us = now_us
        self._leases = Leases(objects)

    def create_queue(self, project: str, queue: str, quota: int, create: Callable[[], T]
                     ) -> T:
        """``create()``, which makes the queue, unless the queue does not exist and the
        project holds *quota* queues (QuotaExceeded, and nothing made)."""
        objects = self._objects
        container = objects.container(project, queue)
        start = lay.queue_prefix(objects.prefix, project)

        def new() -> bool:
            """True when the queue is to be made and there is room for it; False when its
            container exists; raises when the project is full."""
            held = objects.account(start)
            if container in held:
                return False
            if len(held) >= quota:
                raise errors.QuotaExceeded.queues(len(held), quota)
            return True

        with self._leases.held(QUEUES_PREFIX + lay.project_part(project), new) as lease:
            if lease is not None and new():  # decided again, under the lease
                lease.check()
            return create()

    def post(self, project: str, queue: str, posted: int, quota: int,
             write: Callable[[Lease], T]) -> T:
        """``write(lease)``, which stores *posted* messages into the queue, unless the
        queue would then hold more than *quota* live messages (QuotaExceeded, and
        nothing written). *write* calls ``lease.check()`` again before writing messages
        when it had to create the queue first."""
        container = self._objects.container(project, queue)

        def room() -> bool:
            held = len(lay.live_entries(self._objects.names(container, lay.INDEX_PREFIX),
                                        self._now_us()))
            if held + posted > quota:
                raise errors.QuotaExceeded.messages(queue, held, posted, quota)
            return True

        name = f"{POSTS_PREFIX}{lay.project_part(project)}/{queue}"
        with self._leases.held(name, room, check_first=False) as lease:
            if lease is None:  # room() never says no lease is needed
                raise RuntimeError("a post under a message quota needs its lease")
            room()  # counted again, under the lease: what the post is decided on
            lease.check()
            return write(lease)
