"""One object per event loop: what an asyncio connection or client is tied to.

An asyncio connection belongs to the loop that opened it, and a process may run several
loops (a worker's, the tests'), so the Redis driver keeps one of each of its loop-bound
objects per loop, made at the loop's first call. A closed loop's object goes when the
next loop's is made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """``make(loop)``'s object for each loop, kept while the loop lives."""

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._make = make
        self._objects: dict[asyncio.AbstractEventLoop, T] = {}
        self._lock = threading.Lock()

    def get(self) -> T:
        """The running loop's object, made at its first call."""
        loop = asyncio.get_running_loop()
        found = self._objects.get(loop)
        if found is not None:
            return found
        made = self._make(loop)
        with self._lock:
            for closed in [other for other in self._objects if other.is_closed()]:
                del self._objects[closed]
            self._objects[loop] = made
        return made

    def take_all(self) -> dict[asyncio.AbstractEventLoop, T]:
        """Every loop's object, forgotten here (to be closed by the caller)."""
        with self._lock:
            taken, self._objects = self._objects, {}
        return taken
