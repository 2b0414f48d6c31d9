"""The project catalogues in Redis, which list each project's queues for GET /v2/queues
and count them for the queue quota (``max_queues_per_project``): holds in the catalogue.

A project's catalogue (``KeyNames.catalogue``) lists its queues, and its size is what the
quota counts; in a cluster it lives in a slot of its own, so no script can count it and
make a queue at once. A creation the quota bounds therefore goes in steps
(``lua/catalogue_reserve.lua`` documents the keys and the protocol): its write in the
queue's slot finds the queue missing and makes nothing; it takes a *hold* of the name in
the catalogue, refused when the catalogue lists the quota already (one script: exact,
whatever the concurrency); writes again, under the hold's deadline as a fence; and
settles the hold. A hold counts as a queue from the moment it is taken, so a burst of
creations never takes the project past its quota; a refused or failed creation only
drops its own hold.

A process dying between the steps leaves its hold behind, counted. Past its deadline
(``HOLD_LEASE``) and the clock skew allowed between nodes (``HOLD_SKEW``) no write
under it can make the queue any more, so the next reservation in the project reports
it, and it is settled by whether its queue exists: counted for good if it does,
dropped if not. Until then it counts, as a creation in progress does.

A deletion unlists its queue before dropping its keys, but leaves a name a creation
holds to that creation's settle. When the creation's write came before the drop, the
name stays listed though the queue is gone (as when a post without quotas races a
deletion): a listing skips it, and it counts until the name is made or deleted again.
The quota is never passed; at worst a queue too few is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from delayq import errors
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.layout import US, KeyNames, new_nonce
from delayq.storage.redis.scripts import Scripts

# Seconds a hold lets its creation make the queue: several round trips, each bounded
# by the socket timeout. A creation later than that finds its fence passed and reserves
# again (``HOLD_ATTEMPTS`` in all).
HOLD_LEASE = 30
# Seconds a hold is kept past its deadline before it is settled without its creation:
# covers the clocks of the catalogue's node and the queue's node, which test the fence.
HOLD_SKEW = 30
HOLD_ATTEMPTS = 3
# The fence of a write that must not make its queue: no clock reads 0 or earlier.
NO_CREATION = "0"


@dataclass(frozen=True, slots=True)
class Hold:
    """A creation's hold of a queue name in its project's catalogue."""

    project: str
    name: str
    token: str
    deadline: int  # us, on the catalogue node's clock (or the driver's given clock)

    @property
    def fence(self) -> str:
        """The fence argument of the creating write (``lua/queue_create.lua``)."""
        return str(self.deadline)


class Catalogue:
    """The project catalogues of a Redis driver: listing a queue, unlisting it, the
    holds of creations the queue quota bounds, and the creation of a queue under them.

    *scripts* are the driver's scripts (``scripts.calls`` its plain commands), *now*
    the time argument of every script (``Context.now_arg``).
    """

    def __init__(self, key_names: KeyNames, scripts: Scripts, now: Callable[[], str]) -> None:
        self.key_names = key_names
        self.scripts = scripts
        self._now = now

    async def create_queue(self, project: str, name: str, metadata: str, quota: int
                           ) -> bool:
        """Make the queue unless it exists, under the queue *quota* (0: none); True
        when this call made it."""
        key = self.key_names.queue(project, name)
        creation = Creation(self, project, name, quota)
        while True:
            created, listed, exists = await self.scripts.queue_create.call(
                [key], [metadata, new_nonce(), self._now(), creation.fence])
            if exists:
                break
            await creation.missing()
        await creation.done(True)
        if not (quota and listed):
            # Always without a quota: this also repairs a queue a crashed delete left out
            # of the listing.
            await self.list_queue(project, name)
        return bool(created)

    async def list_queue(self, project: str, name: str) -> None:
        """Add an existing queue to its project's catalogue, then mark it listed."""
        await self.list_name(project, name)
        await self.scripts.queue_update.call([self.key_names.queue(project, name)],
                                             ["listed", "1"])

    async def reserve(self, project: str, name: str, quota: int) -> Hold:
        """A hold of *name* for a creation in *project*, which may then make the queue
        until the hold's fence; raises ``QuotaExceeded`` when the catalogue lists
        *quota* names and *name* is not among them. Late holds the reservation meets
        are settled first (a refusal is decided again once they are)."""
        catalogue = self.key_names.catalogue(project)
        for _ in range(2):
            token = new_nonce()
            reply = await self.scripts.catalogue_reserve.call(
                [catalogue], [self._now(), name, token, quota, HOLD_LEASE * US,
                              HOLD_SKEW * US])
            held, value, late = reply[0], reply[1], reply[2:]
            if late:
                await self._settle_late(project, late)
            if held:
                # Before the queue can exist: the reaper finds projects by this set.
                await self.scripts.calls.command("SADD", self.key_names.projects(), project)
                return Hold(project, name, token, value)
            if not late:
                break
        raise errors.QuotaExceeded.queues(value, quota)

    async def settle(self, hold: Hold, exists: bool) -> None:
        """Drop *hold*: its name stays listed if the queue *exists* (made or found by
        the creation), else goes unless listed for good or held by another."""
        await self.scripts.catalogue_settle.call(
            [self.key_names.catalogue(hold.project)], [hold.name, hold.token, int(exists)])

    async def list_name(self, project: str, name: str) -> None:
        """List an existing queue, with no hold: made by a creation the quota does not
        bound (a queue that exists is never refused), or left unlisted by a crash."""
        await self.scripts.catalogue_settle.call([self.key_names.catalogue(project)],
                                                 [name, "", 1])
        await self.scripts.calls.command("SADD", self.key_names.projects(), project)

    async def unlist(self, project: str, name: str) -> None:
        """Take a queue being deleted out of the listing (a held name stays, tentative,
        for its holds to settle)."""
        await self.scripts.catalogue_unlist.call([self.key_names.catalogue(project)], [name])

    async def _settle_late(self, project: str, late: list[bytes]) -> None:
        """Settle holds past their deadline and the skew, left by dying processes: no
        write can make their queue any more, so whether it exists is final."""
        for member in late:
            name, _, token = member.decode().partition(" ")
            exists = await self.scripts.calls.command(
                "HEXISTS", self.key_names.queue(project, name), "meta")
            await self.settle(Hold(project, name, token, 0), bool(exists))


