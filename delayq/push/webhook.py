"""The webhook request: one message POSTed to a subscription's subscriber, as Zaqar's
webhook notifier makes it.

The body is the message as JSON, with the queue's name as ``queue_name`` and
``"Message_Type": "Notification"`` added, as Zaqar sends them; it carries the message's
``id``, so a receiver can tell a message pushed again (delivery is at least once) from a
new one. The subscription's ``post_data`` option, when set, is the body instead, with
``"$zaqar_message$"`` (the quotes included) replaced by that JSON; its ``post_headers``
are sent on top of ``Content-Type: application/json``.

A push is delivered when the subscriber answers 2xx. Any other answer (a redirect
among them: it is not followed), no answer within the timeout, no connection, or a
subscriber at an address pushes may not reach (``delayq.push.targets``) is a failed
delivery.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from delayq import jsontext
from delayq.message import Message
from delayq.push.targets import TargetRefused, Targets
from delayq.subscription import Subscription

LOG = logging.getLogger(__name__)

MESSAGE_PLACEHOLDER = '"$zaqar_message$"'
NOTIFICATION = "Notification"  # Zaqar's MessageType.Notification
MAX_ANSWER_READ = 65536  # bytes of a subscriber's answer read before its connection goes


def payload(queue: str, message: Message) -> dict[str, Any]:
    """The message as a push carries it."""
    return {"id": message.id, "body": message.body, "ttl": message.ttl, "age": message.age,
            "claim_count": message.claim_count, "queue_name": queue,
            "Message_Type": NOTIFICATION}


def request_body(subscription: Subscription, document: dict[str, Any]) -> bytes:
    """The bytes POSTed: *document* (a message's payload, or a confirmation request)
    as JSON, or the subscription's ``post_data`` around it, as Zaqar applies it to
    both."""
    text = jsontext.response(document).decode()
    template = subscription.options.get("post_data")
    if template is not None:
        text = template.replace(MESSAGE_PLACEHOLDER, text)
    return text.encode()


def request_headers(subscription: Subscription) -> dict[str, str]:
    return {"Content-Type": "application/json",
            **subscription.options.get("post_headers", {})}


class Webhooks:
    """Pushes over one connection pool, made on the running event loop; ``close`` when
    done. aiohttp makes the requests: a push costs it a tenth of the CPU httpx takes
    (docs/performance.md, "Push delivery"). Its connections go only where *targets*
    allows: the resolver refuses a host with any address outside, and every socket is
    checked against the address it connects to. They go straight to the subscriber:
    proxies named by the environment (``HTTPS_PROXY``, ...) are not used, since a proxy
    would resolve the subscriber's name again, unchecked."""

    def __init__(self, timeout: float, connections: int, targets: Targets) -> None:
        self.timeout = timeout
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, resolver=targets.resolver(),
                                           socket_factory=targets.socket_factory),
            timeout=aiohttp.ClientTimeout(total=timeout), trust_env=False)

    async def push(self, subscription: Subscription, queue: str, message: Message) -> bool:
        """POST *message* to *subscription*'s subscriber; whether it answered 2xx within
        the timeout."""
        return await self.post(subscription, payload(queue, message),
                               f"Push of message {message.id} of queue {queue}")

    async def post(self, subscription: Subscription, document: dict[str, Any],
                   what: str) -> bool:
        """POST *document* to *subscription*'s subscriber; whether it answered 2xx
        within the timeout. *what* names it in the log."""
        try:
            status = await self._post(subscription, request_body(subscription, document))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else None
            if isinstance(cause, TargetRefused):
                LOG.warning("%s to %s refused: %s", what, subscription.subscriber,
                            cause.strerror)
            else:
                LOG.info("%s to %s failed: %s", what, subscription.subscriber,
                         str(exc) or type(exc).__name__)
            return False
        if 200 <= status < 300:
            return True
        LOG.info("%s to %s answered %s", what, subscription.subscriber, status)
        return False

    async def _post(self, subscription: Subscription, content: bytes) -> int:
        async with self._session.post(subscription.subscriber, data=content,
                                      headers=request_headers(subscription),
                                      allow_redirects=False) as response:
            # An answer read to its end leaves its connection to the next push; one
            # longer than this is cut off with its connection, never held in memory.
            read = 0
            async for chunk in response.content.iter_chunked(MAX_ANSWER_READ):
                read += len(chunk)
                if read > MAX_ANSWER_READ:
                    response.close()
                    break
            return response.status

    async def close(self) -> None:
        await self._session.close()
