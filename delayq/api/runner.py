"""Running broker calls: on the event loop, or off it in a thread pool.

Storage client libraries block. Handing each call to a pool thread keeps a slow backend
from stalling the event loop and the other requests it serves, but the hand-off itself
(a thread woken, the loop woken back) costs about as much CPU as a brief store round trip
(docs/performance.md, "Throughput"). So a driver whose calls are brief round trips
(``Driver.calls_are_brief``: SQLite, Redis) is called on the event loop, until one of its
calls is slow or finds the store unavailable: then calls go to the pool for
``THREADS_AFTER_SLOW`` seconds, and a store in trouble stalls the loop for at most one
call at a time. ``[drivers:transport:wsgi] storage_calls`` chooses otherwise.

A driver whose waits can be awaited on the loop (``Driver.waits_on_loop``: Redis) is
called on the loop under ``delayq.bridge.run``: its script calls wait for Redis without
blocking the loop, so a slow reply holds up its own request only and sends nothing to
the pool; a store found unavailable still does (connecting blocks). The hot operations
(post, claim, delete one message) are run as steps (``Runner.steps``,
``delayq.steps``): their calls are awaited by the request's own coroutine, without the
bridge's greenlet switches.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from delayq import bridge, steps
from delayq.broker import Broker
from delayq.errors import StorageUnavailable
from delayq.steps import Steps

T = TypeVar("T")

AUTO, INLINE, THREADS = MODES = ("auto", "inline", "threads")
SLOW_CALL = 0.1  # seconds: an inline call this long sends the next ones to the pool
THREADS_AFTER_SLOW = 5.0  # seconds calls go to the pool after a slow or failed one


class Runner:
    """Calls the broker: ``await run(broker.method, *args)``."""

    def __init__(self, broker: Broker, threads: int = 16, mode: str = AUTO) -> None:
        if mode not in MODES:
            raise ValueError(f"storage_calls must be one of {', '.join(MODES)}, not {mode!r}")
        self.broker = broker
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq")
        self._inline = mode == INLINE or (mode == AUTO and broker.driver.calls_are_brief)
        self._adaptive = mode == AUTO
        self._threads_until = 0.0  # monotonic time before which calls use the pool

    def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Awaitable[T]:
        """An awaitable of ``fn(*args, **kwargs)``, made where this runner puts calls."""
        if self._inline and time.monotonic() >= self._threads_until:
            if self.broker.driver.waits_on_loop:
                # bridge.run's own coroutine, no other wrapped around it: every request
                # takes this path.
                return bridge.run(self._bridged, fn, args, kwargs)
            return self._on_loop(fn, args, kwargs)
        return self._in_thread(fn, args, kwargs)

    def steps(self, made: Steps[T]) -> Awaitable[T]:
        """An awaitable of the result of the steps *made* (``delayq.steps``): their calls
        awaited on the loop when the driver's waits can be, else driven where this
        runner puts calls."""
        if (self._inline and self.broker.driver.waits_on_loop
                and time.monotonic() >= self._threads_until):
            # Connecting to a store that is down blocks the loop: back off when it is.
            return steps.on_loop(made, self._back_off)
        return self(steps.drive, made)

    def offload(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """An awaitable of ``fn(*args)``, always run in a pool thread: blocking work that
        is not a store call (checking a token with Keystone)."""
        return self._in_thread(fn, args, {})

    def _bridged(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        try:
            return fn(*args, **kwargs)
        except StorageUnavailable:
            self._back_off()  # connecting to a store that is down blocks the loop
            raise

    async def _on_loop(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except StorageUnavailable:
            self._back_off()
            raise
        finally:
            if time.monotonic() - started > SLOW_CALL:
                self._back_off()

    async def _in_thread(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def _back_off(self) -> None:
        if self._adaptive:
            self._threads_until = time.monotonic() + THREADS_AFTER_SLOW
