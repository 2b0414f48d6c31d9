"""Dead-letter queues (docs/user-guide.md): every rule, on every driver."""

from __future__ import annotations

import pytest

from delayq import errors
from tests.contract.helpers import PROJECT, claim, claimed_ids, create, listed_ids, post

CLAIM_TTL = 60


def dead_letter_queue(broker, name="q", target="dlq", max_claim_count=2, **extra):
    create(broker, name, _max_claim_count=max_claim_count, _dead_letter_queue=target,
           **extra)


def claim_and_expire(broker, clock, queue="q", **kwargs):
    """Claim, then let the claim lapse; returns the claimed ids."""
    ids = claimed_ids(broker, queue, ttl=CLAIM_TTL, **kwargs)
    clock.advance(CLAIM_TTL)
    return ids


@pytest.mark.parametrize("metadata, attribute", [
    ({"_max_claim_count": 3}, "_dead_letter_queue"),
    ({"_dead_letter_queue": "dlq"}, "_max_claim_count"),
    ({"_max_claim_count": 0, "_dead_letter_queue": "dlq"}, "_max_claim_count"),
    ({"_max_claim_count": "3", "_dead_letter_queue": "dlq"}, "_max_claim_count"),
    ({"_max_claim_count": True, "_dead_letter_queue": "dlq"}, "_max_claim_count"),
    ({"_max_claim_count": 2.0, "_dead_letter_queue": "dlq"}, "_max_claim_count"),
    ({"_max_claim_count": 2, "_dead_letter_queue": "no spaces"}, "_dead_letter_queue"),
    ({"_max_claim_count": 2, "_dead_letter_queue": 7}, "_dead_letter_queue"),
    ({"_max_claim_count": 2, "_dead_letter_queue": "q"}, "_dead_letter_queue"),
    ({"_max_claim_count": 2, "_dead_letter_queue": "dlq",
      "_dead_letter_queue_messages_ttl": 59}, "_dead_letter_queue_messages_ttl"),
    ({"_max_claim_count": 2, "_dead_letter_queue": "dlq",
      "_dead_letter_queue_messages_ttl": 1209601}, "_dead_letter_queue_messages_ttl"),
    ({"_max_claim_count": 2, "_dead_letter_queue": "dlq",
      "_dead_letter_queue_messages_ttl": "60"}, "_dead_letter_queue_messages_ttl"),
])
def test_invalid_dead_letter_attributes_are_refused_by_name(broker, metadata, attribute):
    with pytest.raises(errors.ValidationError, match=attribute):
        create(broker, "q", **metadata)
    assert broker.driver.queues.get(PROJECT, "q") is None


def test_patch_cannot_leave_half_a_dead_letter_policy(broker):
    dead_letter_queue(broker)
    with pytest.raises(errors.ValidationError, match="_max_claim_count"):
        broker.patch_queue(PROJECT, "q", [
            {"op": "remove", "path": "/metadata/_max_claim_count"}])
    assert broker.queue_metadata(PROJECT, "q")["_max_claim_count"] == 2


def test_dead_letter_attributes_are_reported_and_null_when_unset(broker):
    create(broker, "plain")
    metadata = broker.queue_metadata(PROJECT, "plain")
    assert metadata["_max_claim_count"] is None
    assert metadata["_dead_letter_queue"] is None
    assert metadata["_dead_letter_queue_messages_ttl"] is None
    dead_letter_queue(broker, _dead_letter_queue_messages_ttl=120)
    metadata = broker.queue_metadata(PROJECT, "q")
    assert (metadata["_max_claim_count"], metadata["_dead_letter_queue"],
            metadata["_dead_letter_queue_messages_ttl"]) == (2, "dlq", 120)


def test_each_claim_that_returns_a_message_counts(broker, clock):
    create(broker, "q")
    [mid] = post(broker, "q", "x")
    assert broker.get_message(PROJECT, "q", mid).claim_count == 0
    for expected in (1, 2, 3):
        result = claim(broker, "q", ttl=CLAIM_TTL)
        assert [(m.id, m.claim_count) for m in result.messages] == [(mid, expected)]
        clock.advance(CLAIM_TTL)
    assert broker.get_message(PROJECT, "q", mid).claim_count == 3


def test_released_claims_count_too(broker):
    dead_letter_queue(broker, max_claim_count=1)
    [mid] = post(broker, "q", "x")
    result = claim(broker, "q")
    broker.release_claim(PROJECT, "q", result.id)
    assert claim(broker, "q") is None
    assert broker.get_message(PROJECT, "dlq", mid).claim_count == 1


def test_message_moves_when_found_claimed_max_times(broker, clock):
    dead_letter_queue(broker, max_claim_count=2)
    [mid] = post(broker, "q", {"order": 7})
    assert claim_and_expire(broker, clock) == [mid]
    assert claim_and_expire(broker, clock) == [mid]
    assert claim(broker, "q") is None
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", mid)
    moved = broker.get_message(PROJECT, "dlq", mid)
    assert moved.body == {"order": 7}


