"""Where the API runs an operation (``delayq.operations``): on its event loop, or in a
thread pool.

A request's operation runs in one of three places:

- **awaited on the loop**, when the driver's store calls can be awaited
  (``Driver.waits_on_loop``: Redis): each call waits for its reply
  while the loop serves other requests, so a slow reply holds up its own request only;
- **inline on the loop**, blocking it, when the driver's calls are brief round trips to
  a nearby store (``Driver.calls_are_brief``: SQLite): a thread hand-off would cost
  about as much CPU as the call itself;
- **in a pool thread** otherwise (MongoDB, Swift), so that a slow store never stalls
  the loop.

A store in trouble sends operations to the pool: after an inline call slower than
``SLOW_CALL``, or a call that finds the store unavailable (connecting blocks), the next
``THREADS_AFTER_SLOW`` seconds of operations run in threads, so such a store stalls the
loop for at most one call at a time. ``[drivers:transport:wsgi] storage_calls`` chooses
otherwise (``inline``, ``threads``).

Blocking work that is not an operation (checking a token with Keystone) is handed to the
same pool with ``offload``.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from delayq.errors import StorageUnavailable
from delayq.operations import BoundOperation, on_loop
from delayq.storage.base import Driver

T = TypeVar("T")

AUTO, INLINE, THREADS = MODES = ("auto", "inline", "threads")
SLOW_CALL = 0.1  # seconds: an inline call this long sends the next ones to the pool
THREADS_AFTER_SLOW = 5.0  # seconds operations go to the pool after a slow or failed call


class Execution:
    """Runs operations for the API: ``await execute(broker.claim, ...)``."""

    def __init__(self, driver: Driver, threads: int = 16, mode: str = AUTO) -> None:
        if mode not in MODES:
            raise ValueError(f"storage_calls must be one of {', '.join(MODES)}, not {mode!r}")
        self._driver = driver
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq")
        self._on_loop = mode == INLINE or (mode == AUTO and driver.calls_are_brief)
        self._adaptive = mode == AUTO
        self._threads_until = 0.0  # monotonic time before which operations use the pool

    def __call__(self, operation: BoundOperation[T], *args: Any,
                 **kwargs: Any) -> Awaitable[T]:
        """An awaitable of ``operation(*args, **kwargs)``, run where this puts it."""
        if self._on_loop and time.monotonic() >= self._threads_until:
            if self._driver.waits_on_loop:
                # on_loop's own coroutine, none wrapped around it: most requests take it.
                return on_loop(operation.steps(*args, **kwargs), self._back_off)
            return self._inline(operation, args, kwargs)
        return self._in_thread(operation, args, kwargs)

    def offload(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """An awaitable of ``fn(*args)``, always run in a pool thread: blocking work that
        is not an operation."""
        return self._in_thread(fn, args, {})

    async def _inline(self, operation: BoundOperation[T], args: tuple, kwargs: dict) -> T:
        started = time.monotonic()
        try:
            return operation(*args, **kwargs)
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
