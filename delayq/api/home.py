"""Service resources: the home document, ping and health."""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi

from delayq import jsontext
from delayq.broker import Broker

JSON: dict[str, Any] = {"application/json": {}}
QUEUE = "/v2/queues/{queue_name}"


def _relation(template: str, allow: list[str], *, accept_post: bool = False,
              **variables: str) -> dict[str, Any]:
    """One relation of the home document: its URI template, the ``param/`` each of its
    variables stands for, and the methods it allows."""
    hints: dict[str, Any] = {"allow": allow, "formats": JSON}
    if accept_post:
        hints["accept-post"] = ["application/json"]
    relation: dict[str, Any] = {"href-template": template}
    if variables:
        relation["href-vars"] = {name: f"param/{param}" for name, param in variables.items()}
    relation["hints"] = hints
    return relation


# Zaqar's home document, relation for relation (rel/claim is one claim, GET; a claim is
# made through rel/post_claim), and rel/health, which Zaqar lists in admin mode: delayq
# serves it to whoever the health:get rule lets through.
HOME_DOCUMENT = {"resources": {
    "rel/queues": _relation("/v2/queues{?marker,limit,detailed}", ["GET"],
                            marker="marker", limit="queue_limit", detailed="detailed"),
    "rel/queue": _relation(QUEUE, ["GET", "PUT", "DELETE", "PATCH"],
                           queue_name="queue_name"),
    "rel/queue_stats": _relation(QUEUE + "/stats", ["GET"], queue_name="queue_name"),
    "rel/queue_share": _relation(QUEUE + "/share", ["POST"], accept_post=True,
                                 queue_name="queue_name"),
    "rel/queue_purge": _relation(QUEUE + "/purge", ["POST"], accept_post=True,
                                 queue_name="queue_name"),
    "rel/messages": _relation(QUEUE + "/messages{?marker,limit,echo,include_claimed}",
                              ["GET"], queue_name="queue_name", marker="marker",
                              limit="messages_limit", echo="echo",
                              include_claimed="include_claimed"),
    "rel/post_messages": _relation(QUEUE + "/messages", ["POST"], accept_post=True,
                                   queue_name="queue_name"),
    "rel/messages_delete": _relation(QUEUE + "/messages{?ids,pop}", ["DELETE"],
                                     queue_name="queue_name", ids="ids", pop="pop"),
    "rel/message_delete": _relation(QUEUE + "/messages/{message_id}{?claim}", ["DELETE"],
                                    queue_name="queue_name", message_id="message_id",
                                    claim="claim_id"),
    "rel/message_get": _relation(QUEUE + "/messages/{message_id}", ["GET"],
                                 queue_name="queue_name", message_id="message_id"),
    "rel/claim": _relation(QUEUE + "/claims/{claim_id}", ["GET"],
                           queue_name="queue_name", claim_id="claim_id"),
    "rel/post_claim": _relation(QUEUE + "/claims{?limit}", ["POST"], accept_post=True,
                                queue_name="queue_name", limit="claim_limit"),
    "rel/patch_claim": _relation(QUEUE + "/claims/{claim_id}", ["PATCH"], accept_post=True,
                                 queue_name="queue_name", claim_id="claim_id"),
    "rel/delete_claim": _relation(QUEUE + "/claims/{claim_id}", ["DELETE"],
                                  queue_name="queue_name", claim_id="claim_id"),
    "rel/subscriptions_get": _relation(QUEUE + "/subscriptions{?marker,limit}", ["GET"],
                                       queue_name="queue_name", marker="marker",
                                       limit="subscription_limit"),
    # Zaqar lists a limit for the POST too, though its template has none.
    "rel/subscriptions_post": _relation(QUEUE + "/subscriptions", ["POST"],
                                        accept_post=True, queue_name="queue_name",
                                        limit="subscription_limit"),
    "rel/subscription": _relation(QUEUE + "/subscriptions/{subscriptions_id}",
                                  ["GET", "DELETE"], queue_name="queue_name",
                                  subscriptions_id="subscriptions_id"),
    "rel/subscription_patch": _relation(QUEUE + "/subscriptions/{subscriptions_id}",
                                        ["PATCH"], accept_post=True,
                                        queue_name="queue_name",
                                        subscriptions_id="subscriptions_id"),
    "rel/ping": _relation("/v2/ping", ["GET"]),
    "rel/health": {"href": "/v2/health", "hints": {"allow": ["GET"], "formats": JSON}},
}}
# Zaqar lets clients keep the home document a day.
HOME_CACHE_CONTROL = ["max-age=86400"]

# The versions document at /, served with 300 Multiple Choices as Zaqar does.
VERSIONS_DOCUMENT = {"versions": [{
    "id": "2",
    "status": "CURRENT",
    "updated": "2014-9-24T04:06:47Z",
    "media-types": [{"base": "application/json",
                     "type": "application/vnd.openstack.messaging-v2+json"}],
    "links": [{"href": "/v2/", "rel": "self"}],
}]}
VERSIONS_JSON = jsontext.response(VERSIONS_DOCUMENT)


HOME_JSON = jsontext.response(HOME_DOCUMENT)


class HomeResource:
    """``/v2``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        # Falcon has no media handler for application/json-home: serialize here.
        resp.data = HOME_JSON
        resp.content_type = "application/json-home"
        resp.cache_control = HOME_CACHE_CONTROL


class VersionsResource:
    """``/``: the API versions this server speaks (v2 only)."""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.status = falcon.HTTP_300
        resp.data = VERSIONS_JSON
        resp.content_type = falcon.MEDIA_JSON


class PingResource:
    """``/v2/ping``: 204 while the storage backend answers, 503 otherwise."""

    def __init__(self, *, broker: Broker) -> None:
        self.broker = broker

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_204 if alive else falcon.HTTP_503

    on_head = on_get


class HealthResource:
    """``/v2/health``: whether the storage backend is reachable, which it is, and how its
    everyday operations fare (Zaqar's ``operation_status``, tried only when it is
    reachable)."""

    def __init__(self, *, broker: Broker, store: str) -> None:
        self.broker = broker
        self.store = store

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_200 if alive else falcon.HTTP_503
        operations = await self.broker.operation_status() if alive else {}
        resp.media = {"storage_reachable": alive, "message_store": self.store,
                      "operation_status": operations}

    async def on_head(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_204 if alive else falcon.HTTP_503
