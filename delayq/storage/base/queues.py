"""The queues of a store: create, read, list and drop them."""

from __future__ import annotations

import abc
from typing import Any

from delayq.queue import QueueCounts, QueueStats


class Queues(abc.ABC):
    """Queues of every project, with their metadata."""

    @abc.abstractmethod
    async def create(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        """Create the queue; False (and metadata untouched) when it exists already.

        *queue_quota*, above 0, is the most queues the project may have: creating one
        more raises ``QuotaExceeded.queues`` and stores nothing. The count and the
        creation are one atomic step (a transaction, a script, a conditional write), so
        that no concurrency takes a project past it. 0 costs nothing.
        """

    @abc.abstractmethod
    async def get(self, project: str, name: str) -> dict[str, Any] | None:
        """The queue's stored metadata, or None when the queue does not exist."""

    async def for_write(self, project: str, name: str
                        ) -> tuple[dict[str, Any] | None, Any]:
        """The queue's metadata (None when absent) for a post or claim that depends on
        it, and a token to pass that write as ``metadata_token``.

        A driver may answer from a cache of its own: the write then checks, in its atomic
        step, that the metadata the token stands for is still the stored one, and raises
        MetadataChanged if not. The dict may then be shared by concurrent calls: callers
        read it and never change it. This default reads the metadata and gives no token.
        """
        return await self.get(project, name), None

    @abc.abstractmethod
    async def set_metadata(self, project: str, name: str, metadata: dict[str, Any]
                           ) -> None:
        """Replace the metadata of an existing queue; raises QueueNotFound."""

    @abc.abstractmethod
    async def delete(self, project: str, name: str) -> None:
        """Delete the queue with its messages and claims; absent queues are fine."""

    @abc.abstractmethod
    async def purge(self, project: str, name: str) -> None:
        """Delete every message and claim of the queue; the queue and metadata stay."""

    @abc.abstractmethod
    async def page(self, project: str, marker: str | None, limit: int
                   ) -> list[tuple[str, dict[str, Any]]]:
        """Up to *limit* ``(name, metadata)`` pairs with names after *marker*, by name."""

    @abc.abstractmethod
    async def count(self, project: str) -> int:
        """How many queues the project has."""

    @abc.abstractmethod
    async def stats(self, project: str, name: str) -> QueueStats:
        """Counts of the queue's live messages (zeros for an absent queue)."""

    async def counts(self, project: str, name: str) -> QueueCounts:
        """The free, claimed and delayed counts of ``stats``, for the /metrics gauges,
        read without scanning the queue where the driver can: O(log n) on SQLite
        (tallies) and Redis (sorted sets), O(1) in the messages on MongoDB and Swift
        (``delayq.tallies``). This default, ``stats``'s cost, serves a driver that keeps
        no tallies."""
        stats = await self.stats(project, name)
        return QueueCounts(free=stats.free, claimed=stats.claimed, delayed=stats.delayed)
