"""The MongoDB driver: the storage interface (``delayq.storage.base``) on MongoDB.

MongoDB updates one document atomically and re-checks an update's filter against the
document it writes, so every transition here is a set of single-document updates whose
filters pin the state the driver read (claims, dead-letter moves and redrives:
``claimer.py``).

- A delete by ids, the end of a pop, a renewal's and a release's changes to the claimed
  messages (``messages.py``, ``claims.py``) are one ``find_one_and_delete`` or
  ``find_one_and_update`` per message: each returns the state it changed, which the
  tallies and the trail need, and which a multi-document write or a bulk of them cannot
  tell when a concurrent request changed some of the same messages. That costs one round
  trip per message (at most ``max_messages_per_claim_or_pop`` or
  ``max_messages_per_page``).
- Posts, claims, dead-letter moves, and the writes above are retryable writes (inserts,
  single-document updates and deletes, and bulk writes of them), so a failover in the
  middle of a claim is retried by pymongo, not doubled. Purging or deleting a queue
  (multi-document deletes) is not retryable: interrupted, it answers 503, and repeating
  the request completes it.

pymongo only blocks: the controllers are plain classes, each call run in a thread of the
driver's pool (``delayq.storage.base.offloaded``), never on the event loop.

Time is the primary's clock (``delayq.storage.clock``), so API hosts whose own clocks are
skewed agree on when a message is due.

The controllers are ``queues.py``, ``messages.py``, ``claims.py`` (a claim made, read,
renewed, released, one message handed back), ``subscriptions.py`` (the webhook
subscriptions) and ``trail.py`` (the audit reads); what they share is ``database.py``
(the collections, the clock, a queue's sequence numbers, and the one path from a MongoDB
failure to 503). Each other concern has a module of its own: ``layout.py`` (documents,
fields, index definitions), ``claimer.py`` (a claim's bulk write and what it won),
``tallies.py`` (the /metrics gauges' counts), ``event_log.py`` (the event trail),
``expiry.py`` (removing expired messages, the reaper's lease), ``indexes.py`` (creating
the indexes), ``post_keys.py`` (idempotent posts), ``quotas.py`` (the quotas, each
checked in the transaction of the write it admits), ``client.py`` (the pymongo
client, and which failures are a 503), ``signals.py`` (the wake-ups of other processes,
from a change stream) and ``change_events.py`` (which change events are signals).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pymongo
import pymongo.errors
from oslo_config import cfg
from pymongo import ReturnDocument
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from delayq import errors, events
from delayq.conf import events_settings
from delayq.offload import THREADS
from delayq.storage.base import Endings, ignore_endings
from delayq.storage.base.offloaded import OffloadedDriver
from delayq.storage.clock import ServerClock, timed
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.claims import Claims
from delayq.storage.mongo.client import (
    NAME,
    make_client,
    parse_write_concern,
    unavailable,
)
from delayq.storage.mongo.database import Database
from delayq.storage.mongo.messages import Messages
from delayq.storage.mongo.options import GROUP
from delayq.storage.mongo.queues import Queues
from delayq.storage.mongo.signals import Signals
from delayq.storage.mongo.subscriptions import Subscriptions
from delayq.storage.mongo.trail import Trail

LOG = logging.getLogger(__name__)


class Driver(OffloadedDriver):
    """Queues, messages and claims in a MongoDB replica set or sharded cluster."""

    name = NAME
    calls = THREADS
    # Requests do not reap as they write (a post would pay a round trip for it): the
    # reaper does, and claims and pops remove the expired messages they meet.
    reaps_on_write = False

    def __init__(self, client: pymongo.MongoClient, database: str = "delayq", *,
                 write_concern: int | str = "majority", journal: bool = True,
                 write_timeout: float = 10.0, clock_sync_interval: float = 30.0,
                 reap_interval: float = 0, expired_retention: int = 3600,
                 clock: Callable[[], float] | None = None, owns_client: bool = False,
                 events_settings: events.Settings = events.ON,
                 endings: Endings = ignore_endings) -> None:
        """*clock* replaces the primary's clock (tests); *owns_client* closes *client*
        with the driver; *events_settings* turns the event trail on or off.

        *reap_interval* seconds apart, once ``start_reaper`` is called, a task reaps
        every queue (0: none; tests call ``reap`` themselves); *expired_retention* is how
        long MongoDB keeps an expired message before its TTL monitor drops it unseen
        (``layout.py``).
        """
        super().__init__(endings=endings, reap_interval=reap_interval)
        self._client = client
        self._owns_client = owns_client
        concern = WriteConcern(w=write_concern, j=journal,
                               wtimeout=int(write_timeout * 1000) or None)
        db = client.get_database(database, write_concern=concern,
                                 read_preference=ReadPreference.PRIMARY)
        # The clock's write needs no replication: waiting for it would skew the reading.
        self._clock_collection = db.get_collection(lay.CLOCK, write_concern=WriteConcern(w=1))
        self._clock = clock or ServerClock(timed(self._server_time_ms),
                                            clock_sync_interval)
        self._db = Database(client, db, self._now_ms, expired_retention=expired_retention,
                            events_settings=events_settings, endings=endings)
        self._expiry = self._db.expiry
        self.offload_controllers(queues=Queues(self._db), messages=Messages(self._db),
                                 claims=Claims(self._db),
                                 subscriptions=Subscriptions(self._db))
        self.trail = Trail(self._db)
        # The writes are the signals, read by a change stream (signals.py).
        self.signals = Signals(db, self.offload)
        try:
            with unavailable:
                self._db.indexes.ensure()
        except errors.StorageUnavailable as exc:
            LOG.warning("%s; creating the indexes at the next request.", exc.description)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *, endings: Endings = ignore_endings
                  ) -> Driver:
        group = conf[GROUP]
        client = make_client(group.uri, server_selection_timeout=group.server_selection_timeout,
                             connect_timeout=group.connect_timeout,
                             socket_timeout=group.socket_timeout,
                             max_pool_size=group.max_pool_size)
        return cls(client, group.database, write_concern=parse_write_concern(group.write_concern),
                   journal=group.journal, write_timeout=group.write_timeout,
                   clock_sync_interval=group.clock_sync_interval,
                   reap_interval=group.reap_interval,
                   expired_retention=group.expired_retention, owns_client=True,
                   events_settings=events_settings(conf), endings=endings)

    # Time

    def _server_time_ms(self) -> int:
        doc = self._clock_collection.find_one_and_update(
            {lay.ID: lay.CLOCK}, {"$currentDate": {lay.CLOCK_TIME: True}}, upsert=True,
            return_document=ReturnDocument.AFTER)
        assert doc is not None  # an upsert returning the document after it
        return lay.ms(doc[lay.CLOCK_TIME])

    def _now_ms(self) -> int:
        return lay.to_ms(self._clock())

    def now_blocking(self) -> float:
        with unavailable:
            return self._now_ms() / 1000

    def ping_blocking(self) -> bool:
        try:
            self._client.admin.command("ping")
        except pymongo.errors.PyMongoError:
            return False
        return True

    # Expiry: expired messages are invisible at once; the reaper removes and reports them

    def reap_blocking(self) -> None:
        """One pass of the reaper over every queue (``Expiry.reap``)."""
        with self._db.request():
            self._expiry.reap()

    def lease_blocking(self, seconds: float) -> bool:
        """The reaper's lease, in the ``locks`` collection (``Expiry.lease``)."""
        return self._expiry.lease(seconds)

    def close_blocking(self) -> None:
        # Closing the client sends endSessions to the server: a round trip.
        if self._owns_client:
            self._client.close()
