"""How errors become HTTP responses: always JSON ``{"title", "description"}``."""

from __future__ import annotations

import logging

import falcon
import falcon.asgi

from delayq import errors, jsontext

LOG = logging.getLogger(__name__)

STATUS: dict[type[errors.DelayqError], tuple[str, str]] = {
    errors.ValidationError: (falcon.HTTP_400, "Invalid API request"),
    errors.EncryptionUnavailable: (falcon.HTTP_400, "Encryption unavailable"),
    errors.BodyUndecryptable: (falcon.HTTP_503, "Message body undecryptable"),
    errors.QueueNotFound: (falcon.HTTP_404, "Not found"),
    errors.TopicNotFound: (falcon.HTTP_404, "Not found"),
    errors.MessageNotFound: (falcon.HTTP_404, "Not found"),
    errors.ClaimNotFound: (falcon.HTTP_404, "Not found"),
    errors.SubscriptionNotFound: (falcon.HTTP_404, "Not found"),
    errors.MessageIsClaimed: (falcon.HTTP_403, "Unable to delete"),
    errors.ClaimMismatch: (falcon.HTTP_403, "Unable to delete"),
    errors.MessageNotClaimed: (falcon.HTTP_400, "Unable to delete"),
    errors.ClaimUnknown: (falcon.HTTP_400, "Unable to delete"),
    errors.QuotaExceeded: (falcon.HTTP_403, "Quota exceeded"),
    errors.KeyReused: (falcon.HTTP_422, "Idempotency key reused"),
    errors.Conflict: (falcon.HTTP_409, "Conflict"),
    errors.NotAuthenticated: (falcon.HTTP_401, "Unauthorized"),
    errors.Forbidden: (falcon.HTTP_403, "Forbidden"),
    errors.SignatureRefused: (falcon.HTTP_404, "Not found"),
    errors.IdentityUnavailable: (falcon.HTTP_503, "Service temporarily unavailable"),
    errors.NameServiceUnavailable: (falcon.HTTP_503, "Service temporarily unavailable"),
    errors.StorageUnavailable: (falcon.HTTP_503, "Service temporarily unavailable"),
}


def status_of(exc: errors.DelayqError) -> tuple[str, str]:
    """The status and title of the nearest kind of error STATUS names (a MessageHeld is a
    Conflict, a MetadataChanged a StorageUnavailable)."""
    for kind in type(exc).__mro__:
        if kind in STATUS:
            return STATUS[kind]
    return falcon.HTTP_500, "Internal server error"


def unavailable_description(store: str) -> str:
    """All a 503 says of its store: which one it is. What failed, where and why (hosts,
    ports, paths, topology, the store's own error text) goes to the server's log only."""
    return f"The message store ({store}) is temporarily unavailable; retry the request later."


def log_unavailable(req: falcon.asgi.Request, exc: errors.StorageUnavailable) -> None:
    """The private side of a 503: the store, the request, and what failed."""
    LOG.warning("The %s message store is unavailable (%s %s): %s", exc.store, req.method,
                req.path, exc.detail)


async def handle_delayq_error(req: falcon.asgi.Request, resp: falcon.asgi.Response,
                              exc: errors.DelayqError, params: dict) -> None:
    status, title = status_of(exc)
    description = exc.description
    if isinstance(exc, errors.StorageUnavailable):
        log_unavailable(req, exc)
        description = unavailable_description(exc.store)
    headers = None
    if isinstance(exc, errors.NotAuthenticated) and exc.challenge:
        headers = {"WWW-Authenticate": exc.challenge}
    raise falcon.HTTPError(status, title=exc.title or title, description=description,
                           headers=headers)


async def handle_unexpected(req: falcon.asgi.Request, resp: falcon.asgi.Response, exc: Exception,
                            params: dict) -> None:
    if isinstance(exc, falcon.HTTPError):
        raise exc
    LOG.exception("Unexpected error serving %s %s", req.method, req.path)
    raise falcon.HTTPInternalServerError(
        title="Internal server error",
        description="The server failed to complete the request; it has been logged.")


# Falcon's own errors (unknown route, wrong method) carry a title only.
FRAMEWORK_DESCRIPTIONS = {
    404: "There is no such resource in the v2 API.",
    405: "The resource does not support this method.",
}


def serialize(req: falcon.asgi.Request, resp: falcon.asgi.Response, exc: falcon.HTTPError) -> None:
    """Every error as JSON ``{"title", "description"}``, whatever the client accepts."""
    status = exc.status_code
    title = exc.title or falcon.code_to_http_status(status)
    if title.startswith(str(status)):  # Falcon's default titles repeat the status line
        title = title[len(str(status)):].strip()
    description = exc.description or FRAMEWORK_DESCRIPTIONS.get(status, title)
    resp.content_type = falcon.MEDIA_JSON
    resp.data = jsontext.response({"title": title, "description": description})


def install(app: falcon.asgi.App) -> None:
    """Register the handlers (the more specific one last) and the serializer."""
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(errors.DelayqError, handle_delayq_error)
    app.set_error_serializer(serialize)
