"""Editing a message before delivery (PATCH of one message), on every driver."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from delayq import errors, events
from delayq.message import Message
from delayq.validation import message_edit
from tests.contract.helpers import PROJECT, claim, claimed_ids, create, listed_ids, post
from tests.contract.test_deliver_at import rfc3339

CLAIM_TTL = 60


def edit(broker, queue: str, message_id: str, project: str = PROJECT,
         **document: Any) -> Message:
    """Edit through the same checks as the API (*document* as a client sends it)."""
    return broker.edit_message(project, queue, message_id,
                               message_edit(document, broker.limits))


def stored(broker, queue: str, message_id: str) -> Message:
    [message] = broker.get_messages(PROJECT, queue, [message_id])
    return message


def test_a_new_body_keeps_everything_else(broker, clock):
    create(broker, "q", _default_message_delay=60)
    [mid] = post(broker, "q", {"v": 1}, ttl=600)
    before = stored(broker, "q", mid)
    clock.advance(10)
    edited = edit(broker, "q", mid, body={"v": 2, "list": [1, "é", None]})
    assert edited.body == {"v": 2, "list": [1, "é", None]}
    after = stored(broker, "q", mid)
    assert after.body == edited.body
    for field in ("id", "ttl", "created", "expires", "due", "claim_count", "client_id"):
        assert getattr(after, field) == getattr(before, field) == getattr(edited, field)
    clock.advance(49.99)
    assert claim(broker, "q") is None  # still due when it was
    clock.advance(0.01)
    [got] = claim(broker, "q").messages
    assert (got.id, got.body) == (mid, edited.body)


def test_a_null_body_is_a_body(broker, clock):
    [mid] = post(broker, "q", "x")
    assert edit(broker, "q", mid, body=None).body is None
    assert stored(broker, "q", mid).body is None


def test_a_delay_counts_from_now(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x")
    clock.advance(100)
    edited = edit(broker, "q", mid, delay=30)
    assert edited.due == pytest.approx(clock.now + 30, abs=0.001)
    assert edited.is_delayed and edited.body == "x"
    clock.advance(29.99)
    assert claim(broker, "q") is None
    assert listed_ids(broker, "q") == []
    clock.advance(0.011)
    assert claimed_ids(broker, "q") == [mid]


def test_delay_0_makes_a_delayed_message_due_at_once(broker, clock):
    create(broker, "q", _default_message_delay=600)
    first, second = post(broker, "q", "a", "b")
    edit(broker, "q", second, delay=0)
    assert listed_ids(broker, "q") == [second]
    assert claimed_ids(broker, "q") == [second]


def test_a_free_message_can_be_delayed_again(broker, clock):
    create(broker, "q", _default_message_delay=5)
    [mid] = post(broker, "q", "x")
    clock.advance(10)
    edit(broker, "q", mid, delay=120)
    assert stored(broker, "q", mid).is_delayed
    assert claim(broker, "q") is None
    clock.advance(120)
    assert claimed_ids(broker, "q") == [mid]


def test_deliver_at_makes_it_due_at_that_instant(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x")
    at = clock.now + 42.25
    edited = edit(broker, "q", mid, deliver_at=rfc3339(at))
    assert at <= edited.due <= at + 0.001
    clock.advance(42.25 - 0.002)
    assert claim(broker, "q") is None
    clock.advance(0.003)
    assert claimed_ids(broker, "q") == [mid]


def test_a_deliver_at_past_is_due_at_once(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x")
    edit(broker, "q", mid, deliver_at=rfc3339(clock.now - 3600))
    assert claimed_ids(broker, "q") == [mid]


def test_a_normal_queue_ignores_a_delay_but_still_checks_it(broker, clock):
    [mid] = post(broker, "q", "x")
    edited = edit(broker, "q", mid, delay=300, body="y")
    assert (edited.body, edited.is_delayed) == ("y", False)
    edit(broker, "q", mid, deliver_at=rfc3339(clock.now + 300))
    with pytest.raises(errors.ValidationError, match="delay"):
        edit(broker, "q", mid, delay=901)
    with pytest.raises(errors.ValidationError, match="deliver_at"):
        edit(broker, "q", mid, deliver_at=rfc3339(clock.now + 901))
    assert claimed_ids(broker, "q") == [mid]


def test_a_claimed_message_is_a_conflict_and_stays_as_it_was(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x", delay=0)
    held = claim(broker, "q", ttl=CLAIM_TTL)
    before = stored(broker, "q", mid)
    for change in ({"body": "y"}, {"delay": 30}, {"body": "y", "delay": 0}):
        with pytest.raises(errors.MessageHeld, match="claimed") as caught:
            edit(broker, "q", mid, **change)
        assert isinstance(caught.value, errors.Conflict)
    after = stored(broker, "q", mid)
    assert (after.body, after.due, after.claim_id) == (before.body, before.due, held.id)
    assert [m.id for m in broker.get_claim(PROJECT, "q", held.id).messages] == [mid]


def test_a_message_whose_claim_expired_is_free_to_edit(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x", delay=0)
    claim(broker, "q", ttl=CLAIM_TTL)
    clock.advance(CLAIM_TTL)
    edited = edit(broker, "q", mid, body="y")
    assert (edited.claim_count, edited.is_claimed) == (1, False)
    [got] = claim(broker, "q").messages
    assert (got.id, got.body, got.claim_count) == (mid, "y", 2)


def test_a_message_whose_claim_expired_can_be_delayed_again(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x", delay=0)
    claim(broker, "q", ttl=CLAIM_TTL)
    clock.advance(CLAIM_TTL + 5)
    edited = edit(broker, "q", mid, delay=20)
    assert (edited.claim_count, edited.is_claimed, edited.is_delayed) == (1, False, True)
    assert claim(broker, "q") is None
    clock.advance(20)
    [got] = claim(broker, "q").messages
    assert (got.id, got.claim_count) == (mid, 2)


def test_a_released_message_is_free_to_edit(broker, clock):
    [mid] = post(broker, "q", "x")
    held = claim(broker, "q", ttl=CLAIM_TTL)
    broker.release_claim(PROJECT, "q", held.id)
    assert edit(broker, "q", mid, body="y").claim_count == 1
    assert claimed_ids(broker, "q") == [mid]


def test_missing_expired_or_elsewhere_is_not_found(broker, clock):
    [mid] = post(broker, "q", "x", ttl=60)
    for queue, message_id, project in (("q", "0" * 24, PROJECT), ("nothing", mid, PROJECT),
                                       ("q", mid, "other-project"), ("q", "bad id", PROJECT)):
        with pytest.raises(errors.MessageNotFound):
            edit(broker, queue, message_id, project=project, body="y")
    post(broker, "other", "z")
    with pytest.raises(errors.MessageNotFound):
        edit(broker, "other", mid, body="y")
    clock.advance(60)
    with pytest.raises(errors.MessageNotFound):
        edit(broker, "q", mid, body="y")


def test_a_deleted_message_is_not_found(broker, clock):
    [mid] = post(broker, "q", "x")
    broker.delete_message(PROJECT, "q", mid, None)
    with pytest.raises(errors.MessageNotFound):
        edit(broker, "q", mid, body="y")


def test_the_new_body_counts_against_the_queue_post_size(broker, clock):
    create(broker, "q", _max_messages_post_size=100)
    [mid] = post(broker, "q", "x")
    edit(broker, "q", mid, body="a" * 98)  # 100 bytes as JSON
    with pytest.raises(errors.ValidationError, match="101 bytes"):
        edit(broker, "q", mid, body="a" * 99)
    assert stored(broker, "q", mid).body == "a" * 98


def test_a_dead_lettered_message_keeps_its_source(broker, clock):
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    [mid] = post(broker, "q", "x")
    claim(broker, "q", ttl=CLAIM_TTL)
    clock.advance(CLAIM_TTL)
    assert claim(broker, "q") is None  # moved
    before = stored(broker, "dlq", mid)
    edited = edit(broker, "dlq", mid, body="fixed")
    assert (edited.source_queue, edited.moved_at, edited.claim_count) == (
        "q", before.moved_at, 1)
    broker.redrive(PROJECT, "dlq")
    assert stored(broker, "q", mid).body == "fixed"


def test_each_edit_is_in_the_trail_with_the_due_it_leaves(broker, clock):
    create(broker, "q", _default_message_delay=600)
    [mid] = post(broker, "q", "x")
    clock.advance(3)
    edit(broker, "q", mid, body="y")
    edit(broker, "q", mid, delay=10)
    edited = [e for e in broker.driver.trail.events(PROJECT, "q") if e.kind == events.EDITED]
    assert [(e.message_id, e.claim_count) for e in edited] == [(mid, 0), (mid, 0)]
    assert edited[0].due == pytest.approx(clock.now - 3 + 600, abs=0.002)
    assert edited[1].due == pytest.approx(clock.now + 10, abs=0.002)
    assert edited[1].time == pytest.approx(clock.now, abs=0.002)


def test_an_edit_racing_claims_is_seen_by_the_claim_exactly_when_it_succeeded(live_broker):
    """On the real clock: claimers drain the queue while an editor edits every message.

    An edit that answered 200 came before the one claim of its message, which must
    therefore return the new body; one refused (409) came after it, which returned the
    old one. Every message is claimed exactly once.
    """
    broker = live_broker
    ids = post(broker, "race", *[f"old {i}" for i in range(12)])
    outcome: dict[str, str] = {}
    bodies: dict[str, Any] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(3)

    def edit_all() -> None:
        barrier.wait()
        for mid in ids:
            try:
                edit(broker, "race", mid, body=f"new {mid}")
                outcome[mid] = "edited"
            except errors.MessageHeld:
                outcome[mid] = "held"
            except BaseException as exc:
                failures.append(exc)

    def claim_all() -> None:
        barrier.wait()
        try:
            while (result := claim(broker, "race", limit=2)) is not None:
                for m in result.messages:
                    assert m.id not in bodies, "claimed twice"
                    bodies[m.id] = m.body
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=edit_all)] + [
        threading.Thread(target=claim_all) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert failures == []
    assert sorted(bodies) == sorted(ids) == sorted(outcome)
    for mid in ids:
        expected = f"new {mid}" if outcome[mid] == "edited" else f"old {ids.index(mid)}"
        assert bodies[mid] == expected, (mid, outcome[mid])
