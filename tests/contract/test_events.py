"""The event trail (delayq/events.py): what each transition writes, on every driver.

Events are compared whole, every field of ``delayq.events.Event``, on the fake clock:
times, due times, ttls and expiries exactly as the message GET (``Broker.get_message``)
shows them before or after the transition the event records. The audit reads are the
driver's own (``trail_queues``, ``read_events``, ``read_messages``).

Expiry is the one rule whose timing depends on the backend: every driver writes an
``expired`` event stamped with the instant the message expired, once it reaps it, by a
write (``Driver.reaps_on_write``) or else by a pass of the background reaper
(``helpers.write`` runs one where writes do not reap).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from delayq import errors, events
from delayq.broker import Broker
from delayq.events import Event
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import open_driver
from tests.contract.helpers import PROJECT, batch_rows, claim, create, post, write

OTHER_PROJECT = "contract-other"


def trail(driver, queue: str, project: str = PROJECT) -> list[Event]:
    return list(driver.trail.events(project, queue))


def of_kind(driver, queue: str, kind: str) -> list[Event]:
    return [e for e in trail(driver, queue) if e.kind == kind]


def posted_event(message, queue: str = "q", project: str = PROJECT) -> Event:
    """The posted event a message's GET right after its post implies."""
    return Event(project, queue, events.POSTED, message.created, message_id=message.id,
                 due=message.due, ttl=message.ttl, expires=message.expires)


def dead_letter_queue(broker, name="q", target="dlq", max_claim_count=2, **extra):
    create(broker, name, _max_claim_count=max_claim_count, _dead_letter_queue=target,
           **extra)


def lapse(broker, clock, queue="q", ttl=60, **kwargs):
    """Claim (ttl 60 by default), let the claim lapse; returns the claim."""
    result = claim(broker, queue, ttl=ttl, **kwargs)
    clock.advance(ttl)
    return result


# posted


def test_a_post_records_each_message_posted_with_its_due_ttl_and_expiry(broker, driver,
                                                                        clock):
    create(broker, "q")
    t0 = clock.now
    first, second = post(broker, "q", {"n": 1}, "two", ttl=600)
    # A normal queue ignores a message's own delay: the message is due at once.
    [third] = post(broker, "q", [3], delay=600)
    shown = [broker.get_message(PROJECT, "q", mid) for mid in (first, second, third)]
    assert [(m.due, m.ttl, m.expires) for m in shown] == [
        (t0, 600, t0 + 600), (t0, 600, t0 + 600), (t0, 3600, t0 + 3600)]
    assert trail(driver, "q") == [posted_event(m) for m in shown]


def test_a_delayed_post_records_the_due_time_the_get_shows(broker, driver, clock):
    create(broker, "q", _default_message_delay=30)
    t0 = clock.now
    [own] = post(broker, "q", "own delay", delay=10, ttl=120)
    clock.advance(1)
    [default] = post(broker, "q", "queue default")
    [undelayed] = post(broker, "q", "no delay", delay=0)
    shown = [broker.get_message(PROJECT, "q", mid) for mid in (own, default, undelayed)]
    assert [(m.due, m.ttl, m.expires) for m in shown] == [
        (t0 + 10, 120, t0 + 120), (t0 + 31, 3600, t0 + 3601), (t0 + 1, 3600, t0 + 3601)]
    assert trail(driver, "q") == [posted_event(m) for m in shown]


def test_a_post_creating_its_queue_records_into_that_queue(broker, driver, clock):
    [mid] = post(broker, "lazy", "x")
    shown = broker.get_message(PROJECT, "lazy", mid)
    assert trail(driver, "lazy") == [posted_event(shown, "lazy")]


# claimed


