"""``X-OpenStack-Request-Id`` on every response the app gives, as oslo.middleware's
``request_id`` sets it in Zaqar: a new ``req-<uuid4>`` each request.

An id the client sends in the same header is not echoed: oslo.middleware keeps it apart
as the global request id and answers with its own. The answers the HTTP protocol gives
in the app's place (a request that is not HTTP, headers too large: ``http_protocol``)
never reach the app and carry none, as they never reach Zaqar's middleware.
"""

from __future__ import annotations

import uuid

import falcon.asgi

HEADER = "X-OpenStack-Request-Id"


class RequestIds:
    """Middleware: gives each response its request id."""

    async def process_request(self, req: falcon.asgi.Request,
                              resp: falcon.asgi.Response) -> None:
        # Set first, so that an error raised by any later middleware or responder is
        # answered with it too.
        resp.set_header(HEADER, f"req-{uuid.uuid4()}")
