"""The Swift driver's queues: a container per queue (``layout.py``), whose metadata
object makes it exist for readers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import errors, events
from delayq.queue import QueueCounts, QueueStats
from delayq.storage.swift import layout as lay
from delayq.storage.swift.live_messages import LiveMessages
from delayq.storage.swift.objects import Objects, is_status, unavailable
from delayq.storage.swift.queue_creation import QueueCreation
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.tallies import Tallies


class Queues:
    """The queues of every project under the driver's prefix (``BlockingQueues``);
    *now_us* is the driver's clock (µs)."""

    def __init__(self, objects: Objects, tallies: Tallies, recorder: Recorder,
                 creation: QueueCreation, live: LiveMessages,
                 now_us: Callable[[], int]) -> None:
        self._objects = objects
        self._tallies = tallies
        self._recorder = recorder
        self._creation = creation
        self._live = live
        self._now_us = now_us

    def create(self, project: str, name: str, metadata: dict[str, Any], *,
               queue_quota: int = 0) -> bool:
        with unavailable:
            return self._creation.ensure(project, name, metadata, queue_quota)

    def get(self, project: str, name: str) -> dict[str, Any] | None:
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

    def for_write(self, project: str, name: str) -> tuple[dict[str, Any] | None, Any]:
        """The metadata as ``get`` reads it, and no token: nothing is cached."""
        return self.get(project, name), None

    def set_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            if self._objects.get(container, lay.META) is None:
                raise errors.QueueNotFound.named(name)
            self._objects.swift.put_object(container, lay.META, lay.encode(metadata))

    def delete(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            now = self._now_us()
            with self._tallies.dropping(project, name):
                deleted = self._objects.delete_container(container, name)
            if deleted:
                self._recorder.record(project, name, now, [
                    self._recorder.event(project, name, events.PURGED, now)])

    def purge(self, project: str, name: str) -> None:
        container = self._objects.container(project, name)
        with unavailable:
            now = self._now_us()
            # The tally objects too: an empty queue counts nothing.
            with self._tallies.dropping(project, name):
                listing = self._objects.names(container, "")
                self._objects.delete_objects(container, [n for n in listing if n != lay.META])
            if listing:  # an absent queue is not purged
                self._recorder.record(project, name, now, [
                    self._recorder.event(project, name, events.PURGED, now)])

    def page(self, project: str, marker: str | None, limit: int
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

    def count(self, project: str) -> int:
        start = lay.queue_prefix(self._objects.prefix, project)
        with unavailable:
            _, listing = self._objects.swift.get_account(prefix=start, full_listing=True)
        return len(listing)

    def stats(self, project: str, name: str) -> QueueStats:
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
                oldest = self._live.first(project, name, ids, now)
                newest = self._live.first(project, name, reversed(ids), now)
        return QueueStats(free=free, claimed=claimed, delayed=delayed, oldest=oldest,
                          newest=newest)

    def counts(self, project: str, name: str) -> QueueCounts:
        """From the tallies (``tallies.Tallies.count``), never the messages."""
        return self._tallies.count(project, name)
