"""Claims, messages and queues: the storage behaviour the API rests on, on every driver."""

from __future__ import annotations

import pytest

from delayq import errors
from tests.contract.helpers import PROJECT, claim, claimed_ids, create, listed_ids, post


def test_claim_returns_oldest_first_up_to_the_limit(broker):
    ids = post(broker, "q", *range(5))
    assert claimed_ids(broker, "q", limit=3) == ids[:3]
    assert claimed_ids(broker, "q", limit=3) == ids[3:]
    assert claim(broker, "q") is None


def test_claim_on_absent_queue_is_none(broker):
    assert claim(broker, "nowhere") is None


def test_claimed_message_is_hidden_until_the_claim_expires(broker, clock):
    [mid] = post(broker, "q", "x")
    result = claim(broker, "q", ttl=60)
    assert result.ttl == 60 and result.expires == clock.now + 60
    message = broker.get_message(PROJECT, "q", mid)
    assert message.live_claim_id == result.id
    assert claim(broker, "q") is None
    assert listed_ids(broker, "q") == []
    assert listed_ids(broker, "q", include_claimed=True) == [mid]
    clock.advance(59.9)
    assert claim(broker, "q") is None
    clock.advance(0.1)
    assert claimed_ids(broker, "q") == [mid]


def test_claim_extends_message_life_to_cover_claim_and_grace(broker, clock):
    [mid] = post(broker, "q", "x", ttl=60)
    claim(broker, "q", ttl=300, grace=100)
    clock.advance(399)
    assert broker.get_message(PROJECT, "q", mid)
    clock.advance(1)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", mid)


def test_get_claim_lists_its_live_messages(broker, clock):
    ids = post(broker, "q", "a", "b")
    result = claim(broker, "q", ttl=120, grace=60)
    clock.advance(10)
    fetched = broker.get_claim(PROJECT, "q", result.id)
    assert (fetched.id, fetched.ttl, fetched.grace, fetched.age) == (result.id, 120, 60, 10)
    assert [m.id for m in fetched.messages] == ids
    broker.delete_message(PROJECT, "q", ids[0], result.id)
    assert [m.id for m in broker.get_claim(PROJECT, "q", result.id).messages] == ids[1:]
    clock.advance(110)
    with pytest.raises(errors.ClaimNotFound):
        broker.get_claim(PROJECT, "q", result.id)


def test_renew_restarts_the_claim_from_now(broker, clock):
    [mid] = post(broker, "q", "x", ttl=60)
    result = claim(broker, "q", ttl=60)
    clock.advance(50)
    broker.renew_claim(PROJECT, "q", result.id, 100, 60)
    clock.advance(99)
    assert claim(broker, "q") is None
    assert broker.get_claim(PROJECT, "q", result.id).ttl == 100
    clock.advance(1)
    assert claimed_ids(broker, "q") == [mid]


def test_renew_of_expired_or_unknown_claim_is_not_found(broker, clock):
    post(broker, "q", "x")
    result = claim(broker, "q", ttl=60)
    clock.advance(60)
    with pytest.raises(errors.ClaimNotFound):
        broker.renew_claim(PROJECT, "q", result.id, 60, 60)
    with pytest.raises(errors.ClaimNotFound):
        broker.renew_claim(PROJECT, "q", "unknown", 60, 60)


def test_release_frees_messages_at_once_in_their_place(broker):
    ids = post(broker, "q", *range(4))
    result = claim(broker, "q", limit=2)
    broker.release_claim(PROJECT, "q", result.id)
    broker.release_claim(PROJECT, "q", result.id)  # idempotent
    assert claimed_ids(broker, "q", limit=4) == ids
    with pytest.raises(errors.ClaimNotFound):
        broker.get_claim(PROJECT, "q", result.id)


def test_delete_claimed_message_needs_its_claim(broker):
    [mid, other] = post(broker, "q", "x", "y")
    first = claim(broker, "q", limit=1)
    second = claim(broker, "q", limit=1)
    with pytest.raises(errors.MessageIsClaimed):
        broker.delete_message(PROJECT, "q", mid, None)
    with pytest.raises(errors.ClaimMismatch):
        broker.delete_message(PROJECT, "q", mid, second.id)
    broker.delete_message(PROJECT, "elsewhere", mid, first.id)  # not in that queue
    assert broker.get_message(PROJECT, "q", mid)
    broker.delete_message(PROJECT, "q", mid, first.id)
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", mid)
    assert broker.get_message(PROJECT, "q", other)


def test_delete_with_claim_of_unclaimed_message_is_refused(broker, clock):
    [mid] = post(broker, "q", "x")
    result = claim(broker, "q", ttl=60)
    clock.advance(60)
    with pytest.raises(errors.MessageNotClaimed):
        broker.delete_message(PROJECT, "q", mid, result.id)
    assert broker.get_message(PROJECT, "q", mid)


