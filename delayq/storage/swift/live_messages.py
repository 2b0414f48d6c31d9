"""Reading a Swift queue's messages as clients see them: the live ones, with the moves
under way met on the way completed (``markers.Markers.finish_move``), not shown."""

from __future__ import annotations

from collections.abc import Iterable

from delayq.message import Message
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.objects import Objects


class LiveMessages:
    """The live messages of the queues under the driver's prefix."""

    def __init__(self, objects: Objects, markers: Markers) -> None:
        self._objects = objects
        self._markers = markers

    def read(self, project: str, queue: str, ids: Iterable[str], now: int
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

    def first(self, project: str, queue: str, ids: Iterable[str], now: int
              ) -> Message | None:
        """The first live message among *ids*, read one at a time."""
        for message_id in ids:
            found = self.read(project, queue, [message_id], now)
            if found:
                return found[0]
        return None
