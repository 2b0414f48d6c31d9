"""``Driver.available_in``, the hint long-poll claims wait on (delayq.api.longpoll): when
a claim of the queue may next find a message, on every driver, to the backend's clock."""

from __future__ import annotations

import pytest

from tests.contract.helpers import PROJECT, claim, create, post

TTL = 600  # claim ttl


def available_in(broker, queue: str) -> float | None:
    return broker.available_in(PROJECT, queue)


def test_missing_queue_has_nothing(broker):
    assert available_in(broker, "missing") is None


def test_empty_queue_has_nothing(broker):
    create(broker, "q")
    assert available_in(broker, "q") is None


def test_free_message_is_available_now(broker):
    post(broker, "q", "hello")
    assert available_in(broker, "q") == 0


def test_delayed_message_is_available_at_its_due_time(broker, clock):
    create(broker, "q", _default_message_delay=30)
    post(broker, "q", "later")
    assert available_in(broker, "q") == pytest.approx(30, abs=0.001)
    clock.advance(12)
    assert available_in(broker, "q") == pytest.approx(18, abs=0.001)
    clock.advance(18)
    assert available_in(broker, "q") == 0


def test_the_earliest_delayed_message_counts(broker, clock):
    create(broker, "q", _default_message_delay=300)
    post(broker, "q", "late", delay=90)
    post(broker, "q", "early", delay=20)
    assert available_in(broker, "q") == pytest.approx(20, abs=0.001)


def test_claimed_message_is_available_when_its_claim_expires(broker, clock):
    post(broker, "q", "only")
    assert claim(broker, "q", ttl=TTL) is not None
    assert available_in(broker, "q") == pytest.approx(TTL, abs=0.001)
    clock.advance(TTL)
    assert available_in(broker, "q") == 0


def test_free_message_wins_over_claimed_and_delayed(broker, clock):
    create(broker, "q", _default_message_delay=300)
    post(broker, "q", "claimed", delay=0)
    assert claim(broker, "q", ttl=TTL) is not None
    post(broker, "q", "delayed", delay=60)
    assert available_in(broker, "q") == pytest.approx(60, abs=0.001)
    clock.advance(1)
    post(broker, "q", "free", delay=0)
    assert available_in(broker, "q") == 0


def test_released_message_is_available_now(broker, clock):
    post(broker, "q", "a", "b")
    held = claim(broker, "q", ttl=TTL, limit=2)
    assert available_in(broker, "q") == pytest.approx(TTL, abs=0.001)
    clock.advance(5)
    broker.release_claim(PROJECT, "q", held.id)
    assert available_in(broker, "q") == 0


def test_deleted_and_purged_messages_are_gone(broker):
    [mid] = post(broker, "q", "one")
    broker.delete_message(PROJECT, "q", mid, None)
    assert available_in(broker, "q") is None
    post(broker, "q", "two")
    broker.purge_queue(PROJECT, "q")
    assert available_in(broker, "q") is None


def test_queues_and_projects_are_apart(broker, clock):
    create(broker, "delayed", _default_message_delay=40)
    post(broker, "delayed", "x")
    post(broker, "free", "y", project="other")
    assert available_in(broker, "delayed") == pytest.approx(40, abs=0.001)
    assert broker.available_in("other", "delayed") is None
    assert available_in(broker, "free") is None
    assert broker.available_in("other", "free") == 0
