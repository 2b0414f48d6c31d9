"""Retry with backoff (a queue's ``_retry_policy``) and handing one message back from its
claim, on every driver: a message whose claim ends without deleting it waits before the
next claim may take it, and counts as delayed meanwhile."""

from __future__ import annotations

import pytest

from delayq import errors, events
from tests.contract.helpers import (
    PROJECT,
    claim,
    claimed_ids,
    create,
    listed_ids,
    post,
)
from tests.contract.test_events import of_kind

# Waits after attempts 1, 2, 3, ...: 10 (the minimum-delay retry), then the linear
# backoff 10, 15, 20, 25, then 30 for every attempt after.
POLICY = {"retries_with_no_delay": 0, "minimum_delay_retries": 1, "minimum_delay": 10,
          "maximum_delay": 30, "maximum_delay_retries": 0,
          "retry_backoff_function": "linear"}
WAITS = [10, 10, 15, 20, 25, 30, 30]


def counts(broker, queue: str = "q") -> tuple[int, int, int]:
    """(free, claimed, delayed) from the stats, after checking the gauges agree."""
    stats = broker.stats(PROJECT, queue)
    gauges = broker.driver.queues.counts(PROJECT, queue)
    assert (gauges.free, gauges.claimed, gauges.delayed) == (
        stats.free, stats.claimed, stats.delayed)
    return stats.free, stats.claimed, stats.delayed


def test_an_expired_claims_message_waits_as_the_policy_says_attempt_by_attempt(
        broker, clock):
    create(broker, "q", _retry_policy=POLICY)
    [mid] = post(broker, "q", "x")
    for attempt, wait in enumerate(WAITS, start=1):
        taken = claim(broker, "q", ttl=60)
        assert [(m.id, m.claim_count) for m in taken.messages] == [(mid, attempt)]
        assert counts(broker) == (0, 1, 0)
        clock.advance(60)  # the claim expires
        assert counts(broker) == (0, 0, 1)
        assert claim(broker, "q") is None
        assert broker.available_in(PROJECT, "q") == pytest.approx(wait)
        clock.advance(wait - 0.01)
        assert claim(broker, "q") is None
        clock.advance(0.01)
        assert counts(broker) == (1, 0, 0)


def test_a_released_claims_messages_wait_from_the_release(broker, clock):
    create(broker, "q", _retry_policy=POLICY)
    ids = post(broker, "q", "a", "b")
    taken = claim(broker, "q", ttl=300)
    clock.advance(5)
    broker.release_claim(PROJECT, "q", taken.id)
    assert counts(broker) == (0, 0, 2)
    assert listed_ids(broker, "q") == []
    assert listed_ids(broker, "q", include_delayed=True) == ids
    clock.advance(9.99)
    assert claim(broker, "q") is None
    clock.advance(0.01)
    assert claimed_ids(broker, "q") == ids


def test_a_renewed_claims_messages_wait_from_its_new_expiry(broker, clock):
    create(broker, "q", _retry_policy=POLICY)
    [mid] = post(broker, "q", "x")
    taken = claim(broker, "q", ttl=60)
    clock.advance(30)
    broker.renew_claim(PROJECT, "q", taken.id, 60, 60)
    clock.advance(60 + 9.99)  # expired 9.99 s ago
    assert claim(broker, "q") is None
    clock.advance(0.01)
    assert claimed_ids(broker, "q") == [mid]


def test_a_live_claims_message_is_claimed_whatever_its_wait(broker, clock):
    create(broker, "q", _retry_policy=POLICY)
    [mid] = post(broker, "q", "x")
    taken = claim(broker, "q", ttl=60)
    [held] = broker.get_messages(PROJECT, "q", [mid])
    assert held.is_claimed and not held.is_delayed
    assert listed_ids(broker, "q", include_claimed=True) == [mid]
    assert listed_ids(broker, "q") == []
    assert [m.id for m in broker.get_claim(PROJECT, "q", taken.id).messages] == [mid]
    clock.advance(60)
    [waiting] = broker.get_messages(PROJECT, "q", [mid])
    assert waiting.is_delayed and not waiting.is_claimed
    assert listed_ids(broker, "q", include_claimed=True) == []
    assert listed_ids(broker, "q", include_delayed=True) == [mid]


