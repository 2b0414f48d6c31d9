"""Topic subscription resources: ``/v2/topics/{name}/subscriptions`` (create, list),
``.../{subscription_id}`` (get, update, delete) and ``.../confirm``, as a queue's
(``delayq.api.subscriptions``); each subscriber is pushed every message published
(``delayq.topics``).

Under ``[notification] require_confirmation`` a topic's subscription is confirmed by the
project's ``PUT .../confirm``: no confirmation request is sent to the subscriber, as its
pre-signed URL names a queue's path (docs/api-reference.md).
"""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import validation
from delayq.api import request, views
from delayq.api.subscriptions import CONFIRMATION_BODY_LIMIT
from delayq.api.topics import TOPICS
from delayq.push.pusher import Pusher
from delayq.push.targets import Targets
from delayq.topics import Topics, space
from delayq.validation import Limits


class _TopicSubscriptionResource:
    """What every topic subscription resource is given."""

    def __init__(self, *, topics: Topics, limits: Limits, pusher: Pusher,
                 targets: Targets) -> None:
        self.topics = topics
        self.limits = limits
        self.pusher = pusher
        self.targets = targets

    async def _document(self, req: falcon.asgi.Request, what: str) -> object:
        # As a queue's subscription (delayq.api.subscriptions).
        return await request.json_body(req, self.limits.max_queue_metadata + 4096, what,
                                       if_empty={})

    def changed(self, project: str, name: str) -> None:
        """The topic's subscriptions changed: its pushes read them again."""
        self.pusher.subscriptions_changed(space(project), name)


class TopicSubscriptionCollection(_TopicSubscriptionResource):
    """``/v2/topics/{name}/subscriptions``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        subscriber, ttl, options = validation.new_subscription(
            await self._document(req, "subscription"), self.limits)
        await self.targets.check_subscriber(subscriber)
        created = await self.topics.subscribe(project, name, subscriber, ttl, options)
        self.changed(project, name)
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
        links = []
        if found:
            query = falcon.to_query_str({"marker": found[-1].id, "limit": limit})
            links.append({"rel": "next",
                          "href": f"{TOPICS}/{name}/subscriptions{query}"})
        resp.media = {"subscriptions": [views.subscription(name, s) for s in found],
                      "links": links}


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
        await self.topics.update_subscription(project, name, subscription_id, change)
        self.changed(project, name)
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
        await self.topics.confirm_subscription(project, name, subscription_id, confirmed)
        self.changed(project, name)
        resp.status = falcon.HTTP_204
        resp.location = req.path
