"""Synchronous storage code whose waits are awaited on the event loop.

The broker and the drivers are plain functions: one place for each rule, whichever
backend runs it. A driver whose store speaks a protocol delayq drives itself (Redis,
through ``storage/redis/link.py``) need not block the event loop while the store
answers, though: ``run(fn, *args)`` runs *fn* in a greenlet of its own, and wherever
that code waits for an answer it calls ``wait(future)``, which hands the future to the
coroutine that called ``run`` and sleeps until it is done. Meanwhile the loop serves
other requests; their store commands share one connection, in order, several a write
and several replies a read when requests come together.

The API's hot operations (post, claim, delete one message) do without it: they are
written as steps (``delayq.steps``), whose calls the request's coroutine awaits itself,
saving the greenlet's switches. Everything else the API calls runs here.

Outside a bridge greenlet (a thread of the pool, a test calling a driver directly)
``bridged()`` is false and the same code takes its blocking path, so every driver
method works either way and nothing about a rule depends on the way it was called.

Only the waits switch: the code between two waits runs as one uninterrupted step of the
loop, as an inline call did, so no state is shared across greenlets that was not
already shared across the pool's threads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import greenlet

T = TypeVar("T")


class Bridge(greenlet.greenlet):
    """A greenlet that runs ``run``'s calls one after another for the coroutines of one
    greenlet (its parent: the one running the event loop).

    Kept for the next call when one ends (up to ``IDLE_KEPT`` of them): making a
    greenlet costs several times the four switches a call makes.
    """

    def __init__(self) -> None:
        super().__init__(self._serve)

    def _serve(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        while True:
            try:
                ended = (_RETURNED, fn(*args, **kwargs))
            except greenlet.GreenletExit:  # the greenlet is being discarded
                raise
            except BaseException as exc:
                ended = (_RAISED, exc)
            fn, args, kwargs = self.parent.switch(ended)


# How a call ended, as a Bridge hands it back: (_RETURNED, value) or (_RAISED, exception).
# Anything else it hands back is something to await.
_RETURNED, _RAISED = object(), object()
IDLE = "delayq_idle_bridges"  # attribute of a loop's greenlet: its free Bridges
IDLE_KEPT = 256  # free Bridges a loop keeps; a peak of concurrent calls beyond is dropped


def bridged() -> bool:
    """True when the calling code runs under ``run`` and may ``wait``."""
    return type(greenlet.getcurrent()) is Bridge


def wait(awaitable: Awaitable[T]) -> T:
    """The result of *awaitable*, awaited by the coroutine that called ``run`` (its
    exception raised here). Call only where ``bridged()`` is true."""
    return greenlet.getcurrent().parent.switch(awaitable)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, awaiting on this loop whatever it ``wait``s for."""
    # The free bridges hang on the greenlet running the loop (a thread's main greenlet):
    # they are its children, and a greenlet can only be switched to in its own thread.
    home = greenlet.getcurrent()
    idle = home.__dict__.get(IDLE)
    if idle is None:
        idle = home.__dict__[IDLE] = []
    bridge = idle.pop() if idle else Bridge()
    handed = bridge.switch(fn, args, kwargs)
    while type(handed) is not tuple:  # something to await
        try:
            value = await handed
        except BaseException as exc:  # cancellation too: the code below the wait sees it
            handed = bridge.throw(exc)
        else:
            handed = bridge.switch(value)
    # Only a call that ended frees its bridge: one whose coroutine was dropped mid-wait
    # stays suspended until collected.
    if len(idle) < IDLE_KEPT:
        idle.append(bridge)
    how, result = handed
    if how is _RAISED:
        raise result
    return result
