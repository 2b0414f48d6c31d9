"""Subscriptions: a queue's messages pushed to a webhook as they come due.

A subscription names a *subscriber* (an ``http://`` or ``https://`` URL), lives *ttl*
seconds from its creation (or from the last change of its ttl) and carries Zaqar's
*options*: ``post_data`` (a template of the pushed body), ``post_headers`` (headers added
to each push) and ``_retry_policy`` (``delayq.retry``). It is unique by project, queue and
subscriber. It is *confirmed* or not: with ``[notification] require_confirmation`` a new
subscription is not, and is pushed nothing until its subscriber confirms it (Zaqar's
``PUT .../confirm``); the rules are ``delayq.broker``'s. Pushing is ``delayq.push``'s;
drivers only store subscriptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)  # read-only, though not frozen: see delayq.message
class Subscription:
    """A live subscription as read at backend time ``as_of``."""

    id: str
    queue: str
    subscriber: str
    ttl: int
    options: dict[str, Any]
    created: float
    expires: float
    as_of: float
    # Stores written before confirmation existed hold no such field: their
    # subscriptions read as confirmed, as Zaqar reads them.
    confirmed: bool = True

    @property
    def age(self) -> int:
        return max(0, int(self.as_of - self.created))


@dataclass(frozen=True, slots=True)
class SubscriptionChange:
    """What a PATCH changes: each field None when it stays as it is. A new *ttl* runs
    from the change."""

    subscriber: str | None = None
    ttl: int | None = None
    options: dict[str, Any] | None = None
    confirmed: bool | None = None