def test_a_claim_records_claim_id_count_after_the_claim_and_the_new_expiry(broker, driver,
                                                                         clock):
    create(broker, "q")
    t0 = clock.now
    long, left = post(broker, "q", "long", "left", ttl=600)
    # A ttl the claim outlives: the message's expiry moves to cover claim + grace.
    [short] = post(broker, "q", "short", ttl=60)
    posted_count = len(trail(driver, "q"))
    clock.advance(5)
    result = claim(broker, "q", limit=3, ttl=100, grace=60)
    assert [m.id for m in result.messages] == [long, left, short]
    after = {mid: broker.get_message(PROJECT, "q", mid) for mid in (long, left, short)}
    assert after[long].expires == t0 + 600
    assert after[short].expires == t0 + 5 + 160
    assert trail(driver, "q")[posted_count:] == [
        Event(PROJECT, "q", events.CLAIMED, t0 + 5, message_id=mid, claim_id=result.id,
              claim_count=1, expires=after[mid].expires)
        for mid in (long, left, short)]


def test_each_claim_records_the_count_it_brings_the_message_to(broker, driver, clock):
    create(broker, "q")
    t0 = clock.now
    [mid] = post(broker, "q", "x", ttl=3600)
    claims = []
    for _ in range(3):
        claims.append((clock.now, lapse(broker, clock, ttl=60, grace=60)))
    claimed = of_kind(driver, "q", events.CLAIMED)
    assert claimed == [
        Event(PROJECT, "q", events.CLAIMED, at, message_id=mid, claim_id=result.id,
              claim_count=count, expires=t0 + 3600)
        for count, (at, result) in enumerate(claims, start=1)]
    assert broker.get_message(PROJECT, "q", mid).claim_count == 3


def test_a_claim_that_finds_nothing_records_nothing(broker, driver, clock):
    create(broker, "q", _default_message_delay=60)
    post(broker, "q", "later")
    before = trail(driver, "q")
    assert claim(broker, "q") is None
    assert trail(driver, "q") == before


# deleted


def test_a_delete_records_deleted_with_the_claim_it_was_deleted_under(broker, driver,
                                                                     clock):
    create(broker, "q")
    [held] = post(broker, "q", "held")
    [free] = post(broker, "q", "free")
    result = claim(broker, "q", limit=1)
    assert [m.id for m in result.messages] == [held]
    before = trail(driver, "q")
    clock.advance(2)
    broker.delete_message(PROJECT, "q", free, None)
    clock.advance(3)
    broker.delete_message(PROJECT, "q", held, result.id)
    assert trail(driver, "q") == before + [
        Event(PROJECT, "q", events.DELETED, clock.now - 3, message_id=free, claim_count=0),
        Event(PROJECT, "q", events.DELETED, clock.now, message_id=held, claim_id=result.id,
              claim_count=1)]


def test_a_refused_or_empty_delete_records_nothing(broker, driver, clock):
    create(broker, "q")
    [held] = post(broker, "q", "held")
    [gone] = post(broker, "q", "gone")
    result = claim(broker, "q", limit=1)
    broker.delete_message(PROJECT, "q", gone, None)
    before = trail(driver, "q")
    with pytest.raises(errors.MessageIsClaimed):
        broker.delete_message(PROJECT, "q", held, None)
    broker.delete_message(PROJECT, "q", gone, None)  # absent: not an error
    broker.delete_messages(PROJECT, "q", [gone])
    broker.release_claim(PROJECT, "q", result.id)
    with pytest.raises(errors.MessageNotClaimed):
        broker.delete_message(PROJECT, "q", held, result.id)
    assert trail(driver, "q") == before


def test_a_bulk_delete_records_each_message_it_deleted(broker, driver, clock):
    create(broker, "q")
    held, free, kept, gone = post(broker, "q", "held", "free", "kept", "gone")
    result = claim(broker, "q", limit=1)
    assert [m.id for m in result.messages] == [held]
    broker.delete_message(PROJECT, "q", gone, None)
    before = trail(driver, "q")
    clock.advance(7)
    broker.delete_messages(PROJECT, "q", [free, held, gone])
    added = trail(driver, "q")[len(before):]
    assert trail(driver, "q")[:len(before)] == before
    # Not deleted under a claim (no claim id was given), whatever held the message.
    assert sorted(added, key=lambda e: e.message_id) == sorted([
        Event(PROJECT, "q", events.DELETED, clock.now, message_id=held, claim_count=1),
        Event(PROJECT, "q", events.DELETED, clock.now, message_id=free, claim_count=0),
    ], key=lambda e: e.message_id)
    assert [m.id for m in broker.get_messages(PROJECT, "q", [held, free, kept])] == [kept]


