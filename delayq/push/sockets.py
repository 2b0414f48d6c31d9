"""Pushes down a WebSocket: the subscriber that is the socket itself.

In Zaqar a ``subscription_create`` frame without a subscriber subscribes the socket: the
subscriber stored is a URL naming the socket, and each message is sent down it as a
frame holding the message as Zaqar's webhook posts it (``delayq.push.webhook.payload``),
in the kind (JSON text or MessagePack) of that ``subscription_create``. delayq stores
such a subscription as any other, its subscriber ``ws://socket.delayq/<socket id>``
(``SCHEME_PREFIX``), and pushes to it by the pusher's own claims: a message is claimed
for the subscription when it is due, never before, sent down the socket, deleted on
success and handed back (``Broker.push_failed``) on failure, due again after the retry
policy's wait and dead-lettered after ``_max_claim_count``.

Success is the client's acknowledgement, which Zaqar's protocol lacks: the frame also
carries its ``claim_id``, and the client acknowledges by deleting the message with it
(a ``message_delete`` frame with ``message_id`` and ``claim_id``) on the same socket
within ``[notification] push_timeout``. Until then the message stays claimed: a
socket that drops, or a client that never acknowledges, has it handed back, so that a
message is delivered at least once and deleted only once a client has it.

Only the process holding a socket can write to it, and a socket's id is a random UUID:
each process's pusher serves the socket subscriptions of its own sockets
(``holds``) and skips the others', so no message is claimed for a socket by a
process that cannot send it. A socket's subscriptions are deleted when it closes; those
of a killed worker stay, served by nobody, until their ttl ends, and take no message.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from delayq.message import Message
from delayq.push.webhook import payload
from delayq.subscription import Subscription

LOG = logging.getLogger(__name__)

SCHEME_PREFIX = "ws://socket.delayq/"
CLAIM_ID = "claim_id"  # the member of a pushed frame the acknowledgement quotes

# Sends one pushed document down the socket, in the kind its subscription chose.
Send = Callable[[dict[str, Any]], Awaitable[None]]
_Key = tuple[str, str]  # (message id, claim id)


def is_socket(subscriber: str) -> bool:
    return subscriber.startswith(SCHEME_PREFIX)


def subscriber_of(socket_id: str) -> str:
    return SCHEME_PREFIX + socket_id


def new_socket_id() -> str:
    return str(uuid.uuid4())


@dataclass
class _Socket:
    send: Send
    waiting: dict[_Key, asyncio.Future[bool]] = field(default_factory=dict)


class SocketPushes:
    """This process's sockets that may be pushed to, and their unacknowledged pushes."""

    def __init__(self) -> None:
        self._sockets: dict[str, _Socket] = {}

    def open(self, socket_id: str, send: Send) -> None:
        """Socket *socket_id* may be pushed to, through *send*."""
        self._sockets[socket_id] = _Socket(send)

    def close(self, socket_id: str) -> None:
        """The socket is gone: its pushes awaiting acknowledgement fail (handed back)."""
        socket = self._sockets.pop(socket_id, None)
        if socket is None:
            return
        for waiter in socket.waiting.values():
            if not waiter.done():
                waiter.set_result(False)

    def holds(self, subscriber: str) -> bool:
        """Whether *subscriber* is a socket of this process."""
        return is_socket(subscriber) and subscriber[len(SCHEME_PREFIX):] in self._sockets

    def acknowledge(self, socket_id: str, message_id: str, claim_id: str) -> None:
        """The client of *socket_id* deleted *message_id* under *claim_id*."""
        socket = self._sockets.get(socket_id)
        waiter = socket.waiting.get((message_id, claim_id)) if socket else None
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def push(self, subscription: Subscription, queue: str, message: Message,
                   claim_id: str, timeout: float) -> bool:
        """Send *message* down the subscription's socket; whether the client
        acknowledged it within *timeout*. False at once for a socket gone."""
        socket = self._sockets.get(subscription.subscriber[len(SCHEME_PREFIX):])
        if socket is None:
            return False
        key = (message.id, claim_id)
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        socket.waiting[key] = waiter
        try:
            await socket.send({**payload(queue, message), CLAIM_ID: claim_id})
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            LOG.info("Push of message %s of queue %s down socket %s: not acknowledged "
                     "within %g s", message.id, queue, subscription.subscriber, timeout)
            return False
        except Exception as exc:  # noqa: BLE001 - a socket that fails is a failed push
            LOG.info("Push of message %s of queue %s down socket %s failed: %s",
                     message.id, queue, subscription.subscriber, exc)
            return False
        finally:
            socket.waiting.pop(key, None)
