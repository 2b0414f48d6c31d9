"""Quotas (``[quotas]``) on every driver: ``max_messages_per_queue`` refuses a post that
would take a queue past it, storing none of its messages; ``max_queues_per_project``
refuses a request that would create one queue too many. Both 0: no limit.

Live messages count, delayed and claimed ones included; expired ones do not, whether or
not a reaper has removed them yet. Dead-letter moves are never refused.
"""

from __future__ import annotations

import threading

import pytest

from delayq.broker import Broker
from delayq.errors import QuotaExceeded
from delayq.synchronous import Synchronous
from delayq.validation import Limits, Quotas
from tests.contract.helpers import PROJECT, claim, create, post


def quota_broker(driver, **quotas: int) -> Broker:
    return Synchronous(Broker(driver.target, Limits(), quotas=Quotas(**quotas)))


def held(driver, queue: str) -> int:
    """The queue's live messages as its stats count them."""
    return driver.queues.stats(PROJECT, queue).total


def all_ids(broker: Broker, queue: str, limit: int = 20) -> set[str]:
    messages, _ = broker.list_messages(PROJECT, queue, client_id="lister", marker=None,
                                       limit=limit, echo=True, include_claimed=True,
                                       include_delayed=True)
    return {m.id for m in messages}


def test_a_post_up_to_the_quota_is_stored_and_one_past_it_stores_nothing(driver):
    broker = quota_broker(driver, max_messages_per_queue=25)
    first = post(broker, "q", *range(10))
    with pytest.raises(QuotaExceeded) as refused:
        post(broker, "q", *range(20))
    assert refused.value.description == (
        "Queue 'q' holds 10 messages; 20 more would pass max_messages_per_queue (25).")
    assert held(driver, "q") == 10
    assert all_ids(broker, "q") == set(first)

    second = post(broker, "q", *range(15))  # exactly the quota
    assert held(driver, "q") == 25
    with pytest.raises(QuotaExceeded, match="holds 25 messages; 1 more"):
        post(broker, "q", "one too many")
    assert held(driver, "q") == 25
    assert len(set(first) | set(second)) == 25


def test_a_post_past_the_quota_does_not_create_its_queue(driver):
    broker = quota_broker(driver, max_messages_per_queue=3)
    with pytest.raises(QuotaExceeded, match="Queue 'new' holds 0 messages; 4 more"):
        post(broker, "new", "a", "b", "c", "d")
    assert driver.queues.get(PROJECT, "new") is None
    assert broker.count_queues(PROJECT) == 0
    post(broker, "new", "a", "b", "c")
    assert held(driver, "new") == 3


def test_each_queue_has_its_own_quota(driver):
    broker = quota_broker(driver, max_messages_per_queue=2)
    post(broker, "a", 1, 2)
    post(broker, "b", 1, 2)
    post(broker, "a", 3, project="other")
    with pytest.raises(QuotaExceeded):
        post(broker, "b", 3)


def test_delayed_and_claimed_messages_count(driver, clock):
    broker = quota_broker(driver, max_messages_per_queue=4)
    create(broker, "q", _default_message_delay=60)
    post(broker, "q", "delayed", "delayed too")
    post(broker, "q", "due", "due too", delay=0)
    taken = claim(broker, "q", limit=2, ttl=600)
    assert len(taken.messages) == 2
    assert driver.queues.counts(PROJECT, "q").free == 0
    with pytest.raises(QuotaExceeded, match="holds 4 messages"):
        post(broker, "q", "one more")

    clock.advance(601)  # the claim lapsed and the delays passed: all free, still held
    with pytest.raises(QuotaExceeded, match="holds 4 messages"):
        post(broker, "q", "one more")
    broker.delete_message(PROJECT, "q", taken.messages[0].id, None)
    post(broker, "q", "one more")
    assert held(driver, "q") == 4


def test_expired_messages_do_not_count(driver, clock):
    broker = quota_broker(driver, max_messages_per_queue=3)
    post(broker, "q", "short", "short too", ttl=60)
    post(broker, "q", "long", ttl=3600)
    with pytest.raises(QuotaExceeded, match="holds 3 messages"):
        post(broker, "q", "refused")
    clock.advance(60.5)  # two expired; no reaper has run
    post(broker, "q", "a", "b")
    assert held(driver, "q") == 3
    with pytest.raises(QuotaExceeded, match="holds 3 messages"):
        post(broker, "q", "refused")


