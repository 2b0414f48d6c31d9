"""The broker: delayq's rules, applied once for every storage driver.

Every method that reaches the driver is a coroutine, awaited by the API on its event loop
(and through ``delayq.synchronous`` by the tests and the audits). The API hands the
broker checked input; the broker resolves what a request means (which
ttl, which delay, which dead-letter policy, which limits apply to this queue) and asks the
driver to store or transition it. Time-critical decisions — is a message due, is it
claimed, must it move to the dead-letter queue — are taken inside the driver's atomic
step, with the backend's clock, never here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from delayq import errors, metrics, retry, validation
from delayq import queue as q
from delayq.claim import Claim, delete_refusal, refuse_delete
from delayq.encryption import BodyCipher, is_sealed
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, Message, NewMessage
from delayq.queue import QueueCounts, QueueFilter, QueuePage, QueueStats
from delayq.storage.base import Driver
from delayq.subscription import Subscription, SubscriptionChange
from delayq.validation import Limits, MessageEdit, PostedMessage, Quotas

LOG = logging.getLogger(__name__)
T = TypeVar("T")

PATCH_OPS = ("add", "replace", "remove")
# Times a post or claim is decided, from the queue's metadata read anew each time it
# changed under the write (errors.MetadataChanged), before the request fails with 503.
METADATA_ATTEMPTS = 3
LAST_ATTEMPT = METADATA_ATTEMPTS - 1
PATCH_PREFIX = "/metadata/"
# A filtered queue listing reads the project's queues FILTER_BATCH at a time, at most
# FILTER_SCAN of them a request (Broker.select_queues).
FILTER_BATCH = 100
FILTER_SCAN = 1000
# Zaqar's detailed health posts HEALTH_MESSAGES messages of this ttl and claims them so.
HEALTH_MESSAGES = 100
HEALTH_MESSAGE_TTL = 600
HEALTH_CLAIM_TTL = 60
HEALTH_CLAIM_GRACE = 300
HEALTH_CLAIM_LIMIT = 10
# A repeated subscription's id is looked up SUBSCRIPTION_SCAN subscriptions at a time;
# a subscription that ends while it is looked up is made again, SUBSCRIBE_ATTEMPTS at most.
SUBSCRIPTION_SCAN = 100
SUBSCRIBE_ATTEMPTS = 3


class Broker:
    """Queues, messages and claims of every project, on one storage driver."""

    def __init__(self, driver: Driver, limits: Limits,
                 counters: metrics.Metrics | metrics.Uncounted | None = None, *,
                 quotas: Quotas | None = None, cipher: BodyCipher | None = None,
                 require_confirmation: bool = False) -> None:
        self.driver = driver
        self.limits = limits
        # [notification] require_confirmation: subscriptions start unconfirmed and are
        # pushed nothing until confirmed (``deliverable``).
        self.require_confirmation = require_confirmation
        self.quotas = quotas if quotas is not None else Quotas()
        # Seals the bodies posted to queues with _enable_encrypt_messages and opens every
        # sealed body read (delayq.encryption); None: no key configured, and no queue may
        # ask for encryption.
        self.cipher = cipher
        # Posts and deliveries are counted here, from what the driver returns; messages
        # leaving a queue are counted by the driver's ``endings`` (it alone sees expiries
        # and dead-letter moves).
        self.counters = counters if counters is not None else metrics.Uncounted()
        self._reserved_defaults = {
            q.DEFAULT_MESSAGE_TTL: limits.default_message_ttl,
            q.MAX_MESSAGES_POST_SIZE: limits.max_messages_post_size,
            q.DEFAULT_MESSAGE_DELAY: limits.default_message_delay,
            q.MAX_CLAIM_COUNT: None,
            q.DEAD_LETTER_QUEUE: None,
            q.DEAD_LETTER_QUEUE_MESSAGES_TTL: None,
            q.ENCRYPT_MESSAGES: False,
        }

    # Queues

    def with_reserved_defaults(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """*metadata* with every reserved attribute present, defaults filled in."""
        return {**self._reserved_defaults, **metadata}

    async def create_queue(self, project: str, name: str, metadata: Any) -> bool:
        """Create a queue; False when it exists (its metadata is then left alone).

        A queue that does not exist yet counts against ``max_queues_per_project``,
        checked by the driver in the creation's own atomic step.
        """
        checked = validation.queue_metadata(metadata, self.limits, name)
        self._encryptable(name, checked)
        return await self.driver.queues.create(
            project, name, checked, queue_quota=self.quotas.max_queues_per_project)

    async def queue_metadata(self, project: str, name: str) -> dict[str, Any]:
        """The queue's metadata, reserved defaults filled in; a queue that does not
        exist has the defaults alone, as in Zaqar: queues are made by their first post,
        so python-zaqarclient reads the metadata of a queue it has not made yet."""
        metadata = await self.driver.queues.get(project, name)
        return self.with_reserved_defaults(metadata or {})

    async def check_queue_exists(self, project: str, name: str) -> None:
        """Raise QueueNotFound unless the queue exists."""
        if await self.driver.queues.get(project, name) is None:
            raise errors.QueueNotFound.named(name)

    async def patch_queue(self, project: str, name: str, operations: Any
                         ) -> dict[str, Any]:
        """Apply a JSON patch to the queue's metadata; the whole result is re-checked."""
        metadata = await self.driver.queues.get(project, name)
        if metadata is None:
            raise errors.QueueNotFound.named(name)
        patched = apply_metadata_patch(metadata, operations)
        checked = validation.queue_metadata(patched, self.limits, name)
        self._encryptable(name, checked)
        await self.driver.queues.set_metadata(project, name, checked)
        return self.with_reserved_defaults(checked)

    def _encryptable(self, name: str, metadata: dict[str, Any]) -> None:
        """Refuse a queue that asks for encryption where no key is configured: its
        bodies would be stored in the clear (EncryptionUnavailable)."""
        if metadata.get(q.ENCRYPT_MESSAGES) and self.cipher is None:
            raise errors.EncryptionUnavailable.for_queue(name)

    def _sealing(self, queue: str, metadata: dict[str, Any]) -> BodyCipher | None:
        """The cipher that seals the bodies of *queue* with *metadata* (reserved
        defaults filled in), or None when they are stored as they are.

        A queue whose flag was set while a key was configured, on a server that has
        none now, refuses posts and edits (EncryptionUnavailable) rather than store
        plaintext.
        """
        if not metadata[q.ENCRYPT_MESSAGES]:
            return None
        if self.cipher is None:
            raise errors.EncryptionUnavailable.for_queue(queue)
        return self.cipher

    def _opened(self, messages: list[Message]) -> list[Message]:
        """*messages* with every sealed body opened, whatever queue they are in now (a
        dead-letter move or a redrive carries a sealed body to a queue that may not
        ask for encryption); the list itself when none is sealed.

        A body no configured key opens fails the read (BodyUndecryptable): a reader is
        never handed ciphertext as if it were the body.
        """
        for message in messages:  # a loop, not any(...): nearly every body is plain
            if is_sealed(message.body):
                break
        else:
            return messages
        return [self._open(m) if is_sealed(m.body) else m for m in messages]

    def _open(self, message: Message) -> Message:
        if self.cipher is None:
            raise errors.BodyUndecryptable.of(message.id)
        return dataclasses.replace(message, body=self.cipher.open(message.body, message.id))

    def _opened_claim(self, claim: Claim) -> Claim:
        opened = self._opened(claim.messages)
        return claim if opened is claim.messages else dataclasses.replace(claim,
                                                                          messages=opened)

    async def delete_queue(self, project: str, name: str) -> None:
        await self.driver.queues.delete(project, name)

    async def purge_queue(self, project: str, name: str) -> None:
        await self.driver.queues.purge(project, name)

    async def list_queues(self, project: str, marker: str | None, limit: int
                         ) -> list[tuple[str, dict[str, Any]]]:
        listed = await self.driver.queues.page(project, marker, limit)
        return [(name, self.with_reserved_defaults(metadata)) for name, metadata in listed]

    async def select_queues(self, project: str, marker: str | None, limit: int,
                            matching: QueueFilter) -> QueuePage:
        """Up to *limit* queues after *marker*, by name, that *matching* shows, with
        their metadata (reserved defaults filled in).

        Unfiltered, one listing of the driver's. Filtered, the driver's listing is read
        page after page, at most ``FILTER_SCAN`` queues a request: the next page's
        marker is then the last queue read, so a request stays short however rare the
        matches, and a page may hold fewer than *limit* (even none) before the end. A
        filtered page that read the last queue has no next marker.
        """
        if not matching:
            queues = await self.list_queues(project, marker, limit)
            return QueuePage(queues, queues[-1][0] if queues else None)
        found: list[tuple[str, dict[str, Any]]] = []
        after = marker
        for _ in range(0, FILTER_SCAN, FILTER_BATCH):
            listed = await self.driver.queues.page(project, after, FILTER_BATCH)
            for name, metadata in listed:
                after = name
                shown = self.with_reserved_defaults(metadata)
                if matching.matches(name, shown):
                    found.append((name, shown))
                    if len(found) == limit:
                        return QueuePage(found, name)
            if len(listed) < FILTER_BATCH:
                return QueuePage(found, None)  # every queue read
        return QueuePage(found, after)

    async def count_queues(self, project: str) -> int:
        return await self.driver.queues.count(project)

    async def stats(self, project: str, name: str) -> QueueStats:
        return await self.driver.queues.stats(project, name)

    async def queue_gauges(self, projects: list[str], per_project: int
                          ) -> list[tuple[str, str, QueueCounts]]:
        """``(project, queue, counts)`` of the first *per_project* queues of each of
        *projects*, by name: the /metrics gauges (``Queues.counts``)."""
        found = []
        for project in projects:
            listed = await self.driver.queues.page(project, None, per_project)
            for name, _ in listed:
                counts = await self.driver.queues.counts(project, name)
                found.append((project, name, counts))
        return found

    # Messages

    async def post(self, project: str, queue: str, client_id: str, messages: list[PostedMessage],
                   size: int, key: PostKey | None = None) -> list[str]:
        """Store posted messages, each with its ttl and delay resolved for *queue*.

        *size* is the request body's length, checked against the queue's own
        ``_max_messages_post_size``. The ttl and delay of each message and the size
        limit come from the queue's metadata as the driver last saw it
        (``Queues.for_write``); the driver's step refuses the post
        (MetadataChanged) when the stored metadata differs, and the post is decided
        again, at most ``METADATA_ATTEMPTS`` times in all.

        Quotas: both go to the driver, which checks them in the post's own atomic step:
        a post that would create its queue counts against ``max_queues_per_project``,
        and ``max_messages_per_queue`` bounds the queue's live messages.

        With *key* (``delayq.idempotency``), the driver's step stores the messages and
        the key together, or nothing when it keeps the key already: the post is then
        answered with the ids the first one stored, if its body was the same (else
        KeyReused), and counts nothing. A repeat is checked as any post is before the
        driver looks its key up.
        """
        delays = await self._own_delays(messages)
        message_quota = self.quotas.max_messages_per_queue
        queue_quota = self.quotas.max_queues_per_project
        for attempt in range(METADATA_ATTEMPTS):
            stored, token = await self.driver.queues.for_write(project, queue)
            metadata = self.with_reserved_defaults(stored or {})
            validation.post_size(size, metadata[q.MAX_MESSAGES_POST_SIZE])
            default_ttl = metadata[q.DEFAULT_MESSAGE_TTL]
            queue_delay = metadata[q.DEFAULT_MESSAGE_DELAY]
            sealer = self._sealing(queue, metadata)
            resolved = [  # NewMessage(body, ttl, delay)
                NewMessage(m.body if sealer is None else sealer.seal(m.body),
                           m.ttl if m.ttl is not None else default_ttl,
                           resolve_delay(queue_delay, delay))
                for m, delay in zip(messages, delays, strict=True)]
            try:
                ids = await self.driver.messages.post(
                    project, queue, client_id, resolved, metadata_token=token,
                    message_quota=message_quota, queue_quota=queue_quota, key=key)
                break
            except errors.MetadataChanged:
                if attempt == LAST_ATTEMPT:
                    raise
            except KeyTaken as taken:
                if key is None:  # a driver finds a kept key only for a post with one
                    raise
                return replayed(key, taken.stored)
        self.counters.count(metrics.POSTED, len(ids))
        return ids

    async def _own_delays(self, messages: list[PostedMessage]) -> list[float | None]:
        """Each message's own delay: its ``delay``, or the time until its ``deliver_at``
        on the backend's clock (read once, only when a message has one)."""
        for m in messages:  # a loop, not all(...): a post usually has one message
            if m.deliver_at is not None:
                break
        else:
            return [m.delay for m in messages]
        now = await self.driver.now()
        return [m.delay if m.deliver_at is None else validation.delay_until(
                    m.deliver_at, now, self.limits.max_message_delay,
                    f"messages[{index}].deliver_at")
                for index, m in enumerate(messages)]

    async def edit_message(self, project: str, queue: str, message_id: str,
                           edit: MessageEdit) -> Message:
        """Change the body and/or the remaining delay of a message no claim holds.

        The new body counts against the queue's ``_max_messages_post_size``. A delay
        (``deliver_at`` turned into one on the backend's clock) is range-checked, then
        resolved like a post's: a normal queue ignores it. The driver applies the rest
        in one atomic step (``Messages.edit``).
        """
        stored = await self.driver.queues.get(project, queue)
        metadata = self.with_reserved_defaults(stored or {})
        body = edit.body
        if body is not NO_CHANGE:
            validation.body_size(body, metadata[q.MAX_MESSAGES_POST_SIZE])
            sealer = self._sealing(queue, metadata)
            if sealer is not None:
                body = sealer.seal(body)
        delay: float | None = edit.delay
        if edit.deliver_at is not None:
            now = await self.driver.now()
            delay = validation.delay_until(edit.deliver_at, now,
                                           self.limits.max_message_delay, "deliver_at")
        if not is_delayed_queue(metadata[q.DEFAULT_MESSAGE_DELAY]):
            delay = None  # as for a post: the due time stays
        edited = await self.driver.messages.edit(project, queue, message_id,
                                                 body=body, delay=delay)
        return self._opened([edited])[0]

    async def redrive(self, project: str, queue: str, *, destination: str | None = None,
                      limit: int = validation.DEFAULT_REDRIVE) -> int:
        """Send dead-lettered messages of *queue* back (``Messages.redrive``).

        A *destination* that does not exist counts against ``max_queues_per_project``
        (refused, nothing moves; the driver checks it as it creates the destination).
        Without one, each message goes back to its source queue, re-created if it was
        deleted since, whatever the quota: like a dead-letter move, it returns messages
        to a queue of their own, and which queues those are is known only inside the
        driver's moves.
        """
        validation.redrive(queue, destination, limit)
        return await self.driver.messages.redrive(
            project, queue, destination=destination, limit=limit,
            queue_quota=self.quotas.max_queues_per_project)

    async def list_messages(self, project: str, queue: str, *, client_id: str, marker: str | None,
                            limit: int, echo: bool, include_claimed: bool,
                            include_delayed: bool) -> tuple[list[Message], str | None]:
        """A page of the queue's messages after *marker* (``validation.listing_marker``),
        and the next page's marker, None after the last."""
        after = validation.listing_marker(marker, self.driver.messages.is_message_id)
        messages, next_marker = await self.driver.messages.page(
            project, queue, marker=after, limit=limit,
            exclude_client=None if echo else client_id,
            include_claimed=include_claimed, include_delayed=include_delayed)
        return self._opened(messages), next_marker

    async def get_message(self, project: str, queue: str, message_id: str) -> Message:
        found = await self.driver.messages.get(project, queue, [message_id])
        if not found:
            raise errors.MessageNotFound.with_id(message_id)
        return self._opened(found)[0]

    async def get_messages(self, project: str, queue: str, ids: list[str]
                          ) -> list[Message]:
        return self._opened(await self.driver.messages.get(project, queue, ids))

    async def delete_message(self, project: str, queue: str, message_id: str,
                             claim_id: str | None) -> None:
        """Delete a message; a claimed one only with its claim's id.

        A claimed message and a claim id not its claim's: 403 (ClaimMismatch) when that
        id is another live claim's of the queue, as in Zaqar; 400 (ClaimUnknown) when it
        is no live claim's (never made, deleted or expired): Zaqar tells the two apart.
        """
        try:
            await self.driver.messages.delete(project, queue, message_id, claim_id)
        except errors.ClaimMismatch:
            assert claim_id is not None  # a mismatch needs a claim id
            try:
                await self.driver.claims.get(project, queue, claim_id)
            except errors.ClaimNotFound:
                raise errors.ClaimUnknown(
                    f"Claim {claim_id[:80]} does not exist or has expired; message "
                    f"{message_id} is held by another claim.") from None
            raise

    async def delete_messages(self, project: str, queue: str, ids: list[str],
                              claim_ids: list[str] | None = None) -> None:
        """Delete the messages among *ids*, claimed or not; with *claim_ids*
        (``message_delete_with_claim_id``) only messages that a live claim among them
        holds.

        With *claim_ids*, every live message among *ids* is read first, and the request
        is refused whole (MessageNotClaimed, ClaimMismatch) unless each is held by one
        of *claim_ids*; then each is deleted under its claim, atomically
        (``Messages.delete``): a claim that ended between the read and its delete
        refuses that delete, and the ones before it stay done.
        """
        if claim_ids is None:
            await self.driver.messages.delete_many(project, queue, ids)
            return
        found = await self.driver.messages.get(project, queue, ids)
        allowed = set(claim_ids)
        for message in found:
            holder = message.live_claim_id
            if holder not in allowed:
                refuse_delete(delete_refusal(claim_ids[0], holder), message.id,
                              ", ".join(claim_ids))
        for message in found:
            await self.driver.messages.delete(project, queue, message.id,
                                              message.live_claim_id)

    async def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        popped = await self.driver.messages.pop(project, queue, limit)
        self.counters.count(metrics.CLAIMED, len(popped))
        return self._opened(popped)

    # Claims

    async def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
                    push_for: Subscription | None = None) -> Claim | None:
        """Claim up to *limit* messages, dead-lettering by the queue's policy as the
        driver last saw it: decided again as a post is (``post``).

        Should the claim expire, its messages wait as the queue's ``_retry_policy``
        says; a claim made to push to subscription *push_for* follows the policy its
        pushes follow (``push_backoff``). Nothing is claimed for a subscription that may
        not be pushed (``deliverable``): a message claimed for it would be consumed on
        behalf of a subscriber that cannot receive it.
        """
        if push_for is not None and not self.deliverable(push_for):
            return None
        for attempt in range(METADATA_ATTEMPTS):
            metadata, token = await self.driver.queues.for_write(project, queue)
            if metadata is None:
                return None
            dead_letter = q.dead_letter_policy(metadata)
            backoff = (queue_backoff(metadata, dead_letter) if push_for is None
                       else push_backoff(metadata, dead_letter, push_for))
            try:
                claim = await self.driver.claims.create(
                    project, queue, ttl=ttl, grace=grace, limit=limit,
                    dead_letter=dead_letter, metadata_token=token, backoff=backoff)
                break
            except errors.MetadataChanged:
                if attempt == LAST_ATTEMPT:
                    raise
        if claim is None:
            return None
        self.counters.count(metrics.CLAIMED, len(claim.messages))
        return self._opened_claim(claim)

    async def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        return self._opened_claim(await self.driver.claims.get(project, queue, claim_id))

    async def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                          grace: int) -> None:
        backoff = await self._queue_backoff(project, queue)
        await self.driver.claims.renew(project, queue, claim_id, ttl, grace,
                                       backoff)

    async def release_claim(self, project: str, queue: str, claim_id: str) -> None:
        """Free the claim's messages: at once, or each after the wait the queue's
        ``_retry_policy`` gives its attempt."""
        backoff = await self._queue_backoff(project, queue)
        await self.driver.claims.release(project, queue, claim_id, backoff)

    async def _queue_backoff(self, project: str, queue: str) -> retry.Backoff | None:
        metadata, _ = await self.driver.queues.for_write(project, queue)
        if metadata is None:
            return None
        return queue_backoff(metadata, q.dead_letter_policy(metadata))

    async def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                              delay: float) -> Message:
        """Hand one message back from its claim, due in *delay* seconds (a consumer's
        ChangeMessageVisibility); the claim keeps the rest."""
        validation.integer(delay, "delay", 0, self.limits.max_message_delay)
        released = await self.driver.claims.release_message(project, queue, message_id,
                                                             claim_id, delay)
        return self._opened([released])[0]

    async def push_failed(self, project: str, queue: str, message: Message, claim_id: str,
                          subscription: Subscription) -> float:
        """Hand back a message whose push to *subscription* failed, due after the wait
        its attempt (its claim count) earns under the push's retry policy; the wait,
        in seconds. At the queue's ``_max_claim_count`` the wait is none: the next
        claim dead-letters the message."""
        metadata, _ = await self.driver.queues.for_write(project, queue)
        metadata = metadata or {}
        backoff = push_backoff(metadata, q.dead_letter_policy(metadata), subscription)
        delay = backoff.after(message.claim_count)
        await self.driver.claims.release_message(project, queue, message.id, claim_id,
                                                 delay)
        return delay

    # Subscriptions

    async def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                                  options: dict[str, Any]) -> str:
        """Subscribe *subscriber* to *queue*, creating the queue when it does not exist
        (counted against ``max_queues_per_project``), as Zaqar does; its id.

        When the queue has a live subscription for *subscriber* already, its id, the
        subscription left as it is (its ttl and options too): Zaqar answers so for a
        subscription no one has confirmed, and delayq asks no subscriber to confirm.
        One that ends between the driver's refusal and the look-up is created anew.
        """
        if await self.driver.queues.get(project, queue) is None:
            await self.driver.queues.create(
                project, queue, {}, queue_quota=self.quotas.max_queues_per_project)
        for _ in range(SUBSCRIBE_ATTEMPTS):
            # Stored unconfirmed, as Zaqar stores every subscription: confirming is what
            # makes a repeated post a conflict (deliverable() decides what is pushed).
            created = await self.driver.subscriptions.create(
                project, queue, subscriber, ttl, options, confirmed=False)
            if created is not None:
                return created
            existing = await self._subscription_of(project, queue, subscriber)
            if existing is not None:
                if existing.confirmed:
                    raise errors.SubscriptionExists.for_subscriber(subscriber)
                return existing.id
        raise errors.Conflict(f"The subscription for {subscriber[:200]} keeps changing; "
                              "retry the request.")

    async def _subscription_of(self, project: str, queue: str, subscriber: str
                               ) -> Subscription | None:
        """The queue's live subscription for *subscriber*, or None: read page by page,
        as the drivers index subscriptions by id (a queue has few)."""
        marker = None
        while True:
            page = await self.driver.subscriptions.page(project, queue, marker,
                                                        SUBSCRIPTION_SCAN)
            for found in page:
                if found.subscriber == subscriber:
                    return found
            if len(page) < SUBSCRIPTION_SCAN:
                return None
            marker = page[-1].id

    async def get_subscription(self, project: str, queue: str, subscription_id: str
                              ) -> Subscription:
        found = await self.driver.subscriptions.get(project, queue,
                                                    subscription_id)
        if found is None:
            raise errors.SubscriptionNotFound.with_id(subscription_id)
        return found

    async def list_subscriptions(self, project: str, queue: str, marker: str | None,
                                 limit: int) -> list[Subscription]:
        return await self.driver.subscriptions.page(project, queue, marker,
                                                    limit)

    async def update_subscription(self, project: str, queue: str, subscription_id: str,
                                  change: SubscriptionChange) -> Subscription | None:
        """Apply *change*. Under ``require_confirmation`` a move to another subscriber
        makes the subscription unconfirmed again, or one confirmed URL would let a
        project push to any other: then the subscription, whose new subscriber is due a
        confirmation request; None otherwise."""
        if self.require_confirmation and change.subscriber is not None:
            before = await self.get_subscription(project, queue, subscription_id)
            if before.subscriber != change.subscriber:
                await self.driver.subscriptions.update(
                    project, queue, subscription_id, dataclasses.replace(change, confirmed=False))
                return await self.get_subscription(project, queue, subscription_id)
        await self.driver.subscriptions.update(project, queue, subscription_id,
                                               change)
        return None

    async def confirm_subscription(self, project: str, queue: str, subscription_id: str,
                                   confirmed: bool) -> Subscription:
        """Confirm (or unconfirm) a live subscription; it as it now is. Raises
        SubscriptionNotFound."""
        await self.driver.subscriptions.update(project, queue, subscription_id,
                                               SubscriptionChange(confirmed=confirmed))
        return await self.get_subscription(project, queue, subscription_id)

    def deliverable(self, subscription: Subscription) -> bool:
        """Whether *subscription* may be pushed messages: always, unless confirmation
        is required and it is not confirmed (as Zaqar's notifier decides)."""
        return subscription.confirmed or not self.require_confirmation

    async def delete_subscription(self, project: str, queue: str, subscription_id: str
                                 ) -> None:
        await self.driver.subscriptions.delete(project, queue, subscription_id)

    async def purge_subscriptions(self, project: str, queue: str) -> None:
        await self.driver.subscriptions.purge(project, queue)

    async def subscribed_queues(self) -> list[tuple[str, str]]:
        return await self.driver.subscriptions.subscribed_queues()

    # Long-poll claims

    async def available_in(self, project: str, queue: str) -> float | None:
        """Seconds until a claim on *queue* may find a message (``Claims.available_in``)."""
        return await self.driver.claims.available_in(project, queue)

    # Service

    async def ping(self) -> bool:
        """Whether the store answers."""
        return await self.driver.ping()

    async def operation_status(self) -> dict[str, dict[str, Any]]:
        """Zaqar's detailed health: the store's everyday operations tried once each, in
        a project and queue of their own (random names, removed at the end), timed.

        ``{operation: {"succeeded", "seconds", "ref"}}`` for the operations Zaqar names,
        in its order; an operation whose prerequisite failed is not tried. ``ref`` is
        None, or for a failure the id under which the server's log has its cause (the
        body never carries the store's own error text). The probes are requests like
        any: /metrics and the event trail count them.
        """
        project, queue, client = (f"health-{uuid.uuid4().hex}" for _ in range(3))
        status: dict[str, dict[str, Any]] = {}

        async def timed(operation: str, call: Awaitable[T]) -> T | None:
            start = time.monotonic()
            ref = None
            result = None
            try:
                result = await call
            except Exception:
                ref = str(uuid.uuid4())
                LOG.exception("Health operation %s failed (ref %s)", operation, ref)
            status[operation] = {"succeeded": ref is None,
                                 "seconds": time.monotonic() - start, "ref": ref}
            return result

        if await timed("create_queue", self.create_queue(project, queue, {})) is None:
            return status
        posted = [PostedMessage({"event": f"p_{n}"}, HEALTH_MESSAGE_TTL, None)
                  for n in range(HEALTH_MESSAGES)]
        # Size 0: the post is the server's own, a few kilobytes, under any queue's limit.
        ids = await timed("post_messages", self.post(project, queue, client, posted,
                                                     size=0))
        if ids:
            claim = await timed("claim_messages", self.claim(
                project, queue, ttl=HEALTH_CLAIM_TTL, grace=HEALTH_CLAIM_GRACE,
                limit=HEALTH_CLAIM_LIMIT))
            await timed("list_messages", self.list_messages(
                project, queue, client_id=client, marker=None,
                limit=self.limits.max_messages_per_page, echo=True, include_claimed=True,
                include_delayed=False))
            if claim is not None and claim.messages:
                for message in claim.messages:
                    await timed("delete_messages", self.delete_message(
                        project, queue, message.id, claim.id))
                    if not status["delete_messages"]["succeeded"]:
                        break
                await timed("delete_claim", self.release_claim(project, queue, claim.id))
        await timed("bulk_delete_messages", self.delete_messages(project, queue, ids or []))
        await timed("delete_queue", self.delete_queue(project, queue))
        return status