# popped


def test_a_pop_records_each_popped_message(broker, driver, clock):
    create(broker, "q")
    worn, fresh, other = post(broker, "q", "worn", "fresh", "other")
    result = claim(broker, "q", limit=1, ttl=60)
    assert [m.id for m in result.messages] == [worn]
    clock.advance(60)  # the claim lapses: "worn" is free again, claimed once
    before = trail(driver, "q")
    clock.advance(1)
    popped = broker.pop(PROJECT, "q", 3)
    assert sorted(m.id for m in popped) == sorted([worn, fresh, other])
    counts = {worn: 1, fresh: 0, other: 0}
    assert trail(driver, "q") == before + [
        Event(PROJECT, "q", events.POPPED, clock.now, message_id=m.id,
              claim_count=counts[m.id])
        for m in popped]


# dead_lettered


@pytest.mark.parametrize("dlq_ttl", [None, 120], ids=["own-expiry", "dlq-ttl"])
def test_a_dead_letter_move_is_recorded_in_the_source_trail(broker, driver, clock,
                                                            dlq_ttl):
    extra = {} if dlq_ttl is None else {"_dead_letter_queue_messages_ttl": dlq_ttl}
    dead_letter_queue(broker, max_claim_count=2, **extra)
    body = {"order": 7, "items": [1, "two", None, 3.5], "note": "caf\u00e9 \u2713"}
    t0 = clock.now
    [mid] = post(broker, "q", body, ttl=600)
    lapse(broker, clock, ttl=60, grace=600)  # stretches the message's life to t0 + 660
    assert broker.get_message(PROJECT, "q", mid).expires == t0 + 660
    lapse(broker, clock, ttl=60)
    clock.advance(30)
    moved_at = clock.now
    assert claim(broker, "q") is None
    moved = broker.get_message(PROJECT, "dlq", mid)
    if dlq_ttl is None:  # the original expiry, not the one the claims stretched
        assert (moved.ttl, moved.expires) == (600, t0 + 600)
    else:
        assert (moved.ttl, moved.expires) == (120, moved_at + 120)
    source = trail(driver, "q")
    assert [e.kind for e in source] == [events.POSTED, events.CLAIMED, events.CLAIMED,
                                        events.DEAD_LETTERED]
    event = source[-1]
    assert dataclasses.replace(event, body=None) == Event(
        PROJECT, "q", events.DEAD_LETTERED, moved_at, message_id=mid, claim_count=2,
        source="q", target="dlq", ttl=moved.ttl, expires=moved.expires)
    assert isinstance(event.body, str) and json.loads(event.body) == body
    # One record of the move, in the source's trail; the id's history goes on in the DLQ.
    assert trail(driver, "dlq") == []
    clock.advance(1)
    result = claim(broker, "dlq", ttl=60, grace=60)
    assert trail(driver, "dlq") == [
        Event(PROJECT, "dlq", events.CLAIMED, clock.now, message_id=mid,
              claim_id=result.id, claim_count=3,
              expires=broker.get_message(PROJECT, "dlq", mid).expires)]


