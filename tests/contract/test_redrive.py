"""Dead-letter redrive: messages go back where they came from, on every driver."""

from __future__ import annotations

import pytest

from delayq import errors, events
from tests.contract.helpers import PROJECT, claim, claimed_ids, create, listed_ids, post

CLAIM_TTL = 60


def worn_out(broker, clock, *bodies, queue="q", target="dlq", **policy) -> list[str]:
    """Post *bodies* to *queue* (policy: one claim) and claim them into *target*."""
    create(broker, queue, _max_claim_count=1, _dead_letter_queue=target, **policy)
    ids = post(broker, queue, *bodies)
    assert sorted(claimed_ids(broker, queue, ttl=CLAIM_TTL, limit=20)) == sorted(ids)
    clock.advance(CLAIM_TTL)
    assert claim(broker, queue) is None  # each one moved
    return ids


def test_redrive_sends_each_message_back_to_its_own_queue_claimable_at_once(broker, clock):
    [a] = worn_out(broker, clock, "a", queue="qa")
    [b] = worn_out(broker, clock, "b", queue="qb")
    clock.advance(5)
    assert broker.redrive(PROJECT, "dlq") == 2
    assert broker.stats(PROJECT, "dlq").total == 0
    assert listed_ids(broker, "qa") == [a]
    assert listed_ids(broker, "qb") == [b]
    [back] = broker.get_messages(PROJECT, "qa", [a])
    assert (back.body, back.claim_count, back.source_queue, back.moved_at) == ("a", 0,
                                                                              None, None)
    assert back.due <= clock.now
    assert claimed_ids(broker, "qb") == [b]


def test_a_redriven_message_keeps_id_body_creation_and_expiry(broker, clock):
    [mid] = worn_out(broker, clock, {"k": [1, 2]}, ttl=None)
    [before] = broker.get_messages(PROJECT, "dlq", [mid])
    broker.redrive(PROJECT, "dlq")
    [after] = broker.get_messages(PROJECT, "q", [mid])
    assert (after.id, after.body, after.created, after.expires) == (
        before.id, before.body, before.created, before.expires)


def test_a_redriven_message_gets_the_whole_policy_again(broker, clock):
    create(broker, "q", _max_claim_count=2, _dead_letter_queue="dlq")
    [mid] = post(broker, "q", "x")
    for _ in range(2):
        assert claimed_ids(broker, "q", ttl=CLAIM_TTL) == [mid]
        clock.advance(CLAIM_TTL)
    assert claim(broker, "q") is None
    broker.redrive(PROJECT, "dlq")
    for count in (1, 2):
        result = claim(broker, "q", ttl=CLAIM_TTL)
        assert [(m.id, m.claim_count) for m in result.messages] == [(mid, count)]
        clock.advance(CLAIM_TTL)
    assert claim(broker, "q") is None
    assert listed_ids(broker, "dlq") == [mid]


def test_a_destination_takes_every_message_even_those_posted_to_the_dead_letter_queue(
        broker, clock):
    [moved] = worn_out(broker, clock, "moved")
    [posted] = post(broker, "dlq", "posted")
    assert broker.redrive(PROJECT, "dlq", destination="retry") == 2
    assert sorted(listed_ids(broker, "retry")) == sorted([moved, posted])
    assert broker.stats(PROJECT, "q").total == 0


def test_without_destination_a_message_with_no_source_stays(broker, clock):
    [moved] = worn_out(broker, clock, "moved")
    [posted] = post(broker, "dlq", "posted")
    assert broker.redrive(PROJECT, "dlq") == 1
    assert listed_ids(broker, "dlq") == [posted]
    assert listed_ids(broker, "q") == [moved]


def test_messages_with_no_source_ahead_do_not_count_toward_the_limit(broker, clock):
    create(broker, "dlq")
    posted = post(broker, "dlq", "posted first", "and second")
    clock.advance(1)
    moved = worn_out(broker, clock, "a", "b")
    assert broker.redrive(PROJECT, "dlq", limit=1) == 1
    assert broker.redrive(PROJECT, "dlq", limit=1) == 1
    assert broker.redrive(PROJECT, "dlq", limit=1) == 0
    assert sorted(listed_ids(broker, "q")) == sorted(moved)
    assert sorted(listed_ids(broker, "dlq")) == sorted(posted)


