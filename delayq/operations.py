"""Store operations: each written once, run blocking or awaited on an event loop.

Every storage-driver method of ``delayq.storage.base.Driver`` and every broker method that
reaches a driver is an *operation*: a method decorated with ``@operation``, written one of
two ways.

- **As steps**: a generator that yields each store call it waits for (a ``StoreCall``)
  and is sent the call's reply, or has the call's exception raised at its ``yield``.
  Within an operation, another one is run with ``yield from other.steps(...)``. A driver
  whose store calls can be awaited (Redis, ``storage/redis/calls.py``) writes its
  operations this way, and so does the broker.
- **As a plain method**, by a driver whose client library blocks (sqlite3, pymongo,
  python-swiftclient): its calls wait where they are made. Its ``steps()`` yield nothing
  and make the whole call when they run.

Either way an operation runs:

- **blocking**, by calling it, ``driver.claim(...)``: each yielded call waits in the
  calling thread (``StoreCall.wait``). Pool threads, the reaper, the audits and the tests
  run operations so;
- **awaited**, by ``on_loop(operation.steps(...))`` on an event loop: each yielded call is
  awaited (``StoreCall.awaited``), and the loop serves other requests meanwhile.

``delayq.api.execution`` decides which of the two each API request uses. Steps are
generators, so making them runs nothing: whoever runs them runs all of their code.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from delayq.errors import StorageUnavailable

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class StoreCall(Protocol[T_co]):
    """One call to a store that an operation waits for."""

    def wait(self) -> T_co:
        """Make the call in this thread and return its reply, blocking until it comes."""

    def awaited(self) -> Awaitable[T_co]:
        """Make the call and give an awaitable of its reply, on the running loop."""


# An operation's steps: yields store calls, is sent their replies, returns its result.
Steps = Generator[StoreCall[Any], Any, T]


class operation(Generic[T]):  # noqa: N801 - a decorator, named as property is
    """``@operation``: a method run blocking when called, or as steps by ``.steps()``.

    An instance's bound operation is made at its first use and kept in the instance's
    ``__dict__``, as ``functools.cached_property`` keeps a value: every request reaches
    its driver's operations through the broker's, and a new object at each would cost
    them all calls.
    """

    def __init__(self, method: Callable[..., Steps[T]] | Callable[..., T]) -> None:
        self.method = method
        self.stepped = inspect.isgeneratorfunction(method)
        self.name = method.__name__
        functools.update_wrapper(self, method)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        bound = BoundOperation(self.method, instance, self.stepped)
        # Kept only when this is the operation the instance's class names (not one a
        # subclass overrides, reached through super()).
        if getattr(type(instance), self.name, None) is self:
            instance.__dict__[self.name] = bound
        return bound

    def __call__(self, instance: Any, *args: Any, **kwargs: Any) -> T:
        """``Class.operation(instance, ...)``: run blocking, as a method called through
        its class is."""
        return BoundOperation(self.method, instance, self.stepped)(*args, **kwargs)


class BoundOperation(Generic[T]):
    """An operation of one driver or broker: ``op(...)`` runs it blocking,
    ``op.steps(...)`` gives its steps (the method itself, bound, when it is written as
    steps: no call of this class between a caller and the steps it makes)."""

    __slots__ = ("method", "instance", "stepped", "steps")

    def __init__(self, method: Callable[..., Any], instance: Any, stepped: bool) -> None:
        self.method = method
        self.instance = instance
        self.stepped = stepped
        self.steps: Callable[..., Steps[T]] = (
            types.MethodType(method, instance) if stepped
            else functools.partial(_whole, method, instance))

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        if self.stepped:
            return drive(self.method(self.instance, *args, **kwargs))
        return self.method(self.instance, *args, **kwargs)


def _whole(method: Callable[..., T], instance: Any, *args: Any, **kwargs: Any
           ) -> Steps[T]:
    """Steps that yield nothing: a plain method's whole call, made when they run."""
    yield from ()
    return method(instance, *args, **kwargs)


def drive(steps: Steps[T]) -> T:
    """Run *steps* in this thread, each call blocking; their result."""
    try:
        call = steps.send(None)
        while True:
            try:
                reply = call.wait()
            except BaseException as exc:
                call = steps.throw(exc)
            else:
                call = steps.send(reply)
    except StopIteration as done:
        return done.value


async def on_loop(steps: Steps[T], unavailable: Callable[[], None] | None = None) -> T:
    """Run *steps* on the running loop, each call awaited; their result.

    *unavailable* is called when the steps raise StorageUnavailable, before it reaches
    the caller (the API then runs operations in its pool for a while: connecting to a
    store that is down blocks).
    """
    try:
        call = steps.send(None)
        while True:
            try:
                reply = await call.awaited()
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
