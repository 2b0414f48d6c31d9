"""Reading requests: headers, query parameters and bounded JSON bodies."""

from __future__ import annotations

from typing import Any

import falcon

from delayq import validation
from delayq.errors import ValidationError

PROJECT_HEADER = "X-Project-ID"
CLIENT_HEADER = "Client-ID"


def project(req: falcon.Request) -> str:
    return validation.project_id(req.get_header(PROJECT_HEADER))


def client(req: falcon.Request) -> str:
    return validation.client_id(req.get_header(CLIENT_HEADER))


async def body(req: falcon.Request, limit: int, what: str) -> tuple[bytes, int]:
    """The raw body, refused unread when it is longer than *limit*; and its length.

    The stream is read at most one byte past *limit*, so a client cannot make the server
    buffer more than the limit whatever Content-Length it claims.
    """
    if req.content_length is not None and req.content_length > limit:
        raise ValidationError(f"The {what} is {req.content_length} bytes; the limit is "
                              f"{limit}.")
    raw = await req.stream.read(limit + 1)
    if len(raw) > limit:
        raise ValidationError(f"The {what} is larger than the limit of {limit} bytes.")
    return raw, len(raw)


async def json_body(req: falcon.Request, limit: int, what: str, *,
                    optional: bool = False) -> Any:
    """The body decoded as JSON; None when it is empty and *optional*."""
    raw, _ = await body(req, limit, what)
    if optional and not raw.strip():
        return None
    return validation.json_document(raw, what)
