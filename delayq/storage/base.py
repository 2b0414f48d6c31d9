"""The storage driver interface.

A driver stores queues, messages and claims and performs every state transition
atomically inside its backend: a claim (with its delay check, claim-count increment and
dead-letter move), a renew, a release, a delete, a pop. It decides nothing else: limits,
defaults, delay resolution and validation live in ``delayq.validation`` and
``delayq.broker`` and reach the driver already applied.

Every method below but the audit reads is an operation (``delayq.operations``): an
implementation decorates it with ``@operation``, and writes it as steps when its store
calls can be awaited (``waits_on_loop``), else as a plain method. Called, an operation
runs blocking; the API runs it where ``delayq.api.execution`` decides (awaited on its
event loop, inline, or in a thread pool). Every method is safe to call from several
threads and from several processes sharing one backend. The audit reads are plain
methods, run blocking in the audits' own processes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from oslo_config import cfg

from delayq.claim import Claim
from delayq.events import Event, event_row
from delayq.idempotency import PostKey
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import Steps, operation
from delayq.queue import DeadLetterPolicy, QueueCounts, QueueStats
from delayq.retry import Backoff
from delayq.storage.reaper import Reaper
from delayq.subscription import Subscription, SubscriptionChange

Endings = Callable[[Iterable[str]], None]


def ignore_endings(kinds: Iterable[str]) -> None:
    """The endings of a driver nobody counts."""


class Driver(abc.ABC):
    """A storage backend for queues, messages and claims of every project."""

    name: str
    # True when requests remove the expired messages they meet as they write (each
    # reported as ``expired``), so any write after an expiry reaps a batch of it; False
    # when only ``reap`` (the background reaper, delayq.storage.reaper) does, because a
    # request doing it would cost one more round trip.
    reaps_on_write: bool = True
    # True when every call is a brief round trip or two to a nearby store (no fan-out, no
    # retry loop of its own), so the API may make it on its event loop instead of paying
    # a thread hand-off (delayq.api.execution).
    calls_are_brief: bool = False
    # True when the driver's operations are steps whose store calls are awaited on the
    # event loop rather than blocking it (Redis's script calls): the API runs them with
    # ``delayq.operations.on_loop`` and its loop serves other requests meanwhile
    # (delayq.api.execution).
    waits_on_loop: bool = False
    # Told, once a transition is stored, the kind of each message that left a queue by
    # it (deleted, popped, dead_lettered, expired: one kind per message), whether or not
    # the event trail is on: the API counts them for /metrics. Given at construction.
    endings: Endings = staticmethod(ignore_endings)
    _reaper: Reaper | None = None

    def __init__(self, *, endings: Endings = ignore_endings) -> None:
        self.endings = endings

    def start_reaper(self, interval: float, lease: Callable[[float], bool]) -> None:
        """Run ``reap`` every *interval* seconds in a background thread, in the one
        process of the deployment that *lease* grants each pass to
        (``delayq.storage.reaper``); none when *interval* is 0."""
        if interval > 0:
            self._reaper = Reaper(f"delayq-{self.name}-reaper", self.reap, lease, interval)
            self._reaper.start()

    def stop_reaper(self) -> None:
        """Stop the background reaper, after its current pass."""
        if self._reaper is not None:
            self._reaper.stop()

    @classmethod
    @abc.abstractmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *, endings: Endings = ignore_endings) -> Driver:
        """A connected driver, configured from its ``[drivers:message_store:NAME]``
        group, telling *endings* of the messages leaving queues."""

    @abc.abstractmethod
    def now(self) -> float:
        """The backend's clock, in POSIX seconds."""

    @abc.abstractmethod
    def ping(self) -> bool:
        """True when the backend answers."""

    def close(self) -> None:  # noqa: B027 - a driver without resources needs no close
        """Release connections; the driver is not used afterwards."""

    @abc.abstractmethod
    def reap(self) -> None:
        """Remove the expired messages of every queue of every project, now, each
        reported as ``expired`` (to ``endings`` and the trail) exactly once: the work of
        one background reaper pass (delayq.storage.reaper)."""

    # Queues

    @abc.abstractmethod
    def create_queue(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        """Create the queue; False (and metadata untouched) when it exists already.

        *queue_quota*, above 0, is the most queues the project may have: creating one
        more raises ``QuotaExceeded.queues`` and stores nothing. The count and the
        creation are one atomic step (a transaction, a script, a conditional write), so
        that no concurrency takes a project past it. 0 costs nothing.
        """

    @abc.abstractmethod
    def get_queue(self, project: str, name: str) -> dict[str, Any] | None:
        """The queue's stored metadata, or None when the queue does not exist."""

    @operation
    def queue_for_write(self, project: str, name: str
                        ) -> Steps[tuple[dict[str, Any] | None, Any]]:
        """The queue's metadata (None when absent) for a post or claim that depends on
        it, and a token to pass that write as ``metadata_token``.

        A driver may answer from a cache of its own: the write then checks, in its atomic
        step, that the metadata the token stands for is still the stored one, and raises
        MetadataChanged if not. The dict may then be shared by concurrent calls: callers
        read it and never change it. This default reads the metadata and gives no token.
        """
        return (yield from self.get_queue.steps(project, name)), None

    @abc.abstractmethod
    def set_queue_metadata(self, project: str, name: str, metadata: dict[str, Any]) -> None:
        """Replace the metadata of an existing queue; raises QueueNotFound."""

    @abc.abstractmethod
    def delete_queue(self, project: str, name: str) -> None:
        """Delete the queue with its messages and claims; absent queues are fine."""

    @abc.abstractmethod
    def purge_queue(self, project: str, name: str) -> None:
        """Delete every message and claim of the queue; the queue and metadata stay."""

    @abc.abstractmethod
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to *limit* ``(name, metadata)`` pairs with names after *marker*, by name."""

    @abc.abstractmethod
    def count_queues(self, project: str) -> int:
        """How many queues the project has."""

    @abc.abstractmethod
    def queue_stats(self, project: str, name: str) -> QueueStats:
        """Counts of the queue's live messages (zeros for an absent queue)."""

    @operation
    def queue_counts(self, project: str, name: str) -> Steps[QueueCounts]:
        """The free, claimed and delayed counts of ``queue_stats``, for the /metrics
        gauges, read without scanning the queue where the driver can: O(log n) on
        SQLite (tallies) and Redis (sorted sets), O(1) in the messages on MongoDB and
        Swift (``delayq.tallies``). This default, ``queue_stats``'s cost, serves a
        driver that keeps no tallies."""
        stats = yield from self.queue_stats.steps(project, name)
        return QueueCounts(free=stats.free, claimed=stats.claimed, delayed=stats.delayed)

    # Messages

    @abc.abstractmethod
    def post_messages(self, project: str, queue: str, client_id: str,
                      messages: list[NewMessage], *, metadata_token: Any = None,
                      message_quota: int = 0, queue_quota: int = 0,
                      key: PostKey | None = None) -> list[str]:
        """Store *messages* in order, creating the queue if needed; their ids.

        *key* (``delayq.idempotency``): when the queue keeps ``key.key`` (stored by a post
        less than its window ago, on the backend's clock), raise ``KeyTaken`` with what
        is kept, storing nothing and before any other check; else store the key (its
        digest, the new ids, kept ``key.window`` seconds) and the messages in one atomic
        step, so that neither is ever stored without the other. Deleting or purging the
        queue forgets its keys. None costs nothing.

        *metadata_token*: see ``queue_for_write``. *message_quota*, above 0, is the most
        live messages (free, delayed and claimed; not expired ones) the queue may hold
        with these: a post that would pass it raises ``QuotaExceeded.messages``, having
        stored nothing (the queue included). *queue_quota*: as ``create_queue``'s, for
        a post that creates its queue. Both are checked in the post's atomic step:
        no concurrency passes them. 0 costs nothing."""

    @abc.abstractmethod
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> tuple[list[Message], str | None]:
        """A page of live messages in post order after *marker*, and the next marker."""

    @abc.abstractmethod
    def get_messages(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        """The live messages among *ids*, delayed and claimed ones included."""

    @abc.abstractmethod
    def delete_message(self, project: str, queue: str, message_id: str,
                       claim_id: str | None) -> None:
        """Delete one message.

        Raises MessageIsClaimed when it is claimed and *claim_id* is None,
        MessageNotClaimed when *claim_id* is given but no live claim holds the message,
        ClaimMismatch when another claim holds it. An absent message is not an error.
        """

    @abc.abstractmethod
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> None:
        """Delete every message among *ids*, claimed or not."""

    @abc.abstractmethod
    def pop_messages(self, project: str, queue: str, limit: int) -> list[Message]:
        """Delete and return up to *limit* claimable (free and due) messages."""

    @abc.abstractmethod
    def edit_message(self, project: str, queue: str, message_id: str, *,
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
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int, queue_quota: int = 0) -> int:
        """Move up to *limit* messages of *queue* that no live claim holds, oldest
        availability first, each in one atomic step, to the queue it was dead-lettered
        from, or to *destination* when given (created when missing, under
        *queue_quota* as ``create_queue`` does: refused, nothing moves). Without
        *destination*, a message that was never dead-lettered stays. Expired messages
        are not moved.

        A moved message keeps its id, body, creation time, ttl and expiry; its claim
        count is reset to 0, it is due at once (``due = min(due, now)``) and it has no
        source or move time any more. Each move is a ``redriven`` event in *queue*'s
        trail. Returns how many moved (0 for a missing queue).
        """

    # Claims

    @abc.abstractmethod
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
              backoff: Backoff | None = None) -> Claim | None:
        """Claim up to *limit* free, due messages, oldest availability first.

        Each claimed message's claim count goes up by one and its expiry is extended to
        cover the claim plus *grace*. When *dead_letter* is set, a candidate already
        claimed ``max_claim_count`` times moves to the dead-letter queue instead (free,
        claim count kept, source and move time recorded; expiry ``now + messages_ttl``
        when the policy has one, else its original ``created + ttl``, whatever claims
        extended it to), and the claim looks further. None when nothing was claimed.
        *metadata_token*: see ``queue_for_write``.

        With *backoff*, each claimed message is due ``backoff.after(claim count)``
        seconds after the claim's expiry (its ``due`` is set so): should the claim
        expire with the message not deleted, the message waits that long before another
        claim may take it. A live claim's message counts as claimed whatever its due
        time; once the claim has ended, a due time to come makes it delayed.
        """

    @abc.abstractmethod
    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        """The live claim with its messages; raises ClaimNotFound."""

    @abc.abstractmethod
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        """Restart the claim's ttl from now; raises ClaimNotFound. With *backoff*, each
        of its messages is due ``backoff.after(claim count)`` after the new expiry, as a
        claim sets it."""

    @abc.abstractmethod
    def release_claim(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        """Free the claim's messages; an absent claim is not an error. Without
        *backoff* they are claimable at once (their due time as it was before the
        claim); with it each is due ``backoff.after(claim count)`` from now."""

    @abc.abstractmethod
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Message:
        """Take one message out of claim *claim_id*, due *delay* seconds (whole
        milliseconds) from now, in one atomic step; the claim keeps its other messages.
        Returns the message as released.

        Raises MessageNotFound when the queue holds no such live message,
        MessageNotClaimed when no live claim holds it, ClaimMismatch when another claim
        does; nothing changes then. A release is a ``released`` event (message id, due,
        claim count) in the queue's trail.
        """

    # Subscriptions (delayq.subscription): records with an expiry, no transition

    @abc.abstractmethod
    def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                            options: dict[str, Any]) -> str | None:
        """Store a subscription living *ttl* seconds from now; its id, or None when the
        queue has a live subscription for *subscriber* already (nothing is stored)."""

    @abc.abstractmethod
    def get_subscription(self, project: str, queue: str, subscription_id: str
                         ) -> Subscription | None:
        """The live subscription, or None."""

    @abc.abstractmethod
    def list_subscriptions(self, project: str, queue: str, marker: str | None,
                           limit: int) -> list[Subscription]:
        """Up to *limit* live subscriptions of the queue with ids after *marker*, by id."""

    @abc.abstractmethod
    def update_subscription(self, project: str, queue: str, subscription_id: str,
                            change: SubscriptionChange) -> None:
        """Apply *change* to a live subscription (a new ttl runs from now). Raises
        SubscriptionNotFound, or SubscriptionExists when the new subscriber has a live
        subscription of the queue already."""

    @abc.abstractmethod
    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        """Delete one subscription; an absent one is not an error."""

    @abc.abstractmethod
    def purge_subscriptions(self, project: str, queue: str) -> None:
        """Delete every subscription of the queue."""

    @abc.abstractmethod
    def subscribed_queues(self) -> list[tuple[str, str]]:
        """``(project, queue)`` of every queue with a live subscription, of every
        project, sorted (the pushers' round, ``delayq.push``)."""

    # Long-poll claims (delayq.api.longpoll)

    @abc.abstractmethod
    def available_in(self, project: str, queue: str) -> float | None:
        """Seconds, on the backend's clock, until some message of the queue is claimable.

        0.0 when one is claimable now (free, due, or its claim expired); otherwise the
        time until the earliest of the queue's delayed messages comes due or its
        earliest claim expires. None when the queue holds no message or does not exist.

        One cheap read of the structure a claim reads first (never a scan of the queue),
        and no write. The answer is a hint for when to try a claim, not a promise: a
        message expired but not yet removed may still count (the claim then removes it),
        and a message dead-lettered by the claim counts as claimable.
        """

    # Audit reads (delayq.spark_jobs): whole queues, in the backend's own order

    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        """Every ``(project, queue)`` holding messages or events, sorted; one project's
        when *project* is given. Deleted queues whose events are retained are included."""
        raise NotImplementedError(f"the {self.name} driver does not read its trail yet")

    def read_events(self, project: str, queue: str) -> Iterator[Event]:
        """The retained events of one queue's trail, oldest first."""
        raise NotImplementedError(f"the {self.name} driver does not read its trail yet")

    def read_event_rows(self, project: str, queue: str) -> Iterator[tuple]:
        """``read_events`` as plain tuples of the ``Event`` fields, in ``events.FIELDS``
        order: what the audits' data source reads, without building an ``Event`` per row
        where the backend hands back rows already (SQLite)."""
        return map(event_row, self.read_events(project, queue))

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        """Every live message of one queue (delayed and claimed included), in post
        order, as read now."""
        raise NotImplementedError(f"the {self.name} driver does not read its trail yet")
