"""Retry waits and hand-backs on the MongoDB driver, beyond the shared contract suite.

How they reach MongoDB: a claim under a retry policy writes each message's wait in its
claiming update (still one bulk write, pinned as before), a renewal and a release in the
one ``findAndModify`` per message they make anyway, a hand-back is one conditional
``findAndModify``; every message's availability stays ``max(d, ce)``. And the /metrics
gauges' tallies stay exact through all of them, however concurrent requests race.

Runs on mongomock and, with DELAYQ_TEST_MONGODB_URI, on a real server too (the fixtures
of ``tests.test_mongo_driver``).
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from bson import ObjectId

from delayq import errors, events
from delayq.queue import DeadLetterPolicy, QueueCounts
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
    trail,
)

# The driver tests' fixtures, taken by name: a real server's or mongomock's database.
command_spy = driver_tests.command_spy
backend = driver_tests.backend
clock = driver_tests.clock

# Waits after attempts 1, 2 and 3 and after: 10, 20, then 40 seconds.
BACKOFF = Backoff((10, 20, 40))


def claim_waiting(driver: Driver, queue: str, limit: int = 10, *, ttl: int = 60,
                  backoff: Backoff = BACKOFF):
    return driver.claims.create(PROJECT, queue, ttl=ttl, grace=60, limit=limit, dead_letter=None,
                        backoff=backoff)


def test_a_claim_writes_each_messages_wait_in_its_claiming_update(backend, clock):
    driver = backend.driver(clock)
    again, fresh = post(driver, "q", 2)
    driver.claims.release(PROJECT, "q", claim(driver, "q", limit=1).id)  # one attempt made
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
    assert driver.claims.available_in(PROJECT, "q") == pytest.approx(10)
    clock.advance(10)
    assert agree(driver, "q") == QueueCounts(1, 0, 1)
    assert [m.id for m in claim(driver, "q").messages] == [fresh]


def test_a_renewal_makes_each_message_due_its_wait_after_the_new_expiry(backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q")
    taken = claim_waiting(driver, "q", ttl=60)
    clock.advance(30)
    with backend.record() as ops:
        driver.claims.renew(PROJECT, "q", taken.id, 100, 60, BACKOFF)

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
    driver.claims.renew(PROJECT, "q", taken.id, 30, 60)  # the policy is gone: ends at 30
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
        driver.claims.release(PROJECT, "q", taken.id, backoff)

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


def test_a_hand_back_is_one_conditional_update_of_the_message(backend, clock):
    driver = backend.driver(clock)
    handed, kept = post(driver, "q", 2)
    taken = claim(driver, "q", ttl=300)
    with backend.record() as ops:
        released = driver.claims.release_message(PROJECT, "q", handed, taken.id, 30)

    due = bson_date(clock.now + 30)
    [update] = message_updates(ops)
    assert update.kind == "findAndModify"
    assert (update.filter["_id"], update.filter["c"]) == (ObjectId(handed), ObjectId(taken.id))
    assert update.filter["ce"] == {"$gt": bson_date(clock.now)}  # the claim is live
    assert update.update == {"$set": {"d": due, "a": due}, "$unset": {"c": "", "ce": ""}}
    assert [op.kind for op in ops if op.collection == "events"] == ["insert"]
    assert (released.due, released.claim_count, released.is_claimed) == (
        clock.now + 30, 1, False)
    raw = backend.raw(handed)
    assert (raw["d"], raw["a"], raw["cc"]) == (due, due, 1) and "c" not in raw
    assert backend.raw(kept)["c"] == ObjectId(taken.id)
    assert agree(driver, "q") == QueueCounts(0, 1, 1)
    [event] = [e for e in trail(driver, "q") if e.kind == events.RELEASED]
    assert (event.message_id, event.due, event.claim_count) == (handed, clock.now + 30, 1)


def test_a_refused_hand_back_writes_nothing(backend, clock):
    driver = backend.driver(clock)
    [message_id] = post(driver, "q")
    taken = claim(driver, "q", ttl=60)
    before = backend.raw(message_id)
    with backend.record() as ops, pytest.raises(errors.ClaimMismatch):
        driver.claims.release_message(PROJECT, "q", message_id, str(ObjectId()), 30)

    assert backend.raw(message_id) == before
    # The conditional update that matched nothing, then the read that tells why.
    assert [(op.kind, op.collection) for op in ops] == [
        ("findAndModify", "messages"), ("find", "messages")]
    clock.advance(60)
    with pytest.raises(errors.MessageNotClaimed):
        driver.claims.release_message(PROJECT, "q", message_id, taken.id, 30)
    assert agree(driver, "q") == QueueCounts(1, 0, 0)


def test_concurrent_retry_waits_and_hand_backs_keep_the_counts_exact(backend, clock):
    drivers = [backend.driver(clock) for _ in range(4)]
    policy = DeadLetterPolicy(3, "dlq")
    backoff = Backoff((0, 10, 25), dead_letter_at=3)
    post(drivers[0], "q", 30)
    post(drivers[0], "q", 10, delay=30)
    # Claims shared by every worker: hand-backs, renewals and releases of one claim race.
    held: list = []
    lock = threading.Lock()

    def pick(rng: random.Random, remove: bool = False):
        with lock:
            if not held:
                return None
            index = rng.randrange(len(held))
            return held.pop(index) if remove else held[index]

    def requests(worker: int) -> None:
        rng = random.Random(worker)
        driver = drivers[worker]
        for _ in range(30):
            action = rng.randrange(7)
            try:
                if action == 0:
                    post(driver, "q", rng.randint(1, 3), delay=rng.choice([0, 30]))
                elif action in (1, 2):
                    taken = driver.claims.create(PROJECT, "q", ttl=20, grace=30,
                                         limit=rng.randint(1, 4), dead_letter=policy,
                                         backoff=backoff)
                    if taken:
                        with lock:
                            held.append(taken)
                elif action == 3 and (taken := pick(rng)):
                    driver.claims.release_message(PROJECT, "q", rng.choice(taken.messages).id,
                                           taken.id, rng.choice([0, 5, 15]))
                elif action == 4 and (taken := pick(rng)):
                    driver.claims.renew(PROJECT, "q", taken.id, rng.choice([10, 40]), 30,
                                       backoff)
                elif action == 5 and (taken := pick(rng, remove=True)):
                    driver.claims.release(PROJECT, "q", taken.id, rng.choice([backoff, None]))
                elif action == 6:
                    driver.messages.pop(PROJECT, "q", rng.randint(1, 3))
            except (errors.MessageNotFound, errors.MessageNotClaimed, errors.ClaimMismatch,
                    errors.ClaimNotFound):
                pass  # another worker got there first

    for _ in range(3):
        with ThreadPoolExecutor(len(drivers)) as pool:
            list(pool.map(requests, range(len(drivers))))
        # The instants to come as well: claims end, waits and delays pass.
        for _ in range(4):
            for queue in ("q", "dlq"):
                agree(drivers[0], queue)
            clock.advance(7.0005)