def test_dead_letter_moves_are_never_refused(driver, clock):
    broker = quota_broker(driver, max_messages_per_queue=2)
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(broker, "dlq", "already", "there")
    post(broker, "q", "x", "y")
    claim(broker, "q", limit=2, ttl=60)
    clock.advance(61)
    assert claim(broker, "q", limit=2) is None  # both moved to the full dead-letter queue
    assert held(driver, "dlq") == 4
    with pytest.raises(QuotaExceeded, match="Queue 'dlq' holds 4 messages"):
        post(broker, "dlq", "refused")


def test_zero_is_no_limit(driver):
    broker = quota_broker(driver, max_messages_per_queue=0, max_queues_per_project=0)
    for name in ("a", "b", "c"):
        create(broker, name)
    post(broker, "d", *range(20))
    post(broker, "d", *range(20))
    assert held(driver, "d") == 40
    assert broker.count_queues(PROJECT) == 4


def test_a_project_at_its_queue_quota_creates_no_queue(driver):
    broker = quota_broker(driver, max_queues_per_project=2)
    assert broker.create_queue(PROJECT, "a", {})
    post(broker, "b", "creates b")
    with pytest.raises(QuotaExceeded) as refused:
        broker.create_queue(PROJECT, "c", {})
    assert refused.value.description == (
        "The project already has 2 queues: max_queues_per_project is 2.")
    with pytest.raises(QuotaExceeded):
        post(broker, "c", "would create c")
    assert driver.queues.get(PROJECT, "c") is None

    # Queues that exist are used as ever; other projects have quotas of their own.
    assert broker.create_queue(PROJECT, "a", {}) is False
    post(broker, "a", "fine")
    post(broker, "c", "fine", project="other")

    broker.delete_queue(PROJECT, "a")
    assert broker.create_queue(PROJECT, "c", {})


def test_a_dead_letter_move_creates_its_queue_at_the_queue_quota(driver, clock):
    broker = quota_broker(driver, max_queues_per_project=1)
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(broker, "q", "x")
    claim(broker, "q", ttl=60)
    clock.advance(61)
    assert claim(broker, "q") is None
    assert held(driver, "dlq") == 1
    assert broker.count_queues(PROJECT) == 2


def test_a_redrive_to_a_missing_destination_at_the_queue_quota_moves_nothing(driver,
                                                                            clock):
    broker = quota_broker(driver, max_queues_per_project=2)
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(broker, "q", "x")
    claim(broker, "q", ttl=60)
    clock.advance(61)
    assert claim(broker, "q") is None
    with pytest.raises(QuotaExceeded, match="max_queues_per_project is 2"):
        broker.redrive(PROJECT, "dlq", destination="retry")
    assert held(driver, "dlq") == 1
    assert driver.queues.get(PROJECT, "retry") is None
    # To a queue that exists, or back to the source, it moves as ever.
    assert broker.redrive(PROJECT, "dlq", destination="q") == 1
    assert held(driver, "q") == 1


# A burst: this many requests, each in its own thread, released at once by a barrier.
BURST = 200


def burst(work, count: int = BURST) -> list[object]:
    """Run ``work(i)`` for i in range(count), each in its own thread, all released
    together; what each returned, or the exception it raised."""
    barrier = threading.Barrier(count)
    outcomes: list[object] = [None] * count

    def run(slot: int) -> None:
        barrier.wait(timeout=120)
        try:
            outcomes[slot] = work(slot)
        except BaseException as exc:  # noqa: BLE001 - reported, and asserted on
            outcomes[slot] = exc

    workers = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
        assert not worker.is_alive(), "a request of the burst still runs after 300 s"
    unexpected = [o for o in outcomes
                  if isinstance(o, BaseException) and not isinstance(o, QuotaExceeded)]
    assert unexpected == []
    return outcomes


def refused(outcomes: list[object]) -> int:
    return sum(isinstance(o, QuotaExceeded) for o in outcomes)


