"""Making a Swift queue: what a queue creation, a post to a missing queue, a dead-letter
move and a redrive to a missing destination share."""

from __future__ import annotations

from typing import Any

from delayq.storage.swift import layout as lay
from delayq.storage.swift.objects import Objects
from delayq.storage.swift.quotas import Quotas
from delayq.storage.swift.recorder import Recorder


class QueueCreation:
    """The queues made under the driver's prefix."""

    def __init__(self, objects: Objects, quotas: Quotas, recorder: Recorder) -> None:
        self._objects = objects
        self._quotas = quotas
        self._recorder = recorder

    def ensure(self, project: str, queue: str, metadata: dict[str, Any],
               quota: int = 0) -> bool:
        """Create the queue's container and metadata; False if the queue existed.

        *quota*, above 0, is the project's queue quota: a queue to create past it is
        refused (``quotas.Quotas.create_queue``). 0 (dead-letter moves, redrives back to
        source queues) creates whatever the count.
        """
        if quota:
            return self._quotas.create_queue(
                project, queue, quota, lambda: self._make(project, queue, metadata))
        return self._make(project, queue, metadata)

    def _make(self, project: str, queue: str, metadata: dict[str, Any]) -> bool:
        """``ensure`` once decided.

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
