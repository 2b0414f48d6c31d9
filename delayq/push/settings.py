"""The push path's settings: the ``[notification]`` options (and the claim limit of
``[transport]``) as the pusher (``delayq.push.pusher``) and the confirmation requests
read them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from oslo_config import cfg

from delayq.conf import NOTIFICATION_GROUP, TRANSPORT_GROUP
from delayq.push import mail
from delayq.push.targets import Targets

# A push's claim outlasts the push's timeout by this much, so that a push answered in
# time is deleted (or handed back) under its own claim; a claim that ends first lets the
# message be pushed again.
CLAIM_MARGIN = 10


@dataclass(frozen=True, slots=True)
class PushSettings:
    """``[notification]`` options as the pusher needs them."""

    in_flight: int = 20
    per_subscription: int = 4
    timeout: float = 10.0
    scan_interval: float = 5.0
    claim_limit: int = 20
    targets: Targets = Targets()
    smtp: mail.SmtpSettings = mail.SmtpSettings("127.0.0.1", 25)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> PushSettings:
        group = conf[NOTIFICATION_GROUP]
        return cls(in_flight=group.max_notifier_workers,
                   per_subscription=group.max_pushes_per_subscription,
                   timeout=group.push_timeout, scan_interval=group.push_scan_interval,
                   claim_limit=conf[TRANSPORT_GROUP].max_messages_per_claim_or_pop,
                   targets=Targets.from_conf(conf),
                   smtp=mail.SmtpSettings.from_conf(conf))

    @property
    def claim_ttl(self) -> int:
        return math.ceil(self.timeout) + CLAIM_MARGIN
