"""Subscription resources: Zaqar's ``/v2/queues/{name}/subscriptions`` (create, list,
get, update, delete, confirm); the pushing is ``delayq.push``'s. A subscriber is checked
against where pushes may go (``delayq.push.targets``) once its document is valid. Under
``[notification] require_confirmation`` a subscription made, or moved to another
subscriber, is sent a confirmation request (``delayq.push.confirmations``), and so is one
unconfirmed. A subscription a socket makes for itself (``delayq.push.sockets``) has its
subscriber from the socket's request, where no client can put it, and is neither checked
against the push targets nor sent a confirmation."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import validation
from delayq.api import request, views
from delayq.broker import Broker
from delayq.push import sockets
from delayq.push.confirmations import Confirmations
from delayq.push.pusher import Pusher
from delayq.push.targets import Targets
from delayq.validation import Limits

# The ASGI scope key of a socket's subscription_create: the subscriber naming the socket.
SOCKET_SUBSCRIBER = "delayq.socket_subscriber"
CONFIRMATION_BODY_LIMIT = 1024  # {"confirmed": false} and room for white space


async def new_subscription(req: falcon.asgi.Request, limits: Limits, targets: Targets
                           ) -> tuple[str, int, dict[str, object]]:
    """The subscriber, ttl and options of a subscription to create, for a queue or a
    topic: a socket's own (``SOCKET_SUBSCRIBER`` in the scope) is validated as a webhook
    would be and stored with the socket's URL, unchecked against the push targets."""
    document = await subscription_document(req, limits, "subscription")
    socket_subscriber = req.scope.get(SOCKET_SUBSCRIBER)
    if socket_subscriber is not None and isinstance(document, dict):
        document = {**document, "subscriber": "http://socket.invalid"}
    subscriber, ttl, options = validation.new_subscription(document, limits)
    if socket_subscriber is not None:
        return socket_subscriber, ttl, options
    await targets.check_subscriber(subscriber)
    return subscriber, ttl, options


async def subscription_document(req: falcon.asgi.Request, limits: Limits, what: str
                                ) -> object:
    """A subscription's JSON body, or its update's (empty: ``{}``). Options hold a
    retry policy, headers and a body template: as large as queue metadata may be, and a
    little more for the subscriber and ttl."""
    return await request.json_body(req, limits.max_queue_metadata + 4096, what,
                                   if_empty={})


class _SubscriptionResource:
    """What every subscription resource is given."""

    def __init__(self, *, broker: Broker, limits: Limits, pusher: Pusher, targets: Targets,
                 confirmations: Confirmations) -> None:
        self.broker = broker
        self.limits = limits
        self.pusher = pusher
        self.targets = targets
        self.confirmations = confirmations

    async def _document(self, req: falcon.asgi.Request, what: str) -> object:
        return await subscription_document(req, self.limits, what)


class SubscriptionCollection(_SubscriptionResource):
    """``/v2/queues/{name}/subscriptions``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        subscriber, ttl, options = await new_subscription(req, self.limits, self.targets)
        created = await self.broker.create_subscription(project, name,
                                                        subscriber, ttl, options)
        self.pusher.subscriptions_changed(project, name)
        if self.broker.require_confirmation and not sockets.is_socket(subscriber):
            self.confirmations.send(
                project, name, await self.broker.get_subscription(project, name, created),
                req.prefix)
        resp.status = falcon.HTTP_201
        resp.location = req.path
        resp.media = {"subscription_id": created}

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         self.limits.max_subscriptions_per_page, 10)
        marker = req.get_param("marker")
        found = await self.broker.list_subscriptions(project, name, marker,
                                                     limit)
        resp.media = views.subscription_listing(name, views.subscriptions_href(name), found,
                                                limit)


class SubscriptionResource(_SubscriptionResource):
    """``/v2/queues/{name}/subscriptions/{subscription_id}``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                     subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        found = await self.broker.get_subscription(project, name,
                                                   subscription_id)
        resp.media = views.subscription(name, found)

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                       subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        change = validation.subscription_change(
            await self._document(req, "subscription update"), self.limits)
        if change.subscriber is not None:
            await self.targets.check_subscriber(change.subscriber)
        moved = await self.broker.update_subscription(project, name,
                                                      subscription_id, change)
        self.pusher.subscriptions_changed(project, name)
        if moved is not None:
            self.confirmations.send(project, name, moved, req.prefix)
        resp.status = falcon.HTTP_204
        resp.location = req.path

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                        subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        await self.broker.delete_subscription(project, name,
                                              subscription_id)
        self.pusher.subscriptions_changed(project, name)
        resp.status = falcon.HTTP_204


class SubscriptionConfirmResource(_SubscriptionResource):
    """``/v2/queues/{name}/subscriptions/{subscription_id}/confirm``: Zaqar's ``PUT``
    of ``{"confirmed": true}`` (or ``false``), sent by the subscriber with the pre-signed
    URL of its confirmation request, or by the project."""

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                     subscription_id: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        confirmed = validation.subscription_confirming(
            await request.json_body(req, CONFIRMATION_BODY_LIMIT, "confirmation",
                                    if_empty={}))
        found = await self.broker.confirm_subscription(project, name, subscription_id,
                                                       confirmed)
        self.pusher.subscriptions_changed(project, name)
        if not confirmed and self.broker.require_confirmation:
            # As Zaqar: the subscriber learns it is unsubscribed, and how to come back.
            self.confirmations.send(project, name, found, req.prefix, unsubscribed=True)
        resp.status = falcon.HTTP_204
        resp.location = req.path
