"""What only the MongoDB driver promises, beyond the shared contract suite.

The contract suite shows that the driver behaves like every other one; this module checks
how it uses MongoDB, because that is what keeps it correct and fast on a real server:

- the indexes it creates (the claimable range, the listing order, the partial claim
  index, TTL expiry, the messages' TTL at ``expired_retention``, changed in place on an
  older database), idempotently;
- the operations that reach MongoDB: a claim reads the claimable range by its index with
  no delay condition, claims and dead-letter moves are single-document updates filtered
  on the state read, the claim-count increment is part of the claiming update;
- the documents it stores (no field for a feature a message does not use) and bodies
  that BSON could not hold as they are;
- the /metrics gauges' tallies: a count reads one page per level and no message,
  concurrent requests keep it exact, old pages carry the date the TTL monitor drops
  them at;
- expiry without MongoDB's TTL monitor: expired messages invisible at once, then removed
  by the reaper (a task of the loop, one process at a time by a lease), claims and pops, each
  reported ``expired`` exactly once however they race;
- the primary's clock, an unreachable server (503, never a hang) and malformed
  connection strings;
- on a real server only (DELAYQ_TEST_MONGODB_URI), the query plan of a claim in a queue
  full of delayed and claimed messages.

Operations are observed where they reach MongoDB, never inside delayq: a
``pymongo.monitoring.CommandListener`` on a real server, and on mongomock wrappers of
its collection methods (installed only while a test records). Tests run on mongomock and,
when DELAYQ_TEST_MONGODB_URI is set, on the real server too, each in a database of its
own.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import mongomock.collection
import pymongo
import pytest
from bson import ObjectId
from falcon import testing
from pymongo import IndexModel, monitoring

from delayq import errors, events, tallies
from delayq.api.app import create_app
from delayq.message import LISTING_START, NewMessage
from delayq.metrics import Metrics
from delayq.queue import DeadLetterPolicy, QueueCounts
from delayq.storage.clock import ServerClock, timed
from delayq.storage.mongo import expiry
from delayq.storage.mongo.client import make_client, parse_write_concern
from delayq.storage.mongo.driver import Driver
from delayq.storage.mongo.expiry import Expiry
from delayq.subscription import SubscriptionChange
from delayq.synchronous import Synchronous
from tests.contract.drivers import FakeClock
from tests.mongo_backend import MONGO, URI_VARIABLE
from tests.trail_history import replayed_trail, sqlite_trail

PROJECT = "proj"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
# A fake clock far ahead of the real one: neither a real server's TTL monitor nor
# mongomock's imitation of it (both compare with the real time) deletes what a test stores.
FAR_FUTURE = 4_000_000_000.0  # 2096
NO_REAL_SERVER = (f"no real MongoDB: set {URI_VARIABLE}=mongodb://host:port/?replicaSet=rs0 "
                  "to run this against one (the mongomock variant runs regardless)")
REAL_SERVER_ONLY = (f"no real MongoDB: set {URI_VARIABLE}=mongodb://host:port/?replicaSet=rs0 "
                    "to run this against one (query plans need a real server's planner)")
# An operation on an unreachable MongoDB fails after one server selection timeout (0.3 s
# here, answered on pymongo's 0.5 s heartbeat), not a multiple of it.
UNAVAILABLE_WITHIN = 1.0
EPOCH = datetime(1970, 1, 1)


def bson_date(seconds: float) -> datetime:
    """The BSON date (naive UTC, whole milliseconds) of POSIX *seconds*."""
    return EPOCH + timedelta(milliseconds=round(seconds * 1000))


def post(driver: Driver, queue: str, count: int = 1, *, ttl: int = 3600, delay: int = 0,
         body: Any = 1) -> list[str]:
    ids = []
    for start in range(0, count, 1000):
        batch = [NewMessage(body, ttl, delay) for _ in range(min(1000, count - start))]
        ids += driver.messages.post(PROJECT, queue, CLIENT, batch)
    return ids


def claim(driver: Driver, queue: str, limit: int = 10, *, ttl: int = 60, grace: int = 60,
          dead_letter: DeadLetterPolicy | None = None):
    return driver.claims.create(PROJECT, queue, ttl=ttl, grace=grace, limit=limit,
                        dead_letter=dead_letter)


def field_names(query: Any) -> set[str]:
    """Every field a query or update document names, through $and/$or/$not nesting."""
    names: set[str] = set()
    if isinstance(query, dict):
        for key, value in query.items():
            if not key.startswith("$"):
                names.add(key)
            names |= field_names(value)
    elif isinstance(query, list):
        for item in query:
            names |= field_names(item)
    return names


# Recording what reaches MongoDB


@dataclass
class Op:
    """One statement as MongoDB receives it: a read, or one write of a command or bulk."""

    kind: str  # find, count, aggregate, update, delete, insert, findAndModify, createIndexes
    collection: str
    filter: dict[str, Any] | None = None
    update: dict[str, Any] | None = None
    multi: bool = False
    sort: list[tuple[str, int]] | None = None
    limit: int | None = None
    hint: str | None = None
    indexes: list[dict[str, Any]] = field(default_factory=list)


COUNT_STAGE = {"$group": {"_id": 1, "n": {"$sum": 1}}}


def ops_of_command(name: str, command: dict[str, Any]) -> list[Op]:
    """The statements of a command a CommandListener saw."""
    collection = command.get(name)
    if name == "find":
        sort = command.get("sort")
        return [Op("find", collection, filter=command.get("filter", {}),
                   sort=list(sort.items()) if sort else None, limit=command.get("limit"),
                   hint=command.get("hint"))]
    if name == "update":
        return [Op("update", collection, filter=u["q"], update=u["u"],
                   multi=u.get("multi", False)) for u in command["updates"]]
    if name == "delete":
        return [Op("delete", collection, filter=d["q"], multi=d["limit"] == 0)
                for d in command["deletes"]]
    if name == "findAndModify":
        return [Op("findAndModify", collection, filter=command.get("query"),
                   update=command.get("update"))]
    if name == "insert":
        return [Op("insert", collection)]
    if name == "aggregate" and command.get("pipeline"):
        pipeline = command["pipeline"]
        # count_documents is an aggregation ending in a count of what it matched.
        kind = "count" if pipeline[-1] == COUNT_STAGE else "aggregate"
        return [Op(kind, collection, filter=pipeline[0].get("$match"),
                   hint=command.get("hint"))]
    if name == "createIndexes":
        return [Op("createIndexes", collection, indexes=list(command["indexes"]))]
    return []


class CommandSpy(monitoring.CommandListener):
    """Records the commands a real client sends to one database, while recording."""

    def __init__(self) -> None:
        self.database: str | None = None
        self.ops: list[Op] | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.ops is not None and event.database_name == self.database:
            self.ops += ops_of_command(event.command_name, copy.deepcopy(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    @contextmanager
    def record(self, database: str) -> Iterator[list[Op]]:
        self.database, self.ops = database, []
        try:
            yield self.ops
        finally:
            self.ops = None


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _sort(key_or_list: Any, direction: Any = None) -> list[tuple[str, int]] | None:
    """A sort as a server receives it: (field, direction) pairs."""
    if not key_or_list:
        return None
    if isinstance(key_or_list, str):
        return [(key_or_list, direction or 1)]
    return [tuple(pair) for pair in key_or_list]


# How each mongomock collection method appears to a server: (args, kwargs) -> Op.
_MOCK_CALLS: dict[str, Callable[[str, tuple, dict], Op | None]] = {
    "find": lambda c, a, k: Op("find", c, filter=_arg(a, k, 0, "filter") or {},
                               limit=_arg(a, k, 3, "limit") or None,
                               sort=_sort(_arg(a, k, 6, "sort"))),
    "count_documents": lambda c, a, k: Op("count", c, filter=_arg(a, k, 0, "filter")),
    "aggregate": lambda c, a, k: Op("aggregate", c,
                                    filter=_arg(a, k, 0, "pipeline")[0].get("$match"),
                                    hint=k.get("hint")),
    "update_one": lambda c, a, k: Op("update", c, filter=_arg(a, k, 0, "filter"),
                                     update=_arg(a, k, 1, "update")),
    "update_many": lambda c, a, k: Op("update", c, filter=_arg(a, k, 0, "filter"),
                                      update=_arg(a, k, 1, "update"), multi=True),
    "find_one_and_update": lambda c, a, k: Op("findAndModify", c,
                                              filter=_arg(a, k, 0, "filter"),
                                              update=_arg(a, k, 1, "update")),
    "find_one_and_delete": lambda c, a, k: Op("findAndModify", c,
                                              filter=_arg(a, k, 0, "filter")),
    "delete_one": lambda c, a, k: Op("delete", c, filter=_arg(a, k, 0, "filter")),
    "delete_many": lambda c, a, k: Op("delete", c, filter=_arg(a, k, 0, "filter"),
                                      multi=True),
    "insert_one": lambda c, a, k: Op("insert", c),
    "insert_many": lambda c, a, k: Op("insert", c),
    "create_indexes": lambda c, a, k: Op("createIndexes", c, indexes=[
        m.document for m in _arg(a, k, 0, "indexes")]),
    # Its statements are recorded one by one as they join the bulk (below).
    "bulk_write": lambda c, a, k: None,
}


class MockSpy:
    """Records what the driver asks of mongomock, in a server's terms.

    Only the outermost call is recorded: mongomock implements some methods with others
    (find_one_and_update reads with find), which a server does not see.
    """

    def __init__(self) -> None:
        self._inside = threading.local()

    @contextmanager
    def record(self, database: str) -> Iterator[list[Op]]:
        ops: list[Op] = []
        collection = mongomock.collection.Collection
        cursor = mongomock.collection.Cursor
        bulk = mongomock.collection.BulkOperationBuilder
        with pytest.MonkeyPatch.context() as patch:
            for name, describe in _MOCK_CALLS.items():
                patch.setattr(collection, name, self._spied(
                    getattr(collection, name), describe, database, ops))
            for name, attribute, normal in (
                    ("sort", "sort", lambda a, k: _sort(_arg(a, k, 0, "key_or_list"),
                                                        _arg(a, k, 1, "direction"))),
                    ("limit", "limit", lambda a, k: _arg(a, k, 0, "count")),
                    ("hint", "hint", lambda a, k: _arg(a, k, 0, "hint"))):
                patch.setattr(cursor, name, self._cursor_option(
                    getattr(cursor, name), attribute, normal))
            patch.setattr(bulk, "add_update", self._bulk_statement(
                bulk.add_update, database, ops,
                lambda c, a, k: Op("update", c, filter=a[0], update=a[1],
                                   multi=_arg(a, k, 2, "multi", False))))
            patch.setattr(bulk, "add_delete", self._bulk_statement(
                bulk.add_delete, database, ops,
                lambda c, a, k: Op("delete", c, filter=a[0], multi=not a[1])))
            yield ops

    def _spied(self, method, describe, database, ops):
        inside = self._inside

        @functools.wraps(method)
        def spied(coll, *args, **kwargs):
            if getattr(inside, "busy", False) or coll.database.name != database:
                return method(coll, *args, **kwargs)
            op = describe(coll.name, copy.deepcopy(args), copy.deepcopy(kwargs))
            if op is not None:
                ops.append(op)
            inside.busy = True
            try:
                result = method(coll, *args, **kwargs)
            finally:
                inside.busy = False
            if op is not None and op.kind == "find":
                result._delayq_spy_op = op  # its sort, limit and hint come next
            return result

        return spied

    @staticmethod
    def _cursor_option(method, attribute, normal):
        @functools.wraps(method)
        def option(cur, *args, **kwargs):
            op = getattr(cur, "_delayq_spy_op", None)
            if op is not None:
                setattr(op, attribute, normal(args, kwargs))
            return method(cur, *args, **kwargs)

        return option

    @staticmethod
    def _bulk_statement(method, database, ops, describe):
        @functools.wraps(method)
        def statement(builder, *args, **kwargs):
            if builder.collection.database.name == database:
                ops.append(describe(builder.collection.name, copy.deepcopy(args), kwargs))
            return method(builder, *args, **kwargs)

        return statement


# Backends


@pytest.fixture(scope="module")
def command_spy() -> Iterator[tuple[pymongo.MongoClient | None, CommandSpy]]:
    """A client of the real server (None without one) whose commands can be recorded."""
    spy = CommandSpy()
    uri = MONGO.real_uri()
    client = (pymongo.MongoClient(uri, event_listeners=[spy], tz_aware=False,
                                  serverSelectionTimeoutMS=10_000) if uri else None)
    yield client, spy
    if client is not None:
        client.close()


@dataclass
class Backend:
    """One database of mongomock or of the real server, for one test."""

    name: str
    client: Any
    database: str
    spy: CommandSpy | MockSpy
    drivers: list[Driver] = field(default_factory=list)

    @property
    def db(self):
        return self.client[self.database]

    def driver(self, clock: Callable[[], float] | None = None, **options: Any) -> Driver:
        driver = Synchronous(Driver(self.client, self.database, clock=clock, **options))
        self.drivers.append(driver)
        return driver

    def record(self) -> Any:
        """A context whose value lists the operations the block sent to this database."""
        return self.spy.record(self.database)

    def raw(self, message_id: str) -> dict[str, Any] | None:
        return self.db.messages.find_one({"_id": ObjectId(message_id)})


def _backend(name: str, command_spy, skip_reason: str = NO_REAL_SERVER) -> Iterator[Backend]:
    real_client, spy = command_spy
    if name == "mongodb":
        if real_client is None:
            pytest.skip(skip_reason)
        backend = Backend(name, real_client, MONGO.new_database(), spy)
    else:
        backend = Backend(name, MONGO.mock_client(), MONGO.new_database(), MockSpy())
    yield backend
    for driver in backend.drivers:
        driver.close()
    backend.client.drop_database(backend.database)


@pytest.fixture(params=["mongomock", "mongodb"])
def backend(request, command_spy) -> Iterator[Backend]:
    yield from _backend(request.param, command_spy)


@pytest.fixture
def real_backend(command_spy) -> Iterator[Backend]:
    yield from _backend("mongodb", command_spy, REAL_SERVER_ONLY)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(FAR_FUTURE)


# Indexes


def index_keys(collection) -> dict[str, dict[str, Any]]:
    """Name -> index information, with its key as a list of (field, direction)."""
    return {name: {**info, "key": list(info["key"])}
            for name, info in collection.index_information().items()}


def test_the_indexes_exist_once_the_driver_has_started(backend):
    with backend.record() as ops:
        backend.driver()
    messages = index_keys(backend.db.messages)
    assert messages["claimable"]["key"] == [("p", 1), ("q", 1), ("a", 1), ("k", 1)]
    assert messages["listing"]["key"] == [("p", 1), ("q", 1), ("k", 1)]
    assert messages["claim"]["key"] == [("c", 1)]
    # A backstop behind the reaper: an hour after the expiry (expired_retention).
    expiry = [info for info in messages.values() if info["key"] == [("e", 1)]]
    assert [info.get("expireAfterSeconds") for info in expiry] == [3600]
    claims = [info for info in index_keys(backend.db.claims).values()
              if info["key"] == [("e", 1)]]
    assert [info.get("expireAfterSeconds") for info in claims] == [0]
    queues = [info for info in index_keys(backend.db.queues).values()
              if info["key"] == [("p", 1), ("q", 1)]]
    assert [info.get("unique") for info in queues] == [True]

    # The claim index holds only claimed messages. mongomock keeps no partial filter in
    # its index information, so the request that created the index is checked too.
    [claim_index] = [index for op in ops if op.kind == "createIndexes"
                     for index in op.indexes if index["name"] == "claim"]
    assert claim_index["partialFilterExpression"] == {"c": {"$exists": True}}
    if backend.name == "mongodb":
        assert messages["claim"]["partialFilterExpression"] == {"c": {"$exists": True}}


def test_a_second_driver_starts_on_the_same_database(backend):
    first = backend.driver()
    ids = post(first, "q", 2)
    before = {name: index_keys(backend.db[name]) for name in ("messages", "claims", "queues")}
    second = backend.driver()
    after = {name: index_keys(backend.db[name]) for name in ("messages", "claims", "queues")}
    assert after == before
    assert [m.id for m in second.messages.get(PROJECT, "q", ids)] == ids
    # Each driver reads the server's clock in whole milliseconds, within half a round trip:
    # the second may stand a moment before the time the first posted at.
    deadline = time.monotonic() + 1
    while (claimed := claim(second, "q")) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert claimed is not None and len(claimed.messages) == 2


# The claim's operations


def find_claimable(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.kind == "find" and op.collection == "messages"
            and op.hint == "claimable"]


def message_updates(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.kind in ("update", "findAndModify")
            and op.collection == "messages"]


@pytest.mark.parametrize("queue_kind", ["normal", "delayed"])
def test_a_claim_reads_the_claimable_range_by_its_index_without_a_delay_condition(
        backend, clock, queue_kind):
    driver = backend.driver(clock)
    if queue_kind == "delayed":
        post(driver, "q", 2, delay=30)  # due before the claim
        clock.advance(31)
        post(driver, "q", 3, delay=600)  # not due at the claim
    else:
        post(driver, "q", 2)
    with backend.record() as ops:
        taken = claim(driver, "q", limit=5)

    assert len(taken.messages) == 2  # the messages not yet due stay where they are
    # A claim that got fewer than it asked for may look again: the same range each time.
    queries = find_claimable(ops)
    assert queries and queries[0].limit == 5
    for query in queries:
        assert query.filter == {"p": PROJECT, "q": "q", "a": {"$lte": bson_date(clock.now)}}
        assert query.sort == [("a", 1), ("k", 1)]
    # Availability alone decides: the delay ("d") costs a claim nothing.
    reads = [op for op in ops if op.collection == "messages" and op.filter is not None]
    assert all("d" not in field_names(op.filter) for op in reads), reads


def test_the_claim_count_increment_is_part_of_the_claiming_update(backend, clock):
    driver = backend.driver(clock)
    ids = post(driver, "q", 3)
    with backend.record() as ops:
        taken = claim(driver, "q", limit=2, ttl=60)

    claim_id = ObjectId(taken.id)
    claiming = [op for op in message_updates(ops)
                if op.update.get("$set", {}).get("c") == claim_id]
    # Ids are random: compared as sets, not by their order.
    assert {op.filter["_id"] for op in claiming} == {ObjectId(i) for i in ids[:2]}
    assert len(claiming) == 2
    expires = bson_date(clock.now + 60)
    for op in claiming:
        assert not op.multi and op.kind == "update"
        assert op.update["$set"] == {"c": claim_id, "ce": expires, "a": expires}
        assert op.update["$inc"] == {"cc": 1}
        # Pinned on the state read: a concurrent claimer's update would match nothing.
        assert op.filter["q"] == "q" and "a" in op.filter and "cc" in op.filter
    others = [op for op in message_updates(ops) if op not in claiming]
    assert all("cc" not in field_names(op.update) for op in others), others
    assert [backend.raw(i).get("cc") for i in ids] == [1, 1, None]


def test_a_dead_letter_move_is_one_update_per_message_keeping_its_claim_count(
        backend, clock):
    driver = backend.driver(clock)
    ids = post(driver, "q", 3)
    driver.claims.release(PROJECT, "q", claim(driver, "q").id)
    before = {ObjectId(i): backend.raw(i) for i in ids}
    with backend.record() as ops:
        taken = claim(driver, "q", dead_letter=DeadLetterPolicy(1, "dlq"))

    assert taken is None  # every message was worn out: moved, none claimed
    moves = [op for op in message_updates(ops) if "q" in op.update.get("$set", {})]
    assert sorted(op.filter["_id"] for op in moves) == sorted(before)
    for op in moves:
        read = before[op.filter["_id"]]
        assert not op.multi and op.kind == "update"
        assert op.update["$set"]["q"] == "dlq"
        assert "$inc" not in op.update and "cc" not in field_names(op.update)
        assert (op.filter["q"], op.filter["a"], op.filter["cc"]) == ("q", read["a"], 1)
    assert [backend.raw(i)["cc"] for i in ids] == [1, 1, 1]


# Stored documents


CLAIM_FIELDS = {"c", "ce", "cc"}
MOVE_FIELDS = {"s", "m"}


def test_a_message_stores_fields_only_for_what_it_uses(backend, clock):
    driver = backend.driver(clock)
    [plain] = post(driver, "q")
    [delayed] = post(driver, "q", delay=30)
    plain_doc, delayed_doc = backend.raw(plain), backend.raw(delayed)
    assert "d" not in plain_doc
    assert delayed_doc["d"] == delayed_doc["cr"] + timedelta(seconds=30)
    assert delayed_doc["d"] == bson_date(clock.now + 30)
    for doc in (plain_doc, delayed_doc):
        assert not (CLAIM_FIELDS | MOVE_FIELDS) & doc.keys(), doc

    taken = claim(driver, "q")
    assert {"c", "ce", "cc"} <= backend.raw(plain).keys()
    driver.claims.release(PROJECT, "q", taken.id)
    released = backend.raw(plain)
    assert not {"c", "ce"} & released.keys() and released["cc"] == 1
    assert not CLAIM_FIELDS & backend.raw(delayed).keys()  # not due: never claimed


def test_a_moved_message_keeps_its_id_and_claim_count_and_records_where_from(
        backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q")
    driver.claims.release(PROJECT, "q", claim(driver, "q").id)
    clock.advance(5)
    assert claim(driver, "q", dead_letter=DeadLetterPolicy(1, "dlq")) is None

    doc = backend.raw(message_id)
    assert (doc["q"], doc["cc"], doc["s"], doc["m"]) == ("dlq", 1, "q", bson_date(clock.now))
    assert not {"c", "ce"} & doc.keys()
    [moved] = driver.messages.get(PROJECT, "dlq", [message_id])
    assert (moved.claim_count, moved.source_queue, moved.moved_at) == (1, "q", clock.now)
    assert driver.messages.get(PROJECT, "q", [message_id]) == []


def nested(depth: int) -> Any:
    body: Any = "bottom"
    for n in range(depth):
        body = {"level": n, "next": [body]}
    return body


AWKWARD_BODIES = {
    "dotted-and-dollar-keys": {"a.b": 1, "$set": {"$inc": 2}, "": None, "_id": "x"},
    "beyond-int64": [2**63, -(2**63) - 1, 10**40],
    "deeper-than-bson-allows": nested(150),  # BSON documents nest 100 deep at most
    "unicode": {"ключ": "日本語 🎉", "nul": "a\u0000b", "rtl": "\u202eabc"},
    "lone-surrogates": json.loads('{"\\ud800": "\\udfff", "pair": "\\ud83c\\udf89"}'),
    "types-equal-in-python": [1, 1.0, True, 0, 0.0, False, -0.0, 1e308],
}


@pytest.mark.parametrize("body", AWKWARD_BODIES.values(), ids=AWKWARD_BODIES.keys())
def test_awkward_bodies_round_trip_exactly(backend, body):
    driver = backend.driver()
    [message_id] = post(driver, "q", body=body)
    [message] = driver.messages.get(PROJECT, "q", [message_id])
    # JSON text tells 1, 1.0 and True apart and keeps key order, unlike ==.
    assert json.dumps(message.body) == json.dumps(body)


# Expiry without the TTL monitor


def test_an_expired_message_is_invisible_to_every_request_until_it_is_reaped(backend,
                                                                            clock):
    ended: list[str] = []
    driver = backend.driver(clock, endings=ended.extend)
    ids = post(driver, "q", 3, ttl=60)
    [moved] = post(driver, "dlq", ttl=60)
    backend.db.messages.update_one({"_id": ObjectId(moved)}, {"$set": {"s": "q"}})
    held = claim(driver, "q", limit=1, ttl=30, grace=10)
    clock.advance(59.999)
    assert len(driver.messages.get(PROJECT, "q", ids)) == 3
    # The claim's document expired at 30 s: gone for every read of it.
    with pytest.raises(errors.ClaimNotFound):
        driver.claims.get(PROJECT, "q", held.id)
    with pytest.raises(errors.ClaimNotFound):
        driver.claims.renew(PROJECT, "q", held.id, 60, 60)

    clock.advance(0.001)  # the messages' expiry
    assert driver.messages.get(PROJECT, "q", ids) == []
    assert driver.messages.page(PROJECT, "q", marker=LISTING_START, limit=10, exclude_client=None,
                                include_claimed=True, include_delayed=True) == ([], None)
    stats = driver.queues.stats(PROJECT, "q")
    assert (stats.total, stats.oldest, stats.newest) == (0, None, None)
    assert driver.queues.counts(PROJECT, "q") == QueueCounts(0, 0, 0)
    assert list(driver.trail.messages(PROJECT, "q")) == []
    with pytest.raises(errors.MessageNotFound):
        driver.messages.edit(PROJECT, "q", ids[1], delay=0)
    assert driver.messages.redrive(PROJECT, "dlq", destination=None, limit=10) == 0
    assert driver.messages.redrive(PROJECT, "dlq", destination="elsewhere", limit=10) == 0
    driver.messages.delete(PROJECT, "q", ids[0], held.id)  # absent: not an error
    driver.messages.delete(PROJECT, "q", ids[1], None)  # left to the reaper
    # Still stored, nothing reported: none of these took it for a live message.
    assert backend.db.messages.count_documents({"p": PROJECT}) == 4
    assert ended == []
    assert [e.kind for e in trail(driver, "q")] == ["posted"] * 3 + ["claimed"]
    driver.reap()
    assert backend.db.messages.count_documents({"p": PROJECT}) == 0
    assert ended == [events.EXPIRED] * 4


# The primary's clock


def clock_reading(backend: Backend) -> float:
    """The time the driver last read from the server, in POSIX seconds."""
    doc = backend.db.clock.find_one({"_id": "clock"})
    return (doc["t"] - EPOCH).total_seconds()


def test_time_is_the_primarys_clock(backend, monkeypatch):
    driver = backend.driver()
    now, read_at = driver.now(), time.monotonic()
    # A real server answers over the network; mongomock at once.
    slack = 0.05 if backend.name == "mongomock" else 0.5
    if backend.name == "mongomock":
        # mongomock's $currentDate is this host's clock.
        assert abs(now - time.time()) < slack
    else:
        server = backend.db.command("hello")["localTime"]
        assert abs(now - (server - EPOCH).total_seconds()) < slack
    assert 0 <= now - clock_reading(backend) < slack

    # This host's clock stepping an hour ahead changes nothing: time goes on from the
    # last reading.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    elapsed = time.monotonic() - read_at
    assert driver.now() - now == pytest.approx(elapsed, abs=0.05)


def test_the_primarys_clock_is_read_again_after_the_interval(backend):
    driver = backend.driver(clock_sync_interval=0.2)
    driver.now()
    first = clock_reading(backend)
    driver.now()
    assert clock_reading(backend) == first  # within the interval: no new reading
    time.sleep(0.25)
    driver.now()
    assert clock_reading(backend) >= first + 0.2


class FixedServer:
    """A server time source whose answers are given in advance."""

    def __init__(self, *answers_ms: int, delay: float = 0.0) -> None:
        self.answers = list(answers_ms)
        self.delay = delay
        self.calls = 0

    def __call__(self) -> int:
        time.sleep(self.delay)
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]


def test_the_server_clock_ignores_a_step_of_the_hosts_wall_clock(monkeypatch):
    server = FixedServer(1_000_000_000_000)
    server_clock = ServerClock(timed(server), interval=30)
    assert server_clock() == pytest.approx(1_000_000_000, abs=0.01)
    real = time.time
    for step in (3600, -3600):
        monkeypatch.setattr(time, "time", lambda step=step: real() + step)
        assert server_clock() == pytest.approx(1_000_000_000, abs=0.05)
    assert server.calls == 1


def test_the_server_clock_fetches_again_after_the_interval():
    server = FixedServer(1_000_000_000_000, 2_000_000_000_000)
    server_clock = ServerClock(timed(server), interval=0.1)
    assert server_clock() == pytest.approx(1_000_000_000, abs=0.01)
    assert server.calls == 1
    time.sleep(0.12)
    assert server_clock() == pytest.approx(2_000_000_000, abs=0.01)
    assert server.calls == 2


def test_a_server_clock_reading_is_taken_at_the_middle_of_the_round_trip():
    # The server answered at some instant of a 0.2 s round trip: the middle is the best
    # guess, so the reading just after the fetch is its answer plus about 0.1 s.
    server_clock = ServerClock(timed(FixedServer(1_000_000_000_000, delay=0.2)),
                               interval=30)
    assert server_clock() == pytest.approx(1_000_000_000.1, abs=0.03)


def test_threads_finding_the_server_clock_stale_together_wait_for_one_fetch():
    # Fetches of one clock never overlap (the Swift driver's overwrite one object), and the
    # threads that waited use the answer the first one fetched.
    fetching = threading.Semaphore(1)
    overlaps = []

    def fetch() -> int:
        if not fetching.acquire(blocking=False):
            overlaps.append(1)
            return 1_000_000_000_000
        try:
            time.sleep(0.05)
            return 1_000_000_000_000
        finally:
            fetching.release()

    counted = FixedServer(1_000_000_000_000, delay=0.05)
    for server_clock in (ServerClock(timed(fetch), interval=0.0),
                         ServerClock(timed(counted), interval=30)):
        threads = [threading.Thread(target=server_clock) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert overlaps == []
    assert counted.calls == 1


# An unavailable MongoDB


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def unreachable(caplog) -> Iterator[Driver]:
    """A driver of a production client whose server does not answer."""
    client = make_client(f"mongodb://127.0.0.1:{closed_port()}/",
                         server_selection_timeout=0.3, connect_timeout=0.3)
    with caplog.at_level(logging.WARNING, logger="delayq.storage.mongo.driver"):
        driver = Synchronous(Driver(client, "delayq_unreachable"))
    yield driver
    client.close()


MID = "5f0c6a1e2b3c4d5e6f708192"  # a well-formed id of nothing
OPERATIONS: dict[str, Callable[[Driver], Any]] = {
    "now": lambda d: d.now(),
    "create_queue": lambda d: d.queues.create(PROJECT, "q", {}),
    "get_queue": lambda d: d.queues.get(PROJECT, "q"),
    "set_queue_metadata": lambda d: d.queues.set_metadata(PROJECT, "q", {}),
    "delete_queue": lambda d: d.queues.delete(PROJECT, "q"),
    "purge_queue": lambda d: d.queues.purge(PROJECT, "q"),
    "list_queues": lambda d: d.queues.page(PROJECT, None, 10),
    "count_queues": lambda d: d.queues.count(PROJECT),
    "queue_stats": lambda d: d.queues.stats(PROJECT, "q"),
    "post_messages": lambda d: post(d, "q"),
    "list_messages": lambda d: d.messages.page(
        PROJECT, "q", marker=LISTING_START, limit=10, exclude_client=None, include_claimed=True,
        include_delayed=True),
    "get_messages": lambda d: d.messages.get(PROJECT, "q", [MID]),
    "delete_message": lambda d: d.messages.delete(PROJECT, "q", MID, None),
    "delete_messages": lambda d: d.messages.delete_many(PROJECT, "q", [MID]),
    "pop_messages": lambda d: d.messages.pop(PROJECT, "q", 1),
    "claim": lambda d: claim(d, "q"),
    "get_claim": lambda d: d.claims.get(PROJECT, "q", MID),
    "renew_claim": lambda d: d.claims.renew(PROJECT, "q", MID, 60, 60),
    "release_claim": lambda d: d.claims.release(PROJECT, "q", MID),
    "release_message": lambda d: d.claims.release_message(PROJECT, "q", MID, MID, 0),
    "create_subscription": lambda d: d.subscriptions.create(PROJECT, "q", "http://h/", 60, {}),
    "get_subscription": lambda d: d.subscriptions.get(PROJECT, "q", MID),
    "list_subscriptions": lambda d: d.subscriptions.page(PROJECT, "q", None, 10),
    "update_subscription": lambda d: d.subscriptions.update(
        PROJECT, "q", MID, SubscriptionChange(ttl=60)),
    "delete_subscription": lambda d: d.subscriptions.delete(PROJECT, "q", MID),
    "purge_subscriptions": lambda d: d.subscriptions.purge(PROJECT, "q"),
    "subscribed_queues": lambda d: d.subscriptions.subscribed_queues(),
    "reap": lambda d: d.reap(),
}


def test_an_unreachable_mongodb_lets_the_driver_start_with_a_warning(unreachable, caplog):
    warnings = [r for r in caplog.get_records("setup") if r.levelno == logging.WARNING]
    assert any("MongoDB is unavailable" in r.getMessage() for r in warnings), warnings
    started = time.monotonic()
    assert unreachable.ping() is False
    assert time.monotonic() - started < UNAVAILABLE_WITHIN


def attempt(driver: Driver, operation: Callable[[Driver], Any]) -> tuple[str, float]:
    """What *operation* raised (or "returned"), and how long it took."""
    started = time.monotonic()
    try:
        operation(driver)
        outcome = "returned"
    except Exception as exc:  # noqa: BLE001 - the outcome is what is checked
        outcome = type(exc).__name__
    return outcome, time.monotonic() - started


def slow_or_wrong(outcomes: dict[str, tuple[str, float]]) -> dict[str, tuple[str, float]]:
    return {name: (outcome, round(elapsed, 2)) for name, (outcome, elapsed)
            in outcomes.items() if outcome != "StorageUnavailable" or elapsed > UNAVAILABLE_WITHIN}


def test_every_operation_on_an_unreachable_mongodb_is_unavailable_within_a_second(
        unreachable):
    outcomes = {name: attempt(unreachable, op) for name, op in OPERATIONS.items()}
    assert not slow_or_wrong(outcomes)


def test_concurrent_requests_to_an_unreachable_mongodb_are_each_unavailable_within_a_second(
        unreachable):
    # API requests run on a thread pool: each should fail as fast as a lone request.
    with ThreadPoolExecutor(5) as pool:
        futures = {n: pool.submit(attempt, unreachable, OPERATIONS["get_queue"])
                   for n in range(5)}
        outcomes = {str(n): future.result(timeout=30) for n, future in futures.items()}
    assert not slow_or_wrong(outcomes)


def test_the_api_answers_503_while_mongodb_is_unreachable(unreachable, make_conf):
    client = testing.TestClient(create_app(make_conf(), driver=unreachable.target))
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    responses = {
        "post": client.simulate_post("/v2/queues/q/messages", headers=headers,
                                     json={"messages": [{"body": 1}]}),
        "claim": client.simulate_post("/v2/queues/q/claims", headers=headers,
                                      json={"ttl": 60, "grace": 60}),
        "get": client.simulate_get(f"/v2/queues/q/messages/{MID}", headers=headers),
    }
    for name, resp in responses.items():
        assert resp.status_code == 503, (name, resp.text)
        assert resp.headers["content-type"].startswith("application/json"), name
        assert set(resp.json) == {"title", "description"}, name


@pytest.mark.parametrize("uri", [
    "mongodb://user:s3cret@host:notaport/",
    "mongodb://user:s3cret@host:99999/",
    "mongodb://user:s3cret@/",
    "mongodb+srv://user:s3cret@host:27017/",
    "http://user:s3cret@host/",
])
def test_a_malformed_uri_is_refused_without_repeating_the_password(uri):
    with pytest.raises(ValueError) as raised:
        make_client(uri)
    assert "uri" in str(raised.value)
    assert "s3cret" not in "".join(traceback.format_exception(raised.value))


# Query plans on a real server


def stages(plan: Any) -> Iterator[dict[str, Any]]:
    """Every stage of an explain plan, whatever the engine or sharding nests it in."""
    if isinstance(plan, dict):
        if "stage" in plan:
            yield plan
        for value in plan.values():
            yield from stages(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from stages(item)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("free", [30, 0], ids=["some-claimable", "none-claimable"])
def test_a_claim_examines_only_what_it_takes_behind_many_delayed_and_claimed(
        real_backend, free):
    driver = real_backend.driver()
    post(driver, "q", 20_000, delay=3600)
    post(driver, "q", 20_000)
    assert len(claim(driver, "q", limit=20_000, ttl=3600).messages) == 20_000
    post(driver, "q", free)
    limit = 10
    with real_backend.record() as ops:
        claim(driver, "q", limit=limit)
    query = find_claimable(ops)[0]

    explained = real_backend.db.command("explain", {
        "find": "messages", "filter": query.filter, "sort": dict(query.sort),
        "limit": query.limit, "hint": query.hint}, verbosity="executionStats")
    plan = list(stages(explained["queryPlanner"]["winningPlan"]))
    assert any(s["stage"] == "IXSCAN" and s.get("indexName") == "claimable"
               for s in plan), plan
    assert not any(s["stage"] == "SORT" for s in plan), plan  # the index is the order
    examined = explained["executionStats"]["totalDocsExamined"]
    if free:
        assert examined <= limit + 2
    else:
        assert examined == 0


@pytest.mark.parametrize("value", ["0", "00"])
def test_unacknowledged_writes_are_refused_at_start(value):
    # Claims learn which of their updates applied from the acknowledgement.
    with pytest.raises(ValueError, match="write_concern = 0"):
        parse_write_concern(value)
    assert parse_write_concern("2") == 2 and parse_write_concern("majority") == "majority"


def test_a_dropped_index_answers_503_once_and_is_created_again(real_backend, clock):
    # Hinted queries fail on a server when their index is gone (an operator dropped it).
    driver = real_backend.driver(clock)
    post(driver, "q")
    real_backend.db.messages.drop_index("claimable")
    with pytest.raises(errors.StorageUnavailable, match="index"):
        claim(driver, "q")
    assert claim(driver, "q") is not None
    assert "claimable" in real_backend.db.messages.index_information()


# The event trail: an events collection, written after each change


TRAIL_RETENTION = 3600


def trail(driver: Driver, queue: str) -> list[events.Event]:
    return list(driver.trail.events(PROJECT, queue))


def test_the_events_collection_has_its_trail_index_and_forgets_by_ttl(backend, clock):
    driver = backend.driver(clock, events_settings=events.Settings(TRAIL_RETENTION))
    post(driver, "q", 2)
    indexes = index_keys(backend.db.events)
    assert indexes["trail"]["key"] == [("p", 1), ("q", 1), ("at", 1), ("_id", 1)]
    expiry = [info for info in indexes.values() if info["key"] == [("x", 1)]]
    assert [info.get("expireAfterSeconds") for info in expiry] == [0]
    # Each event carries its own removal time: the retention it was written under.
    docs = list(backend.db.events.find())
    assert len(docs) == 2
    for doc in docs:
        assert doc["at"] == bson_date(clock.now)
        assert doc["x"] == bson_date(clock.now + TRAIL_RETENTION)


def test_an_event_stores_only_the_fields_it_has(backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q", delay=30)
    assert claim(driver, "q") is None  # a claim that takes nothing records nothing
    [doc] = backend.db.events.find()
    assert set(doc) == {"_id", "p", "q", "ev", "at", "x", "i", "d", "t", "e"}
    assert (doc["ev"], doc["i"], doc["d"]) == ("posted", ObjectId(message_id),
                                               bson_date(clock.now + 30))


def test_each_request_that_changes_messages_adds_one_insert_into_events(backend, clock):
    driver = backend.driver(clock)
    driver.queues.create(PROJECT, "q", {})
    post(driver, "q", 6)
    requests: dict[str, Callable[[], Any]] = {
        "post": lambda: post(driver, "q", 3),
        "claim": lambda: claim(driver, "q", limit=2),
        "delete": lambda: driver.messages.delete(PROJECT, "q", ids.pop(), None),
        "delete_messages": lambda: driver.messages.delete_many(PROJECT, "q", ids[:2]),
        "pop": lambda: driver.messages.pop(PROJECT, "q", 1),
        "purge": lambda: driver.queues.purge(PROJECT, "q"),
        "delete_queue": lambda: driver.queues.delete(PROJECT, "q"),
    }
    ids = [m.id for m in driver.messages.page(
        PROJECT, "q", marker=LISTING_START, limit=20, exclude_client=None, include_claimed=False,
        include_delayed=False)[0]][2:]
    for name, request in requests.items():
        with backend.record() as ops:
            request()
        inserts = [op for op in ops if op.collection == "events"]
        assert [op.kind for op in inserts] == ["insert"], name


def test_with_the_trail_off_no_request_touches_events(backend, clock):
    driver = backend.driver(clock, events_settings=events.OFF)
    with backend.record() as ops:
        ids = post(driver, "q", 4)
        held = claim(driver, "q", limit=1)
        driver.messages.delete(PROJECT, "q", held.messages[0].id, held.id)
        driver.messages.delete_many(PROJECT, "q", ids[1:2])
        driver.messages.pop(PROJECT, "q", 1)
        driver.queues.purge(PROJECT, "q")
        driver.queues.delete(PROJECT, "q")
    assert [op for op in ops if op.collection == "events"] == []
    assert "events" not in backend.db.list_collection_names()
    # A bulk delete is one statement per message, whether the trail is on or not (it
    # must know what it deleted for the tallies); a purge looks nothing up.
    deletes = [op for op in ops if op.collection == "messages" and op.kind == "findAndModify"
               and op.update is None]
    assert sum(1 for op in deletes if op.filter.get("_id") == ObjectId(ids[1])) == 1
    assert not [op for op in ops if op.collection == "queues" and op.kind == "find"]


def test_events_outlive_their_queue_until_the_ttl_monitor_removes_them(backend, clock):
    driver = backend.driver(clock)
    post(driver, "q", 2)
    clock.advance(5)
    driver.queues.delete(PROJECT, "q")
    assert backend.db.messages.count_documents({}) == 0
    assert backend.db.queues.count_documents({}) == 0
    stored = list(backend.db.events.find({"p": PROJECT, "q": "q"}))
    assert [doc["ev"] for doc in stored] == ["posted", "posted", "purged"]
    assert driver.trail.queues(None) == [(PROJECT, "q")]
    assert [e.kind for e in trail(driver, "q")] == ["posted", "posted", "purged"]
    # Deleting it again changes nothing, and records nothing.
    driver.queues.delete(PROJECT, "q")
    driver.queues.purge(PROJECT, "q")
    assert len(trail(driver, "q")) == 3


def test_an_event_write_that_fails_loses_the_events_not_the_request(backend, clock, caplog,
                                                                     monkeypatch):
    driver = backend.driver(clock)
    collection = type(backend.db.events)
    real_insert = collection.insert_many

    def failing(coll, documents, *args, **kwargs):
        if coll.name == "events":
            raise pymongo.errors.AutoReconnect("the primary stepped down")
        return real_insert(coll, documents, *args, **kwargs)

    monkeypatch.setattr(collection, "insert_many", failing)
    with caplog.at_level(logging.WARNING, logger="delayq.storage.trail"):
        ids = post(driver, "q", 2)
    assert [m.id for m in driver.messages.get(PROJECT, "q", ids)] == ids
    assert any("event(s) of the trail lost" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert trail(driver, "q") == []


@contextmanager
def interloper(backend: Backend, action: Callable[[], Any],
               write: str = "bulk_write", then: Callable[[], Any] | None = None
               ) -> Iterator[None]:
    """Run *action* once, just before the next *write* (a collection method) to
    messages: a concurrent request that read the same documents and got its writes in
    first; and *then*, if given, just after that write."""
    collection = type(backend.db.messages)
    real_write = getattr(collection, write)
    pending = [action]

    def racing(coll, *args, **kwargs):
        if coll.name != "messages" or not pending:
            return real_write(coll, *args, **kwargs)
        pending.pop()()
        result = real_write(coll, *args, **kwargs)
        if then is not None:
            then()
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collection, write, racing)
        yield
    assert not pending, "the race never happened"


def claimed_events(driver: Driver, queue: str) -> set[tuple[str, str]]:
    return {(e.message_id, e.claim_id) for e in trail(driver, queue)
            if e.kind == events.CLAIMED}


def test_a_claim_that_loses_a_race_records_only_what_it_got(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    first, second, third = post(driver, "q", 3)
    won = []
    with interloper(backend, lambda: won.append(claim(rival, "q", limit=1))):
        result = claim(driver, "q", limit=2)
    [rivals] = won
    assert [m.id for m in rivals.messages] == [first]
    assert [m.id for m in result.messages] == [second, third]
    assert claimed_events(driver, "q") == {
        (first, rivals.id), (second, result.id), (third, result.id)}


def test_a_move_made_in_a_lost_race_is_recorded_by_its_mover_alone(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    policy = DeadLetterPolicy(1, "dlq")
    [worn] = post(driver, "q")
    earlier = claim(driver, "q", ttl=60)
    clock.advance(1)
    [fresh] = post(driver, "q")  # available before "worn" is again
    clock.advance(59)
    won = []
    # The rival takes "fresh" first; this claim still moves "worn", then finds nothing.
    with interloper(backend, lambda: won.append(claim(rival, "q", limit=1))):
        assert claim(driver, "q", limit=2, dead_letter=policy) is None
    assert claimed_events(driver, "q") == {(worn, earlier.id), (fresh, won[0].id)}
    [moved] = [e for e in trail(driver, "q") if e.kind == events.DEAD_LETTERED]
    assert (moved.message_id, moved.claim_count, moved.target) == (worn, 1, "dlq")


def test_a_move_that_lost_to_a_delete_records_no_move(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    [worn] = post(driver, "q")
    claim(driver, "q", ttl=60)
    clock.advance(60)
    [fresh] = post(driver, "q")
    before = len(trail(driver, "q"))
    with interloper(backend, lambda: rival.messages.delete_many(PROJECT, "q", [worn])):
        result = claim(driver, "q", limit=2, dead_letter=DeadLetterPolicy(1, "dlq"))
    assert [m.id for m in result.messages] == [fresh]
    kinds = [(e.kind, e.message_id) for e in trail(driver, "q")[before:]]
    assert sorted(kinds) == sorted([(events.DELETED, worn), (events.CLAIMED, fresh)])


@pytest.mark.parametrize("deleted", ["after the claim's write", "before it"])
def test_a_claim_counts_a_message_a_delete_took_from_it_only_if_it_had_taken_it(
        backend, clock, deleted):
    """A bulk delete by id takes a held message too. Deleted between this claim's write
    and its look at what it got, the message bears no claim id; the delete tallies it
    as claimed, so the claim must tally taking it (else one free too many, one claimed
    too few, until its expiry). Deleted before the write, it was never the claim's."""
    driver, rival = backend.driver(clock), backend.driver(clock)
    first, second = post(driver, "q", 2)
    after = deleted == "after the claim's write"
    won = []

    def rival_deletes() -> None:
        rival.messages.delete_many(PROJECT, "q", [second])

    def rival_claims() -> None:
        won.append(claim(rival, "q", limit=1))
        if not after:
            rival_deletes()

    # The rival takes the first before this claim's write (so that write is partial) and
    # deletes the second before or after it.
    with interloper(backend, rival_claims, then=rival_deletes if after else None):
        assert claim(driver, "q", limit=2) is None
    assert [m.id for m in won[0].messages] == [first]
    assert agree(driver, "q") == QueueCounts(free=0, claimed=1, delayed=0)
    [event] = [e for e in trail(driver, "q") if e.kind == events.DELETED]
    assert (event.message_id, event.claim_count) == (second, int(after))


