"""Queue names with dots, on every driver, wherever a name is stored or encoded: queue
keys and containers, listings, dead-letter moves (the policy names the target), redrives
(each message names its source), the event trail and its audit reads.

Names are chosen so that a scheme that took a dot for a separator would mix them up:
``a.b`` beside ``a``, ``a-b`` and ``ab``, in a project whose id has dots too.
"""

from __future__ import annotations

from delayq import events
from tests.contract.helpers import claim, claimed_ids, create, post

PROJECT = "acme.eu"
NEIGHBOURS = ("a", "a-b", "a.b", "a.b.c", "ab", "b.a")
CLAIM_TTL = 60


def listed(broker, queue: str) -> list[str]:
    messages, _ = broker.list_messages(PROJECT, queue, client_id="lister", marker=None,
                                       limit=20, echo=True, include_claimed=True,
                                       include_delayed=True)
    return [m.body for m in messages]


def test_dotted_names_are_queues_of_their_own(broker, driver):
    for name in NEIGHBOURS:
        post(broker, name, f"in {name}", project=PROJECT)
    for name in NEIGHBOURS:
        assert listed(broker, name) == [f"in {name}"]
        assert broker.stats(PROJECT, name).total == 1
    assert [name for name, _ in broker.list_queues(PROJECT, None, 20)] == sorted(NEIGHBOURS)
    assert [name for name, _ in broker.list_queues(PROJECT, "a.b", 20)] == ["a.b.c", "ab",
                                                                            "b.a"]
    assert broker.count_queues(PROJECT) == len(NEIGHBOURS)
    assert broker.count_queues("acme") == 0
    assert [queue for _, queue in driver.trail.queues(PROJECT)] == sorted(NEIGHBOURS)

    broker.delete_queue(PROJECT, "a.b")
    assert broker.stats(PROJECT, "a.b").total == 0
    for name in set(NEIGHBOURS) - {"a.b"}:
        assert listed(broker, name) == [f"in {name}"]


def test_a_dotted_dead_letter_queue_receives_moves_and_redrives_send_them_back(broker,
                                                                              driver, clock):
    source, target = "orders.eu", "orders.eu.dlq"
    create(broker, source, project=PROJECT, _max_claim_count=1, _dead_letter_queue=target)
    assert broker.queue_metadata(PROJECT, source)["_dead_letter_queue"] == target
    [mid] = post(broker, source, "order 1", project=PROJECT)
    assert claimed_ids(broker, source, ttl=CLAIM_TTL, project=PROJECT) == [mid]
    clock.advance(CLAIM_TTL)
    assert claim(broker, source, project=PROJECT) is None  # moved

    [moved] = broker.get_messages(PROJECT, target, [mid])
    assert moved.source_queue == source
    [move] = [e for e in driver.trail.events(PROJECT, source)
              if e.kind == events.DEAD_LETTERED]
    assert (move.source, move.target) == (source, target)
    assert [m.id for m in driver.trail.messages(PROJECT, target)] == [mid]

    assert broker.redrive(PROJECT, target) == 1
    assert listed(broker, source) == ["order 1"]
    [redriven] = [e for e in driver.trail.events(PROJECT, target)
                  if e.kind == events.REDRIVEN]
    assert (redriven.source, redriven.target) == (target, source)
    assert broker.redrive(PROJECT, source, destination="orders.retry.v2") == 1
    assert listed(broker, "orders.retry.v2") == ["order 1"]
