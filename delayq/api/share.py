"""``/v2/queues/{name}/share``: pre-signed URLs for a queue (``delayq.signed_urls``)."""

from __future__ import annotations

from typing import Any

import falcon

from delayq import signed_urls, validation
from delayq.api import request, views
from delayq.errors import ValidationError

# A share request is {"paths", "methods", "expires"}: anything much larger is not one.
MAX_SHARE_BODY = 4096
SHARE_KEYS = ("paths", "methods", "expires")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class QueueShareResource:
    """``POST /v2/queues/{name}/share``: sign the queue's messages (or claims) for some
    methods until an expiry; answers Zaqar's document with the signature."""

    def __init__(self, secret_key: str | None) -> None:
        self.secret_key = secret_key

    async def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        document = await request.json_body(req, MAX_SHARE_BODY, "share request",
                                           if_empty={})
        paths, methods, expires = share_options(document)
        base = views.queue_href(name)
        try:
            signed = signed_urls.sign(self.secret_key, [f"{base}/{p}" for p in paths],
                                      project, methods, expires)
        except signed_urls.SigningError as exc:
            raise ValidationError(str(exc)) from None
        resp.media = signed.as_document()


def share_options(document: Any) -> tuple[list[str], list[str] | None, str | None]:
    """The queue sub-resources, methods and expiry a share request asks for (defaults:
    messages, GET, a day)."""
    if not isinstance(document, dict):
        raise ValidationError("The share request must be a JSON object.")
    unknown = sorted(set(document) - set(SHARE_KEYS))
    if unknown:
        raise ValidationError(f"Unknown keys: {', '.join(unknown)[:200]}; a share takes "
                              f"{', '.join(SHARE_KEYS)}.")
    paths = document.get("paths") or ["messages"]
    if (not isinstance(paths, list)
            or not all(p in signed_urls.SHAREABLE_PATHS for p in paths)):
        raise ValidationError("paths must be a list of "
                              f"{', '.join(signed_urls.SHAREABLE_PATHS)}.")
    methods = document.get("methods")
    if methods is not None and (not isinstance(methods, list)
                                or not all(m in METHODS for m in methods)):
        raise ValidationError(f"methods must be a list of {', '.join(METHODS)}.")
    expires = document.get("expires")
    if expires is not None and not isinstance(expires, str):
        raise ValidationError("expires must be a date and time such as "
                              "2030-01-01T00:00:00 (UTC).")
    return list(paths), methods or None, expires
