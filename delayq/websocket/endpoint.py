"""The WebSocket route: accepts a socket within the worker's cap and serves its frames,
one at a time, until it closes, idles out, floods, or its authentication expires."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import falcon
import falcon.asgi
import falcon.media
from falcon.constants import WebSocketPayloadType

from delayq.api import auth
from delayq.offload import Offload
from delayq.websocket import actions, dispatch, frames, limits
from delayq.websocket.session import EXPIRED, EXPIRED_CODE, NOT_AUTHENTIFIED, Session

LOG = logging.getLogger(__name__)

FLOOD = "Too many frames: the socket sends faster than the server allows."
IDLE = "Idle for too long."
# Until the server pushes messages down a socket (a subscription without a subscriber,
# in Zaqar), such a subscription is refused rather than made with nobody to push to.
NO_SOCKET_SUBSCRIBER = ("A subscription needs a subscriber: this server does not push "
                        "messages down the socket yet.")


class _Passthrough(falcon.media.TextBaseHandlerWS):
    """Hands a text frame over undecoded: ``frames`` decodes it, and answers a frame
    that is no JSON with Zaqar's error frame rather than a closed socket."""

    def deserialize(self, payload: str) -> object:
        return payload


class _BinaryPassthrough(falcon.media.BinaryBaseHandlerWS):
    def deserialize(self, payload: bytes) -> object:
        return payload


def install_media_handlers(app: falcon.asgi.App) -> None:
    """Let ``receive_media`` give frames as they came, text or binary."""
    app.ws_options.media_handlers[WebSocketPayloadType.TEXT] = _Passthrough()
    app.ws_options.media_handlers[WebSocketPayloadType.BINARY] = _BinaryPassthrough()


class WebSocketEndpoint:
    """``[drivers:transport:websocket] path``: Zaqar's WebSocket API over the app."""

    def __init__(self, *, app: dispatch.AsgiApp, socket_limits: limits.SocketLimits,
                 tokens: auth.KeystoneTokens | None, offload: Offload) -> None:
        self.app = app
        self.limits = socket_limits
        self.tokens = tokens
        self.offload = offload
        self.sockets = limits.SocketCount(socket_limits.max_sockets)

    async def on_websocket(self, req: falcon.asgi.Request, ws: falcon.asgi.WebSocket) -> None:
        if not self.sockets.admit():
            # Refused before the handshake completes: the client sees HTTP 403.
            LOG.warning("WebSocket refused: the worker holds its maximum of %d sockets",
                        self.sockets.maximum)
            await ws.close(limits.TRY_AGAIN_LATER)
            return
        try:
            await ws.accept()
            await self.serve(req, ws)
        except falcon.WebSocketDisconnected:
            pass
        finally:
            self.sockets.release()

    async def serve(self, req: falcon.asgi.Request, ws: falcon.asgi.WebSocket) -> None:
        session = Session(self.tokens, self.offload)
        rate = limits.FrameRate(self.limits.max_frames_per_second)
        while True:
            payload = await self._next_frame(ws, session)
            if payload is None:
                return
            if session.expired():
                await ws.close(EXPIRED_CODE, EXPIRED)
                return
            if not rate.take():
                await ws.close(limits.POLICY_VIOLATION, FLOOD)
                return
            binary = isinstance(payload, bytes)
            document = await self.answer(req, session, payload)
            encoded = frames.encode(document, binary)
            if isinstance(encoded, bytes):
                await ws.send_data(encoded)
            else:
                await ws.send_text(encoded)

    async def _next_frame(self, ws: falcon.asgi.WebSocket,
                          session: Session) -> str | bytes | None:
        """The next frame; None once the socket is closed for idling or expiry."""
        timeout = self.limits.idle_timeout
        left = session.seconds_left()
        expiring = left is not None and left < timeout
        try:
            payload = await asyncio.wait_for(
                ws.receive_media(), max(left, 0) if expiring and left is not None else timeout)
        except TimeoutError:
            if expiring:
                await ws.close(EXPIRED_CODE, EXPIRED)
            else:
                await ws.close(limits.NORMAL, IDLE)
            return None
        assert isinstance(payload, str | bytes)  # the pass-through handlers'
        return payload

    async def answer(self, req: falcon.asgi.Request, session: Session,
                     payload: str | bytes) -> dict[str, Any]:
        """The answer frame's document for one frame."""
        try:
            request = frames.decode(payload)
        except frames.Undecodable as exc:
            return frames.response(frames.Request(binary=exc.binary), 400,
                                   frames.error_body(exc.message))
        if request.action == actions.AUTHENTICATE:
            status, body = await session.authenticate(request.headers)
            return frames.response(frames.Request(action=actions.AUTHENTICATE), status,
                                   body)
        action = actions.ACTIONS.get(request.action) if isinstance(
            request.action, str) else None
        if action is None:
            return frames.response(request, 400,
                                   frames.error_body(actions.not_an_action(request.action)))
        if not session.admits(request.headers):
            return frames.response(request, 403, frames.error_body(NOT_AUTHENTIFIED))
        if (request.action == actions.SUBSCRIPTION_CREATE and isinstance(request.body, dict)
                and not request.body.get("subscriber")):
            return frames.response(request, 400, frames.error_body(NO_SOCKET_SUBSCRIBER))
        return await self.serve_action(req, session, request, action)

    async def serve_action(self, req: falcon.asgi.Request, session: Session,
                           request: frames.Request, action: actions.Action
                           ) -> dict[str, Any]:
        try:
            http = actions.http_request(action, request.body)
        except actions.FrameInvalid as exc:
            return frames.response(request, 400,
                                   frames.error_body(exc.detail, exc.message))
        answer = await dispatch.call(self.app, req.scope, http, request.headers,
                                     session.credentials)
        if answer.status >= 400:
            return frames.response(request, answer.status, error_of(answer.document))
        body = request.body if isinstance(request.body, dict) else {}
        return frames.response(request, answer.status,
                               action.answer(body, answer.document, answer.location))


def error_of(document: Any) -> dict[str, Any]:
    """Zaqar's error body from the HTTP API's ``{"title", "description"}``: the one
    place HTTP errors become socket errors, so that statuses stay the HTTP API's."""
    if isinstance(document, dict):
        description = document.get("description")
        title = document.get("title")
        return frames.error_body(str(description or title or "Error."),
                                 str(title) if title else None)
    return frames.error_body("Error.")
