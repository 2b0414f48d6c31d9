"""Topic resources: Zaqar's ``/v2/topics`` (list), ``/v2/topics/{name}`` (create, get,
patch, delete), its ``stats`` and ``purge``. The rules are ``delayq.topics``'s."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import validation
from delayq.api import request, views
from delayq.api.queues import JSON_PATCH, purge_types
from delayq.topics import Topics
from delayq.validation import Limits

TOPICS = f"{views.V2}/topics"


def topic_href(name: str) -> str:
    return f"{TOPICS}/{name}"


def topic_message_href(name: str, message_id: str) -> str:
    return f"{TOPICS}/{name}/messages/{message_id}"


class _TopicResource:
    """What every topic resource is given."""

    def __init__(self, *, topics: Topics, limits: Limits) -> None:
        self.topics = topics
        self.limits = limits


class TopicCollection(_TopicResource):
    """``/v2/topics``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        """Zaqar's listing, as the queues': ``name`` and metadata filters, ``detailed``."""
        project = request.project(req)
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         self.limits.max_queues_per_page, 10)
        detailed = validation.query_bool(req.get_param("detailed"), "detailed")
        page = await self.topics.page(project, req.get_param("marker"), limit,
                                      validation.queue_filter(req.params))
        resp.media = views.name_listing("topics", TOPICS, page, req.params, limit, detailed)


class TopicResource(_TopicResource):
    """``/v2/topics/{name}``"""

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        metadata = await request.json_body(req, self.limits.max_queue_metadata,
                                           "topic metadata", if_empty={})
        created = await self.topics.create(project, name, metadata)
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_204
        resp.location = req.path

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        """The metadata; 404 for a topic that does not exist (Zaqar's topics, unlike
        its queues, are not read into being)."""
        project = request.project(req)
        validation.queue_name(name)
        resp.media = await self.topics.metadata(project, name)

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                       name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        request.media_type(req, (JSON_PATCH,), "Topic PATCH")
        operations = await request.json_body(req, self.limits.max_queue_metadata, "patch")
        resp.media = await self.topics.patch(project, name, operations)

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        await self.topics.delete(project, name)
        resp.status = falcon.HTTP_204


class TopicStatsResource(_TopicResource):
    """``/v2/topics/{name}/stats``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        document = views.stats(name, await self.topics.stats(project, name))
        for end in ("oldest", "newest"):
            if end in document["messages"]:
                found = document["messages"][end]
                found["href"] = topic_message_href(name, found["id"])
        resp.media = document


class TopicPurgeResource(_TopicResource):
    """``/v2/topics/{name}/purge``: Zaqar's ``resource_types`` (both without a body)."""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        types = await purge_types(req, self.limits)
        await self.topics.purge(project, name, messages="messages" in types,
                                subscribers="subscriptions" in types)
        resp.status = falcon.HTTP_204
