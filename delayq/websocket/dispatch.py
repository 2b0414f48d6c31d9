"""Calling the app in-process: one HTTP request of an action, as an ASGI call.

The request carries the socket's own connection facts (client, server, scheme) and the
frame's headers, so that the app sees what an HTTP client on the same connection would
send. Credentials a socket's ``authenticate`` settled travel in the scope
(``delayq.api.auth.SOCKET_CREDENTIALS``), where no client can put them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from delayq import jsontext
from delayq.api import auth
from delayq.websocket.actions import HttpRequest

AsgiApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

# Headers the frame may not set: they describe the HTTP message, which is ours.
OWN_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding",
                         "connection", "upgrade", "expect"})


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    document: Any  # the JSON answer decoded; None when it has no content
    location: str | None


def headers_of(frame_headers: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """The frame's headers as ASGI headers: string values only, without those
    ``OWN_HEADERS`` names."""
    headers = []
    for name, value in frame_headers.items():
        if (isinstance(name, str) and isinstance(value, str)
                and name.lower() not in OWN_HEADERS):
            headers.append((name.lower().encode("latin-1", "replace"),
                            value.encode("latin-1", "replace")))
    return headers


async def call(app: AsgiApp, socket_scope: Mapping[str, Any], request: HttpRequest,
               frame_headers: Mapping[str, Any],
               credentials: Mapping[str, Any] | None,
               extra_scope: Mapping[str, Any] | None = None) -> HttpAnswer:
    """The app's answer to *request*, made on the socket of *socket_scope*; *extra_scope*
    holds what the endpoint tells the app beside the request (a socket's subscriber)."""
    headers = headers_of(frame_headers)
    headers.append((b"content-type", request.content_type.encode()))
    headers.append((b"content-length", str(len(request.content)).encode()))
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": request.method,
        "scheme": "https" if socket_scope.get("scheme") == "wss" else "http",
        "path": request.path, "raw_path": request.path.encode(),
        "query_string": request.query_string, "root_path": socket_scope.get("root_path", ""),
        "headers": headers, "client": socket_scope.get("client"),
        "server": socket_scope.get("server"),
    }
    if credentials is not None:
        scope[auth.SOCKET_CREDENTIALS] = credentials
    scope.update(extra_scope or {})
    answer = _Collected()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": request.content, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = message.get("headers", [])
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")

    await app(scope, receive, send)
    location = next((value.decode("latin-1") for name, value in answer.headers
                     if name.lower() == b"location"), None)
    body = bytes(answer.body)
    return HttpAnswer(answer.status, jsontext.loads(body.decode()) if body.strip() else None,
                      location)


class _Collected:
    """What the app sent."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
