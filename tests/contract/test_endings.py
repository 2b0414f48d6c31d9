"""``Driver.endings``: every driver reports each message that leaves a queue, once, by
the kind of its ending, with the event trail on or off (the /metrics counters of
deletes, dead-letter moves and expiries rest on it)."""

from __future__ import annotations

import pytest

from delayq import events
from delayq.broker import Broker
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import open_driver
from tests.contract.helpers import PROJECT, claim, create, post, write


@pytest.fixture(params=["trail on", "trail off"])
def reported(request, spec, clock):
    """A broker over a fresh driver whose endings land in a list, and that list."""
    settings = None if request.param == "trail on" else events.OFF
    ended: list[str] = []
    driver = Synchronous(open_driver(spec, clock, settings, ended.extend))
    yield Synchronous(Broker(driver.target, Limits())), ended
    driver.close()


def test_each_ending_is_reported_once_by_kind(reported, clock):
    broker, ended = reported
    create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    create(broker, "short")
    post(broker, "short", "expires", ttl=60)
    a, b, c, d = post(broker, "q", "a", "b", "c", "d", ttl=3600)
    [popped] = broker.pop(PROJECT, "q", 1)
    assert popped.id == a and ended == [events.POPPED]
    taken = claim(broker, "q", limit=2)
    assert [m.id for m in taken.messages] == [b, c]
    broker.delete_message(PROJECT, "q", b, taken.id)
    broker.release_claim(PROJECT, "q", taken.id)
    # An absent id and a repeated delete end nothing.
    broker.delete_messages(PROJECT, "q", [d, "0" * 24])
    broker.delete_messages(PROJECT, "q", [d])
    broker.delete_message(PROJECT, "q", b, None)
    assert ended == [events.POPPED, events.DELETED, events.DELETED]
    # c was claimed once, the most the policy allows: this claim moves it.
    assert claim(broker, "q") is None
    assert broker.get_message(PROJECT, "dlq", c).claim_count == 1
    assert ended == [events.POPPED, events.DELETED, events.DELETED, events.DEAD_LETTERED]
    clock.advance(61)
    write(broker, "short")
    assert ended == [events.POPPED, events.DELETED, events.DELETED,
                     events.DEAD_LETTERED, events.EXPIRED]


def test_a_reaper_pass_reports_the_expired_messages_of_queues_nobody_writes_to(
        reported, clock):
    broker, ended = reported
    create(broker, "idle")
    create(broker, "other")
    gone = post(broker, "idle", *range(30), ttl=60)
    claimed_one = post(broker, "other", "claimed", ttl=60)
    kept = post(broker, "other", "kept", ttl=3600)
    taken = claim(broker, "other", limit=1, ttl=60, grace=60)
    assert [m.id for m in taken.messages] == claimed_one
    clock.advance(61)
    broker.driver.reap()
    # The claimed message lives on to its claim's end plus grace (t0 + 120).
    assert ended == [events.EXPIRED] * 30
    assert broker.get_messages(PROJECT, "idle", gone) == []
    clock.advance(60)
    broker.driver.reap()
    broker.driver.reap()  # nothing is left to report twice
    assert ended == [events.EXPIRED] * 31
    assert [m.id for m in broker.get_messages(PROJECT, "other", kept + claimed_one)] == kept
