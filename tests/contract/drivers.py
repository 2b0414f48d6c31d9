"""The drivers the contract suite runs against, and how to open each.

To add a driver, add an entry to ``DRIVERS``: a function that takes pytest's
``tmp_path`` and returns ``DriverSpec`` options, plus an ``open_driver`` branch. The test
ids then carry the driver's name (``test_x[sqlite]``, ``test_x[redis]``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from delayq.events import Settings
from delayq.storage.base import Driver, Endings, ignore_endings
from tests.mongo_backend import MONGO, URI_VARIABLE
from tests.redis_servers import SERVERS
from tests.swift_server import SWIFT


@dataclass(frozen=True)
class DriverSpec:
    """Everything needed to open the same backend again, in this or another process."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)


def _sqlite(tmp_path: Path) -> DriverSpec:
    return DriverSpec("sqlite", {"path": str(tmp_path / "contract.sqlite")})


def _namespace() -> str:
    """Keys of one test apart from every other test's on the shared server."""
    return f"t{uuid.uuid4().hex[:12]}"


def _redis(tmp_path: Path) -> DriverSpec:
    return DriverSpec("redis", {"uri": SERVERS.single().uri, "namespace": _namespace()})


def _redis_cluster(tmp_path: Path) -> DriverSpec:
    return DriverSpec("redis", {"uri": SERVERS.cluster_uri(), "namespace": _namespace()})


def _mongomock(tmp_path: Path) -> DriverSpec:
    return DriverSpec("mongodb", {"database": MONGO.new_database(), "mongomock": True})


def _mongodb(tmp_path: Path) -> DriverSpec:
    if MONGO.real_uri() is None:
        pytest.skip(f"no real MongoDB: set {URI_VARIABLE}=mongodb://host:port/?replicaSet=rs0 "
                    "to run this against one (the mongodb-mock variant runs regardless)")
    return DriverSpec("mongodb", {"database": MONGO.new_database()})


def _swift(tmp_path: Path) -> DriverSpec:
    auth = SWIFT.auth()
    return DriverSpec("swift", {"auth_url": auth.auth_url, "user": auth.user, "key": auth.key,
                                "prefix": _namespace()})


DRIVERS: dict[str, Callable[[Path], DriverSpec]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "redis-cluster": _redis_cluster,
    "mongodb-mock": _mongomock,
    "mongodb": _mongodb,
    "swift": _swift,
}


def skip_unless_shared_across_processes(spec: DriverSpec) -> None:
    """Skip a test that needs other processes to see the backend (mongomock lives in one)."""
    if spec.options.get("mongomock"):
        pytest.skip(f"mongomock lives inside one process; set {URI_VARIABLE} to run this "
                    "against a real MongoDB")


def open_driver(spec: DriverSpec, clock: Callable[[], float] = time.time,
                events_settings: Settings | None = None,
                endings: Endings = ignore_endings) -> Driver:
    """A connected driver for *spec*; *clock* replaces the backend clock where it can.

    *events_settings*, when given, is handed to the driver (else its default, the trail on);
    the driver tells *endings* of the messages leaving queues.
    """
    trail = {"endings": endings}
    if events_settings is not None:
        trail["events_settings"] = events_settings
    if spec.name == "sqlite":
        from delayq.storage.sqlite.driver import Driver as SqliteDriver

        return SqliteDriver(spec.options["path"], clock=clock, **trail)
    if spec.name == "redis":
        from delayq.storage.redis.driver import Driver as RedisDriver

        # The real clock is the Redis server's TIME, as in production; a fake clock is
        # handed to every script instead.
        return RedisDriver(spec.options["uri"], namespace=spec.options["namespace"],
                           clock=None if clock is time.time else clock, **trail)
    if spec.name == "mongodb":
        from delayq.storage.mongo.driver import Driver as MongoDriver

        client = MONGO.mock_client() if spec.options.get("mongomock") else MONGO.real_client()
        # The real clock is the primary's clock, read through the driver as in production.
        return MongoDriver(client, spec.options["database"],
                           clock=None if clock is time.time else clock, **trail)
    if spec.name == "swift":
        from swiftclient.client import Connection

        from delayq.storage.swift.driver import Driver as SwiftDriver

        options = spec.options

        def connect() -> Connection:
            return Connection(authurl=options["auth_url"], user=options["user"],
                              key=options["key"], retries=0, timeout=30)

        # The real clock is the Swift proxy's, read through the driver as in production.
        return SwiftDriver(connect, prefix=options["prefix"],
                           clock=None if clock is time.time else clock, **trail)
    raise ValueError(f"unknown driver {spec.name}")


class FakeClock:
    """A clock that only moves when told to, so time rules are tested to the instant."""

    # Far ahead of the real clock: backends that expire by the real clock (MongoDB's TTL
    # monitor, Swift's X-Delete-At) must never see a test's messages as expired.
    def __init__(self, start: float = 4_000_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