def queue_backoff(metadata: dict[str, Any], dead_letter: q.DeadLetterPolicy | None
                  ) -> retry.Backoff | None:
    """The waits of the queue's ``_retry_policy`` after a consumer's failed attempts
    (a claim released or expired), or None when the queue has none: its messages are
    then claimable again as soon as the claim ends."""
    return retry.backoff(metadata.get(retry.RETRY_POLICY),
                         dead_letter.max_claim_count if dead_letter else None)


def push_backoff(metadata: dict[str, Any], dead_letter: q.DeadLetterPolicy | None,
                 subscription: Subscription) -> retry.Backoff:
    """The waits after failed pushes to *subscription*: its own ``_retry_policy`` or the
    queue's (``retry.effective``), Zaqar's defaults without either."""
    policy = retry.effective(metadata.get(retry.RETRY_POLICY),
                             subscription.options.get(retry.RETRY_POLICY))
    return retry.backoff(policy, dead_letter.max_claim_count if dead_letter else None)


def replayed(key: PostKey, stored: StoredKey) -> list[str]:
    """The answer to a post whose *key* a driver keeps as *stored*: the first post's
    message ids when the bodies are the same, else KeyReused."""
    if stored.digest != key.digest:
        raise errors.KeyReused.by_post(key.key, key.window)
    return stored.ids


