"""``/v2/queues/{name}/share``: pre-signed URLs for a queue (``delayq.signed_urls``).

A signed request is not checked against the policy, so a share is: with
``auth_strategy = keystone`` it may grant only what its maker may do. Each method on each
path it signs lets through the requests of the routes at that path and below it, each
under one policy rule (``policy.rules_granted``, the mapping the middleware checks
ordinary requests with); the maker's credentials must satisfy every one of them, whatever
the request carries besides (``Policy.allowing_every_request``), or the share is 403.
Without authentication there is no policy, and any share within the limits is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import falcon
import falcon.asgi

from delayq import signed_urls, validation
from delayq.api import policy, request, views
from delayq.errors import Forbidden, ValidationError

# A share request is {"paths", "methods", "expires"}: anything much larger is not one.
MAX_SHARE_BODY = 4096
SHARE_KEYS = ("paths", "methods", "expires")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class QueueShareResource:
    """``POST /v2/queues/{name}/share``: sign the queue's messages (or claims) for some
    methods until an expiry; answers Zaqar's document with the signature.

    *rules* is the policy in force, None without authentication.
    """

    def __init__(self, signing: signed_urls.Settings, rules: policy.Policy | None) -> None:
        self.signing = signing
        self.rules = rules

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                      name: str) -> None:
        project = request.project(req)
        validation.queue_name(name)
        document = await request.json_body(req, MAX_SHARE_BODY, "share request",
                                           if_empty={})
        paths, methods, expires = share_options(document)
        base = views.queue_href(name)
        try:
            signed = signed_urls.sign(self.signing.secret_key,
                                      [f"{base}/{p}" for p in paths], project, methods,
                                      expires, max_lifetime=self.signing.max_lifetime)
        except signed_urls.SigningError as exc:
            raise ValidationError(str(exc)) from None
        if self.rules is not None:
            check_grants(self.rules, req.context.credentials, project, paths,
                         signed.methods)
        resp.media = signed.as_document()


def check_grants(rules: policy.Policy, credentials: Mapping[str, Any] | None,
                 project: str, paths: list[str], methods: list[str]) -> None:
    """Refuse (403) a share of *methods* on the queue's *paths* that grants a request
    *credentials* may not make themselves (module doc)."""
    if credentials is None:
        # Reached with a pre-signed URL that signs the share itself: a URL that made
        # URLs would outlive and outreach whoever signed it.
        raise Forbidden("A pre-signed URL cannot create pre-signed URLs: share with a "
                        "token.")
    for path in paths:
        template = f"{policy.QUEUE}/{path}"
        for method in methods:
            for rule in policy.rules_granted(method, template):
                if not rules.allowing_every_request(rule, credentials, project):
                    raise Forbidden(
                        f"The share would grant {method} on {path}, which the policy "
                        f"does not allow these credentials ({rule}): a share grants only "
                        f"what its maker may do.")


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
