"""The Swift driver's message ids: made by the process that posts, from the driver's
clock, so that a queue lists its messages in post order."""

from __future__ import annotations

import threading

from delayq.storage.swift import layout as lay


class MessageIds:
    """The ids one driver makes: each after every id it made before."""

    def __init__(self) -> None:
        self._last_us = 0
        self._lock = threading.Lock()  # guards _last_us

    def new(self, now: int) -> str:
        """An id after every id this process made before, so its posts list in order."""
        with self._lock:
            self._last_us = max(now, self._last_us + 1)
            return lay.new_message_id(self._last_us)
