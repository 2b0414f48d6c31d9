"""The Swift driver: queues, messages and claims in an OpenStack Swift account.

``layout.py`` describes the objects. The driver's requests and what Swift's answers need
before they can be trusted (bids, 404 rechecks, the proxy's clock) are ``objects.py``'s;
claims, moves, redrives, edits and expiries are won by bidding for generation markers
(``markers.py``). The controllers (``queues.py``, ``messages.py``, ``claims.py``,
``subscriptions.py``, ``trail.py``) answer the storage interface with them; the event
trail is written by ``recorder.py``, the tallies behind ``Queues.counts`` are
``tallies.py``'s, the reaper's passes ``expiry.py``'s, the leases that make the quotas
exact ``quotas.py``'s. python-swiftclient only blocks: every call runs in a thread
(``delayq.storage.base.offloaded``). This module connects them and keeps the clock.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable

from oslo_config import cfg
from swiftclient import client as swift

from delayq import errors, events
from delayq.conf import events_settings
from delayq.offload import THREADS
from delayq.storage import base
from delayq.storage.base.offloaded import OffloadedDriver
from delayq.storage.clock import ServerClock
from delayq.storage.swift import layout as lay
from delayq.storage.swift.claims import Claims
from delayq.storage.swift.expiry import Expiry
from delayq.storage.swift.layout import US
from delayq.storage.swift.live_messages import LiveMessages
from delayq.storage.swift.markers import Markers
from delayq.storage.swift.message_ids import MessageIds
from delayq.storage.swift.messages import Messages
from delayq.storage.swift.objects import EXPIRED_RETENTION, NAME, Objects, unavailable
from delayq.storage.swift.options import GROUP
from delayq.storage.swift.post_keys import PostKeys
from delayq.storage.swift.queue_creation import QueueCreation
from delayq.storage.swift.queues import Queues
from delayq.storage.swift.quotas import Quotas
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.signals import Signals
from delayq.storage.swift.subscriptions import Subscriptions
from delayq.storage.swift.tallies import Tallies
from delayq.storage.swift.trail import Trail


class Driver(OffloadedDriver):
    """Queues, messages and claims in an OpenStack Swift account."""

    name = NAME
    # A post removes nothing: reaping would cost it a listing of the index. Claims remove
    # the expired messages they meet at the head of the index, the reaper the others.
    reaps_on_write = False
    # Requests fan out to threads and bids wait the settle time: never on the loop.
    calls = THREADS

    def __init__(self, connect: Callable[[], swift.Connection], *, prefix: str = "dq",
                 concurrency: int = 16, claim_settle_time: float = 0.1,
                 clock_sync_interval: float = 30.0,
                 clock: Callable[[], float] | None = None,
                 events_settings: events.Settings = events.ON,
                 tally_flush_interval: float = 1.0, tally_writer_lease: int = 300,
                 expired_retention: int = EXPIRED_RETENTION, reap_interval: int = 0,
                 endings: base.Endings = base.ignore_endings) -> None:
        """*connect* makes a connection (one per thread: swiftclient's are not shared);
        *clock* replaces the proxy's clock (tests); *events_settings* turns the event
        trail on or off; *tally_flush_interval* is the seconds between writes of this
        process's tallies, *tally_writer_lease* the seconds of the lease on its writer
        slot (at least ``tallies.MIN_LEASE``: tests use a few seconds, the option at least
        30); *expired_retention* the seconds an expired message stays stored for the
        reaper; *reap_interval* the seconds between passes of the background reaper (0:
        none, as tests want: they call ``reap`` themselves)."""
        super().__init__(endings=endings, reap_interval=reap_interval)
        self.signals = Signals()
        self._objects = Objects(connect, prefix=prefix, concurrency=concurrency,
                                claim_settle_time=claim_settle_time,
                                expired_retention=expired_retention)
        clock_object = lay.clock_object(secrets.token_hex(8))
        self._clock = clock or ServerClock(
            lambda: self._objects.proxy_stamp(clock_object), clock_sync_interval)
        # Set on close: the flusher and a reaper pass under way stop.
        self._stop = threading.Event()
        self._tallies = Tallies(self._objects, self._now_us, self._stop,
                                flush_interval=tally_flush_interval,
                                lease_time=tally_writer_lease)
        self._recorder = Recorder(self._objects, events_settings, endings)
        self._quotas = Quotas(self._objects, self._now_us)
        creation = QueueCreation(self._objects, self._quotas, self._recorder)
        self._markers = Markers(self._objects, self._tallies, self._recorder, creation.ensure)
        ids = MessageIds()
        self._post_keys = PostKeys(self._objects, self._tallies, self._recorder, ids.new,
                                   self._now_us)
        live = LiveMessages(self._objects, self._markers)
        self.trail = Trail(self._objects, live, self._now_us)
        self._expiry = Expiry(self._objects, self._markers, self._recorder, self.trail,
                              self._now_us, self._stop)
        self._subscriptions = Subscriptions(self._objects, self._now_us)
        self.offload_controllers(
            queues=Queues(self._objects, self._tallies, self._recorder, creation, live,
                          self._now_us),
            messages=Messages(self._objects, self._tallies, self._recorder, self._markers,
                              self._quotas, self._post_keys, creation, live, ids,
                              self._now_us),
            claims=Claims(self._objects, self._tallies, self._recorder, self._markers,
                          self._now_us),
            subscriptions=self._subscriptions)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        os_options = {}
        if group.auth_version == "3":
            os_options = {"project_name": group.project_name,
                          "project_domain_name": group.project_domain_name,
                          "user_domain_name": group.user_domain_name,
                          "project_domain_id": group.project_domain_id,
                          "user_domain_id": group.user_domain_id,
                          "region_name": group.region_name,
                          "interface": group.interface, "endpoint_type": group.interface}

        def connect() -> swift.Connection:
            # No retries inside swiftclient: a conditional PUT retried after a lost reply
            # would read its own success as a lost race.
            return swift.Connection(authurl=group.auth_url, user=group.user, key=group.key,
                                    auth_version=group.auth_version, os_options=os_options,
                                    insecure=group.insecure, cacert=group.cacert,
                                    timeout=group.timeout, retries=0)

        return cls(connect, prefix=group.container_prefix, concurrency=group.concurrency,
                   claim_settle_time=group.claim_settle_time,
                   clock_sync_interval=group.clock_sync_interval,
                   events_settings=events_settings(conf),
                   tally_flush_interval=group.tally_flush_interval,
                   tally_writer_lease=group.tally_writer_lease,
                   expired_retention=group.expired_retention,
                   reap_interval=group.reap_interval, endings=endings)

    def _now_us(self) -> int:
        """The driver's clock (the proxy's, ``objects.Objects.proxy_stamp``), in µs."""
        return round(self._clock() * US)

    def now_blocking(self) -> float:
        with unavailable:
            return self._now_us() / US

    def ping_blocking(self) -> bool:
        try:
            with unavailable:
                self._objects.swift.head_account()
        except errors.StorageUnavailable:
            return False
        return True

    async def close(self) -> None:
        """Stop the reaper, write the tallies still pending (its own among them), free
        the writer slot, then let go of the connections."""
        # Set first: a reaper pass under way stops at its next batch (and the flusher).
        self._stop.set()
        await super().close()

    def close_blocking(self) -> None:
        # Writing the tallies takes requests, and waits for a flush under way.
        self._tallies.close()
        self._objects.close()

    # The reaper

    def lease_blocking(self, seconds: float) -> bool:
        """``expiry.Expiry.lease``: one process of the deployment reaps each pass."""
        return self._expiry.lease(seconds)

    def reap_blocking(self) -> None:
        """One pass: the expired messages of every queue container under this driver's
        prefix, each removed and reported by whoever wins its expire marker (so passes
        and claims racing report each once); then the expired subscriptions."""
        self._expiry.reap()
        with unavailable:
            self._subscriptions.reap(self._now_us())

    def flush_tallies(self) -> None:
        """Write every tally page this process changed since it last wrote it (blocking:
        tests and scripts)."""
        self._tallies.flush()