def test_claimed_messages_stay_until_their_claim_is_over(broker, clock):
    ids = worn_out(broker, clock, "a", "b")
    held = claim(broker, "dlq", ttl=CLAIM_TTL, limit=1)
    [kept] = [m.id for m in held.messages]
    assert broker.redrive(PROJECT, "dlq") == 1
    assert listed_ids(broker, "dlq", include_claimed=True) == [kept]
    clock.advance(CLAIM_TTL)
    assert broker.redrive(PROJECT, "dlq") == 1
    assert sorted(listed_ids(broker, "q")) == sorted(ids)


def test_limit_moves_the_oldest_first_and_the_rest_later(broker, clock):
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    ids = []
    for body in "abc":
        ids += post(broker, "q", body)
        assert claimed_ids(broker, "q", ttl=CLAIM_TTL) == ids[-1:]
        clock.advance(CLAIM_TTL)
        assert claim(broker, "q") is None  # moved now: one after the other
        clock.advance(1)
    assert broker.redrive(PROJECT, "dlq", limit=2) == 2
    assert listed_ids(broker, "dlq") == ids[2:]
    assert broker.redrive(PROJECT, "dlq", limit=2) == 1
    assert broker.redrive(PROJECT, "dlq", limit=2) == 0
    assert sorted(listed_ids(broker, "q")) == sorted(ids)


def test_a_source_queue_deleted_meanwhile_is_created_again(broker, clock):
    [mid] = worn_out(broker, clock, "x")
    broker.delete_queue(PROJECT, "q")
    assert broker.redrive(PROJECT, "dlq") == 1
    assert listed_ids(broker, "q") == [mid]


def test_a_delayed_message_redriven_is_due_at_once(broker, clock):
    create(broker, "dlq", _default_message_delay=600)
    [mid] = post(broker, "dlq", "later")
    assert broker.redrive(PROJECT, "dlq", destination="now") == 1
    assert claimed_ids(broker, "now") == [mid]


def test_expired_messages_are_not_redriven(broker, clock):
    worn_out(broker, clock, "x", _dead_letter_queue_messages_ttl=60)
    clock.advance(60)
    assert broker.redrive(PROJECT, "dlq") == 0
    assert broker.stats(PROJECT, "q").total == 0


def test_a_missing_or_empty_queue_redrives_nothing(broker):
    assert broker.redrive(PROJECT, "nothing") == 0
    create(broker, "empty")
    assert broker.redrive(PROJECT, "empty") == 0


def test_redrive_is_scoped_to_the_project(broker, clock):
    worn_out(broker, clock, "x")
    assert broker.redrive("other-project", "dlq") == 0
    assert broker.stats(PROJECT, "dlq").total == 1


@pytest.mark.parametrize(("options", "complaint"), [
    ({"destination": "dlq"}, "destination"),
    ({"destination": "no spaces"}, "destination"),
    ({"limit": 0}, "limit"),
])
def test_bad_redrive_options_are_refused(broker, clock, options, complaint):
    worn_out(broker, clock, "x")
    with pytest.raises(errors.ValidationError, match=complaint):
        broker.redrive(PROJECT, "dlq", **options)
    assert broker.stats(PROJECT, "dlq").total == 1


def test_each_redrive_is_in_the_trail_of_the_dead_letter_queue(broker, clock):
    [mid] = worn_out(broker, clock, "x")
    clock.advance(7)
    broker.redrive(PROJECT, "dlq")
    [event] = [e for e in broker.driver.trail.events(PROJECT, "dlq")
               if e.kind == events.REDRIVEN]
    assert (event.message_id, event.claim_count, event.source, event.target) == (
        mid, 1, "dlq", "q")
    assert event.time == pytest.approx(clock.now, abs=0.002)
