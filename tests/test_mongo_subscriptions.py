"""Subscriptions on the MongoDB driver, beyond the shared contract suite: their
collection and indexes, uniqueness under races and against expired documents the TTL
monitor has not removed yet, and the cheap read of the subscribed queues.

Runs on mongomock and, with DELAYQ_TEST_MONGODB_URI, on a real server too (the fixtures
of ``tests.test_mongo_driver``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from delayq.subscription import SubscriptionChange
from tests import test_mongo_driver as driver_tests
from tests.test_mongo_driver import PROJECT, bson_date, index_keys

# The driver tests' fixtures, taken by name: a real server's or mongomock's database.
command_spy = driver_tests.command_spy
backend = driver_tests.backend
clock = driver_tests.clock

HOOK = "http://127.0.0.1:9/hook"
OTHER = "https://example.com/other"


def subscribe(driver, queue: str = "q", subscriber: str = HOOK, ttl: int = 3600,
              options: dict | None = None, project: str = PROJECT) -> str | None:
    return driver.subscriptions.create(project, queue, subscriber, ttl, options or {})


def test_the_subscriptions_collection_has_its_indexes(backend):
    backend.driver()
    keys = index_keys(backend.db.subscriptions)
    assert keys["listing"]["key"] == [("p", 1), ("q", 1), ("_id", 1)]
    assert keys["subscriber"]["key"] == [("p", 1), ("q", 1), ("sb", 1)]
    assert keys["subscriber"]["unique"]
    assert keys["subscribed"]["key"] == [("e", 1), ("p", 1), ("q", 1)]
    assert keys["expiry"]["key"] == [("e", 1)]
    assert keys["expiry"]["expireAfterSeconds"] == 0


def test_a_subscription_is_one_document_with_its_options_as_json_text(backend, clock):
    driver = backend.driver(clock)
    options = {"post_headers": {"X.Dotted": "1", "$dollar": "2"}, "post_data": "$zaqar_message$"}
    sid = subscribe(driver, ttl=60, options=options)
    [doc] = backend.db.subscriptions.find()
    assert doc == {"_id": sid, "p": PROJECT, "q": "q", "sb": HOOK, "t": 60,
                   "o": json.dumps(options, separators=(",", ":")),
                   "cr": bson_date(clock.now), "e": bson_date(clock.now + 60), "cf": True}
    assert len(sid) == 32 and int(sid, 16) >= 0
    assert driver.subscriptions.get(PROJECT, "q", sid).options == options


def test_an_expired_subscription_still_stored_gives_its_subscriber_up(backend, clock):
    driver = backend.driver(clock)
    old = subscribe(driver, ttl=60)
    clock.advance(60)
    # Expired, and still stored (the TTL monitor has not come by): its key is taken.
    assert backend.db.subscriptions.count_documents({"_id": old}) == 1
    with backend.record() as ops:
        new = subscribe(driver)
    assert new is not None and new != old
    assert [doc["_id"] for doc in backend.db.subscriptions.find()] == [new]
    # The insert the unique key refused, the removal pinned on the expiry, the insert.
    assert [op.kind for op in ops] == ["insert", "delete", "insert"]
    assert ops[1].filter == {"p": PROJECT, "q": "q", "sb": HOOK,
                             "e": {"$lte": bson_date(clock.now)}}
    assert subscribe(driver) is None  # a live one is never removed


def test_an_update_takes_a_subscriber_an_expired_subscription_still_holds(backend, clock):
    driver = backend.driver(clock)
    expiring = subscribe(driver, subscriber=OTHER, ttl=60)
    sid = subscribe(driver, ttl=600)
    clock.advance(60)
    driver.subscriptions.update(PROJECT, "q", sid, SubscriptionChange(subscriber=OTHER))
    assert driver.subscriptions.get(PROJECT, "q", sid).subscriber == OTHER
    assert backend.db.subscriptions.count_documents({"_id": expiring}) == 0


def test_of_concurrent_subscriptions_of_one_subscriber_one_is_stored(backend, clock):
    drivers = [backend.driver(clock) for _ in range(4)]
    subscribe(drivers[0], ttl=60)
    clock.advance(60)  # an expired one holds the key: every creator meets it

    def create(n: int) -> str | None:
        return subscribe(drivers[n % len(drivers)])

    with ThreadPoolExecutor(len(drivers)) as pool:
        created = list(pool.map(create, range(12)))
    [sid] = [c for c in created if c is not None]
    assert [s.id for s in drivers[0].subscriptions.page(PROJECT, "q", None, 10)] == [sid]
    assert backend.db.subscriptions.count_documents({}) == 1


def test_the_subscribed_queues_are_one_aggregation_over_the_live_range(backend, clock):
    driver = backend.driver(clock)
    for queue, subscriber, ttl in (("b", HOOK, 600), ("b", OTHER, 600), ("a", HOOK, 60),
                                   ("gone", HOOK, 30)):
        subscribe(driver, queue, subscriber, ttl)
    clock.advance(30)
    with backend.record() as ops:
        assert driver.subscriptions.subscribed_queues() == [(PROJECT, "a"), (PROJECT, "b")]
    [read] = ops
    assert (read.kind, read.collection, read.hint) == ("aggregate", "subscriptions",
                                                       "subscribed")
    assert read.filter == {"e": {"$gt": bson_date(clock.now)}}
    if backend.name == "mongodb":
        # Covered by the index: its keys are read, no subscription document.
        plan = backend.db.command(
            "explain", {"aggregate": "subscriptions", "cursor": {}, "hint": "subscribed",
                        "pipeline": [{"$match": read.filter},
                                     {"$group": {"_id": {"p": "$p", "q": "$q"}}}]},
            verbosity="queryPlanner")
        text = json.dumps(plan, default=str)
        assert "IXSCAN" in text and "FETCH" not in text and "COLLSCAN" not in text, text


@pytest.mark.parametrize("ttl", [None, 120])
def test_an_update_is_one_conditional_write_of_what_it_changes(backend, clock, ttl):
    driver = backend.driver(clock)
    sid = subscribe(driver, ttl=60)
    with backend.record() as ops:
        driver.subscriptions.update(PROJECT, "q", sid, SubscriptionChange(
            ttl=ttl, options={"post_headers": {}}))
    [write] = ops
    assert (write.kind, write.collection) == ("update", "subscriptions")
    assert write.filter == {"_id": sid, "p": PROJECT, "q": "q",
                            "e": {"$gt": bson_date(clock.now)}}
    changed = {"o": '{"post_headers":{}}'}
    if ttl is not None:
        changed.update(t=ttl, e=bson_date(clock.now + ttl))
    assert write.update == {"$set": changed}


def test_a_document_without_the_confirmed_field_reads_as_confirmed(backend, clock):
    """Written before confirmation existed (or by a Zaqar-era copy): confirmed."""
    driver = backend.driver(clock)
    sid = subscribe(driver, ttl=60)
    backend.db.subscriptions.update_one({"_id": sid}, {"$unset": {"cf": ""}})
    assert driver.subscriptions.get(PROJECT, "q", sid).confirmed is True
