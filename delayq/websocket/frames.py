"""Zaqar's WebSocket frames (``zaqar.common.api.request`` and ``response``).

A request frame is an object ``{"action", "headers", "body"}``; the answer echoes it as
``{"request": {"action", "body", "headers", "api": "v2"}, "headers": {"status": N},
"body": ...}``. Text frames carry JSON, binary frames MessagePack, and each request is
answered in its own kind, as Zaqar does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from delayq import jsontext

API = "v2"
STATUS = "status"
# Zaqar's own wording, which clients may match on.
NOT_A_DICT = "Unexpected body type. Expected dict or dict like."
SCHEMA_FAILED = "Schema validation failed."


@dataclass(frozen=True)
class Request:
    """A decoded request frame; *binary* when it came as MessagePack."""

    action: Any = None
    headers: dict[str, Any] = field(default_factory=dict)
    body: Any = field(default_factory=dict)
    binary: bool = False

    def echo(self) -> dict[str, Any]:
        """The ``request`` member of the answer."""
        return {"action": self.action, "body": self.body, "headers": self.headers,
                "api": API}


class Undecodable(Exception):
    """A frame that is no request: answered 400 with *message*, in the frame's kind."""

    def __init__(self, message: str, binary: bool) -> None:
        super().__init__(message)
        self.message = message
        self.binary = binary


def decode(payload: str | bytes) -> Request:
    """The request a frame holds: text is JSON, binary is MessagePack."""
    binary = isinstance(payload, bytes)
    try:
        document = (msgpack.unpackb(payload) if isinstance(payload, bytes)
                    else jsontext.loads_strict(payload))
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the client's
        kind = "binary (MessagePack)" if binary else "text (JSON)"
        raise Undecodable(f"Can't decode {kind} request. {type(exc).__name__}: {exc}",
                          binary) from None
    if not isinstance(document, dict):
        raise Undecodable(NOT_A_DICT, binary)
    headers = document.get("headers")
    body = document.get("body", {})
    return Request(action=document.get("action"),
                   headers=headers if isinstance(headers, dict) else {},
                   body=body, binary=binary)


def response(request: Request, status: int, body: Any) -> dict[str, Any]:
    """An answer frame's document."""
    return {"request": request.echo(), "headers": {STATUS: status}, "body": body}


def encode(document: dict[str, Any], binary: bool) -> str | bytes:
    """A frame of *document*: MessagePack for a binary request, JSON text otherwise."""
    if binary:
        return msgpack.packb(document)
    return jsontext.response(document).decode()


def error_body(description: str, title: str | None = None) -> dict[str, Any]:
    """Zaqar's error body: ``error`` says what went wrong (python-zaqarclient shows it
    as the error's description); ``exception`` names the kind, where there is one."""
    body: dict[str, Any] = {"error": description}
    if title is not None:
        body["exception"] = title
    return body
