"""Running broker calls off the event loop.

Storage client libraries block; each call runs in a thread pool of the worker so that a
slow backend never stalls the event loop and the other requests it is serving.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from delayq.broker import Broker

T = TypeVar("T")


class Runner:
    """Calls the broker in a thread pool: ``await run(broker.method, *args)``."""

    def __init__(self, broker: Broker, threads: int = 16) -> None:
        self.broker = broker
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq")

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
