"""The WebSocket route: accepts a socket within the worker's cap and serves its frames,
one at a time, until it closes, idles out, floods, or its authentication expires.

A ``subscription_create`` without a subscriber subscribes the socket itself, as in
Zaqar, and so does a ``topic_subscription_create`` without one: messages are pushed down
it (``delayq.push.sockets``, ``pushed``) until it closes, when its subscriptions are
deleted."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import falcon
import falcon.asgi
import falcon.media
from falcon.constants import WebSocketPayloadType

from delayq.api import auth
from delayq.api.subscriptions import SOCKET_SUBSCRIBER
from delayq.offload import Offload
from delayq.push.sockets import SocketPushes
from delayq.websocket import actions, dispatch, frames, limits
from delayq.websocket.pushed import SocketSide
from delayq.websocket.session import EXPIRED, EXPIRED_CODE, NOT_AUTHENTIFIED, Session

LOG = logging.getLogger(__name__)

FLOOD = "Too many frames: the socket sends faster than the server allows."
IDLE = "Idle for too long."


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
                 tokens: auth.KeystoneTokens | None, offload: Offload,
                 socket_pushes: SocketPushes) -> None:
        self.app = app
        self.socket_pushes = socket_pushes
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
        session = Session(self.tokens, self.offload)
        side = SocketSide(ws, self.socket_pushes)
        try:
            await ws.accept()
            side.open()
            await self.serve(req, ws, session, side)
        except falcon.WebSocketDisconnected:
            pass
        finally:
            try:
                await self._unsubscribe(req, session, side)
            finally:
                self.sockets.release()

    async def _unsubscribe(self, req: falcon.asgi.Request, session: Session,
                           side: SocketSide) -> None:
        """Delete the socket's own subscriptions, as Zaqar does when a socket closes:
        nobody can be pushed to through them any more. One that cannot be deleted now
        takes no message (no process holds its socket) and lapses with its ttl."""
        for made in side.close():
            http = actions.http_request(actions.ACTIONS[made.delete_action], made.body)
            try:
                answer = await dispatch.call(self.app, req.scope, http, made.headers,
                                             session.credentials)
            except Exception:  # noqa: BLE001 - the others are still deleted
                LOG.exception("Cannot delete the subscription %s of a closed socket",
                              made.body["subscription_id"])
                continue
            if answer.status >= 300:
                LOG.warning("Cannot delete the subscription %s of a closed socket: %s",
                            made.body["subscription_id"], answer.status)

    async def serve(self, req: falcon.asgi.Request, ws: falcon.asgi.WebSocket,
                    session: Session, side: SocketSide) -> None:
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
            document = await self.answer(req, session, payload, side)
            await side.write(document, binary)

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
                     payload: str | bytes, side: SocketSide) -> dict[str, Any]:
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
        if (request.action in actions.SUBSCRIPTION_DELETE
                and isinstance(request.body, dict) and not request.body.get("subscriber")):
            document = await self.serve_action(req, session, request, action,
                                               {SOCKET_SUBSCRIBER: side.subscriber})
            side.subscribed(request, document["headers"][frames.STATUS], document["body"])
            return document
        document = await self.serve_action(req, session, request, action)
        side.answered(request, document["headers"][frames.STATUS])
        return document

    async def serve_action(self, req: falcon.asgi.Request, session: Session,
                           request: frames.Request, action: actions.Action,
                           extra_scope: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            http = actions.http_request(action, request.body)
        except actions.FrameInvalid as exc:
            return frames.response(request, 400,
                                   frames.error_body(exc.detail, exc.message))
        answer = await dispatch.call(self.app, req.scope, http, request.headers,
                                     session.credentials, extra_scope)
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
