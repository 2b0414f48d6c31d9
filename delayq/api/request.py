"""Reading requests: the app's request type, headers, query parameters and bounded JSON
bodies."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from typing import Any

import falcon
import falcon.asgi

from delayq import validation
from delayq.errors import ValidationError

PROJECT_HEADER = "X-Project-ID"
CLIENT_HEADER = "Client-ID"
# The query parameter naming the claim a message is deleted or handed back under.
CLAIM_ID_PARAM = "claim_id"


class RequestContext(falcon.Context):
    """``req.context``, stamped with the time Falcon built the request (for the latency
    histogram, ``delayq.api.metrics.RequestTimer``).

    Stamped here rather than by a ``process_request`` middleware method, which Falcon
    would await as a coroutine of its own on every request. ``project`` is the project
    authentication settled (``delayq.api.auth``), None when the header names it;
    ``credentials`` the Keystone token's policy values, None without a token.
    """

    project: str | None = None
    credentials: Mapping[str, Any] | None = None

    def __init__(self) -> None:
        self.started = time.perf_counter()


class Request(falcon.asgi.Request):
    """Falcon's request, with delayq's context."""

    __slots__ = ()
    context_type = RequestContext


def project(req: falcon.asgi.Request) -> str:
    """The project the request acts in: the one authentication settled
    (``delayq.api.auth``), else the X-Project-ID header (``header_project``)."""
    settled = req.context.project
    if settled is not None:
        return settled
    return header_project(req)


def header_project(req: falcon.asgi.Request) -> str:
    """The X-Project-ID header, as sent; refused (400) when absent or empty, as Zaqar
    does (``validation.project_id``)."""
    return validation.project_id(req.get_header(PROJECT_HEADER))


def client(req: falcon.asgi.Request, limits: validation.Limits) -> str:
    """The Client-ID header, checked (``validation.client_id``)."""
    return validation.client_id(req.get_header(CLIENT_HEADER), limits)


def media_type(req: falcon.asgi.Request, accepted: tuple[str, ...], what: str) -> None:
    """Refuse (415) a body whose Content-Type is none of *accepted* (parameters and
    letter case aside)."""
    media = (req.content_type or "").split(";")[0].strip().lower()
    if media not in accepted:
        raise falcon.HTTPUnsupportedMediaType(
            description=f"{what} takes Content-Type: {' or '.join(accepted)}.")


def body(req: falcon.asgi.Request, limit: int, what: str) -> Awaitable[bytes]:
    """An awaitable of the raw body, refused unread when it is longer than *limit*.

    At most *limit* bytes are read (one more without a Content-Length), so a client
    cannot make the server buffer more than the limit, whatever it sends. A plain
    function, not a coroutine: a body with a Content-Length (nearly all) is Falcon's
    own read, awaited by the caller with no coroutine of ours around it.
    """
    declared = req.content_length  # parsed from the header at each read
    if declared is not None:
        if declared > limit:
            raise ValidationError(f"The {what} is {declared} bytes; the limit is {limit}.")
        # Falcon's stream ends at the declared length (the server refuses a body that
        # runs past it): reading it all reads at most *limit* bytes.
        return req.stream.readall()
    return _undeclared_body(req, limit, what)


async def _undeclared_body(req: falcon.asgi.Request, limit: int, what: str) -> bytes:
    raw = await req.stream.read(limit + 1)
    if len(raw) > limit:
        raise ValidationError(f"The {what} is larger than the limit of {limit} bytes.")
    return raw


NO_DEFAULT = object()


async def json_body(req: falcon.asgi.Request, limit: int, what: str, *,
                    if_empty: Any = NO_DEFAULT) -> Any:
    """The body decoded as JSON; *if_empty* when the body is empty, if given.

    An empty body and the JSON document ``null`` differ: only the former may stand for
    "use the defaults".
    """
    raw = await body(req, limit, what)
    if if_empty is not NO_DEFAULT and (not raw or raw.isspace()):
        return if_empty
    return validation.json_document(raw, what)
