"""The mail target, a ``mailto:`` subscriber's
message sent as mail, as Zaqar's mailto task makes it.

A pushed message is mailed as its payload's JSON (``delayq.push.webhook.payload``) in a
text/plain body; ``To`` is the mailto address, ``From`` the subscription's ``from``
option, ``Subject`` the URL's ``?subject=`` or else its ``subject`` option. A
confirmation request is mailed with ``[notification]
subscription_confirmation_email_template`` (or ``unsubscribe_...``): its ``topic`` is the
subject, ``sender`` the From, and ``body`` formatted with ``{0}`` the queue, ``{1}`` the
project and ``{2}`` the confirmation URL (``external_confirmation_url`` with the signed
values as query parameters, as Zaqar builds it).

Delivery is by SMTP to ``[notification] smtp_host``:``smtp_port`` (``smtp_mode =
self_local``), with the standard library's smtplib offloaded to a thread; a mail the
server accepted is delivered, any SMTP or connection error a failed attempt (retried
by the push path like a webhook's non-2xx).
"""

from __future__ import annotations

import logging
import smtplib
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import parseaddr
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from oslo_config import cfg

from delayq import jsontext
from delayq.conf import NOTIFICATION_GROUP
from delayq.offload import THREADS, Offload
from delayq.subscription import Subscription

LOG = logging.getLogger(__name__)

SCHEME = "mailto"
DEFAULT_SENDER = "no-reply@openstack.org"  # Zaqar's template's sender


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    timeout: float = 10.0
    # The envelope sender of a mail whose From names no address (a subscription
    # without a ``from`` option): the confirmation template's sender, the operator's.
    default_sender: str = DEFAULT_SENDER

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> SmtpSettings:
        group = conf[NOTIFICATION_GROUP]
        sender = parseaddr(group.subscription_confirmation_email_template.get(
            "sender", ""))[1]
        return cls(group.smtp_host, group.smtp_port, group.smtp_user_name,
                   group.smtp_user_password, group.push_timeout,
                   sender or DEFAULT_SENDER)


def confirmation_settings(conf: cfg.ConfigOpts) -> ConfirmationMail:
    group = conf[NOTIFICATION_GROUP]
    return ConfirmationMail(Mailer(SmtpSettings.from_conf(conf), Offload(THREADS, 2)),
                            dict(group.subscription_confirmation_email_template),
                            dict(group.unsubscribe_confirmation_email_template),
                            group.external_confirmation_url)


def address(subscriber: str) -> str:
    """The recipient of a ``mailto:`` subscriber (its path)."""
    return urlsplit(subscriber).path


def message_mail(subscription: Subscription, document: dict[str, Any]) -> EmailMessage:
    """A pushed message as mail (module doc)."""
    query = {k.lower(): v for k, v in parse_qs(urlsplit(subscription.subscriber).query).items()}
    mail = EmailMessage()
    mail["To"] = address(subscription.subscriber)
    mail["From"] = str(subscription.options.get("from", ""))
    subject = query.get("subject", [None])[0] or str(subscription.options.get("subject", ""))
    mail["Subject"] = subject
    mail.set_content(jsontext.response(document).decode())
    return mail


def confirmation_mail(subscription: Subscription, document: dict[str, Any],
                      template: dict[str, str], confirm_page: str | None) -> EmailMessage:
    """A confirmation request as mail, from Zaqar's template option."""
    link = ""
    if confirm_page is not None:
        link = confirm_page + "?" + urlencode({
            "Signature": document["URL-Signature"], "Methods": document["URL-Methods"],
            "Paths": document["URL-Paths"], "Project": document["X-Project-ID"],
            "Expires": document["URL-Expires"], "Url": document["WSGISubscribeURL"],
            "Queue": document["queue_name"]})
    mail = EmailMessage()
    mail["To"] = address(subscription.subscriber)
    mail["From"] = template.get("sender", "")
    mail["Subject"] = template.get("topic", "")
    mail.set_content(template.get("body", "").format(
        document["queue_name"], document["X-Project-ID"], link))
    return mail


@dataclass(frozen=True, slots=True)
class ConfirmationMail:
    """What a confirmation mail needs: the mailer, Zaqar's two templates and its
    ``external_confirmation_url``."""

    mailer: Mailer
    subscribe: dict[str, str]
    unsubscribe: dict[str, str]
    confirm_page: str | None


class Mailer:
    """Sends mail through the configured SMTP server, one connection per mail, in a
    thread of *offload* (smtplib blocks)."""

    def __init__(self, settings: SmtpSettings, offload: Offload) -> None:
        self.settings = settings
        self.offload = offload

    async def send(self, mail: EmailMessage) -> bool:
        """Send *mail*; whether the server accepted it."""
        try:
            await self.offload(self._send, mail)
        except (OSError, smtplib.SMTPException) as exc:
            LOG.info("Mail to %s through %s:%s failed: %s", mail["To"], self.settings.host,
                     self.settings.port, str(exc) or type(exc).__name__)
            return False
        return True

    def _send(self, mail: EmailMessage) -> None:
        s = self.settings
        with smtplib.SMTP(s.host, s.port, timeout=s.timeout) as smtp:
            if s.user:
                smtp.login(s.user, s.password or "")
            # The envelope given, not read from headers: smtplib fails on an empty From.
            sender = parseaddr(str(mail["From"] or ""))[1] or s.default_sender
            smtp.send_message(mail, from_addr=sender, to_addrs=[str(mail["To"])])
