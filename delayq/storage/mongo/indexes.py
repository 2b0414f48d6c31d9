"""The MongoDB driver's indexes (``layout.indexes``) kept in place: created once per
process, at the first request that reaches MongoDB, and again after a query named one
that is not there (dropped by hand).

Creating an existing index is a no-op. One request at a time creates them; the others
fail at once with 503 rather than queue behind it while MongoDB is unreachable. The TTL
of the messages' expiry index follows ``expired_retention``: a database made before the
option (TTL 0), or by workers with another value, has the index with other options, and
MongoDB refuses to create it again (IndexOptionsConflict), but ``collMod`` changes its
TTL without a rebuild. ``collMod`` needs more than ``readWrite`` (``dbAdmin``): refused,
the worker works on with the old TTL and logs how to change it by hand.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading

import pymongo
import pymongo.errors
from pymongo.database import Database

from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.client import is_unavailable, unavailable

LOG = logging.getLogger(__name__)

# createIndexes: an index of that name and key exists with other options (its TTL).
INDEX_OPTIONS_CONFLICT = 85


class Indexes:
    """Every collection's indexes in database *db*; without the trail (*trail_enabled*
    false) the events collection is never created."""

    def __init__(self, db: Database, expired_retention: int, trail_enabled: bool) -> None:
        self._db = db
        self._expired_retention = expired_retention
        self._trail_enabled = trail_enabled
        self._created = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Create the indexes unless this process has; StorageUnavailable while another
        request of this process is creating them."""
        if self._created:
            return
        if not self._lock.acquire(blocking=False):
            raise unavailable.error("Creating delayq's MongoDB indexes; retry.")
        try:
            if not self._created:
                for name, indexes in lay.indexes(self._expired_retention).items():
                    if name != lay.EVENTS or self._trail_enabled:
                        self._create(name, indexes)
                self._create_collection(lay.PROJECTS)
                self._created = True
        finally:
            self._lock.release()

    def missing(self) -> None:
        """A query named an index that is not there: the next request creates them."""
        self._created = False

    def _create_collection(self, name: str) -> None:
        """Create collection *name* (which has no index) unless it exists: only
        transactions write to it, and a transaction may not create a collection on
        servers before 4.4, nor in a write across shards."""
        if name in self._db.list_collection_names(filter={"name": name}):
            return
        with contextlib.suppress(pymongo.errors.CollectionInvalid):  # made meanwhile
            self._db.create_collection(name)

    def _create(self, name: str, indexes: list[pymongo.IndexModel]) -> None:
        """Create *indexes* of collection *name*, changing the TTL of the messages'
        expiry index in place when it differs from ``expired_retention``."""
        collection = self._db[name]
        try:
            collection.create_indexes(indexes)
            return
        except pymongo.errors.OperationFailure as exc:
            if name != lay.MESSAGES or exc.code != INDEX_OPTIONS_CONFLICT:
                raise
        change = {"collMod": lay.MESSAGES,
                  "index": {"keyPattern": lay.EXPIRY_KEY,
                            "expireAfterSeconds": self._expired_retention}}
        try:
            self._db.command(change)
        except pymongo.errors.OperationFailure as exc:
            if is_unavailable(exc):
                raise
            LOG.error("Could not set the TTL of the messages' %r index to expired_retention "
                      "(%d s): %s. Expired messages are dropped unseen at the old TTL "
                      "(uncounted, no expired event) until a user with the collMod "
                      "privilege runs db.runCommand(%s) in database %r.", lay.EXPIRY_INDEX,
                      self._expired_retention, exc, json.dumps(change), self._db.name)
            # The others may not have been created: the failed command created none.
            indexes = [model for model in indexes
                       if model.document["name"] != lay.EXPIRY_INDEX]
        else:
            LOG.info("The messages' %r index now drops expired messages %d s after their "
                     "expiry (expired_retention).", lay.EXPIRY_INDEX, self._expired_retention)
        collection.create_indexes(indexes)