def is_delayed_queue(queue_delay: int) -> bool:
    """Whether a queue with default delay *queue_delay* takes its messages' own delays."""
    return queue_delay > 0


def resolve_delay(queue_delay: int, message_delay: float | None) -> float:
    """The delay a message gets.

    A normal queue (default delay 0) ignores a message's own delay, so it never pays for
    the feature; on a delayed queue the message's delay, when given, wins.
    """
    if not is_delayed_queue(queue_delay):
        return 0
    return queue_delay if message_delay is None else message_delay


def apply_metadata_patch(metadata: dict[str, Any], operations: Any) -> dict[str, Any]:
    """A copy of *metadata* with JSON-patch *operations* applied.

    Paths are ``/metadata/<key>``. ``replace`` and ``remove`` of a user key that is not
    set conflict (409); reserved attributes always exist, so both work on them.

    ``remove`` of a reserved attribute only removes a value stored before this patch.
    python-zaqarclient's ``queue.metadata(new_meta=...)`` sends ``add`` for each key whose
    current value is null and then ``remove`` for the same key; honouring that remove
    would silently drop, say, a dead-letter policy the user has just set.
    """
    if not isinstance(operations, list) or not operations:
        raise errors.ValidationError("The patch must be a non-empty JSON array of "
                                     "operations.")
    patched = dict(metadata)
    for index, patch_op in enumerate(operations):
        where = f"patch[{index}]"
        if not isinstance(patch_op, dict):
            raise errors.ValidationError(f"{where} must be a JSON object.")
        op = patch_op.get("op")
        path = patch_op.get("path")
        if op not in PATCH_OPS:
            raise errors.ValidationError(f"{where}.op must be one of {', '.join(PATCH_OPS)}; "
                                         f"got {op!r}.")
        if (not isinstance(path, str) or not path.startswith(PATCH_PREFIX)
                or len(path) == len(PATCH_PREFIX) or "/" in path[len(PATCH_PREFIX):]):
            raise errors.ValidationError(f"{where}.path must be /metadata/<key>; got "
                                         f"{str(path)[:80]!r}.")
        key = path[len(PATCH_PREFIX):]
        if op in ("add", "replace") and "value" not in patch_op:
            raise errors.ValidationError(f"{where}.value is missing.")
        exists = key in patched or key in q.RESERVED_ATTRIBUTES
        if op != "add" and not exists:
            raise errors.Conflict(f"Cannot {op} {key!r}: it is not set.")
        if op == "remove":
            if key not in q.RESERVED_ATTRIBUTES or key in metadata:
                patched.pop(key, None)
        else:
            patched[key] = patch_op["value"]
    return patched
