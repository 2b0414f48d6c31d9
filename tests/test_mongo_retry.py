"""Retry waits on the MongoDB driver, beyond the shared contract suite.

How they reach MongoDB: a claim under a retry policy writes each message's wait in its
claiming update (still one bulk write, pinned as before), a renewal and a release in the
one ``findAndModify`` per message they make anyway; every message's availability stays
``max(d, ce)``, and the /metrics gauges' tallies count each as claimed, then delayed.

Runs on mongomock and, with DELAYQ_TEST_MONGODB_URI, on a real server too (the fixtures
of ``tests.test_mongo_driver``).
"""

from __future__ import annotations

import pytest
from bson import ObjectId

from delayq.queue import QueueCounts
from delayq.retry import Backoff
from delayq.storage.mongo.driver import Driver
from tests import test_mongo_driver as driver_tests
from tests.test_mongo_driver import (
    PROJECT,
    agree,
    bson_date,
    claim,
    message_updates,
    post,
)

# The driver tests' fixtures, taken by name: a real server's or mongomock's database.
command_spy = driver_tests.command_spy
backend = driver_tests.backend
clock = driver_tests.clock

# Waits after attempts 1, 2 and 3 and after: 10, 20, then 40 seconds.
BACKOFF = Backoff((10, 20, 40))


def claim_waiting(driver: Driver, queue: str, limit: int = 10, *, ttl: int = 60,
                  backoff: Backoff = BACKOFF):
    return driver.claim(PROJECT, queue, ttl=ttl, grace=60, limit=limit, dead_letter=None,
                        backoff=backoff)


def test_a_claim_writes_each_messages_wait_in_its_claiming_update(backend, clock):
    driver = backend.driver(clock)
    again, fresh = post(driver, "q", 2)
    driver.release_claim(PROJECT, "q", claim(driver, "q", limit=1).id)  # one attempt made
    with backend.record() as ops:
        taken = claim_waiting(driver, "q", ttl=60)

    expires = clock.now + 60
    waits = {again: 20, fresh: 10}  # the second attempt of one, the first of the other
    assert {m.id: m.due for m in taken.messages} == {i: expires + w for i, w in waits.items()}
    updates = message_updates(ops)
    # The claim's bulk write as without a policy: one pinned update per message.
    assert [op.kind for op in updates] == ["update", "update"]
    for op in updates:
        due = bson_date(expires + waits[str(op.filter["_id"])])
        assert op.update["$set"] == {"c": ObjectId(taken.id), "ce": bson_date(expires),
                                     "d": due, "a": due}
        assert "a" in op.filter and "cc" in op.filter
    for message_id, wait in waits.items():
        raw = backend.raw(message_id)
        assert raw["d"] == raw["a"] == bson_date(expires + wait)
    assert agree(driver, "q") == QueueCounts(0, 2, 0)  # claimed, whatever their due time
    clock.advance(60)
    assert agree(driver, "q") == QueueCounts(0, 0, 2)
    assert driver.available_in(PROJECT, "q") == pytest.approx(10)
    clock.advance(10)
    assert agree(driver, "q") == QueueCounts(1, 0, 1)
    assert [m.id for m in claim(driver, "q").messages] == [fresh]


def test_a_renewal_makes_each_message_due_its_wait_after_the_new_expiry(backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q")
    taken = claim_waiting(driver, "q", ttl=60)
    clock.advance(30)
    with backend.record() as ops:
        driver.renew_claim(PROJECT, "q", taken.id, 100, 60, BACKOFF)

    [update] = message_updates(ops)
    assert update.kind == "findAndModify" and update.filter["c"] == ObjectId(taken.id)
    raw = backend.raw(message_id)
    assert (raw["ce"], raw["d"], raw["a"]) == (
        bson_date(clock.now + 100), bson_date(clock.now + 110), bson_date(clock.now + 110))
    clock.advance(100)
    assert agree(driver, "q") == QueueCounts(0, 0, 1)
    clock.advance(10)
    assert agree(driver, "q") == QueueCounts(1, 0, 0)


def test_a_renewal_without_a_policy_keeps_a_later_due_time_and_its_availability(
        backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q")
    taken = claim_waiting(driver, "q", ttl=60)  # due at 70
    driver.renew_claim(PROJECT, "q", taken.id, 30, 60)  # the policy is gone: ends at 30
    assert agree(driver, "q") == QueueCounts(0, 1, 0)
    raw = backend.raw(message_id)
    assert (raw["ce"], raw["d"], raw["a"]) == (
        bson_date(clock.now + 30), bson_date(clock.now + 70), bson_date(clock.now + 70))
    clock.advance(30)
    assert agree(driver, "q") == QueueCounts(0, 0, 1)
    assert claim(driver, "q") is None
    clock.advance(40)
    assert claim(driver, "q").messages[0].id == message_id


@pytest.mark.parametrize("backoff", [BACKOFF, None], ids=["policy", "none"])
def test_a_release_makes_each_message_due_its_wait_or_at_once(backend, clock, backoff):
    driver = backend.driver(clock)
    ids = post(driver, "q", 2)
    taken = claim_waiting(driver, "q", ttl=300)  # due 10 s after the claim's end
    clock.advance(5)
    with backend.record() as ops:
        driver.release_claim(PROJECT, "q", taken.id, backoff)

    updates = message_updates(ops)
    assert [op.kind for op in updates] == ["findAndModify", "findAndModify"]
    # Pinned on the claim and the due time read: a hand-back or renewal in between wins.
    assert all(op.filter["c"] == ObjectId(taken.id) and "d" in op.filter for op in updates)
    due = clock.now + (10 if backoff else 0)
    for message_id in ids:
        raw = backend.raw(message_id)
        assert not {"c", "ce"} & raw.keys()
        assert raw["d"] == raw["a"] == bson_date(due)
    assert agree(driver, "q") == (QueueCounts(0, 0, 2) if backoff else QueueCounts(2, 0, 0))
