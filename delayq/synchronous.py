"""Blocking calls into the store and the broker, for code that runs no event loop of its
own: the tests, the audits' Spark driver and workers, scripts.

``Synchronous(store).queues.create(project, name, {})`` awaits the coroutine on one
event loop that runs in a daemon thread of the process and blocks the caller until it is
done. The store's reaper, when it has one, runs as a task of that loop. Calling through
the facade from that loop itself is refused: it would wait for itself.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from delayq.broker import Broker
from delayq.storage.base import Claims, Driver, Messages, Queues, Subscriptions

T = TypeVar("T")

# Objects whose coroutine methods the facade turns into blocking ones.
WRAPPED = (Driver, Queues, Messages, Claims, Subscriptions, Broker)


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever,
                                       name="delayq-synchronous", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result, awaited on the loop; blocks until it is done."""
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise RuntimeError("a blocking call from the loop it would wait for")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process's loop thread, started at first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread()
        return _shared


class Synchronous:
    """*target*'s coroutine methods, and those of its controllers, as blocking calls;
    every other attribute as it is (set on *target* too)."""

    __slots__ = ("_target", "_loop")

    def __init__(self, target: Any, loop: LoopThread | None = None) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop if loop is not None else shared_loop())
        if isinstance(target, Driver):  # its reaper, when it has one, runs on this loop
            self._loop.run(_started(target))

    @property
    def target(self) -> Any:
        """The object the facade calls."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.iscoroutinefunction(value):
            return self._blocking(value)
        if isinstance(value, WRAPPED):
            return Synchronous(value, self._loop)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def _blocking(self, method: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> T:
            return self._loop.run(method(*args, **kwargs))
        return call


async def _started(driver: Driver) -> None:
    driver.start_reaper()