def test_the_attempt_that_reaches_max_claim_count_waits_for_nothing(broker, clock):
    create(broker, "q", _retry_policy={**POLICY, "minimum_delay": 100,
                                       "maximum_delay": 300},
           _max_claim_count=2, _dead_letter_queue="dlq")
    [mid] = post(broker, "q", "x")
    claim(broker, "q", ttl=60)
    clock.advance(60 + 100)  # the first attempt's wait
    claim(broker, "q", ttl=60)
    clock.advance(60)  # the second attempt's claim ends: the message moves at once
    assert claim(broker, "q") is None
    assert [m.id for m in broker.get_messages(PROJECT, "dlq", [mid])] == [mid]


def test_a_queue_without_a_policy_frees_at_once(broker, clock):
    [mid] = post(broker, "q", "x")
    taken = claim(broker, "q", ttl=60)
    broker.release_claim(PROJECT, "q", taken.id)
    assert counts(broker) == (1, 0, 0)
    assert claimed_ids(broker, "q") == [mid]


def test_a_message_handed_back_waits_its_delay_and_its_claim_keeps_the_rest(
        broker, clock):
    a, b = post(broker, "q", "a", "b")
    taken = claim(broker, "q", ttl=300)
    released = broker.release_message(PROJECT, "q", a, taken.id, 30)
    assert (released.id, released.claim_count, released.due) == (a, 1, clock.now + 30)
    assert not released.is_claimed and released.is_delayed
    assert [m.id for m in broker.get_claim(PROJECT, "q", taken.id).messages] == [b]
    assert counts(broker) == (0, 1, 1)
    clock.advance(29.99)
    assert claim(broker, "q") is None
    clock.advance(0.01)
    again = claim(broker, "q")
    assert [(m.id, m.claim_count) for m in again.messages] == [(a, 2)]
    # The claim that handed it back can no longer delete it; the new one can.
    with pytest.raises(errors.ClaimMismatch):
        broker.delete_message(PROJECT, "q", a, taken.id)
    broker.delete_message(PROJECT, "q", a, again.id)


def test_a_message_handed_back_with_no_delay_is_claimable_at_once(broker, clock):
    [mid] = post(broker, "q", "x")
    taken = claim(broker, "q", ttl=300)
    broker.release_message(PROJECT, "q", mid, taken.id, 0)
    assert claimed_ids(broker, "q") == [mid]


def test_a_hand_back_is_refused_as_a_delete_with_a_claim_is(broker, clock):
    a, b = post(broker, "q", "a", "b")
    first = claim(broker, "q", ttl=60, limit=1)
    with pytest.raises(errors.MessageNotClaimed):
        broker.release_message(PROJECT, "q", b, first.id, 10)
    second = claim(broker, "q", ttl=60, limit=1)
    with pytest.raises(errors.ClaimMismatch):
        broker.release_message(PROJECT, "q", b, first.id, 10)
    with pytest.raises(errors.MessageNotFound):
        broker.release_message(PROJECT, "q", "0" * 32, first.id, 10)
    with pytest.raises(errors.MessageNotFound):
        broker.release_message(PROJECT, "nowhere", a, first.id, 10)
    clock.advance(60)  # both claims expired
    with pytest.raises(errors.MessageNotClaimed):
        broker.release_message(PROJECT, "q", a, first.id, 10)
    assert sorted(claimed_ids(broker, "q")) == sorted([a, b])
    assert second.id != first.id


def test_a_hand_back_is_a_released_event(broker, clock):
    [mid] = post(broker, "q", "x")
    taken = claim(broker, "q", ttl=60)
    broker.release_message(PROJECT, "q", mid, taken.id, 15)
    [event] = of_kind(broker.driver, "q", events.RELEASED)
    assert (event.message_id, event.claim_count, event.due, event.time) == (
        mid, 1, clock.now + 15, clock.now)
