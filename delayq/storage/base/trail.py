"""The audit reads of a store (``delayq.spark_jobs``): whole queues, in the backend's own
order.

Unlike the other controllers these are blocking: only the audits read them, in their own
processes (the Spark driver and its workers), never on the API's event loop.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import TYPE_CHECKING

from delayq.events import Event, event_row
from delayq.message import Message

if TYPE_CHECKING:
    import pyarrow as pa


class Trail(abc.ABC):
    """The event trail and the live messages of every queue, read whole."""

    @abc.abstractmethod
    def queues(self, project: str | None) -> list[tuple[str, str]]:
        """Every ``(project, queue)`` holding messages or events, sorted; one project's
        when *project* is given. Deleted queues whose events are retained are included."""

    @abc.abstractmethod
    def events(self, project: str, queue: str, *, after: float | None = None
               ) -> Iterator[Event]:
        """The retained events of one queue's trail, oldest first; with *after* (POSIX
        seconds, on the store's clock) only those whose ``time`` is strictly greater,
        read without the earlier ones wherever the backend's keys follow the time."""

    def event_rows(self, project: str, queue: str, *, after: float | None = None
                   ) -> Iterator[tuple]:
        """``events`` as plain tuples of the ``Event`` fields, in ``events.FIELDS``
        order: what the audits' data source reads, without building an ``Event`` per row
        where the backend hands back rows already (SQLite)."""
        return map(event_row, self.events(project, queue, after=after))

    def event_batches(self, project: str, queue: str, schema: pa.Schema, *,
                      after: float | None = None) -> Iterator[pa.RecordBatch]:
        """``event_rows`` as Arrow record batches of *schema* (the ``Event`` fields in
        ``events.FIELDS`` order, typed as the audits' data source declares them): the
        bulk read of the audits, done in C where the backend can (SQLite)."""
        from delayq.storage import arrow  # pyarrow: in the audits' processes only

        return arrow.record_batches(self.event_rows(project, queue, after=after), schema)

    @abc.abstractmethod
    def messages(self, project: str, queue: str) -> Iterator[Message]:
        """Every live message of one queue (delayed and claimed included), in post
        order, as read now."""
