"""The subscriptions of a store (``delayq.subscription``): records with an expiry and a
confirmed flag the broker sets (``SubscriptionChange.confirmed``); no rule of their own."""

from __future__ import annotations

import abc
from typing import Any

from delayq.subscription import Subscription, SubscriptionChange


class Subscriptions(abc.ABC):
    """Subscriptions of every queue."""

    @abc.abstractmethod
    async def create(self, project: str, queue: str, subscriber: str, ttl: int,
                     options: dict[str, Any], confirmed: bool = True) -> str | None:
        """Store a subscription living *ttl* seconds from now, *confirmed* or not; its
        id, or None when the queue has a live subscription for *subscriber* already
        (nothing is stored)."""

    @abc.abstractmethod
    async def get(self, project: str, queue: str, subscription_id: str
                  ) -> Subscription | None:
        """The live subscription, or None."""

    @abc.abstractmethod
    async def page(self, project: str, queue: str, marker: str | None, limit: int
                   ) -> list[Subscription]:
        """Up to *limit* live subscriptions of the queue with ids after *marker*, by id."""

    @abc.abstractmethod
    async def update(self, project: str, queue: str, subscription_id: str,
                     change: SubscriptionChange) -> None:
        """Apply *change* to a live subscription (a new ttl runs from now; a *confirmed*
        given is stored as given). Raises
        SubscriptionNotFound, or SubscriptionExists when the new subscriber has a live
        subscription of the queue already."""

    @abc.abstractmethod
    async def delete(self, project: str, queue: str, subscription_id: str) -> None:
        """Delete one subscription; an absent one is not an error."""

    @abc.abstractmethod
    async def purge(self, project: str, queue: str) -> None:
        """Delete every subscription of the queue."""

    @abc.abstractmethod
    async def subscribed_queues(self) -> list[tuple[str, str]]:
        """``(project, queue)`` of every queue with a live subscription, of every
        project, sorted (the pushers' round, ``delayq.push``)."""
