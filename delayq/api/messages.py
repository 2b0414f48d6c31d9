"""Message resources: post, list, get by ids, bulk delete, pop, one message."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import idempotency, jsontext, validation
from delayq.api import request, views
from delayq.api.longpoll import LongPoll
from delayq.broker import Broker
from delayq.errors import MessageNotFound, ValidationError
from delayq.push.pusher import Pusher
from delayq.validation import Limits

# A message edit is a JSON object; both types say so (merge-patch: RFC 7396's own).
EDIT_TYPES = ("application/json", "application/merge-patch+json")
# An edit's body may be as large as a post allows; its keys and a delay come on top.
EDIT_OVERHEAD = 4096


class _MessageResource:
    """What every message resource is given."""

    def __init__(self, *, broker: Broker, limits: Limits, longpoll: LongPoll,
                 pusher: Pusher, checksums: bool = False) -> None:
        self.broker = broker
        self.limits = limits
        self.longpoll = longpoll
        self.pusher = pusher
        self.checksums = checksums  # [DEFAULT] enable_checksum

    def notify(self, project: str, queue: str) -> None:
        """Messages of *queue* may be claimable now: its waiting claims and its pushes
        look at once."""
        self.longpoll.notify(project, queue)
        self.pusher.notify(project, queue)


class MessageCollection(_MessageResource):
    """``/v2/queues/{name}/messages``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        client = request.client(req, self.limits)
        validation.queue_name(name)
        limits = self.limits
        key = validation.idempotency_key(req.get_header(idempotency.HEADER))
        raw = await request.body(req, limits.max_messages_post_size, "message post")
        posted = validation.messages_post(validation.json_document(raw, "message post"),
                                          limits)
        if key is None:
            ids = await self.broker.post(project, name, client, posted, len(raw))
        else:
            ids = await self.broker.post(project, name, client, posted, len(raw),
                                         idempotency.PostKey(key, idempotency.digest(raw),
                                                             limits.idempotency_window))
        self.notify(project, name)
        resp.status = falcon.HTTP_201
        resp.location, document = views.posted(name, ids)
        resp.data = jsontext.response(document)  # resp.media's encoder, without its lookup

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        project = request.project(req)
        client = request.client(req, self.limits)
        validation.queue_name(name)
        limits = self.limits
        details = validation.query_bool(req.get_param("details"), "details")
        ids = req.get_param_as_list("ids")
        if ids is not None:
            wanted = validation.message_ids(ids, limits)
            found = await self.broker.get_messages(project, name, wanted)
            if not found:
                raise MessageNotFound(f"No messages with ids {', '.join(wanted)[:200]} in "
                                      f"queue {name}.")
            resp.media = {"messages": [views.message(name, m, details=details,
                                                     checksums=self.checksums)
                                       for m in found]}
            return
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         limits.max_messages_per_page, 10)
        echo = validation.query_bool(req.get_param("echo"), "echo")
        include_claimed = validation.query_bool(req.get_param("include_claimed"),
                                                "include_claimed")
        include_delayed = validation.query_bool(req.get_param("include_delayed"),
                                                "include_delayed")
        messages, marker = await self.broker.list_messages(
            project, name, client_id=client, marker=req.get_param("marker"), limit=limit,
            echo=echo, include_claimed=include_claimed, include_delayed=include_delayed)
        links = []
        if marker is not None:
            params = {"marker": marker, "limit": limit, "echo": echo,
                      "include_claimed": include_claimed, "include_delayed": include_delayed,
                      "details": details}
            query = falcon.to_query_str({k: str(v).lower() if isinstance(v, bool) else v
                                         for k, v in params.items()})
            links.append({"rel": "next", "href": f"{views.queue_href(name)}/messages{query}"})
        resp.media = {"messages": [views.message(name, m, details=details,
                                                 checksums=self.checksums)
                                   for m in messages],
                      "links": links}

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                        name: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        limits = self.limits
        ids = req.get_param_as_list("ids")
        pop = req.get_param("pop")
        if (ids is None) == (pop is None):
            raise ValidationError("DELETE on messages takes exactly one of ids or pop.")
        claim_ids = validation.bulk_delete_claims(ids, req.get_param_as_list("claim_ids"),
                                                  limits)
        if ids is not None:
            await self.broker.delete_messages(project, name,
                                              validation.message_ids(ids, limits), claim_ids)
            resp.status = falcon.HTTP_204
            return
        assert pop is not None  # exactly one of ids and pop is given (checked above)
        if not pop.strip():
            raise ValidationError("pop must be an integer: how many messages to pop.")
        count = validation.query_integer(pop, "pop", 1, limits.max_messages_per_claim_or_pop,
                                         1)
        popped = await self.broker.pop(project, name, count)
        resp.media = {"messages": [views.message(name, m, checksums=self.checksums)
                                   for m in popped]}


class MessageResource(_MessageResource):
    """``/v2/queues/{name}/messages/{message_id}``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                     message_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        details = validation.query_bool(req.get_param("details"), "details")
        message = await self.broker.get_message(project, name, message_id)
        resp.media = views.message(name, message, details=details,
                                   checksums=self.checksums)

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                       message_id: str) -> None:
        """(delayq) Edit the body and/or the remaining delay of an unclaimed message;
        with ``claim_id``, hand the message back from that claim, due after ``delay``
        seconds (SQS's ChangeMessageVisibility)."""
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        request.media_type(req, EDIT_TYPES, "Message PATCH")
        limits = self.limits
        document = await request.json_body(
            req, limits.max_messages_post_size + EDIT_OVERHEAD, "message edit")
        claim_id = req.get_param(request.CLAIM_ID_PARAM) or None
        if claim_id is None:
            message = await self.broker.edit_message(project, name,
                                         message_id, validation.message_edit(document, limits))
        else:
            message = await self.broker.release_message(project, name,
                                                        message_id, claim_id,
                                                        validation.release_delay(document, limits))
        if not message.is_delayed:  # an edit may make a delayed message due now
            self.notify(project, name)
        resp.media = views.message(name, message, details=True,
                                   checksums=self.checksums)

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                        message_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        claim_id = req.get_param(request.CLAIM_ID_PARAM) or None
        validation.single_delete(claim_id, self.limits)
        await self.broker.delete_message(project, name, message_id, claim_id)
        resp.status = falcon.HTTP_204