def test_a_move_to_a_dead_letter_queue_deleted_right_after_still_counts(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    [worn] = post(driver, "q")
    claim(driver, "q", ttl=60)
    clock.advance(1)
    [fresh] = post(driver, "q")  # available before "worn" is again: the rival takes it
    clock.advance(59)
    won = []
    with interloper(backend, lambda: won.append(claim(rival, "q", limit=1)),
                    then=lambda: rival.messages.delete_many(PROJECT, "dlq", [worn])):
        assert claim(driver, "q", limit=2, dead_letter=DeadLetterPolicy(1, "dlq")) is None
    assert [m.id for m in won[0].messages] == [fresh]
    assert agree(driver, "q") == QueueCounts(free=0, claimed=1, delayed=0)
    assert agree(driver, "dlq") == QueueCounts(free=0, claimed=0, delayed=0)
    [moved] = [e for e in trail(driver, "q") if e.kind == events.DEAD_LETTERED]
    assert (moved.message_id, moved.target) == (worn, "dlq")


def test_a_bulk_delete_records_the_claim_count_a_racing_claim_left(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    ids = post(driver, "q", 2)
    with interloper(backend, lambda: claim(rival, "q", limit=1), "find_one_and_delete"):
        driver.messages.delete_many(PROJECT, "q", ids)
    deleted = [(e.message_id, e.claim_count) for e in trail(driver, "q")
               if e.kind == events.DELETED]
    assert sorted(deleted) == sorted([(ids[0], 1), (ids[1], 0)])
    assert driver.messages.get(PROJECT, "q", ids) == []


def test_a_bulk_delete_racing_another_records_each_message_once(backend, clock):
    driver, rival = backend.driver(clock), backend.driver(clock)
    ids = post(driver, "q", 2)
    with interloper(backend, lambda: rival.messages.delete(PROJECT, "q", ids[0], None),
                    "find_one_and_delete"):
        driver.messages.delete_many(PROJECT, "q", ids)
    endings = [e.message_id for e in trail(driver, "q") if e.kind in events.ENDINGS]
    # Each deletion is recorded by the request that made it: the rival's first.
    assert endings == ids


# The same history as the SQLite driver writes


def test_the_trail_has_the_fields_sqlite_writes_for_the_same_history(backend, tmp_path):
    expected = sqlite_trail(tmp_path, FAR_FUTURE)
    got = replayed_trail(backend.driver, FAR_FUTURE)
    assert got == expected
    kinds = {dict(row)["kind"] for row in got}
    assert kinds == set(events.KINDS) - {events.EXPIRED}


# The gauges' tallies


def agree(driver: Driver, queue: str) -> QueueCounts:
    """The gauges' counts, checked against the stats' count of the messages."""
    stats = driver.queues.stats(PROJECT, queue)
    counts = driver.queues.counts(PROJECT, queue)
    assert counts == QueueCounts(stats.free, stats.claimed, stats.delayed)
    return counts


def test_a_count_reads_one_page_per_level_of_the_tallies_and_no_message(backend, clock):
    driver = backend.driver(clock)
    # A backlog whose instants fall in blocks of every level: due and expiring within
    # milliseconds, seconds, hours and weeks.
    for delay, ttl in ((0, 60), (1, 3600), (30, 86400), (5000, 86400), (90000, 2_000_000)):
        post(driver, "q", 300, delay=delay, ttl=ttl)
    claim(driver, "q", limit=50, ttl=600)
    clock.advance(1.0005)
    counts = agree(driver, "q")
    assert (counts.claimed, counts.delayed) == (50, 900)

    with backend.record() as ops:
        assert driver.queues.counts(PROJECT, "q") == counts
    [read] = ops
    assert (read.kind, read.collection, read.hint) == ("find", "tallies", "page")
    assert len(read.filter["$or"]) == tallies.LEVELS
    # Points of the unique page index: at most one document each, whatever the backlog.
    assert backend.db.tallies.count_documents(read.filter) <= tallies.LEVELS


def test_concurrent_requests_keep_the_counts_exact(backend, clock):
    drivers = [backend.driver(clock) for _ in range(4)]
    policy = DeadLetterPolicy(2, "dlq")
    ids = post(drivers[0], "q", 30) + post(drivers[0], "q", 10, delay=30)

    def requests(worker: int) -> None:
        rng = random.Random(worker)
        driver, held = drivers[worker], []
        for _ in range(30):
            action = rng.randrange(8)
            try:
                if action == 0:
                    ids.extend(post(driver, "q", rng.randint(1, 3), delay=rng.choice([0, 30])))
                elif action in (1, 2):
                    taken = claim(driver, "q", rng.randint(1, 4), ttl=20, dead_letter=policy)
                    held += [taken] if taken else []
                elif action == 3 and held:
                    taken = held.pop(rng.randrange(len(held)))
                    for message in taken.messages[:2]:
                        driver.messages.delete(PROJECT, "q", message.id, taken.id)
                    driver.claims.release(PROJECT, "q", taken.id)
                elif action == 4 and held:
                    driver.claims.renew(PROJECT, "q", rng.choice(held).id, 40, 30)
                elif action == 5:
                    driver.messages.delete_many(PROJECT, "q", rng.sample(ids, 3))
                elif action == 6:
                    driver.messages.pop(PROJECT, "q", rng.randint(1, 3))
                elif action == 7:
                    driver.messages.edit(PROJECT, "q", rng.choice(ids),
                                        delay=rng.choice([0, 15]))
            except (errors.MessageNotFound, errors.ClaimNotFound, errors.MessageHeld):
                pass  # another worker got there first

    for _ in range(3):
        with ThreadPoolExecutor(len(drivers)) as pool:
            list(pool.map(requests, range(len(drivers))))
        for queue in ("q", "dlq"):
            agree(drivers[0], queue)
        clock.advance(20.0005)  # claims lapse, delays pass: more moves and races


def test_a_tally_page_carries_the_date_it_can_be_dropped_at(backend, clock):
    driver = backend.driver(clock)
    post(driver, "q", 3, delay=30)
    claim(driver, "q")
    pages = list(backend.db.tallies.find({"p": PROJECT, "q": "q"}))
    assert {doc["l"] for doc in pages} == set(range(tallies.LEVELS))
    for doc in pages:
        if doc["l"] == tallies.LEVELS - 1:
            assert "x" not in doc  # the one page of every instant a date can hold
        else:
            end = tallies.page_end(doc["l"], doc["g"])
            assert doc["x"] == bson_date(end + tallies.HINDSIGHT)
    [ttl] = [info for info in index_keys(backend.db.tallies).values()
             if info["key"] == [("x", 1)]]
    assert ttl.get("expireAfterSeconds") == 0
    assert index_keys(backend.db.tallies)["page"]["unique"]

    # What the TTL monitor drops once its date has passed, no count reads.
    post(driver, "q", 2, ttl=20 * 86400)
    clock.advance(tallies.HINDSIGHT + 86400)
    gone = backend.db.tallies.delete_many({"x": {"$lte": bson_date(clock.now)}})
    assert gone.deleted_count > 0
    assert agree(driver, "q") == QueueCounts(2, 0, 0)


# Expiry: the reaper, claims and pops remove expired messages, each reported once


def expired_events(driver: Driver, queue: str, project: str = PROJECT) -> list[events.Event]:
    return [e for e in driver.trail.events(project, queue) if e.kind == events.EXPIRED]


def test_the_messages_ttl_index_keeps_expired_messages_for_expired_retention(backend):
    backend.driver(expired_retention=120)
    [expiry] = [info for info in index_keys(backend.db.messages).values()
                if info["key"] == [("e", 1)]]
    assert expiry["expireAfterSeconds"] == 120


@pytest.fixture
def index_ttl_changes(backend, monkeypatch) -> list[dict[str, Any]]:
    """The ``collMod`` commands the driver sends, applied as a server would; and
    mongomock's refusal to create an index with other options raised as a server's
    (IndexOptionsConflict, code 85: mongomock gives no code)."""
    if backend.name != "mongomock":
        pytest.skip("mongomock stands in for a server here")
    sent: list[dict[str, Any]] = []
    collection, database = type(backend.db.messages), type(backend.db)
    create_indexes = collection.create_indexes

    def conflicting(coll, indexes, *args, **kwargs):
        try:
            return create_indexes(coll, indexes, *args, **kwargs)
        except pymongo.errors.OperationFailure as exc:
            if exc.code is None and "different options" in str(exc):
                raise pymongo.errors.OperationFailure(str(exc), code=85) from exc
            raise

    def command(db, command, *args, **kwargs):
        assert "collMod" in command, command
        sent.append(copy.deepcopy(command))
        change = command["index"]
        coll = db[command["collMod"]]
        [(name, info)] = [(name, info) for name, info in coll.index_information().items()
                          if dict(info["key"]) == change["keyPattern"]]
        coll.drop_index(name)
        coll.create_indexes([IndexModel(list(change["keyPattern"].items()), name=name,
                                        expireAfterSeconds=change["expireAfterSeconds"])])
        return {"ok": 1}

    monkeypatch.setattr(collection, "create_indexes", conflicting)
    monkeypatch.setattr(database, "command", command)
    return sent


def messages_ttl(backend: Backend) -> list[int]:
    return [info.get("expireAfterSeconds") for info in index_keys(backend.db.messages).values()
            if info["key"] == [("e", 1)]]


def test_a_database_whose_ttl_index_drops_at_expiry_gets_the_retention_in_place(
        backend, index_ttl_changes):
    # As a delayq before expired_retention left it: dropped at expiry, unseen.
    backend.db.messages.create_indexes([IndexModel([("e", 1)], name="expiry",
                                                   expireAfterSeconds=0)])
    driver = backend.driver(expired_retention=900)
    assert index_ttl_changes == [{"collMod": "messages", "index": {
        "keyPattern": {"e": 1}, "expireAfterSeconds": 900}}]
    assert messages_ttl(backend) == [900]
    assert {"claimable", "listing", "claim"} <= set(index_keys(backend.db.messages))
    [mid] = post(driver, "q")
    assert [m.id for m in driver.messages.get(PROJECT, "q", [mid])] == [mid]
    # Started again with the same retention, nothing is changed.
    backend.driver(expired_retention=900)
    assert len(index_ttl_changes) == 1


def test_a_refused_ttl_change_leaves_the_old_ttl_and_says_how_to_change_it(
        backend, index_ttl_changes, monkeypatch, caplog):
    backend.db.messages.create_indexes([IndexModel([("e", 1)], name="expiry",
                                                   expireAfterSeconds=0)])

    def unauthorized(db, command, *args, **kwargs):
        raise pymongo.errors.OperationFailure("not authorized to execute collMod", code=13)

    monkeypatch.setattr(type(backend.db), "command", unauthorized)
    with caplog.at_level(logging.ERROR, logger="delayq.storage.mongo.indexes"):
        driver = backend.driver(clock=None, expired_retention=3600)
        [mid] = post(driver, "q")
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "collMod" in record.getMessage() and "3600" in record.getMessage()
    assert messages_ttl(backend) == [0]
    # The worker serves, with its other indexes in place.
    assert {"claimable", "listing", "claim"} <= set(index_keys(backend.db.messages))
    assert [m.id for m in driver.messages.get(PROJECT, "q", [mid])] == [mid]


def test_a_claim_meeting_expired_messages_removes_and_reports_each_once(backend, clock):
    ended: list[str] = []
    driver = backend.driver(clock, endings=ended.extend)
    t0 = clock.now
    gone = post(driver, "q", 3, ttl=60)
    live = post(driver, "q", 2, ttl=3600)
    clock.advance(61)
    with backend.record() as ops:
        taken = claim(driver, "q", limit=10)
    assert [m.id for m in taken.messages] == live
    assert ended == [events.EXPIRED] * 3
    assert sorted((e.message_id, e.time, e.expires, e.claim_count)
                  for e in expired_events(driver, "q")) == [
        (mid, t0 + 60, t0 + 60, 0) for mid in sorted(gone)]
    # Each removal is pinned on the expiry; none rides in the claim's bulk uncounted.
    removals = [op for op in ops if op.collection == "messages" and op.kind == "delete"
                or op.kind == "findAndModify" and op.update is None]
    assert len(removals) == 3
    assert all(set(op.filter) == {"_id", "p", "e"} and "$lte" in op.filter["e"]
               for op in removals)
    assert [op.kind for op in ops if op.collection == "events"] == ["insert"]
    # Nothing is left to report again, by a claim, a pop or the reaper.
    assert claim(driver, "q") is None
    assert driver.messages.pop(PROJECT, "q", 5) == []
    driver.reap()
    assert ended == [events.EXPIRED] * 3
    assert agree(driver, "q") == QueueCounts(0, 2, 0)


def test_a_pop_meeting_expired_messages_reports_them_with_what_it_popped(backend, clock):
    ended: list[str] = []
    driver = backend.driver(clock, endings=ended.extend)
    [gone] = post(driver, "q", ttl=60)
    [live] = post(driver, "q", ttl=3600)
    clock.advance(61)
    assert [m.id for m in driver.messages.pop(PROJECT, "q", 5)] == [live]
    assert sorted(ended) == [events.EXPIRED, events.POPPED]
    assert [e.message_id for e in expired_events(driver, "q")] == [gone]


def test_a_claim_racing_the_reaper_leaves_each_expired_message_reported_once(backend,
                                                                             clock):
    ended: list[str] = []
    rivals: list[str] = []
    driver = backend.driver(clock, endings=ended.extend)
    rival = backend.driver(clock, endings=rivals.extend)
    gone = post(driver, "q", 3, ttl=60)
    [live] = post(driver, "q", ttl=3600)
    clock.advance(61)
    # The rival's reaper removes them all between this claim's read and its removals.
    with interloper(backend, rival.reap, "find_one_and_delete"):
        taken = claim(driver, "q", limit=10)
    assert [m.id for m in taken.messages] == [live]
    assert (ended, rivals) == ([], [events.EXPIRED] * 3)
    assert sorted(e.message_id for e in expired_events(driver, "q")) == sorted(gone)


def test_two_reapers_at_once_report_each_expired_message_once(backend, clock,
                                                             monkeypatch):
    # Small batches, so that the reapers race through several (mongomock scans the
    # whole collection for each statement: a server's batch would be slow here).
    monkeypatch.setattr(expiry, "REAP_BATCH", 16)
    ended: list[list[str]] = [[] for _ in range(3)]
    drivers = [backend.driver(clock, endings=mine.extend) for mine in ended]
    queues = [("proj", "a"), ("proj", "b"), ("other", "a")]
    ids: dict[tuple[str, str], list[str]] = {}
    for project, queue in queues:
        batch = [NewMessage(n, 60, 0) for n in range(40)]
        ids[(project, queue)] = drivers[0].messages.post(project, queue, CLIENT, batch)
    kept = post(drivers[0], "a", 5, ttl=3600)
    clock.advance(61)
    start = threading.Barrier(len(drivers) + 1)

    def reap(driver: Driver) -> None:
        start.wait()
        driver.reap()

    def claims() -> None:  # a claim meets them too, and removes what it meets
        start.wait()
        while claim(drivers[0], "a", limit=5) is None and len(sum(ended, [])) < 120:
            pass

    with ThreadPoolExecutor(len(drivers) + 1) as pool:
        done = [pool.submit(reap, driver) for driver in drivers[1:]]
        done += [pool.submit(claims), pool.submit(reap, drivers[0])]
        for future in done:
            future.result(timeout=120)
    assert sum(len(mine) for mine in ended) == 120
    assert set(sum(ended, [])) == {events.EXPIRED}
    assert sum(1 for mine in ended if mine) >= 2, "the reapers did not overlap"
    for (project, queue), posted in ids.items():
        reported = [e.message_id for e in expired_events(drivers[0], queue, project)]
        assert sorted(reported) == sorted(posted), (project, queue)
    assert backend.db.messages.count_documents({}) == len(kept)
    assert agree(drivers[0], "a") == QueueCounts(0, 5, 0)  # the claim took the live ones
    for project, queue in queues[1:]:
        assert drivers[0].queues.counts(project, queue) == QueueCounts(0, 0, 0)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_reaper_thread_empties_the_queues_nobody_touches(backend, clock):
    ended: list[str] = []
    driver = backend.driver(clock, reap_interval=1, endings=ended.extend)
    gone = post(driver, "idle", 5, ttl=60)
    [kept] = post(driver, "idle", ttl=3600)
    clock.advance(61)
    wait_for(lambda: len(ended) == 5)
    assert ended == [events.EXPIRED] * 5
    assert sorted(e.message_id for e in expired_events(driver, "idle")) == sorted(gone)
    assert [doc["_id"] for doc in backend.db.messages.find()] == [ObjectId(kept)]
    lease = backend.db.locks.find_one({"_id": "reaper"})
    assert lease["h"] == f"{socket.gethostname()}:{os.getpid()}"
    reaper = driver._reaper
    driver.close()
    assert not reaper.running


def test_a_driver_reaps_in_the_background_only_when_told_to(backend, clock):
    assert backend.driver(clock)._reaper is None  # tests and audits reap themselves
    assert backend.driver(clock, reap_interval=0)._reaper is None


def test_the_lease_grants_one_pass_at_a_time_across_processes(backend, clock):
    first, second = backend.driver(clock), backend.driver(clock)
    assert first._expiry.lease(0.9)
    assert not second._expiry.lease(0.9)
    assert not first._expiry.lease(0.9)  # its own pass is under way too
    clock.advance(0.9)
    assert second._expiry.lease(0.9)
    assert not first._expiry.lease(0.9)
    # Processes racing for a lapsed lease: one gets it.
    clock.advance(1)
    start = threading.Barrier(8)

    def bid(driver: Driver) -> bool:
        start.wait()
        return driver._expiry.lease(0.9)

    with ThreadPoolExecutor(8) as pool:
        granted = list(pool.map(bid, [first, second] * 4))
    assert granted.count(True) == 1


def test_of_two_processes_reapers_one_runs_each_pass(backend, clock, monkeypatch):
    passes: list[float] = []
    bids: list[bool] = []
    lease, reap = Expiry.lease, Driver.reap_blocking

    def bidding(bidder: Expiry, seconds: float) -> bool:
        granted = lease(bidder, seconds)
        bids.append(granted)
        return granted

    def reaping(driver: Driver) -> None:
        passes.append(clock.now)
        reap(driver)

    monkeypatch.setattr(Expiry, "lease", bidding)
    monkeypatch.setattr(Driver, "reap_blocking", reaping)
    ended: list[str] = []
    for _ in range(2):
        backend.driver(clock, reap_interval=1, endings=ended.extend)
    post(backend.drivers[0], "q", 4, ttl=60)
    clock.advance(61)
    wait_for(lambda: len(passes) == 1)
    # Both bid every second; the lease, 0.9 s of the primary's clock, is still held.
    wait_for(lambda: len(bids) >= 5)
    assert passes == [clock.now] and ended == [events.EXPIRED] * 4
    clock.advance(0.9)
    wait_for(lambda: len(passes) == 2)
    bids.clear()
    wait_for(lambda: len(bids) >= 4)
    assert len(passes) == 2 and passes[1] == clock.now


def test_the_metrics_counter_counts_expired_messages(backend, clock, make_conf):
    metrics = Metrics()
    client = testing.TestClient(create_app(
        make_conf(), driver=backend.driver(clock, endings=metrics.count_endings).target,
        metrics=metrics))
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}

    def expired_total() -> float:
        result = client.simulate_get("/metrics")
        [value] = [line.split()[1] for line in result.text.splitlines()
                   if line.startswith("delayq_messages_expired_total ")]
        return float(value)

    before = expired_total()
    result = client.simulate_post("/v2/queues/q/messages", headers=headers, json={
        "messages": [{"body": n, "ttl": 60} for n in range(3)]})
    assert result.status_code == 201, result.text
    clock.advance(61)
    backend.drivers[0].reap()
    assert expired_total() - before == 3


def test_an_audit_opens_the_store_without_a_reaper(tmp_path):
    from delayq.spark_jobs.store import StoreLocation, load_conf

    conf = load_conf(StoreLocation(uri="mongodb://127.0.0.1:27017/?replicaSet=rs0"))
    assert conf["drivers:message_store:mongodb"].reap_interval == 0
    # A configuration file that turns every reaper on: the audit turns them off.
    groups = ("mongodb", "redis", "swift")
    config = tmp_path / "delayq.conf"
    config.write_text("[drivers]\nmessage_store = swift\n" + "".join(
        f"[drivers:message_store:{name}]\nreap_interval = 5\n" for name in groups))
    conf = load_conf(StoreLocation(config_file=str(config)))
    assert [conf[f"drivers:message_store:{name}"].reap_interval for name in groups] == [
        0, 0, 0]
