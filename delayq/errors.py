"""Errors the core and the storage drivers raise; the API maps each to one HTTP status."""

from __future__ import annotations


class DelayqError(Exception):
    """Base of every error delayq raises on purpose.

    *title* overrides the HTTP error title the API gives this kind of error.
    """

    def __init__(self, description: str, *, title: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.title = title


class ValidationError(DelayqError):
    """Client input breaks a rule or a limit (HTTP 400)."""


class EncryptionUnavailable(DelayqError):
    """A request asks for message encryption where no key is configured (HTTP 400):
    refused rather than storing bodies in the clear."""

    @classmethod
    def for_queue(cls, queue: str) -> EncryptionUnavailable:
        return cls(f"Queue {queue!r} asks for encrypted messages "
                   "(_enable_encrypt_messages), but this server has no [transport] "
                   "message_encryption_key: nothing would be encrypted. Ask the operator "
                   "to configure one.")


class BodyUndecryptable(DelayqError):
    """A stored body is encrypted and no configured key opens it (HTTP 503): its key
    was removed from the configuration, or the store's copy was altered."""

    @classmethod
    def of(cls, message_id: str) -> BodyUndecryptable:
        which = f"Message {message_id}" if message_id else "A message"
        return cls(f"{which} is encrypted with a key that is not among this server's "
                   "[transport] message_encryption_key (or was altered in the store); "
                   "its body cannot be read.")


class QueueNotFound(DelayqError):
    """The queue does not exist in this project (HTTP 404)."""

    @classmethod
    def named(cls, name: str) -> QueueNotFound:
        return cls(f"Queue {name!r} does not exist.")


class TopicNotFound(DelayqError):
    """The topic does not exist in this project (HTTP 404)."""

    @classmethod
    def named(cls, name: str) -> TopicNotFound:
        return cls(f"Topic {name!r} does not exist.")


class MessageNotFound(DelayqError):
    """The message does not exist, or has expired (HTTP 404)."""

    @classmethod
    def with_id(cls, message_id: str) -> MessageNotFound:
        return cls(f"Message {message_id} does not exist.")


class ClaimNotFound(DelayqError):
    """The claim does not exist, or has expired (HTTP 404)."""

    @classmethod
    def with_id(cls, claim_id: str) -> ClaimNotFound:
        return cls(f"Claim {claim_id} does not exist or has expired.")


class SubscriptionNotFound(DelayqError):
    """The subscription does not exist, or has expired (HTTP 404)."""

    @classmethod
    def with_id(cls, subscription_id: str) -> SubscriptionNotFound:
        return cls(f"Subscription {subscription_id} does not exist.")


class MessageIsClaimed(DelayqError):
    """A claimed message was to be deleted without its claim id (HTTP 403)."""


class ClaimMismatch(DelayqError):
    """The message is held by another claim than the one given (HTTP 403)."""


class ClaimUnknown(DelayqError):
    """A claimed message was to be deleted with a claim id of no live claim of the queue
    (HTTP 400, as in Zaqar: the claim may have expired; another live claim's id is a
    ClaimMismatch, 403)."""


class MessageNotClaimed(DelayqError):
    """A claim id was given for a message no live claim holds (HTTP 400, as in Zaqar)."""


class NotAuthenticated(DelayqError):
    """The request carries no valid credentials (HTTP 401).

    *challenge* is the ``WWW-Authenticate`` value telling the client where to
    authenticate.
    """

    def __init__(self, description: str, *, challenge: str | None = None) -> None:
        super().__init__(description)
        self.challenge = challenge


class Forbidden(DelayqError):
    """The credentials are valid but do not allow the request (HTTP 403)."""

    @classmethod
    def by_policy(cls, rule: str) -> Forbidden:
        """The error for a request the policy denies."""
        return cls(f"The policy does not allow {rule} to these credentials.")


class SignatureRefused(DelayqError):
    """A pre-signed URL that does not allow the request: wrong method, path or project,
    expired, or tampered with (HTTP 404, as in Zaqar)."""


class IdentityUnavailable(DelayqError):
    """The identity service (Keystone) cannot be reached to check a token (HTTP 503)."""


class NameServiceUnavailable(DelayqError):
    """A subscriber's host name cannot be resolved now, to check where its pushes would
    go: the resolver failed for the time being or did not answer in time (HTTP 503)."""


class StorageUnavailable(DelayqError):
    """The storage backend cannot serve the request now (HTTP 503).

    *store* names the backend (a driver's ``name``: sqlite, redis, mongodb, swift). The
    description says what failed, with the cause's own text: it may name hosts, ports,
    paths, a cluster's topology or a script's line, so it is for the server's log only.
    The API answers with the store's name alone (``delayq.api.errors``).
    """

    def __init__(self, description: str, *, store: str) -> None:
        super().__init__(description)
        self.store = store

    @property
    def detail(self) -> str:
        """For the server's log: the description, then the exception this one was raised
        from (its type, and its text unless the description quotes it already)."""
        cause = self.__cause__
        if cause is None:
            return self.description
        kind = f"{type(cause).__module__}.{type(cause).__qualname__}"
        said = str(cause)
        if said in self.description:
            return f"{self.description} [{kind}]"
        return f"{self.description} [{kind}: {said}]"


class MetadataChanged(StorageUnavailable):
    """A write was made under queue metadata that has changed since it was read
    (``Driver.queue_for_write``); the broker reads it again and redoes the write, and
    answers 503 only if it keeps changing."""


class Conflict(DelayqError):
    """The request contradicts the resource's current state (HTTP 409)."""


class MessageHeld(Conflict):
    """A live claim holds the message, so it cannot be edited (HTTP 409)."""

    @classmethod
    def editing(cls, message_id: str) -> MessageHeld:
        """The error every driver raises for an edit of a claimed message."""
        return cls(f"Message {message_id} is claimed: it can be edited once its claim is "
                   "deleted, released or expired.")


class SubscriptionExists(Conflict):
    """The queue already has a subscription for this subscriber (HTTP 409): subscriptions
    are unique by project, queue and subscriber, as in Zaqar."""

    @classmethod
    def for_subscriber(cls, subscriber: str) -> SubscriptionExists:
        return cls(f"Queue already has a subscription for {subscriber[:200]}: "
                   "subscriptions are unique by project, queue and subscriber.")


class KeyReused(DelayqError):
    """An Idempotency-Key of a post within its window came with another body (HTTP 422);
    nothing is stored."""

    @classmethod
    def by_post(cls, key: str, window: int) -> KeyReused:
        return cls(f"Idempotency-Key {key[:80]!r} was used for a post with another body "
                   f"within the last {window} seconds (idempotency_window): send this "
                   "post under a new key.")


class QuotaExceeded(DelayqError):
    """A request would take a project or a queue past an operator's quota (HTTP 403);
    nothing of it is done."""

    @classmethod
    def queues(cls, held: int, limit: int) -> QuotaExceeded:
        """The project has *held* queues, *limit* (``max_queues_per_project``) or more."""
        return cls(f"The project already has {_counted(held, 'queue')}: "
                   f"max_queues_per_project is {limit}.")

    @classmethod
    def messages(cls, queue: str, held: int, posted: int, limit: int) -> QuotaExceeded:
        """Queue *queue* holds *held* live messages, and *posted* more would pass *limit*
        (``max_messages_per_queue``)."""
        return cls(f"Queue {queue!r} holds {_counted(held, 'message')}; {posted} more "
                   f"would pass max_messages_per_queue ({limit}).")


def _counted(n: int, noun: str) -> str:
    """*n* and *noun*, plural unless *n* is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
