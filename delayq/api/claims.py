"""Claim resources: create, get, renew, release."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import jsontext, validation
from delayq.api import request, views
from delayq.api.longpoll import LongPoll
from delayq.broker import Broker
from delayq.push.pusher import Pusher
from delayq.validation import Limits

# Claim bodies are tiny ({"ttl", "grace"}); anything much larger is not a claim request.
MAX_CLAIM_BODY = 4096


class _ClaimResource:
    """What every claim resource is given."""

    def __init__(self, *, broker: Broker, limits: Limits, longpoll: LongPoll,
                 pusher: Pusher, checksums: bool = False) -> None:
        self.broker = broker
        self.limits = limits
        self.longpoll = longpoll
        self.pusher = pusher
        self.checksums = checksums  # [DEFAULT] enable_checksum


class ClaimCollection(_ClaimResource):
    """``/v2/queues/{name}/claims``"""

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        limits = self.limits
        limit = validation.query_integer(req.get_param("limit"), "limit", 1,
                                         limits.max_messages_per_claim_or_pop,
                                         validation.DEFAULT_CLAIM_LIMIT)
        wait = validation.claim_wait(req.get_param("wait"))
        document = await request.json_body(req, MAX_CLAIM_BODY, "claim request",
                                           if_empty={})
        ttl, grace = validation.claim_options(document, limits)

        def attempt():  # longpoll.Attempt
            # Made now and, when that finds nothing and the request waits, at each turn.
            return self.broker.claim(project, name, ttl=ttl, grace=grace,
                                     limit=limit)

        claim = await attempt()
        if claim is None and wait > 0:
            claim = await self.longpoll.claim_later(project, name, attempt, limit=limit,
                                                   wait=wait)
        if claim is None:
            resp.status = falcon.HTTP_204
            return
        resp.status = falcon.HTTP_201
        resp.location = views.claim_href(name, claim.id)
        # resp.media's encoder, without its lookup: every claim takes this path.
        resp.data = jsontext.response(
            {"messages": [views.message(name, m, checksums=self.checksums)
                          for m in claim.messages]})


class ClaimResource(_ClaimResource):
    """``/v2/queues/{name}/claims/{claim_id}``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                     claim_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        claim = await self.broker.get_claim(project, name, claim_id)
        resp.content_location = views.claim_href(name, claim_id)
        resp.media = views.claim(name, claim, checksums=self.checksums)

    async def on_patch(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                       claim_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        document = await request.json_body(req, MAX_CLAIM_BODY, "claim update",
                                           if_empty={})
        ttl, grace = validation.claim_options(document, self.limits)
        await self.broker.renew_claim(project, name, claim_id, ttl, grace)
        resp.status = falcon.HTTP_204

    async def on_delete(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str,
                        claim_id: str) -> None:
        project = request.project(req)
        request.client(req, self.limits)
        validation.queue_name(name)
        await self.broker.release_claim(project, name, claim_id)
        self.longpoll.notify(project, name)
        self.pusher.notify(project, name)
        resp.status = falcon.HTTP_204