def test_claim_keeps_looking_after_a_move(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [worn] = post(broker, "q", "worn")
    assert claim_and_expire(broker, clock, limit=1) == [worn]
    [fresh] = post(broker, "q", "fresh")
    assert claimed_ids(broker, "q", limit=1) == [fresh]
    assert [m.id for m in broker.get_messages(PROJECT, "dlq", [worn])] == [worn]


def test_moved_message_keeps_id_body_creation_time_and_claim_count(broker, clock):
    dead_letter_queue(broker, max_claim_count=3)
    [mid] = post(broker, "q", {"payload": [1, 2, 3]})
    created = broker.get_message(PROJECT, "q", mid).created
    for _ in range(3):
        claim_and_expire(broker, clock)
    move_time = clock.now
    assert claim(broker, "q") is None
    moved = broker.get_message(PROJECT, "dlq", mid)
    assert moved.id == mid
    assert moved.body == {"payload": [1, 2, 3]}
    assert moved.created == created
    assert moved.claim_count == 3
    assert moved.source_queue == "q"
    assert moved.moved_at == move_time


def test_moved_message_is_free_listable_and_claimable_at_once(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [mid] = post(broker, "q", "x")
    claim_and_expire(broker, clock)
    assert claim(broker, "q") is None
    stats = broker.stats(PROJECT, "dlq")
    assert (stats.free, stats.claimed, stats.delayed) == (1, 0, 0)
    assert listed_ids(broker, "dlq") == [mid]
    result = claim(broker, "dlq")
    assert [(m.id, m.claim_count) for m in result.messages] == [(mid, 2)]


def test_moved_message_from_a_delayed_queue_is_not_delayed_again(broker, clock):
    dead_letter_queue(broker, max_claim_count=1, _default_message_delay=30)
    create(broker, "dlq", _default_message_delay=600)
    [mid] = post(broker, "q", "x")
    clock.advance(30)
    claim_and_expire(broker, clock)
    assert claim(broker, "q") is None
    assert claimed_ids(broker, "dlq") == [mid]


def test_dead_letter_queue_is_created_by_the_first_move(broker, clock):
    dead_letter_queue(broker, target="graveyard", max_claim_count=1)
    post(broker, "q", "x")
    claim_and_expire(broker, clock)
    assert broker.driver.queues.get(PROJECT, "graveyard") is None
    assert claim(broker, "q") is None
    assert broker.driver.queues.get(PROJECT, "graveyard") == {}
    assert broker.stats(PROJECT, "graveyard").total == 1


def test_dead_letter_ttl_replaces_the_message_ttl(broker, clock):
    dead_letter_queue(broker, max_claim_count=1, _dead_letter_queue_messages_ttl=120)
    [mid] = post(broker, "q", "x", ttl=86400)
    claim_and_expire(broker, clock)
    assert claim(broker, "q") is None
    moved = broker.get_message(PROJECT, "dlq", mid)
    assert moved.ttl == 120
    clock.advance(119.9)
    assert broker.get_message(PROJECT, "dlq", mid)
    clock.advance(0.1)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "dlq", mid)
    assert claim(broker, "dlq") is None


def test_without_dead_letter_ttl_the_message_keeps_its_expiry(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [mid] = post(broker, "q", "x", ttl=600)
    expires = broker.get_message(PROJECT, "q", mid).expires
    claim_and_expire(broker, clock)
    assert claim(broker, "q") is None
    moved = broker.get_message(PROJECT, "dlq", mid)
    assert (moved.ttl, moved.expires) == (600, expires)
    clock.advance(expires - clock.now)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "dlq", mid)


def test_claims_do_not_stretch_the_expiry_a_moved_message_keeps(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [mid] = post(broker, "q", "x", ttl=600)
    claimed = claim(broker, "q", ttl=500, grace=500)  # message now lives until +1000
    broker.release_claim(PROJECT, "q", claimed.id)
    clock.advance(100)
    assert claim(broker, "q") is None
    moved = broker.get_message(PROJECT, "dlq", mid)
    assert moved.expires == moved.created + 600
    clock.advance(500)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "dlq", mid)


def test_queue_without_policy_never_moves(broker, clock):
    create(broker, "q")
    [mid] = post(broker, "q", "x", ttl=3600)
    for _ in range(10):
        assert claim_and_expire(broker, clock) == [mid]


def test_dead_letter_queue_is_scoped_to_the_project(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    post(broker, "q", "x")
    claim_and_expire(broker, clock)
    assert claim(broker, "q") is None
    assert broker.stats("someone-else", "dlq").total == 0
    assert broker.stats(PROJECT, "dlq").total == 1


def test_a_message_is_never_in_both_queues_or_neither(broker, clock):
    dead_letter_queue(broker, max_claim_count=1)
    ids = post(broker, "q", *range(15))
    claim_and_expire(broker, clock, limit=20)
    for _ in range(3):
        claim(broker, "q", limit=5)
        in_source = {m.id for m in broker.get_messages(PROJECT, "q", ids)}
        in_target = {m.id for m in broker.get_messages(PROJECT, "dlq", ids)}
        assert not in_source & in_target
        assert in_source | in_target == set(ids)
