"""The claims of a store: the claim transition (with its delay check, claim count and
dead-letter move), renew, release, and the long-poll hint."""

from __future__ import annotations

import abc
from typing import Any

from delayq.claim import Claim
from delayq.message import Message
from delayq.queue import DeadLetterPolicy
from delayq.retry import Backoff


class Claims(abc.ABC):
    """Claims of every queue."""

    @abc.abstractmethod
    async def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
                     dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
                     backoff: Backoff | None = None) -> Claim | None:
        """Claim up to *limit* free, due messages, oldest availability first.

        Each claimed message's claim count goes up by one and its expiry is extended to
        cover the claim plus *grace*. When *dead_letter* is set, a candidate already
        claimed ``max_claim_count`` times moves to the dead-letter queue instead (free,
        claim count kept, source and move time recorded; expiry ``now + messages_ttl``
        when the policy has one, else its original ``created + ttl``, whatever claims
        extended it to), and the claim looks further. None when nothing was claimed.
        *metadata_token*: see ``Queues.for_write``.

        With *backoff*, each claimed message is due ``backoff.after(claim count)``
        seconds after the claim's expiry (its ``due`` is set so): should the claim
        expire with the message not deleted, the message waits that long before another
        claim may take it. A live claim's message counts as claimed whatever its due
        time; once the claim has ended, a due time to come makes it delayed.
        """

    @abc.abstractmethod
    async def get(self, project: str, queue: str, claim_id: str) -> Claim:
        """The live claim with its messages; raises ClaimNotFound."""

    @abc.abstractmethod
    async def renew(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        """Restart the claim's ttl from now; raises ClaimNotFound. With *backoff*, each
        of its messages is due ``backoff.after(claim count)`` after the new expiry, as a
        claim sets it."""

    @abc.abstractmethod
    async def release(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        """Free the claim's messages; an absent claim is not an error. Without
        *backoff* they are claimable at once (their due time as it was before the
        claim); with it each is due ``backoff.after(claim count)`` from now."""

    @abc.abstractmethod
    async def release_message(self, project: str, queue: str, message_id: str,
                              claim_id: str, delay: float) -> Message:
        """Take one message out of claim *claim_id*, due *delay* seconds (whole
        milliseconds) from now, in one atomic step; the claim keeps its other messages.
        Returns the message as released.

        Raises MessageNotFound when the queue holds no such live message,
        MessageNotClaimed when no live claim holds it, ClaimMismatch when another claim
        does; nothing changes then. A release is a ``released`` event (message id, due,
        claim count) in the queue's trail.
        """

    @abc.abstractmethod
    async def available_in(self, project: str, queue: str) -> float | None:
        """Seconds, on the backend's clock, until some message of the queue is claimable
        (``delayq.api.longpoll`` waits so long before it tries a claim again).

        0.0 when one is claimable now (free, due, or its claim expired); otherwise the
        time until the earliest of the queue's delayed messages comes due or its
        earliest claim expires. None when the queue holds no message or does not exist.

        One cheap read of the structure a claim reads first (never a scan of the queue),
        and no write. The answer is a hint for when to try a claim, not a promise: a
        message expired but not yet removed may still count (the claim then removes it),
        and a message dead-lettered by the claim counts as claimable.
        """
