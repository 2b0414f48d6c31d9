"""The stores whose client libraries only block (sqlite3, pymongo, python-swiftclient):
their controllers are written as plain methods, and the adapters here make them the
``Driver``'s coroutines by running each call through the store's ``delayq.offload``
policy (inline for SQLite while calls stay brief, in threads otherwise).

A blocking controller has the methods of the interface's controller (``Queues``, ...),
with the same signatures and meaning, that block instead of being awaited; the
``Blocking*`` protocols below state them for the type checker.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

from delayq.claim import Claim
from delayq.idempotency import PostKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged
from delayq.offload import THREADS, Offload
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats
from delayq.retry import Backoff
from delayq.storage.base.claims import Claims
from delayq.storage.base.driver import Driver, Endings, ignore_endings
from delayq.storage.base.messages import Messages
from delayq.storage.base.queues import Queues
from delayq.storage.base.subscriptions import Subscriptions
from delayq.subscription import Subscription, SubscriptionChange


class BlockingQueues(Protocol):
    def create(self, project: str, name: str, metadata: dict[str, Any], *,
               queue_quota: int = 0) -> bool: ...
    def get(self, project: str, name: str) -> dict[str, Any] | None: ...
    def for_write(self, project: str, name: str) -> tuple[dict[str, Any] | None, Any]: ...
    def set_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None: ...
    def delete(self, project: str, name: str) -> None: ...
    def purge(self, project: str, name: str) -> None: ...
    def page(self, project: str, marker: str | None, limit: int
             ) -> list[tuple[str, dict[str, Any]]]: ...
    def count(self, project: str) -> int: ...
    def stats(self, project: str, name: str) -> QueueStats: ...
    def counts(self, project: str, name: str) -> QueueCounts: ...


class BlockingMessages(Protocol):
    def post(self, project: str, queue: str, client_id: str, messages: list[NewMessage],
             *, metadata_token: Any = None, message_quota: int = 0, queue_quota: int = 0,
             key: PostKey | None = None) -> list[str]: ...
    def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
             exclude_client: str | None, include_claimed: bool, include_delayed: bool
             ) -> tuple[list[Message], str | None]: ...
    def is_message_id(self, text: str) -> bool: ...
    def get(self, project: str, queue: str, ids: list[str]) -> list[Message]: ...
    def delete(self, project: str, queue: str, message_id: str,
               claim_id: str | None) -> None: ...
    def delete_many(self, project: str, queue: str, ids: list[str]) -> None: ...
    def pop(self, project: str, queue: str, limit: int) -> list[Message]: ...
    def edit(self, project: str, queue: str, message_id: str, *,
             body: Any | Unchanged = NO_CHANGE, delay: float | None = None) -> Message: ...
    def redrive(self, project: str, queue: str, *, destination: str | None, limit: int,
                queue_quota: int = 0) -> int: ...


class BlockingClaims(Protocol):
    def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
               dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
               backoff: Backoff | None = None) -> Claim | None: ...
    def get(self, project: str, queue: str, claim_id: str) -> Claim: ...
    def renew(self, project: str, queue: str, claim_id: str, ttl: int, grace: int,
              backoff: Backoff | None = None) -> None: ...
    def release(self, project: str, queue: str, claim_id: str,
                backoff: Backoff | None = None) -> None: ...
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message: ...
    def available_in(self, project: str, queue: str) -> float | None: ...


class BlockingSubscriptions(Protocol):
    def create(self, project: str, queue: str, subscriber: str, ttl: int,
               options: dict[str, Any], confirmed: bool = True) -> str | None: ...
    def get(self, project: str, queue: str, subscription_id: str
            ) -> Subscription | None: ...
    def page(self, project: str, queue: str, marker: str | None, limit: int
             ) -> list[Subscription]: ...
    def update(self, project: str, queue: str, subscription_id: str,
               change: SubscriptionChange) -> None: ...
    def delete(self, project: str, queue: str, subscription_id: str) -> None: ...
    def purge(self, project: str, queue: str) -> None: ...
    def subscribed_queues(self) -> list[tuple[str, str]]: ...


class OffloadedQueues(Queues):
    def __init__(self, blocking: BlockingQueues, offload: Offload) -> None:
        self.blocking = blocking
        self.offload = offload

    async def create(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        return await self.offload(self.blocking.create, project, name, metadata,
                                  queue_quota=queue_quota)

    async def get(self, project: str, name: str) -> dict[str, Any] | None:
        return await self.offload(self.blocking.get, project, name)

    async def for_write(self, project: str, name: str
                        ) -> tuple[dict[str, Any] | None, Any]:
        return await self.offload(self.blocking.for_write, project, name)

    async def set_metadata(self, project: str, name: str, metadata: dict[str, Any]
                           ) -> None:
        await self.offload(self.blocking.set_metadata, project, name, metadata)

    async def delete(self, project: str, name: str) -> None:
        await self.offload(self.blocking.delete, project, name)

    async def purge(self, project: str, name: str) -> None:
        await self.offload(self.blocking.purge, project, name)

    async def page(self, project: str, marker: str | None, limit: int
                   ) -> list[tuple[str, dict[str, Any]]]:
        return await self.offload(self.blocking.page, project, marker, limit)

    async def count(self, project: str) -> int:
        return await self.offload(self.blocking.count, project)

    async def stats(self, project: str, name: str) -> QueueStats:
        return await self.offload(self.blocking.stats, project, name)

    async def counts(self, project: str, name: str) -> QueueCounts:
        return await self.offload(self.blocking.counts, project, name)


class OffloadedMessages(Messages):
    def __init__(self, blocking: BlockingMessages, offload: Offload) -> None:
        self.blocking = blocking
        self.offload = offload

    async def post(self, project: str, queue: str, client_id: str,
                   messages: list[NewMessage], *, metadata_token: Any = None,
                   message_quota: int = 0, queue_quota: int = 0,
                   key: PostKey | None = None) -> list[str]:
        return await self.offload(self.blocking.post, project, queue, client_id, messages,
                                  metadata_token=metadata_token, message_quota=message_quota,
                                  queue_quota=queue_quota, key=key)

    async def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
                   exclude_client: str | None, include_claimed: bool,
                   include_delayed: bool) -> tuple[list[Message], str | None]:
        return await self.offload(self.blocking.page, project, queue, marker=marker,
                                  limit=limit, exclude_client=exclude_client,
                                  include_claimed=include_claimed,
                                  include_delayed=include_delayed)

    def is_message_id(self, text: str) -> bool:
        return self.blocking.is_message_id(text)  # pure: nothing to offload

    async def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        return await self.offload(self.blocking.get, project, queue, ids)

    async def delete(self, project: str, queue: str, message_id: str,
                     claim_id: str | None) -> None:
        await self.offload(self.blocking.delete, project, queue, message_id, claim_id)

    async def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        await self.offload(self.blocking.delete_many, project, queue, ids)

    async def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        return await self.offload(self.blocking.pop, project, queue, limit)

    async def edit(self, project: str, queue: str, message_id: str, *,
                   body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                   ) -> Message:
        return await self.offload(self.blocking.edit, project, queue, message_id,
                                  body=body, delay=delay)

    async def redrive(self, project: str, queue: str, *, destination: str | None,
                      limit: int, queue_quota: int = 0) -> int:
        return await self.offload(self.blocking.redrive, project, queue,
                                  destination=destination, limit=limit,
                                  queue_quota=queue_quota)


class OffloadedClaims(Claims):
    def __init__(self, blocking: BlockingClaims, offload: Offload) -> None:
        self.blocking = blocking
        self.offload = offload

    async def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
                     dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
                     backoff: Backoff | None = None) -> Claim | None:
        return await self.offload(self.blocking.create, project, queue, ttl=ttl,
                                  grace=grace, limit=limit, dead_letter=dead_letter,
                                  metadata_token=metadata_token, backoff=backoff)

    async def get(self, project: str, queue: str, claim_id: str) -> Claim:
        return await self.offload(self.blocking.get, project, queue, claim_id)

    async def renew(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        await self.offload(self.blocking.renew, project, queue, claim_id, ttl, grace,
                           backoff)

    async def release(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        await self.offload(self.blocking.release, project, queue, claim_id, backoff)

    async def release_message(self, project: str, queue: str, message_id: str,
                              claim_id: str, delay: float) -> Message:
        return await self.offload(self.blocking.release_message, project, queue,
                                  message_id, claim_id, delay)

    async def available_in(self, project: str, queue: str) -> float | None:
        return await self.offload(self.blocking.available_in, project, queue)


class OffloadedSubscriptions(Subscriptions):
    def __init__(self, blocking: BlockingSubscriptions, offload: Offload) -> None:
        self.blocking = blocking
        self.offload = offload

    async def create(self, project: str, queue: str, subscriber: str, ttl: int,
                     options: dict[str, Any], confirmed: bool = True) -> str | None:
        return await self.offload(self.blocking.create, project, queue, subscriber, ttl,
                                  options, confirmed)

    async def get(self, project: str, queue: str, subscription_id: str
                  ) -> Subscription | None:
        return await self.offload(self.blocking.get, project, queue, subscription_id)

    async def page(self, project: str, queue: str, marker: str | None, limit: int
                   ) -> list[Subscription]:
        return await self.offload(self.blocking.page, project, queue, marker, limit)

    async def update(self, project: str, queue: str, subscription_id: str,
                     change: SubscriptionChange) -> None:
        await self.offload(self.blocking.update, project, queue, subscription_id, change)

    async def delete(self, project: str, queue: str, subscription_id: str) -> None:
        await self.offload(self.blocking.delete, project, queue, subscription_id)

    async def purge(self, project: str, queue: str) -> None:
        await self.offload(self.blocking.purge, project, queue)

    async def subscribed_queues(self) -> list[tuple[str, str]]:
        return await self.offload(self.blocking.subscribed_queues)


class OffloadedDriver(Driver):
    """A ``Driver`` over blocking controllers: a driver hands them to
    ``offload_controllers`` and writes ``now_blocking``, ``ping_blocking``,
    ``reap_blocking`` (and, when it takes a reaper lease, ``lease_blocking``) as plain
    methods."""

    # ``delayq.offload`` mode of the store's calls: THREADS, or AUTO for a store whose
    # calls are brief round trips to a nearby backend (no fan-out, no retry loop).
    calls = THREADS

    def __init__(self, *, endings: Endings = ignore_endings, reap_interval: float = 0.0
                 ) -> None:
        super().__init__(endings=endings, reap_interval=reap_interval)
        self.offload = Offload(self.calls)

    def offload_controllers(self, *, queues: BlockingQueues, messages: BlockingMessages,
                            claims: BlockingClaims, subscriptions: BlockingSubscriptions
                            ) -> None:
        """Serve the interface's controllers from these blocking ones, each call run
        through ``self.offload``."""
        self.queues = OffloadedQueues(queues, self.offload)
        self.messages = OffloadedMessages(messages, self.offload)
        self.claims = OffloadedClaims(claims, self.offload)
        self.subscriptions = OffloadedSubscriptions(subscriptions, self.offload)

    @abc.abstractmethod
    def now_blocking(self) -> float:
        """``now``, blocking."""

    @abc.abstractmethod
    def ping_blocking(self) -> bool:
        """``ping``, blocking."""

    @abc.abstractmethod
    def reap_blocking(self) -> None:
        """``reap``, blocking."""

    def lease_blocking(self, seconds: float) -> bool:
        """``reap_lease``, blocking."""
        return True

    def close_blocking(self) -> None:  # noqa: B027 - a store without resources needs none
        """Release connections, blocking; run in a thread once the reaper has stopped
        (closing may take round trips to the store)."""

    async def now(self) -> float:
        return await self.offload(self.now_blocking)

    async def ping(self) -> bool:
        return await self.offload(self.ping_blocking)

    async def reap(self) -> None:
        await self.offload.in_thread(self.reap_blocking)

    async def reap_lease(self, seconds: float) -> bool:
        return await self.offload.in_thread(self.lease_blocking, seconds)

    async def close(self) -> None:
        await super().close()
        await self.offload.in_thread(self.close_blocking)
        self.offload.shutdown()