class Creation:
    """One creation the queue quota may bound, through its write's replies.

    ``fence`` is the argument its write passes: '' without a quota (the write makes the
    queue), else ``NO_CREATION`` until it holds the name, then its hold's fence. When
    the write finds the queue missing, ``missing()`` takes a hold (another when the
    fence passed first, at most ``HOLD_ATTEMPTS``); once the write is done, ``done()``
    settles it. A write whose outcome is unknown (the connection broke) settles
    nothing: its hold is settled late, by whether the queue exists.
    """

    def __init__(self, catalogue: Catalogue, project: str, name: str, quota: int) -> None:
        self.catalogue = catalogue
        self.project = project
        self.name = name
        self.quota = quota
        self.hold: Hold | None = None
        self.holds_taken = 0

    @property
    def fence(self) -> str:
        if self.hold is not None:
            return self.hold.fence
        return NO_CREATION if self.quota else ""

    async def missing(self) -> str:
        """The write found the queue missing and made nothing: the fence to write again
        under, once the name is held; raises ``QuotaExceeded`` when it cannot be."""
        await self.done(False)
        if self.holds_taken == HOLD_ATTEMPTS:
            raise unavailable.error(
                f"Creating queue {self.name!r} outlasted {self.holds_taken} holds of its "
                "name; retry.")
        self.hold = await self.catalogue.reserve(self.project, self.name, self.quota)
        self.holds_taken += 1
        return self.hold.fence

    async def done(self, exists: bool) -> None:
        """Settle the hold, if any: the queue *exists* after the write (made or found),
        or the write made none."""
        if self.hold is not None:
            hold, self.hold = self.hold, None
            await self.catalogue.settle(hold, exists)
