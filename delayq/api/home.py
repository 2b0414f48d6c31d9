"""Service resources: the home document, ping and health."""

from __future__ import annotations

import falcon
import falcon.asgi

from delayq import jsontext
from delayq.broker import Broker

HOME_DOCUMENT = {
    "resources": {
        "rel/queues": {"href-template": "/v2/queues{?marker,limit,detailed}",
                       "href-vars": {"marker": "param/marker", "limit": "param/queue_limit",
                                     "detailed": "param/detailed"},
                       "hints": {"allow": ["GET"], "formats": {"application/json": {}}}},
        "rel/queue": {"href-template": "/v2/queues/{queue_name}",
                      "href-vars": {"queue_name": "param/queue_name"},
                      "hints": {"allow": ["PUT", "GET", "PATCH", "DELETE"],
                                "formats": {"application/json": {}}}},
        "rel/queue_stats": {"href-template": "/v2/queues/{queue_name}/stats",
                            "href-vars": {"queue_name": "param/queue_name"},
                            "hints": {"allow": ["GET"], "formats": {"application/json": {}}}},
        "rel/messages": {"href-template": "/v2/queues/{queue_name}/messages"
                                          "{?marker,limit,echo,include_claimed,include_delayed}",
                         "href-vars": {"queue_name": "param/queue_name"},
                         "hints": {"allow": ["GET", "POST", "DELETE"],
                                   "formats": {"application/json": {}}}},
        "rel/claim": {"href-template": "/v2/queues/{queue_name}/claims{?limit}",
                      "href-vars": {"queue_name": "param/queue_name"},
                      "hints": {"allow": ["POST"], "formats": {"application/json": {}}}},
        "rel/ping": {"href-template": "/v2/ping", "hints": {"allow": ["GET", "HEAD"]}},
        "rel/health": {"href-template": "/v2/health", "hints": {"allow": ["GET", "HEAD"]}},
    }
}


HOME_JSON = jsontext.response(HOME_DOCUMENT)


class HomeResource:
    """``/v2``"""

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        # Falcon has no media handler for application/json-home: serialize here.
        resp.data = HOME_JSON
        resp.content_type = "application/json-home"


class PingResource:
    """``/v2/ping``: 204 while the storage backend answers, 503 otherwise."""

    def __init__(self, *, broker: Broker) -> None:
        self.broker = broker

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_204 if alive else falcon.HTTP_503

    on_head = on_get


class HealthResource:
    """``/v2/health``: whether the storage backend is reachable, and which it is."""

    def __init__(self, *, broker: Broker, store: str) -> None:
        self.broker = broker
        self.store = store

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_200 if alive else falcon.HTTP_503
        resp.media = {"storage_reachable": alive, "message_store": self.store}

    async def on_head(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        alive = await self.broker.ping()
        resp.status = falcon.HTTP_204 if alive else falcon.HTTP_503