def test_delete_of_absent_message_is_not_an_error(broker):
    create(broker, "q")
    broker.delete_message(PROJECT, "q", "does-not-exist", None)
    broker.delete_message(PROJECT, "nowhere", "does-not-exist", None)


def test_bulk_delete_and_pop(broker, clock):
    ids = post(broker, "q", *range(6))
    broker.delete_messages(PROJECT, "q", ids[:2] + ["unknown"])
    assert [m.id for m in broker.get_messages(PROJECT, "q", ids)] == ids[2:]
    popped = broker.pop(PROJECT, "q", 3)
    assert [m.id for m in popped] == ids[2:5]
    assert [m.id for m in broker.get_messages(PROJECT, "q", ids)] == ids[5:]


def test_pop_skips_claimed_messages(broker):
    ids = post(broker, "q", *range(3))
    claim(broker, "q", limit=1)
    assert [m.id for m in broker.pop(PROJECT, "q", 5)] == ids[1:]


def test_expired_messages_are_gone_everywhere(broker, clock):
    ids = post(broker, "q", "a", "b", ttl=60)
    clock.advance(60)
    assert broker.get_messages(PROJECT, "q", ids) == []
    assert listed_ids(broker, "q", include_claimed=True, include_delayed=True) == []
    assert claim(broker, "q") is None
    assert broker.pop(PROJECT, "q", 5) == []
    assert broker.stats(PROJECT, "q").total == 0


def test_listing_pages_with_marker_and_echo(broker):
    ids = post(broker, "q", *range(5))
    first, marker = broker.list_messages(
        PROJECT, "q", client_id="someone-else", marker=None, limit=3, echo=False,
        include_claimed=False, include_delayed=False)
    second, _ = broker.list_messages(
        PROJECT, "q", client_id="someone-else", marker=marker, limit=3, echo=False,
        include_claimed=False, include_delayed=False)
    assert [m.id for m in first + second] == ids
    own, _ = broker.list_messages(
        PROJECT, "q", client_id="2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a", marker=None,
        limit=10, echo=False, include_claimed=False, include_delayed=False)
    assert own == []


def test_stats_count_and_name_oldest_and_newest(broker, clock):
    create(broker, "q", _default_message_delay=100)
    [oldest] = post(broker, "q", "a", delay=0)
    clock.advance(5)
    post(broker, "q", "b", delay=0)
    [newest] = post(broker, "q", "c")
    claim(broker, "q", limit=1)
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed, stats.total) == (1, 1, 1, 3)
    assert stats.oldest.id == oldest and stats.oldest.age == 5
    assert stats.newest.id == newest and stats.newest.age == 0
    empty = broker.stats(PROJECT, "absent")
    assert (empty.total, empty.oldest, empty.newest) == (0, None, None)


def test_queue_lifecycle(broker):
    assert broker.create_queue(PROJECT, "b", {"color": "blue"}) is True
    assert broker.create_queue(PROJECT, "b", {"color": "red"}) is False
    assert broker.queue_metadata(PROJECT, "b")["color"] == "blue"
    broker.create_queue(PROJECT, "a", {})
    broker.create_queue(PROJECT, "c", {})
    assert [n for n, _ in broker.list_queues(PROJECT, None, 2)] == ["a", "b"]
    assert [n for n, _ in broker.list_queues(PROJECT, "b", 2)] == ["c"]
    assert broker.count_queues(PROJECT) == 3
    post(broker, "b", "x")
    broker.purge_queue(PROJECT, "b")
    assert broker.stats(PROJECT, "b").total == 0
    assert broker.queue_metadata(PROJECT, "b")["color"] == "blue"
    post(broker, "b", "y")
    broker.delete_queue(PROJECT, "b")
    broker.delete_queue(PROJECT, "b")
    with pytest.raises(errors.QueueNotFound):
        broker.check_queue_exists(PROJECT, "b")
    assert "color" not in broker.queue_metadata(PROJECT, "b")
    assert broker.stats(PROJECT, "b").total == 0


def test_projects_are_isolated(broker):
    create(broker, "q", project="alpha")
    [mid] = post(broker, "q", "secret", project="alpha")
    assert broker.list_queues("beta", None, 10) == []
    with pytest.raises(errors.QueueNotFound):
        broker.check_queue_exists("beta", "q")
    assert broker.driver.messages.get("beta", "q", [mid]) == []
    assert claim(broker, "q", project="beta") is None
    broker.delete_message("beta", "q", mid, None)
    broker.delete_messages("beta", "q", [mid])
    assert broker.pop("beta", "q", 5) == []
    assert broker.stats("beta", "q").total == 0
    result = claim(broker, "q", project="alpha")
    with pytest.raises(errors.ClaimNotFound):
        broker.get_claim("beta", "q", result.id)
    assert [m.id for m in result.messages] == [mid]
