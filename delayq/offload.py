"""Blocking work, made awaitable: the one place the event loop hands work to threads.

Stores whose client libraries only block (sqlite3, pymongo, python-swiftclient,
``delayq.storage.base.offloaded``) and the Keystone token check (``delayq.api.auth``) run
their calls through an ``Offload``:

- **in a pool thread** (``threads``), so that a slow store never stalls the loop;
- **inline on the loop** (``inline``), blocking it for the call: for brief round trips to
  a nearby store (SQLite), a thread hand-off costs about as much CPU as the call itself;
- ``auto``: inline while calls stay brief. After a call slower than ``SLOW_CALL``, or one
  that finds the store unavailable (connecting blocks), the next ``THREADS_AFTER_SLOW``
  seconds of calls run in threads, so a store in trouble stalls the loop for at most one
  call at a time.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from delayq.errors import StorageUnavailable

T = TypeVar("T")

AUTO, INLINE, THREADS = MODES = ("auto", "inline", "threads")
SLOW_CALL = 0.1  # seconds: an inline call this long sends the next ones to the pool
THREADS_AFTER_SLOW = 5.0  # seconds calls go to the pool after a slow or failed call


class Offload:
    """Awaits blocking calls where *mode* puts them: ``await offload(fn, *args)``."""

    def __init__(self, mode: str = THREADS, threads: int = 16) -> None:
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._threads_until = 0.0  # monotonic time before which auto calls use the pool
        self.mode = THREADS
        self.set_mode(mode)

    def set_mode(self, mode: str) -> None:
        """Run the next calls ``inline``, in ``threads``, or ``auto``."""
        if mode not in MODES:
            raise ValueError(f"storage_calls must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.mode == THREADS or (self.mode == AUTO
                                    and time.monotonic() < self._threads_until):
            return await self.in_thread(fn, *args, **kwargs)
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except StorageUnavailable:
            self._back_off()
            raise
        finally:
            if time.monotonic() - started > SLOW_CALL:
                self._back_off()

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a pool thread, whatever the mode: work that may
        take long (a reaper pass, a Keystone call)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads,
                                            thread_name_prefix="delayq")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        """Let the pool's threads end once idle; a later call starts a new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _back_off(self) -> None:
        if self.mode == AUTO:
            self._threads_until = time.monotonic() + THREADS_AFTER_SLOW
