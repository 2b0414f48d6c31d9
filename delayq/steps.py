"""Storage operations written as steps: one copy of the code, blocking or awaited.

A request's hot operations (post, claim, delete one message) are generators that yield
each store call they wait for and are sent its reply. The code around the calls — which
metadata applies, what a reply means, which error to raise — is written once; who runs
the generator decides how the calls wait:

- ``drive(steps)`` makes each call blocking, in the calling thread (a pool thread, a
  test, the reaper, any driver that has no other way);
- ``await on_loop(steps)`` awaits each call on the event loop (the API's requests on a
  driver with ``Driver.waits_on_loop``), without the greenlet ``delayq.bridge`` needs
  for code that waits deep inside plain functions: a request saves two greenlet
  switches each way (docs/performance.md, "Steps").

A yielded call is a tuple ``(waiter, *args)``: ``waiter(*args)`` makes it blocking and
``waiter.on_loop(*args)`` returns an awaitable of the same reply. An exception a call
raises is raised inside the generator, at its ``yield``, either way.

Steps are generators, so making them runs nothing: the caller makes them where it likes
(the API, on the loop's thread) and whoever runs them (a pool thread) runs all of their
code. A driver with nothing to await (SQLite, MongoDB, Swift) does its work in the plain
method; ``called(method, ...)`` makes that one blocking call as steps that yield
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

from delayq.errors import StorageUnavailable

T = TypeVar("T")

# A generator of store calls to wait for, returning the operation's result.
Steps = Generator[tuple, Any, T]


def called(fn: Callable[..., T], *args: Any, **kwargs: Any) -> Steps[T]:
    """Steps that wait for nothing but ``fn(*args, **kwargs)``, called when they run."""
    yield from ()
    return fn(*args, **kwargs)


def drive(steps: Steps[T]) -> T:
    """Run *steps* here, each call blocking; its result."""
    try:
        call = steps.send(None)
        while True:
            try:
                reply = call[0](*call[1:])
            except BaseException as exc:
                call = steps.throw(exc)
            else:
                call = steps.send(reply)
    except StopIteration as done:
        return done.value


async def on_loop(steps: Steps[T], unavailable: Callable[[], None] | None = None) -> T:
    """Run *steps*, each call awaited on the running loop; its result.

    *unavailable* is called when the steps raise StorageUnavailable, before it reaches
    the caller (the API's runner then sends calls to its pool: connecting blocks).
    """
    try:
        call = steps.send(None)
        while True:
            try:
                reply = await call[0].on_loop(*call[1:])
            except BaseException as exc:  # cancellation too: the steps see it
                call = steps.throw(exc)
            else:
                call = steps.send(reply)
    except StopIteration as done:
        return done.value
    except StorageUnavailable:
        if unavailable is not None:
            unavailable()
        raise