def test_a_claim_that_moves_and_claims_records_both(broker, driver, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [worn] = post(broker, "q", "worn")
    lapse(broker, clock, limit=1)
    [fresh] = post(broker, "q", "fresh")
    before = trail(driver, "q")
    result = claim(broker, "q", limit=1, ttl=60, grace=60)
    assert [m.id for m in result.messages] == [fresh]
    added = trail(driver, "q")[len(before):]
    assert sorted((e.kind, e.message_id, e.claim_count) for e in added) == sorted([
        (events.DEAD_LETTERED, worn, 1), (events.CLAIMED, fresh, 1)])


# expired


def test_an_expired_message_is_recorded_at_the_instant_it_expired(broker, driver, clock):
    create(broker, "q")
    t0 = clock.now
    [short] = post(broker, "q", "short", ttl=60)
    [stretched] = post(broker, "q", "stretched", ttl=60)
    post(broker, "q", "long", ttl=3600)
    # Claim "short" and "stretched" (ttl 60 + grace 60): "stretched" now lives to +120;
    # "short" is deleted at once, under its claim.
    result = claim(broker, "q", limit=2, ttl=60, grace=60)
    assert [m.id for m in result.messages] == [short, stretched]
    broker.delete_message(PROJECT, "q", short, result.id)
    [short] = post(broker, "q", "short again", ttl=60)
    assert broker.get_message(PROJECT, "q", stretched).expires == t0 + 120

    clock.advance(59.5)
    write(broker, "q", "write before the first expiry")
    assert of_kind(driver, "q", events.EXPIRED) == []
    clock.advance(0.5)  # t0 + 60: "short again" expires now
    write(broker, "q", "write at the first expiry")
    first = Event(PROJECT, "q", events.EXPIRED, t0 + 60, message_id=short, claim_count=0,
                  expires=t0 + 60)
    assert of_kind(driver, "q", events.EXPIRED) == [first]
    clock.advance(70)  # past t0 + 120
    write(broker, "q", "write after the second expiry")
    second = Event(PROJECT, "q", events.EXPIRED, t0 + 120, message_id=stretched,
                   claim_count=1, expires=t0 + 120)
    assert of_kind(driver, "q", events.EXPIRED) == [first, second]
    clock.advance(10)
    write(broker, "q", "another write")
    claim(broker, "q")
    assert of_kind(driver, "q", events.EXPIRED) == [first, second]
    # An expired message ends with its expiry: nothing else is recorded of it.
    assert [e.kind for e in trail(driver, "q") if e.message_id == stretched] == [
        events.POSTED, events.CLAIMED, events.EXPIRED]


def test_many_expired_messages_are_each_recorded_once(broker, driver, clock):
    # Drivers reap expired messages in bounded batches on each write, so a large expiry
    # may take several writes to reach the trail; each message is recorded once.
    create(broker, "q")
    t0 = clock.now
    ids = []
    for batch in range(10):
        ids += post(broker, "q", *range(20), ttl=60 + batch)
    clock.advance(100)
    for _ in range(10):
        write(broker, "q", ttl=3600)
    expired = of_kind(driver, "q", events.EXPIRED)
    assert sorted(e.message_id for e in expired) == sorted(ids)
    expiry = {mid: t0 + 60 + index // 20 for index, mid in enumerate(ids)}
    assert sorted(expired, key=lambda e: e.message_id) == [
        Event(PROJECT, "q", events.EXPIRED, expiry[mid], message_id=mid, claim_count=0,
              expires=expiry[mid])
        for mid in sorted(ids)]


def test_a_delete_of_an_expired_message_records_no_deletion(broker, driver, clock):
    create(broker, "q")
    t0 = clock.now
    [mid] = post(broker, "q", "x", ttl=60)
    clock.advance(61)
    broker.delete_message(PROJECT, "q", mid, None)
    broker.delete_messages(PROJECT, "q", [mid])
    write(broker, "q")
    kinds = [e.kind for e in trail(driver, "q") if e.message_id == mid]
    assert kinds == [events.POSTED, events.EXPIRED]
    assert of_kind(driver, "q", events.EXPIRED) == [
        Event(PROJECT, "q", events.EXPIRED, t0 + 60, message_id=mid, claim_count=0,
              expires=t0 + 60)]


# purged


def test_a_purge_records_purged_and_keeps_the_trail(broker, driver, clock):
    create(broker, "q")
    post(broker, "q", "a", "b")
    claim(broker, "q", limit=1)
    before = trail(driver, "q")
    clock.advance(3)
    broker.purge_queue(PROJECT, "q")
    assert trail(driver, "q") == before + [Event(PROJECT, "q", events.PURGED, clock.now)]
    assert list(driver.trail.messages(PROJECT, "q")) == []
    clock.advance(1)
    [again] = post(broker, "q", "after the purge")
    assert trail(driver, "q")[-1] == posted_event(broker.get_message(PROJECT, "q", again))


def test_a_queue_delete_records_purged_and_the_trail_outlives_the_queue(broker, driver,
                                                                       clock):
    create(broker, "q")
    ids = post(broker, "q", "a", "b")
    shown = [broker.get_message(PROJECT, "q", mid) for mid in ids]
    clock.advance(3)
    broker.delete_queue(PROJECT, "q")
    assert driver.queues.get(PROJECT, "q") is None
    assert trail(driver, "q") == [posted_event(m) for m in shown] + [
        Event(PROJECT, "q", events.PURGED, clock.now)]
    assert driver.trail.queues(PROJECT) == [(PROJECT, "q")]
    assert list(driver.trail.messages(PROJECT, "q")) == []


# order, queues, messages


def test_the_trail_reads_oldest_first(broker, driver, clock):
    create(broker, "q")
    t0 = clock.now
    a, b = post(broker, "q", "a", "b", ttl=600)
    clock.advance(1)
    held = claim(broker, "q", limit=1, ttl=60, grace=60)
    clock.advance(1)
    broker.delete_message(PROJECT, "q", b, None)
    clock.advance(1)
    [c] = post(broker, "q", "c", ttl=600)
    clock.advance(1)
    assert [m.id for m in broker.pop(PROJECT, "q", 1)] == [c]
    clock.advance(1)
    broker.delete_message(PROJECT, "q", a, held.id)
    clock.advance(1)
    broker.purge_queue(PROJECT, "q")
    assert trail(driver, "q") == [
        Event(PROJECT, "q", events.POSTED, t0, message_id=a, due=t0, ttl=600,
              expires=t0 + 600),
        Event(PROJECT, "q", events.POSTED, t0, message_id=b, due=t0, ttl=600,
              expires=t0 + 600),
        Event(PROJECT, "q", events.CLAIMED, t0 + 1, message_id=a, claim_id=held.id,
              claim_count=1, expires=t0 + 600),
        Event(PROJECT, "q", events.DELETED, t0 + 2, message_id=b, claim_count=0),
        Event(PROJECT, "q", events.POSTED, t0 + 3, message_id=c, due=t0 + 3, ttl=600,
              expires=t0 + 603),
        Event(PROJECT, "q", events.POPPED, t0 + 4, message_id=c, claim_count=0),
        Event(PROJECT, "q", events.DELETED, t0 + 5, message_id=a, claim_id=held.id,
              claim_count=1),
        Event(PROJECT, "q", events.PURGED, t0 + 6),
    ]


def test_event_rows_are_the_events_fields_in_order(broker, driver, clock):
    dead_letter_queue(broker, max_claim_count=1)
    [a] = post(broker, "q", {"k": [1, "x"]}, ttl=600)
    claim(broker, "q", limit=1, ttl=60, grace=60)
    clock.advance(61)
    claim(broker, "q", limit=1, ttl=60, grace=60)  # moves a to dlq
    broker.delete_message(PROJECT, "dlq", a, None)
    for queue in ("q", "dlq"):
        rows = list(driver.trail.event_rows(PROJECT, queue))
        assert rows == [tuple(e.as_row().values()) for e in trail(driver, queue)]
        assert batch_rows(driver, queue) == rows
    assert [row[2] for row in driver.trail.event_rows(PROJECT, "q")] == [
        events.POSTED, events.CLAIMED, events.DEAD_LETTERED]
    assert list(driver.trail.event_rows(PROJECT, "nowhere")) == []
    assert batch_rows(driver, "nowhere") == []


def test_trail_queues_lists_the_queues_of_one_project_or_all(broker, driver, clock):
    post(broker, "b", "x")
    post(broker, "a", "x")
    post(broker, "a", "y", project=OTHER_PROJECT)
    post(broker, "gone", "x")
    broker.delete_queue(PROJECT, "gone")
    assert driver.trail.queues(PROJECT) == [(PROJECT, "a"), (PROJECT, "b"),
                                            (PROJECT, "gone")]
    assert driver.trail.queues(OTHER_PROJECT) == [(OTHER_PROJECT, "a")]
    assert driver.trail.queues(None) == [(PROJECT, "a"), (PROJECT, "b"), (PROJECT, "gone"),
                                         (OTHER_PROJECT, "a")]
    assert driver.trail.queues("nobody") == []
    # Each project's trail of its queue "a" holds its own events only.
    for project, body in ((PROJECT, "x"), (OTHER_PROJECT, "y")):
        [event] = trail(driver, "a", project)
        assert (event.project, event.queue, event.kind) == (project, "a", events.POSTED)
        [message] = driver.messages.get(project, "a", [event.message_id])
        assert message.body == body


def test_read_messages_gives_every_live_message_in_post_order(broker, driver, clock):
    create(broker, "q", _default_message_delay=300)
    held, delayed, free, expiring, deleted = (
        post(broker, "q", "held", delay=0)[0],
        post(broker, "q", "delayed")[0],
        post(broker, "q", "free", delay=0)[0],
        post(broker, "q", "expiring", delay=0, ttl=60)[0],
        post(broker, "q", "deleted", delay=0)[0])
    result = claim(broker, "q", limit=1, ttl=100, grace=60)
    assert [m.id for m in result.messages] == [held]
    broker.delete_message(PROJECT, "q", deleted, None)
    clock.advance(60)  # "expiring" has expired, not yet reaped; "held" is still claimed
    read = list(driver.trail.messages(PROJECT, "q"))
    expected = [broker.get_message(PROJECT, "q", mid) for mid in (held, delayed, free)]
    assert [m.id for m in read] == [held, delayed, free]
    assert read == expected
    assert read[0].live_claim_id == result.id and read[1].is_delayed
    assert expiring not in {m.id for m in read}
    assert list(driver.trail.messages(PROJECT, "nowhere")) == []


def test_read_messages_includes_a_dead_lettered_message_in_its_new_queue(broker, driver,
                                                                         clock):
    dead_letter_queue(broker, max_claim_count=1)
    [mid] = post(broker, "q", {"k": "v"})
    lapse(broker, clock)
    [before] = post(broker, "dlq", "already there")
    assert claim(broker, "q") is None
    # Where a moved message falls among the queue's own is the driver's listing order.
    read = {m.id: m for m in driver.trail.messages(PROJECT, "dlq")}
    assert sorted(read) == sorted([before, mid])
    assert read[mid] == broker.get_message(PROJECT, "dlq", mid)
    assert (read[mid].source_queue, read[mid].body) == ("q", {"k": "v"})
    assert list(driver.trail.messages(PROJECT, "q")) == []


# the trail off


def test_a_driver_with_the_trail_off_writes_no_event(spec, clock):
    driver = Synchronous(open_driver(spec, clock, events_settings=events.OFF))
    try:
        broker = Synchronous(Broker(driver.target, Limits()))
        dead_letter_queue(broker, max_claim_count=1)
        create(broker, "delayed", _default_message_delay=30)
        post(broker, "delayed", "later")
        [worn] = post(broker, "q", "worn")
        lapse(broker, clock, limit=1)  # "worn", claimed once
        clock.advance(1)
        deleted, bulk, popped = post(broker, "q", "deleted", "bulk", "pop")
        post(broker, "q", "short", ttl=60)  # expires unseen
        broker.delete_message(PROJECT, "q", deleted, None)
        held = claim(broker, "q", limit=1)  # moves "worn", claims "bulk"
        assert [m.id for m in held.messages] == [bulk]
        assert broker.get_message(PROJECT, "dlq", worn).claim_count == 1
        broker.delete_messages(PROJECT, "q", [bulk])
        assert [m.id for m in broker.pop(PROJECT, "q", 1)] == [popped]
        clock.advance(60)  # "short" expires
        post(broker, "q", "a write")
        claimed = claim(broker, "dlq", limit=1)
        broker.delete_message(PROJECT, "dlq", worn, claimed.id)
        broker.purge_queue(PROJECT, "q")
        post(broker, "gone", "x")
        broker.delete_queue(PROJECT, "gone")
        for queue in ("q", "dlq", "delayed", "gone"):
            assert trail(driver, queue) == [], queue
        assert (PROJECT, "gone") not in driver.trail.queues(PROJECT)
        assert (PROJECT, "gone") not in driver.trail.queues(None)
        assert [m.body for m in driver.trail.messages(PROJECT, "delayed")] == ["later"]
    finally:
        driver.close()
