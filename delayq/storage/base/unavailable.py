"""A store that cannot serve now: one path, for every driver, from a client library's
exception to ``StorageUnavailable`` (the API's 503).

Each driver says what "not now" looks like in its library (a connection refused, a
timeout, an election, a full memory): a function from an exception to the description of
what failed, for the server's log, or None when the exception means something else (a
bug, a conflict), which then propagates as it is. ``Unavailability`` applies it, as a
context manager around calls to the store.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from delayq import errors

Describe = Callable[[BaseException], "str | None"]


class Unavailability:
    """The 503s of one store (*store*: the driver's name, all a 503 tells clients)."""

    __slots__ = ("store", "describe")

    def __init__(self, store: str, describe: Describe) -> None:
        self.store = store
        self.describe = describe

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc is not None:
            self.check(exc)

    def check(self, exc: BaseException) -> None:
        """Raise StorageUnavailable from *exc* when it means the store cannot serve now;
        return otherwise."""
        if isinstance(exc, errors.DelayqError):
            return
        description = self.describe(exc)
        if description is not None:
            raise errors.StorageUnavailable(description, store=self.store) from exc

    def error(self, description: str) -> errors.StorageUnavailable:
        """The 503 for a condition the driver finds itself (no exception of the
        library's behind it)."""
        return errors.StorageUnavailable(description, store=self.store)
