"""The messages of a store's queues: post, read, edit, delete, pop, redrive."""

from __future__ import annotations

import abc
from typing import Any

from delayq.idempotency import PostKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged


class Messages(abc.ABC):
    """Messages of every queue."""

    @abc.abstractmethod
    async def post(self, project: str, queue: str, client_id: str,
                   messages: list[NewMessage], *, metadata_token: Any = None,
                   message_quota: int = 0, queue_quota: int = 0,
                   key: PostKey | None = None) -> list[str]:
        """Driver *messages* in order, creating the queue if needed; their ids.

        *key* (``delayq.idempotency``): when the queue keeps ``key.key`` (stored by a post
        less than its window ago, on the backend's clock), raise ``KeyTaken`` with what
        is kept, storing nothing and before any other check; else store the key (its
        digest, the new ids, kept ``key.window`` seconds) and the messages in one atomic
        step, so that neither is ever stored without the other. Deleting or purging the
        queue forgets its keys. None costs nothing.

        *metadata_token*: see ``Queues.for_write``. *message_quota*, above 0, is the most
        live messages (free, delayed and claimed; not expired ones) the queue may hold
        with these: a post that would pass it raises ``QuotaExceeded.messages``, having
        stored nothing (the queue included). *queue_quota*: as ``Queues.create``'s, for
        a post that creates its queue. Both are checked in the post's atomic step:
        no concurrency passes them. 0 costs nothing."""

    @abc.abstractmethod
    async def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
                   exclude_client: str | None, include_claimed: bool,
                   include_delayed: bool) -> tuple[list[Message], str | None]:
        """A page of live messages in post order after *marker*, and the next marker
        (a position of at most 19 digits, or a message id: ``validation.listing_marker``).

        A marker naming a message lists what follows its place in post order, expired or
        claimed as it may be. When the queue no longer holds it (deleted, or never) and
        its id does not tell a place, the listing starts at the start: a client paging
        with ids sees messages again, never misses one."""

    @abc.abstractmethod
    def is_message_id(self, text: str) -> bool:
        """Whether *text* is shaped like the id of a message of this store (whether or
        not one has it): what a listing marker that is no position must be."""

    @abc.abstractmethod
    async def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        """The live messages among *ids*, delayed and claimed ones included."""

    @abc.abstractmethod
    async def delete(self, project: str, queue: str, message_id: str,
                     claim_id: str | None) -> None:
        """Delete one message.

        Raises MessageIsClaimed when it is claimed and *claim_id* is None,
        MessageNotClaimed when *claim_id* is given but no live claim holds the message,
        ClaimMismatch when another claim holds it. An absent message is not an error.
        """

    @abc.abstractmethod
    async def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        """Delete every message among *ids*, claimed or not."""

    @abc.abstractmethod
    async def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        """Delete and return up to *limit* claimable (free and due) messages."""

    @abc.abstractmethod
    async def edit(self, project: str, queue: str, message_id: str, *,
                   body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                   ) -> Message:
        """Edit one message that no live claim holds, in one atomic step, and return
        it as edited.

        *body*, unless ``NO_CHANGE``, replaces the body. *delay* (seconds, whole
        milliseconds), unless None, makes the message due at ``now + delay`` on the
        backend's clock: delayed again if it was free, due at once with 0; None leaves
        the due time as it is. Id, creation time, ttl, expiry, claim count, source queue
        and move time are kept; a message whose claim expired is free and stays so
        (its claim count unchanged).

        Raises MessageNotFound when the queue holds no such live message (missing,
        expired, or the queue is missing) and MessageHeld (``MessageHeld.editing``) when
        a live claim holds it; either way nothing changes. Each edit is an ``edited``
        event (message id, due after the edit, claim count) in the queue's trail.
        """

    @abc.abstractmethod
    async def redrive(self, project: str, queue: str, *, destination: str | None,
                      limit: int, queue_quota: int = 0) -> int:
        """Move up to *limit* messages of *queue* that no live claim holds, oldest
        availability first, each in one atomic step, to the queue it was dead-lettered
        from, or to *destination* when given (created when missing, under
        *queue_quota* as ``Queues.create`` does: refused, nothing moves). Without
        *destination*, a message that was never dead-lettered stays. Expired messages
        are not moved.

        A moved message keeps its id, body, creation time, ttl and expiry; its claim
        count is reset to 0, it is due at once (``due = min(due, now)``) and it has no
        source or move time any more. Each move is a ``redriven`` event in *queue*'s
        trail. Returns how many moved (0 for a missing queue).
        """
