"""Topic subscription resources: ``/v2/topics/{name}/subscriptions`` (create, list),
``.../{subscription_id}`` (get, update, delete) and ``.../confirm``, as a queue's
(``delayq.api.subscriptions``); each subscriber is pushed every message published
(``delayq.topics``).

Under ``[notification] require_confirmation`` a topic's subscription made, or moved to
another subscriber, is sent a confirmation request, and so is one unconfirmed, as a
queue's (``delayq.push.confirmations``): its pre-signed URL allows the ``PUT`` of the
topic's confirm path, ``/v2/topics/{name}/subscriptions/{subscription_id}/confirm``. A
socket's own subscription (a WebSocket's ``topic_subscription_create`` without a
subscriber) is made as for a queue (``delayq.api.subscriptions.new_subscription``).
"""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import validation
from delayq.api import request, views
from delayq.api.subscriptions import (
    CONFIRMATION_BODY_LIMIT,
    new_subscription,
    subscription_document,
)
from delayq.api.topics import TOPICS
from delayq.push import confirmations, sockets
from delayq.push.confirmations import Confirmations
from delayq.push.pusher import Pusher
from delayq.push.targets import Targets
from delayq.subscription import Subscription
from delayq.topics import Topics, space
from delayq.validation import Limits


class _TopicSubscriptionResource:
    """What every topic subscription resource is given."""

    def __init__(self, *, topics: Topics, limits: Limits, pusher: Pusher,
                 targets: Targets, confirmations: Confirmations) -> None:
        self.topics = topics
        self.limits = limits
        self.pusher = pusher
        self.targets = targets
        self.confirmations = confirmations

    async def _document(self, req: falcon.asgi.Request, what: str) -> object:
        return await subscription_document(req, self.limits, what)

    def changed(self, project: str, name: str) -> None:
        """The topic's subscriptions changed: its pushes read them again."""
        self.pusher.subscriptions_changed(space(project), name)

    def confirm(self, req: falcon.asgi.Request, project: str, name: str,
                subscription: Subscription, *, unsubscribed: bool = False) -> None:
        """Send *subscription* its confirmation request for the topic's confirm path."""
        self.confirmations.send(project, name, subscription, req.prefix,
                                unsubscribed=unsubscribed, collection=confirmations.TOPICS)

    @property
    def require_confirmation(self) -> bool:
        return self.topics.broker.require_confirmation


class TopicSubscriptionCollection(_TopicSubscriptionResource):
    """``/v2/topics/{name}/subscriptions``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        subscriber, ttl, options = await new_subscription(req, self.limits, self.targets)
        created = await self.topics.subscribe(project, name, subscriber, ttl, options)
        self.changed(project, name)
        if self.require_confirmation and not sockets.is_socket(subscriber):
            self.confirm(req, project, name,
                         await self.topics.get_subscription(project, name, created))
        resp.status = falcon.HTTP_201
        resp.location = req.path
        resp.media = {"subscription_id": created}

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         self.limits.max_subscriptions_per_page, 10)
        found = await self.topics.list_subscriptions(project, name,
                                                     req.get_param("marker"), limit)
        resp.media = views.subscription_listing(name, f"{TOPICS}/{name}/subscriptions",
                                                found, limit)


class TopicSubscriptionResource(_TopicSubscriptionResource):
    """``/v2/topics/{name}/subscriptions/{subscription_id}``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str, subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        found = await self.topics.get_subscription(project, name, subscription_id)
        resp.media = views.subscription(name, found)

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                       name: str, subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        change = validation.subscription_change(
            await self._document(req, "subscription update"), self.limits)
        if change.subscriber is not None:
            await self.targets.check_subscriber(change.subscriber)
        moved = await self.topics.update_subscription(project, name, subscription_id,
                                                      change)
        self.changed(project, name)
        if moved is not None:
            self.confirm(req, project, name, moved)
        resp.status = falcon.HTTP_204
        resp.location = req.path

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str, subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        await self.topics.unsubscribe(project, name, subscription_id)
        self.changed(project, name)
        resp.status = falcon.HTTP_204


class TopicSubscriptionConfirmResource(_TopicSubscriptionResource):
    """``/v2/topics/{name}/subscriptions/{subscription_id}/confirm``"""

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str, subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        confirmed = validation.subscription_confirming(
            await request.json_body(req, CONFIRMATION_BODY_LIMIT, "confirmation",
                                    if_empty={}))
        found = await self.topics.confirm_subscription(project, name, subscription_id,
                                                       confirmed)
        self.changed(project, name)
        if not confirmed and self.require_confirmation:
            # As a queue's: the subscriber learns it is unsubscribed, and how to come back.
            self.confirm(req, project, name, found, unsubscribed=True)
        resp.status = falcon.HTTP_204
        resp.location = req.path