def test_a_burst_of_queue_creations_creates_exactly_the_quota(driver):
    broker = quota_broker(driver, max_queues_per_project=3)
    outcomes = burst(lambda i: broker.create_queue(PROJECT, f"q{i}", {}))
    assert outcomes.count(True) == 3
    assert refused(outcomes) == BURST - 3
    assert broker.count_queues(PROJECT) == 3
    created = {f"q{i}" for i, o in enumerate(outcomes) if o is True}
    assert {name for name, _ in broker.list_queues(PROJECT, None, 100)} == created


def test_a_burst_of_every_kind_of_queue_creation_creates_exactly_the_quota(driver, clock):
    """Creates, posts, subscriptions and redrives that each would make a queue."""
    broker = quota_broker(driver, max_queues_per_project=5)
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(broker, "q", *range(10))
    claim(broker, "q", limit=10, ttl=60)
    clock.advance(61)
    assert claim(broker, "q") is None  # all moved to dlq: 2 queues held, 3 to go

    def work(i: int) -> object:
        name = f"new{i}"
        match i % 4:
            case 0:
                return broker.create_queue(PROJECT, name, {})
            case 1:
                return post(broker, name, "x")
            case 2:
                return broker.create_subscription(PROJECT, name, "http://example.org/hook",
                                                  3600, {})
            case _:
                return broker.redrive(PROJECT, "dlq", destination=name, limit=1)

    outcomes = burst(work)
    assert refused(outcomes) == BURST - 3
    assert broker.count_queues(PROJECT) == 5
    names = {name for name, _ in broker.list_queues(PROJECT, None, 100)}
    made = {f"new{i}" for i, o in enumerate(outcomes) if not isinstance(o, QuotaExceeded)}
    assert names == {"q", "dlq"} | made


def test_a_refused_creation_leaves_room_for_the_next(driver):
    broker = quota_broker(driver, max_queues_per_project=2)
    burst(lambda i: broker.create_queue(PROJECT, f"q{i}", {}), count=50)
    kept = [name for name, _ in broker.list_queues(PROJECT, None, 10)]
    broker.delete_queue(PROJECT, kept[0])
    outcomes = burst(lambda i: post(broker, f"p{i}", "x"), count=50)
    assert refused(outcomes) == 49
    assert broker.count_queues(PROJECT) == 2


def test_creating_a_queue_that_exists_is_never_refused(driver):
    broker = quota_broker(driver, max_queues_per_project=1)
    create(broker, "q")
    outcomes = burst(lambda i: post(broker, "q", i) if i % 2 else
                     broker.create_queue(PROJECT, "q", {}), count=50)
    assert refused(outcomes) == 0
    assert held(driver, "q") == 25


def test_a_burst_of_posts_stores_exactly_the_quota(driver):
    broker = quota_broker(driver, max_messages_per_queue=40)
    create(broker, "q")
    outcomes = burst(lambda i: post(broker, "q", i))
    stored = [o for o in outcomes if isinstance(o, list)]
    assert len(stored) == 40
    assert refused(outcomes) == BURST - 40
    assert held(driver, "q") == 40
    assert all_ids(broker, "q", limit=100) == {i for ids in stored for i in ids}


def test_a_burst_of_posts_of_several_messages_never_passes_the_quota(driver):
    """Posts of 3: the queue may end below the quota, never above, and each post is
    stored whole or not at all."""
    broker = quota_broker(driver, max_messages_per_queue=40)
    outcomes = burst(lambda i: post(broker, "q", i, i, i), count=100)
    stored = [o for o in outcomes if isinstance(o, list)]
    assert len(stored) == 13  # 13 * 3 = 39: one more would make 42
    assert held(driver, "q") == 39


def test_concurrent_posts_end_exactly_at_the_quota(driver):
    """Threads post one message at a time until refused: the queue ends exactly at
    the quota."""
    broker = quota_broker(driver, max_messages_per_queue=40)
    threads = 4
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work() -> None:
        barrier.wait()
        try:
            while True:
                post(broker, "q", "x")
        except QuotaExceeded:
            return
        except BaseException as exc:
            failures.append(exc)
            raise

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert not worker.is_alive(), "a poster still runs after 120 s"
    assert failures == []
    assert held(driver, "q") == 40
