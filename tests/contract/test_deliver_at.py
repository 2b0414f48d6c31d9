"""A message's ``deliver_at``: the delay rules, with an instant instead of a duration, on
every driver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from delayq import errors
from delayq.validation import messages_post
from tests.contract.helpers import CLIENT, PROJECT, claim, claimed_ids, create, listed_ids


def rfc3339(moment: float, offset_hours: int = 0) -> str:
    """*moment* written as RFC 3339 with milliseconds, in the given UTC offset."""
    zone = UTC if offset_hours == 0 else timezone(timedelta(hours=offset_hours))
    text = datetime.fromtimestamp(moment, zone).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def post_at(broker, queue: str, *messages: dict) -> list[str]:
    """Post *messages* (documents as a client sends them) through the post checks."""
    checked = messages_post({"messages": list(messages)}, broker.limits)
    return broker.post(PROJECT, queue, CLIENT, checked, size=0)


def test_a_message_is_due_at_its_deliver_at_to_the_millisecond(broker, clock):
    create(broker, "q", _default_message_delay=600)
    at = clock.now + 42.25
    [mid] = post_at(broker, "q", {"body": 1, "deliver_at": rfc3339(at)})
    [message] = broker.driver.messages.get(PROJECT, "q", [mid])
    assert at <= message.due <= at + 0.001
    clock.advance(42.25 - 0.002)
    assert claim(broker, "q") is None
    assert listed_ids(broker, "q") == []
    clock.advance(0.003)
    assert claimed_ids(broker, "q") == [mid]


def test_deliver_at_is_read_in_its_own_utc_offset(broker, clock):
    create(broker, "q", _default_message_delay=600)
    at = clock.now + 30
    [mid] = post_at(broker, "q", {"body": 1, "deliver_at": rfc3339(at, offset_hours=5)})
    clock.advance(29.99)
    assert claim(broker, "q") is None
    clock.advance(0.011)
    assert claimed_ids(broker, "q") == [mid]


def test_deliver_at_overrides_the_queue_delay_and_a_past_one_is_due_at_once(broker, clock):
    create(broker, "q", _default_message_delay=600)
    early, past, default = post_at(
        broker, "q", {"body": "early", "deliver_at": rfc3339(clock.now + 5)},
        {"body": "past", "deliver_at": rfc3339(clock.now - 3600)}, {"body": "default"})
    assert claimed_ids(broker, "q") == [past]
    clock.advance(5)
    assert claimed_ids(broker, "q") == [early]
    clock.advance(595)
    assert claimed_ids(broker, "q") == [default]


def test_a_normal_queue_ignores_deliver_at(broker, clock):
    create(broker, "q")
    [mid] = post_at(broker, "q", {"body": 1, "deliver_at": rfc3339(clock.now + 300)})
    assert claimed_ids(broker, "q") == [mid]


@pytest.mark.parametrize("delayed", [True, False])
def test_deliver_at_beyond_max_message_delay_is_refused_and_nothing_is_stored(
        broker, clock, delayed):
    create(broker, "q", **({"_default_message_delay": 10} if delayed else {}))
    with pytest.raises(errors.ValidationError,
                       match=r"messages\[1\]\.deliver_at is 901 seconds ahead"):
        post_at(broker, "q", {"body": "fine", "deliver_at": rfc3339(clock.now + 900)},
                {"body": "too far", "deliver_at": rfc3339(clock.now + 901)})
    assert broker.stats(PROJECT, "q").total == 0


def test_exactly_max_message_delay_ahead_is_accepted(broker, clock):
    create(broker, "q", _default_message_delay=10)
    [mid] = post_at(broker, "q", {"body": 1, "deliver_at": rfc3339(clock.now + 900)})
    clock.advance(900)
    assert claimed_ids(broker, "q") == [mid]


def test_delay_and_deliver_at_together_are_refused(broker, clock):
    with pytest.raises(errors.ValidationError, match=r"messages\[0\] has both"):
        post_at(broker, "q", {"body": 1, "delay": 5, "deliver_at": rfc3339(clock.now)})


@pytest.mark.parametrize("value", [
    "tomorrow", "2026-11-24", "2026-11-24T10:00:00", "2026-11-24T10:00Z",
    "20261124T100000Z", "2026-13-01T00:00:00Z", "2026-11-24T25:00:00Z", 1795554755,
    True, ["2026-11-24T10:00:00Z"], ""])
def test_a_deliver_at_that_is_not_an_rfc3339_date_time_is_refused(broker, value):
    with pytest.raises(errors.ValidationError, match=r"messages\[0\]\.deliver_at"):
        post_at(broker, "q", {"body": 1, "deliver_at": value})
    assert broker.driver.queues.get(PROJECT, "q") is None
