"""Confirmation requests: what a subscriber is sent, under ``[notification]
require_confirmation``, when its subscription is made (or moved to it) and when it is
unconfirmed, as Zaqar's notifier sends them.

The request is a JSON document POSTed like a push (the subscription's ``post_data`` and
``post_headers`` apply), never a message of the queue: it is sent once, when the API
answers, and is not retried; a subscriber that missed it is sent another by creating the
subscription again (Zaqar's way) or by unconfirming it. It carries Zaqar's fields:

- ``Message_Type``: ``SubscriptionConfirmation``, or ``UnsubscribeConfirmation`` when
  the subscription was unconfirmed; ``Message``: a sentence saying so;
- a pre-signed URL (``delayq.signed_urls``) allowing ``PUT`` on the subscription's
  confirm path in the project, ``/v2/queues/{queue}/subscriptions/{id}/confirm``, or
  ``/v2/topics/{topic}/subscriptions/{id}/confirm`` for a topic's: ``URL-Signature``,
  ``URL-Methods``, ``URL-Paths``, ``URL-Expires`` and ``X-Project-ID``, which the
  subscriber sends back as headers with ``SubscribeBody`` (``{"confirmed": true}``) or
  ``UnsubscribeBody`` as the body; ``WSGISubscribeURL``, that path on the API's address
  as the request creating the subscription reached it;
- ``queue_name``: the queue's name, or the topic's.

Zaqar's notifier words a topic's request as a queue's ("subscribe to the queue: <name>"),
and so does delayq; but where Zaqar signs the queue path ``/v2/queues/<topic>/...`` for it
(its topic subscriptions are stored with its queues'), delayq signs the topic's own
confirm path, as its topics are apart from its queues: the URL confirms the topic's
subscription and nothing of a queue of the same name.

The URL lives as long as the subscription, or ``[signed_url] max_expires`` if that is
shorter. Without ``[signed_url] secret_key`` nothing can be signed, and, as in Zaqar, no
confirmation request is sent (logged): the project can still confirm with its own
credentials.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from delayq import signed_urls
from delayq.push import mail
from delayq.push.targets import Targets
from delayq.push.webhook import Webhooks
from delayq.subscription import Subscription

LOG = logging.getLogger(__name__)

SUBSCRIPTION_CONFIRMATION = "SubscriptionConfirmation"  # Zaqar's MessageType names
UNSUBSCRIBE_CONFIRMATION = "UnsubscribeConfirmation"
# The collections a subscription's source is in: /v2/queues or /v2/topics.
QUEUES = "queues"
TOPICS = "topics"


def confirm_path(queue: str, subscription_id: str, collection: str = QUEUES) -> str:
    """The confirm path of subscription *subscription_id* of *queue*, a queue or (with
    *collection* ``TOPICS``) a topic."""
    return f"/v2/{collection}/{queue}/subscriptions/{subscription_id}/confirm"


def request_document(project: str, queue: str, subscription: Subscription,
                     signed: signed_urls.SignedUrl, base_url: str, *,
                     unsubscribed: bool = False, collection: str = QUEUES
                     ) -> dict[str, Any]:
    """The confirmation request's JSON document (module doc)."""
    path = confirm_path(queue, subscription.id, collection)
    if unsubscribed:
        kind = UNSUBSCRIBE_CONFIRMATION
        text = (f"You have unsubscribed successfully to the queue: {queue}, you can "
                f"resubscribe it by using confirmed=True.")
    else:
        kind = SUBSCRIPTION_CONFIRMATION
        text = f"You have chosen to subscribe to the queue: {queue}"
    return {"Message_Type": kind, "Message": text,
            "URL-Signature": signed.signature, "URL-Methods": signed.methods[0],
            "URL-Paths": signed.paths[0], "X-Project-ID": project,
            "URL-Expires": signed.expires, "WSGISubscribeURL": base_url.rstrip("/") + path,
            "SubscribeBody": {"confirmed": True}, "UnsubscribeBody": {"confirmed": False},
            "queue_name": queue}


class Confirmations:
    """Sends confirmation requests in the background of the worker's event loop: the
    API answers without waiting on a subscriber. ``close`` (the worker's shutdown)
    abandons those under way."""

    def __init__(self, signing: signed_urls.Settings, targets: Targets,
                 timeout: float, mail_settings: mail.ConfirmationMail | None = None) -> None:
        self.signing = signing
        self.targets = targets
        self.timeout = timeout
        self.mail = mail_settings
        self._tasks: set[asyncio.Task[bool]] = set()

    def send(self, project: str, queue: str, subscription: Subscription, base_url: str, *,
             unsubscribed: bool = False, collection: str = QUEUES
             ) -> asyncio.Task[bool] | None:
        """Start sending the confirmation request of *subscription* of *queue* (a topic
        when *collection* is ``TOPICS``) in *project*, the client's project; the task (its
        result: whether the subscriber took it), or None when none can be signed."""
        lifetime = datetime.timedelta(seconds=max(1, subscription.expires
                                                  - subscription.as_of))
        lifetime = min(lifetime, self.signing.max_lifetime)
        expires = (signed_urls.utcnow() + lifetime).strftime(signed_urls.EXPIRES_FORMAT)
        try:
            signed = signed_urls.sign(self.signing.secret_key,
                                      [confirm_path(queue, subscription.id, collection)],
                                      project,
                                      ["PUT"], expires, max_lifetime=self.signing.max_lifetime)
        except signed_urls.SigningError as exc:
            LOG.error("No confirmation request sent to %s for subscription %s of %s "
                      "%s: %s", subscription.subscriber, subscription.id,
                      collection.rstrip("s"), queue, exc)
            return None
        document = request_document(project, queue, subscription, signed, base_url,
                                    unsubscribed=unsubscribed, collection=collection)
        task = asyncio.get_running_loop().create_task(self._send(subscription, document))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _send(self, subscription: Subscription, document: dict[str, Any]) -> bool:
        if subscription.subscriber.startswith(f"{mail.SCHEME}:"):
            return await self._mail(subscription, document)
        # A pool of its own, made and closed per request: confirmations are rare, and
        # are sent whether or not this process pushes ([notification] push).
        webhooks = Webhooks(self.timeout, 1, self.targets)
        try:
            sent = await webhooks.post(
                subscription, document,
                f"{document['Message_Type']} of subscription {subscription.id}")
        finally:
            await webhooks.close()
        if sent:
            LOG.info("%s sent to %s for subscription %s", document["Message_Type"],
                     subscription.subscriber, subscription.id)
        return sent

    async def _mail(self, subscription: Subscription, document: dict[str, Any]) -> bool:
        if self.mail is None:
            LOG.error("No confirmation mail sent to %s: mail is not configured",
                      subscription.subscriber)
            return False
        unsubscribed = document["Message_Type"] == UNSUBSCRIBE_CONFIRMATION
        template = self.mail.unsubscribe if unsubscribed else self.mail.subscribe
        sent = await self.mail.mailer.send(mail.confirmation_mail(
            subscription, document, template, self.mail.confirm_page))
        if not sent:
            LOG.info("%s mail to %s failed", document["Message_Type"],
                     subscription.subscriber)
        return sent

    async def close(self) -> None:
        if self.mail is not None:
            self.mail.mailer.offload.shutdown()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
