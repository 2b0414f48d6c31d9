"""The Swift driver's subscriptions (``delayq.subscription``): records with an expiry,
unique per subscriber of a queue, in one container for the whole deployment,
``<prefix>:subscriptions`` (``layout.py``).

Versions
    A subscription is the object ``s/<project>/<queue>/<id>/<written>.<expires>``: each
    write of it (its creation, each update) is a new object, named by the time of the
    write, after which the writer deletes the older ones. The newest name of an id is
    its current version, and the name tells its expiry, so listings say which
    subscriptions are live without reading them: ``subscribed_queues`` is one listing of
    the container (a request per 10,000 subscriptions) whatever the number of queues
    and projects. Of two updates racing, the one written later wins whole; a writer that
    dies between its two steps leaves an older version that readers pass over and the
    next write or reaper pass deletes.
Uniqueness
    Swift cannot create an object only if another one does not exist, so each
    subscriber of a queue has locks ``u/<project>/<queue>/<subscriber digest>/<n>``, won
    by bidding (``Objects.bid``) as a message's generation markers are. The newest lock
    names the subscription holding the subscriber. The next one may be bid for when that
    subscription does not hold it any more: deleted (a deletion marks its lock
    ``released``), expired, or moved to another subscriber by an update. A creation, or
    an update to another subscriber, bids for the next lock and then writes the
    subscription: of requests racing for one subscriber exactly one wins, as with
    claims (the settle-time assumption, docs/swift.md). A lock naming a subscription that
    does not hold its subscriber (yet) is its winner's, about to write it, until
    ``ABANDONED`` has passed: then its winner died, and the subscriber is free.

Expiry is the driver's clock: an expired subscription is invisible at once.
``X-Delete-At`` (its expiry) lets Swift drop it; the reaper deletes expired and older
versions from the listing meanwhile. Deleting a queue keeps its subscriptions, as Zaqar
does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from swiftclient.exceptions import ClientException

from delayq import errors
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, SubscriptionName
from delayq.storage.swift.objects import (
    DELETE_AFTER,
    MARKER_MARGIN,
    Objects,
    delete_at,
    is_status,
    unavailable,
)
from delayq.subscription import Subscription, SubscriptionChange

# A lock naming a subscription that does not hold its subscriber is its winner's, about
# to write it, until this old (µs of the driver's clock); then its winner died.
ABANDONED = 60 * US
# Seconds a lock superseded by a newer one is kept: long after every request that listed
# the locks before the newer one was won has ended.
SUPERSEDED_LOCK_LIFETIME = MARKER_MARGIN
# Bids an update to another subscriber makes while other updates of the subscription
# keep winning its lock first.
UPDATE_ATTEMPTS = 5

Stored = dict[str, Any]  # a subscription's JSON body
T = TypeVar("T")


def subscription(stored: Stored, now: int) -> Subscription:
    return Subscription(id=stored["id"], queue=stored["queue"], subscriber=stored["subscriber"],
                        ttl=stored["ttl"], options=stored["options"],
                        created=stored["created"] / US, expires=stored["expires"] / US,
                        as_of=now / US,
                        # Written before confirmation existed: confirmed.
                        confirmed=stored.get("confirmed", True))


def current_versions(names: Iterable[str]) -> dict[tuple[str, str, str], str]:
    """The newest name of each subscription among *names* (sorted, as listings are), by
    ``(project part, queue, id)``, in name order."""
    current: dict[tuple[str, str, str], str] = {}
    for name in names:
        parsed = SubscriptionName.parse(name)
        if parsed is not None:
            current[(parsed.part, parsed.queue, parsed.id)] = name
    return current


def is_live(name: str, now: int) -> bool:
    parsed = SubscriptionName.parse(name)
    return parsed is not None and parsed.expires > now


class Subscriptions:
    """The subscriptions of every project under the driver's prefix
    (``BlockingSubscriptions``); *now_us* is the driver's clock (µs)."""

    def __init__(self, objects: Objects, now_us: Callable[[], int]) -> None:
        self._objects = objects
        self._now_us = now_us
        self._container = lay.subscriptions_container(objects.prefix)
        # Hashed project parts (``layout.project_part``) and the projects they stand for.
        self._projects: dict[str, str] = {}

    # Reads

    def get(self, project: str, queue: str, subscription_id: str) -> Subscription | None:
        """The live subscription: a listing of its versions and a GET of the newest."""
        with unavailable:
            now = self._now_us()
            stored = self._current(self._versions(project, queue, subscription_id), now)
            return None if stored is None else subscription(stored, now)

    def page(self, project: str, queue: str, marker: str | None, limit: int
             ) -> list[Subscription]:
        """Up to *limit* live subscriptions after *marker*, by id: one listing of the
        queue's names, then a GET of each subscription of the page."""
        with unavailable:
            now = self._now_us()
            start = lay.queue_subscriptions(project, queue)
            # Past every version of the marker's id ("~" sorts after any hexadecimal digit).
            after = f"{start}{marker}/~" if marker else start
            live = [name for name in current_versions(self._names(start, after)).values()
                    if is_live(name, now)]
            page: list[Subscription] = []
            for begin in range(0, len(live), limit):
                read = self._objects.parallel(self._read, live[begin:begin + limit])
                page += [subscription(stored, now) for stored in read if stored is not None]
                if len(page) >= limit:
                    break
            return page[:limit]

    def subscribed_queues(self) -> list[tuple[str, str]]:
        """``(project, queue)`` of every queue with a live subscription, sorted: one
        listing of the container, plus a GET the first time a hashed project is met."""
        with unavailable:
            now = self._now_us()
            live: dict[tuple[str, str], str] = {}
            for (part, queue, _), name in current_versions(
                    self._names(lay.SUBSCRIPTION_PREFIX)).items():
                if is_live(name, now):
                    live.setdefault((part, queue), name)
            found = []
            for (part, queue), name in live.items():
                project = self._project(part, name)
                if project is not None:
                    found.append((project, queue))
            return sorted(found)

    def _project(self, part: str, name: str) -> str | None:
        """The project of a project part; a hashed one is read from subscription *name*
        once per process (None when that subscription is gone meanwhile)."""
        project = lay.project_of_part(part)
        if project is None:
            project = self._projects.get(part)
        if project is None:
            stored = self._read(name)
            if stored is not None:
                project = self._projects[part] = stored["project"]
        return project

    # Writes

    def create(self, project: str, queue: str, subscriber: str, ttl: int,
               options: dict[str, Any], confirmed: bool = True) -> str | None:
        """Store a subscription, *confirmed* or not; its id, or None when a live one
        holds *subscriber*."""
        with unavailable:
            now = self._now_us()
            generation = self._free_lock(project, queue, subscriber, now)
            subscription_id = uuid.uuid4().hex
            if generation is None or not self._take_lock(project, queue, subscriber,
                                                         generation, subscription_id, now):
                return None
            self._write({"project": project, "queue": queue, "id": subscription_id,
                         "subscriber": subscriber, "ttl": ttl, "options": options,
                         "created": now, "expires": now + ttl * US, "written": now,
                         "confirmed": confirmed})
            return subscription_id

    def update(self, project: str, queue: str, subscription_id: str,
               change: SubscriptionChange) -> None:
        """Apply *change* to a live subscription, as a new version (a new ttl runs from
        now). Raises SubscriptionNotFound, or SubscriptionExists when the new subscriber
        is held by another live subscription of the queue."""
        with unavailable:
            for _ in range(UPDATE_ATTEMPTS):
                now = self._now_us()
                versions = self._versions(project, queue, subscription_id)
                stored = self._current(versions, now)
                if stored is None:
                    raise errors.SubscriptionNotFound.with_id(subscription_id)
                updated = {**stored, "written": now}
                if change.ttl is not None:
                    updated.update(ttl=change.ttl, expires=now + change.ttl * US)
                if change.options is not None:
                    updated["options"] = change.options
                if change.confirmed is not None:
                    updated["confirmed"] = change.confirmed
                # The subscriber it moves to, if it moves.
                moving = (None if change.subscriber == stored["subscriber"]
                          else change.subscriber)
                if moving is not None:
                    updated["subscriber"] = moving
                    generation = self._free_lock(project, queue, moving, now,
                                                 subscription_id)
                    if generation is None:
                        raise errors.SubscriptionExists.for_subscriber(moving)
                    if not self._take_lock(project, queue, moving, generation,
                                           subscription_id, now):
                        continue  # another request won it first: look again
                name = self._write(updated)
                self._objects.delete_objects(self._container, [n for n in versions if n != name])
                if moving is not None:
                    # The old subscriber is free at once, not only once ABANDONED has passed.
                    self._release(project, queue, stored["subscriber"], subscription_id)
                return
            raise errors.Conflict(f"Subscription {subscription_id} is being changed by other "
                                  "requests; retry.")

    def delete(self, project: str, queue: str, subscription_id: str) -> None:
        with unavailable:
            self._remove(project, queue, subscription_id,
                         self._versions(project, queue, subscription_id))

    def purge(self, project: str, queue: str) -> None:
        with unavailable:
            start = lay.queue_subscriptions(project, queue)
            by_id: dict[str, list[str]] = {}
            for name in self._names(start):
                parsed = SubscriptionName.parse(name)
                if parsed is not None:
                    by_id.setdefault(parsed.id, []).append(name)
            self._objects.parallel(
                lambda item: self._remove(project, queue, item[0], item[1]), by_id.items())

    def reap(self, now: int) -> None:
        """Delete the expired subscriptions and the older versions of the others."""
        names = self._names(lay.SUBSCRIPTION_PREFIX)
        current = set(current_versions(names).values())
        self._objects.delete_objects(self._container, [
            name for name in names if name not in current or not is_live(name, now)])

    def _remove(self, project: str, queue: str, subscription_id: str, versions: list[str]
                ) -> None:
        """Delete a subscription's versions, then release its subscriber's lock."""
        if not versions:
            return
        stored = self._read(versions[-1])
        self._objects.delete_objects(self._container, versions)
        if stored is not None:
            self._release(project, queue, stored["subscriber"], subscription_id)

    # Versions

    def _versions(self, project: str, queue: str, subscription_id: str) -> list[str]:
        """The names of the subscription's versions, oldest first."""
        if not lay.is_uuid_hex(subscription_id):
            return []
        return self._names(f"{lay.queue_subscriptions(project, queue)}{subscription_id}/")

    def _current(self, versions: list[str], now: int) -> Stored | None:
        """The newest of *versions* when it is live."""
        return self._read(versions[-1]) if versions and is_live(versions[-1], now) else None

    def _write(self, stored: Stored) -> str:
        """Store a version of a subscription; its name."""
        name = lay.subscription_name(stored["project"], stored["queue"], stored["id"],
                                     stored["written"], stored["expires"])
        self._creating_container(lambda: self._objects.swift.put_object(
            self._container, name, lay.encode(stored), content_type="application/json",
            headers={"X-Delete-At": delete_at(stored["expires"])}))
        return name

    # Locks

    def _free_lock(self, project: str, queue: str, subscriber: str, now: int,
                   holder: str | None = None) -> int | None:
        """The generation of *subscriber*'s lock to bid for; None when a live
        subscription other than *holder* holds the subscriber, or is about to."""
        locks = self._names(lay.subscriber_locks(project, queue, subscriber))
        if not locks:
            return 1
        generation = lay.generation_of(locks[-1])
        found = self._objects.get(self._container, locks[-1], newest=True)
        if found is None:
            return generation + 1  # superseded since the listing: the bid finds out
        lock = json.loads(found[1])
        if lock.get("released") or lock["id"] == holder:
            return generation + 1
        versions = self._versions(project, queue, lock["id"])
        if versions and not is_live(versions[-1], now):
            return generation + 1  # expired
        stored = self._read(versions[-1]) if versions else None
        if stored is not None and stored["subscriber"] == subscriber:
            return None
        # Not written yet, or not moved to this subscriber yet: its winner is about to,
        # unless it died.
        return None if now - lock["at"] < ABANDONED else generation + 1

    def _take_lock(self, project: str, queue: str, subscriber: str, generation: int,
                   subscription_id: str, now: int) -> bool:
        """Bid for lock *generation* of *subscriber* for the subscription; True when won.
        The lock it supersedes is left to Swift, to drop a day later."""
        won = self._creating_container(lambda: self._objects.bid(
            self._container, lay.subscriber_lock(project, queue, subscriber, generation),
            {"kind": lay.SUBSCRIBER, "id": subscription_id, "at": now}, {}))
        if won and generation > 1:
            try:
                self._objects.swift.post_object(
                    self._container,
                    lay.subscriber_lock(project, queue, subscriber, generation - 1),
                    headers={DELETE_AFTER: str(SUPERSEDED_LOCK_LIFETIME)})
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
        return won

    def _release(self, project: str, queue: str, subscriber: str, subscription_id: str
                 ) -> None:
        """Mark *subscriber*'s newest lock released, when it names the subscription."""
        locks = self._names(lay.subscriber_locks(project, queue, subscriber))
        found = self._objects.get(self._container, locks[-1], newest=True) if locks else None
        if found is None:
            return
        lock = json.loads(found[1])
        if lock["id"] == subscription_id and not lock.get("released"):
            # Overwritten, not bid for: only this subscription's deletion writes it, and
            # creations bid for the next generation, never this one.
            self._objects.swift.put_object(self._container, locks[-1],
                                           lay.encode({**lock, "released": True}))

    # Requests

    def _names(self, prefix: str, after: str = "") -> list[str]:
        return self._objects.names(self._container, prefix, marker=after)

    def _read(self, name: str) -> Stored | None:
        found = self._objects.get(self._container, name)
        return None if found is None else json.loads(found[1])

    def _creating_container(self, write: Callable[[], T]) -> T:
        """*write*, after creating the container when it does not exist yet."""
        try:
            return write()
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            self._objects.swift.put_container(self._container)
            return write()
