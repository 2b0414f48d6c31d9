"""``Driver.queue_counts`` (the /metrics gauges) agrees with ``queue_stats`` through
every transition, on every driver: posts with and without delay, delays passing, claims,
renewals, releases, deletes, pops, dead-letter moves, expiries, purges and a queue
deleted and made again.

Instants are checked between milliseconds: SQLite counts to the millisecond."""

from __future__ import annotations

from delayq.queue import QueueCounts
from delayq.validation import MessageEdit
from tests.contract.helpers import PROJECT, claim, create, post


def agree(driver, queue: str) -> QueueCounts:
    stats = driver.queues.stats(PROJECT, queue)
    counts = driver.queues.counts(PROJECT, queue)
    assert counts == QueueCounts(stats.free, stats.claimed, stats.delayed)
    return counts


def test_counts_agree_with_stats_through_every_transition(broker, driver, clock):
    create(broker, "q", _default_message_delay=30, _max_claim_count=2,
           _dead_letter_queue="dlq")
    assert agree(driver, "q") == QueueCounts(0, 0, 0)
    assert agree(driver, "absent") == QueueCounts(0, 0, 0)
    post(broker, "q", "a", "b", "c", delay=10)
    post(broker, "q", "now", "now too", delay=0)
    post(broker, "q", "short", ttl=60, delay=0)
    post(broker, "q", "default delay")
    assert agree(driver, "q") == QueueCounts(3, 0, 4)

    clock.advance(10.0005)  # the delay-10 messages are due
    assert agree(driver, "q") == QueueCounts(6, 0, 1)
    first = claim(broker, "q", limit=2, ttl=60, grace=60)
    assert agree(driver, "q") == QueueCounts(4, 2, 1)
    clock.advance(30)
    broker.renew_claim(PROJECT, "q", first.id, 120, 60)
    assert agree(driver, "q") == QueueCounts(5, 2, 0)
    broker.release_claim(PROJECT, "q", first.id)
    assert agree(driver, "q") == QueueCounts(7, 0, 0)

    second = claim(broker, "q", limit=3, ttl=60, grace=60)
    broker.delete_message(PROJECT, "q", second.messages[0].id, second.id)
    assert agree(driver, "q") == QueueCounts(4, 2, 0)
    clock.advance(60.25)  # the claim lapses; "short" (ttl 60) expires
    counts = agree(driver, "q")
    assert counts.claimed == 0 and counts.delayed == 0

    # Messages claimed twice move to the dead-letter queue instead of being claimed.
    third = claim(broker, "q", limit=10, ttl=60, grace=60)
    agree(driver, "q")
    agree(driver, "dlq")
    if third is not None:
        broker.delete_messages(PROJECT, "q", [third.messages[0].id])
        agree(driver, "q")
    broker.pop(PROJECT, "dlq", 1)
    agree(driver, "dlq")

    broker.purge_queue(PROJECT, "q")
    assert agree(driver, "q") == QueueCounts(0, 0, 0)
    broker.delete_queue(PROJECT, "dlq")
    assert agree(driver, "dlq") == QueueCounts(0, 0, 0)
    create(broker, "dlq")
    post(broker, "dlq", "again")
    assert agree(driver, "dlq") == QueueCounts(1, 0, 0)

    # Hours later (past tally blocks are forgotten by then), writes and counts still agree.
    post(broker, "q", "long", ttl=86400, delay=900)
    clock.advance(7200.125)
    post(broker, "q", "later", delay=60)
    claim(broker, "q", limit=1, ttl=600, grace=60)
    assert agree(driver, "q") == QueueCounts(0, 1, 1)


def test_counts_follow_a_redrive(broker, driver, clock):
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(broker, "q", "a", "b", "c")
    claim(broker, "q", limit=3, ttl=60, grace=60)
    clock.advance(60.0005)
    assert claim(broker, "q") is None  # all three moved
    broker.patch_queue(PROJECT, "dlq", [
        {"op": "add", "path": "/metadata/_default_message_delay", "value": 60}])
    post(broker, "dlq", "delayed", delay=60)
    held = claim(broker, "dlq", limit=1, ttl=60, grace=60)
    assert held is not None
    assert agree(driver, "dlq") == QueueCounts(2, 1, 1)
    assert broker.redrive(PROJECT, "dlq", destination="back") == 3
    assert agree(driver, "dlq") == QueueCounts(0, 1, 0)
    assert agree(driver, "back") == QueueCounts(3, 0, 0)
    assert agree(driver, "q") == QueueCounts(0, 0, 0)


def test_counts_follow_edits_of_the_delay(broker, driver, clock):
    create(broker, "q", _default_message_delay=60)
    a, b = post(broker, "q", "a", "b")
    assert agree(driver, "q") == QueueCounts(0, 0, 2)
    broker.edit_message(PROJECT, "q", a, MessageEdit(delay=0))
    assert agree(driver, "q") == QueueCounts(1, 0, 1)
    broker.edit_message(PROJECT, "q", a, MessageEdit(delay=600))
    broker.edit_message(PROJECT, "q", b, MessageEdit(body="new"))
    assert agree(driver, "q") == QueueCounts(0, 0, 2)
    clock.advance(60.0005)
    assert agree(driver, "q") == QueueCounts(1, 0, 1)
