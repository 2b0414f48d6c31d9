"""Topic message resources: ``/v2/topics/{name}/messages`` (publish, list, read or
delete by ids) and ``/v2/topics/{name}/messages/{message_id}`` (read, delete).

A topic's messages are not claimed: they are pushed to its subscribers
(``delayq.topics``), and listed here until their ttl ends.
"""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi

from delayq import jsontext, validation
from delayq.api import request, views
from delayq.api.topics import TOPICS, topic_message_href
from delayq.errors import MessageNotFound, ValidationError
from delayq.message import Message
from delayq.push.pusher import Pusher
from delayq.topics import Topics, space
from delayq.validation import Limits


class _TopicMessageResource:
    """What every topic message resource is given."""

    def __init__(self, *, topics: Topics, limits: Limits, pusher: Pusher,
                 checksums: bool = False) -> None:
        self.topics = topics
        self.limits = limits
        self.pusher = pusher
        self.checksums = checksums  # [DEFAULT] enable_checksum

    def view(self, name: str, message: Message, details: bool = False) -> dict[str, Any]:
        shown = views.message(name, message, details=details, checksums=self.checksums)
        shown["href"] = topic_message_href(name, message.id)
        return shown


class TopicMessageCollection(_TopicMessageResource):
    """``/v2/topics/{name}/messages``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        """Publish: the answer is Zaqar's post answer, the ids the topic's messages'."""
        project = request.project(req)
        client = request.client(req, self.limits)
        validation.queue_name(name)
        raw = await request.body(req, self.limits.max_messages_post_size, "message post")
        posted = validation.messages_post(validation.json_document(raw, "message post"),
                                          self.limits)
        ids, deliveries = await self.topics.publish(project, name, client, posted, len(raw))
        for delivery in deliveries:
            self.pusher.notify(space(project), delivery)
        messages = f"{TOPICS}/{name}/messages"
        resp.status = falcon.HTTP_201
        resp.location = f"{messages}?ids={','.join(ids)}"
        resp.data = jsontext.response(
            {"resources": [f"{messages}/{message_id}" for message_id in ids]})

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str) -> None:
        project = request.project(req)
        client = request.client(req, self.limits)
        validation.queue_name(name)
        details = validation.query_bool(req.get_param("details"), "details")
        ids = req.get_param_as_list("ids")
        if ids is not None:
            wanted = validation.message_ids(ids, self.limits)
            found = await self.topics.get_messages(project, name, wanted)
            if not found:
                raise MessageNotFound(f"No messages with ids {', '.join(wanted)[:200]} in "
                                      f"topic {name}.")
            resp.media = {"messages": [self.view(name, m, details) for m in found]}
            return
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         self.limits.max_messages_per_page, 10)
        echo = validation.query_bool(req.get_param("echo"), "echo")
        include_delayed = validation.query_bool(req.get_param("include_delayed"),
                                                "include_delayed")
        messages, marker = await self.topics.list_messages(
            project, name, client_id=client, marker=req.get_param("marker"), limit=limit,
            echo=echo, include_claimed=True, include_delayed=include_delayed)
        links = []
        if marker is not None:
            params = {"marker": marker, "limit": limit, "echo": str(echo).lower(),
                      "include_delayed": str(include_delayed).lower(),
                      "details": str(details).lower()}
            links.append({"rel": "next",
                          "href": f"{TOPICS}/{name}/messages{falcon.to_query_str(params)}"})
        resp.media = {"messages": [self.view(name, m, details) for m in messages],
                      "links": links}

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str) -> None:
        """Delete by ids (a topic's messages are not popped: none is claimed)."""
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        ids = req.get_param_as_list("ids")
        if ids is None:
            raise ValidationError("DELETE on a topic's messages takes ids.")
        await self.topics.delete_messages(project, name,
                                          validation.message_ids(ids, self.limits))
        resp.status = falcon.HTTP_204


class TopicMessageResource(_TopicMessageResource):
    """``/v2/topics/{name}/messages/{message_id}``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                     name: str, message_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        details = validation.query_bool(req.get_param("details"), "details")
        message = await self.topics.get_message(project, name, message_id)
        resp.media = self.view(name, message, details)

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str, message_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        await self.topics.delete_message(project, name, message_id)
        resp.status = falcon.HTTP_204
