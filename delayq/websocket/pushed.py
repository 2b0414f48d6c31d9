"""One socket's side of the messages pushed down it (``delayq.push.sockets``): its
subscriptions, the kind its pushed frames take, its acknowledgements, and the frames
written from the pusher's tasks beside the answers of the socket's own task.

As Zaqar does, pushed frames take the kind (JSON text or MessagePack) of the socket's
last ``subscription_create`` that made a socket subscription, and the socket's
subscriptions are deleted when it closes. A ``topic_subscription_create`` without a
subscriber (delayq's topics) subscribes the socket to the topic the same way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import falcon.asgi

from delayq.push.sockets import SocketPushes, new_socket_id, subscriber_of
from delayq.websocket import actions, frames

ACKNOWLEDGING_ACTION = "message_delete"


@dataclass(frozen=True)
class MadeSubscription:
    """A socket subscription to delete when the socket closes: the action deleting it,
    that action's body, and the headers (the project) it was made under."""

    delete_action: str
    body: dict[str, str]
    headers: dict[str, Any]


class SocketSide:
    """What one socket keeps of its pushes; ``open`` it once accepted, ``close`` it
    when the socket ends."""

    def __init__(self, ws: falcon.asgi.WebSocket, pushes: SocketPushes) -> None:
        self.ws = ws
        self.pushes = pushes
        self.socket_id = new_socket_id()
        self.binary = False
        self.made: list[MadeSubscription] = []
        # The socket's own answers and the pusher's frames are written by different
        # tasks: one frame at a time.
        self._writing = asyncio.Lock()

    @property
    def subscriber(self) -> str:
        return subscriber_of(self.socket_id)

    def open(self) -> None:
        self.pushes.open(self.socket_id, self._push)

    def close(self) -> list[MadeSubscription]:
        """Stop pushing to the socket (what awaits acknowledgement is handed back); the
        subscriptions to delete."""
        self.pushes.close(self.socket_id)
        made, self.made = self.made, []
        return made

    async def write(self, document: dict[str, Any], binary: bool) -> None:
        encoded = frames.encode(document, binary)
        async with self._writing:
            if isinstance(encoded, bytes):
                await self.ws.send_data(encoded)
            else:
                await self.ws.send_text(encoded)

    async def _push(self, document: dict[str, Any]) -> None:
        await self.write(document, self.binary)

    def subscribed(self, request: frames.Request, status: int, answer: Any) -> None:
        """A ``subscription_create`` or ``topic_subscription_create`` of the socket
        itself was answered *status*."""
        if (status != 201 or not isinstance(answer, dict)
                or not isinstance(request.body, dict)
                or request.action not in actions.SUBSCRIPTION_DELETE):
            return
        self.binary = request.binary
        delete_action, name = actions.SUBSCRIPTION_DELETE[request.action]
        self.made.append(MadeSubscription(
            delete_action, {name: str(request.body.get(name)),
                            "subscription_id": str(answer.get("subscription_id"))},
            dict(request.headers)))

    def answered(self, request: frames.Request, status: int) -> None:
        """A frame was answered *status*: a message deleted with its claim id
        acknowledges the push of that message."""
        body = request.body
        if (request.action != ACKNOWLEDGING_ACTION or status >= 300
                or not isinstance(body, dict)):
            return
        message_id, claim_id = body.get("message_id"), body.get("claim_id")
        if isinstance(message_id, str) and isinstance(claim_id, str):
            self.pushes.acknowledge(self.socket_id, message_id, claim_id)
