"""The Swift driver's reaper passes: removing the expired messages of queues no claim
reaches (``delayq.storage.reaper`` keeps the rhythm).

A pass lists every queue container under the driver's prefix and, in each, the index
entries available by now whose expiry has passed. Each expired message is removed and
reported by whoever wins its ``expire`` marker (``markers.py``), so passes and claims
racing report each once. One process of the deployment makes each pass: the one that wins
the pass's lease, ``reaper`` in the writers container (``layout.py``). A pass stops at its
next batch once the driver closes; the next pass, of whichever process, goes on.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable

from swiftclient.exceptions import ClientException

from delayq import errors
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import Entry
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.objects import (
    DELETE_AFTER,
    LISTING_PAGE,
    Objects,
    is_status,
    unavailable,
)
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.trail import Trail

LOG = logging.getLogger(__name__)

REAP_BATCH = 64  # expired index entries a reaper pass handles at once
REAPER_POOL = "delayq-swift-reaper"  # the reaper's threads for per-message requests


class Expiry:
    """Reaper passes over the queues under the driver's prefix."""

    def __init__(self, objects: Objects, markers: Markers, recorder: Recorder, trail: Trail,
                 now_us: Callable[[], int], stop: threading.Event) -> None:
        """*trail* names the projects of hashed project parts; *now_us* is the driver's
        clock; *stop* is set when the driver closes."""
        self._objects = objects
        self._markers = markers
        self._recorder = recorder
        self._trail = trail
        self._now_us = now_us
        self._stop = stop

    def lease(self, seconds: float) -> bool:
        """Bid for this pass of the background reaper: True for the one process of the
        deployment that won it. The lease is never renewed nor deleted: it lapses before
        the next pass is due (``delayq.storage.reaper``)."""
        objects = self._objects
        container = lay.writers_container(objects.prefix)
        body = lay.lease_body(secrets.token_hex(8))
        # Whole seconds, as Swift keeps them; a lease of less than one would be none.
        headers = {DELETE_AFTER: str(max(1, int(seconds)))}
        with unavailable:
            try:
                return objects.bid(container, lay.REAPER, body, headers)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
                objects.swift.put_container(container)  # the deployment's first lease
                return objects.bid(container, lay.REAPER, body, headers)

    def reap(self) -> None:
        """One pass: the expired messages of every queue container under the prefix."""
        prefix = self._objects.prefix
        with unavailable:
            containers = self._objects.account(f"{prefix}:")
        for part, queue in filter(None, (lay.parse_container(prefix, name)
                                         for name in containers)):
            if self._stop.is_set():
                return  # closing: the next pass, of whichever process, goes on
            try:
                with unavailable:
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
        objects = self._objects
        container = objects.container(project, queue)
        with unavailable:
            now = self._now_us()
            end = lay.index_end(now)
            after = lay.INDEX_PREFIX
            while True:
                names = objects.names(container, lay.INDEX_PREFIX, marker=after, end=end,
                                      limit=LISTING_PAGE)
                expired = [entry for entry in map(Entry.parse, names)
                           if entry is not None and entry.expires <= now]
                for start in range(0, len(expired), REAP_BATCH):
                    if self._stop.is_set():
                        return
                    trail = objects.parallel(
                        lambda entry: self._markers.expire(project, queue, entry, now),
                        expired[start:start + REAP_BATCH], pool=REAPER_POOL)
                    self._recorder.record(project, queue, now,
                                       [event for event in trail if event])
                if len(names) < LISTING_PAGE:
                    return
                after = names[-1]
