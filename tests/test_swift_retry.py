"""What only the Swift driver promises of retry waits and hand-backs, on a real Swift.

The availability-index entry of a claimed message due after its claim's expiry, the wait
chosen by a claimer that died after winning (completed from its marker by whoever meets
the message next), a hand-back cut short at each of its steps, and their Swift requests.
The contract suite (tests/contract/test_retry.py) states the behaviour itself.
"""

from __future__ import annotations

import signal

import pytest

from delayq import events
from delayq.broker import Broker
from delayq.storage.swift import layout
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import FakeClock
from tests.swift_server import SWIFT
from tests.test_swift_driver import NO_FLUSH, PROJECT, SPAWN, START, RequestLog, crash, names, post

pytestmark = pytest.mark.timeout(120)

WAIT = 10  # the policy's wait after each of the first attempts
POLICY = {"retries_with_no_delay": 0, "minimum_delay_retries": 3, "minimum_delay": WAIT,
          "maximum_delay": 30, "maximum_delay_retries": 0}
US = 1_000_000


def retrying_queue(broker: Broker, queue: str = "q") -> None:
    broker.create_queue(PROJECT, queue, {"_retry_policy": POLICY})


def entries(raw, prefix: str, queue: str = "q") -> list[layout.Entry]:
    return [layout.Entry.parse(name) for name in names(raw, prefix, queue, "a/")]


def counts(broker: Broker, queue: str = "q") -> tuple[int, int, int]:
    stats = broker.stats(PROJECT, queue)
    return stats.free, stats.claimed, stats.delayed


def test_a_claimed_messages_entry_is_at_the_later_of_its_due_time_and_its_claims_end(
        make_driver, raw, prefix):
    clock = FakeClock(START)
    broker = Synchronous(Broker(make_driver(clock=clock).target, Limits()))
    retrying_queue(broker)
    [mid] = post(broker.driver, "q", 1)
    claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1)
    ends = round(claim.expires * US)
    [entry] = entries(raw, prefix)
    # Listed after its claim's end, so no claim reaches it before its wait is over; the
    # claim's end is in the name, for stats and listings.
    assert (entry.message_id, entry.state) == (mid, layout.CLAIMED)
    assert (entry.available, entry.claim_ends) == (ends + WAIT * US, ends)
    assert counts(broker) == (0, 1, 0)
    clock.now = START + 60
    assert counts(broker) == (0, 0, 1)
    assert broker.list_messages(PROJECT, "q", client_id="c", marker=None, limit=10,
                                echo=True, include_claimed=True,
                                include_delayed=False)[0] == []
    clock.now = START + 60 + WAIT
    assert counts(broker) == (1, 0, 0)
    # A claim without a wait (no policy) keeps the entry's six parts.
    broker.driver.queues.set_metadata(PROJECT, "q", {})
    broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1)
    [entry] = entries(raw, prefix)
    assert entry.claim_ends == 0 and entry.name.count(".") == 5


def test_a_claimer_killed_after_winning_leaves_the_wait_it_chose(make_driver, prefix):
    clock = FakeClock(START)
    broker = Synchronous(Broker(make_driver(clock=clock).target, Limits()))
    retrying_queue(broker)
    [mid] = post(broker.driver, "q", 1)
    crash("after-claim-bid", prefix, "q", clock.now)  # claimed it for 60 s, then died
    clock.now = START + 1
    # The next claim repairs the stale entry from the marker: the dead claimer's claim,
    # and the due time it set, its wait after that claim's end.
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1) is None
    [held] = broker.driver.messages.get(PROJECT, "q", [mid])
    assert (held.claim_count, held.claim_expires, held.due) == (
        1, START + 60, START + 60 + WAIT)
    # Clock readings set, not added up: whole microseconds at START's magnitude.
    clock.now = START + 60 + WAIT - 0.01
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1) is None
    clock.now = START + 60 + WAIT
    again = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1)
    assert [(m.id, m.claim_count) for m in again.messages] == [(mid, 2)]


def hand_back_and_die(kind: str, prefix: str, now: float, message_id: str, claim_id: str,
                      delay: float) -> None:
    from tests.swift_crash import hand_back_and_die as work

    auth = SWIFT.auth()
    child = SPAWN.Process(target=work, args=(
        kind, (auth.auth_url, auth.user, auth.key), prefix, PROJECT, "q", now, message_id,
        claim_id, delay))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("kind", ["after-hand-back-marker", "after-hand-back-record"])
def test_a_hand_back_cut_short_loses_nothing_and_its_message_comes_back_once(
        make_driver, prefix, kind):
    clock = FakeClock(START)
    broker = Synchronous(Broker(make_driver(clock=clock).target, Limits()))
    handed, kept = post(broker.driver, "q", 2)
    claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=2)
    hand_back_and_die(kind, prefix, clock.now, handed, claim.id, 5)
    # The claim keeps the other message whatever happened to this one.
    assert kept in [m.id for m in broker.get_claim(PROJECT, "q", claim.id).messages]
    clock.now = START + 5
    if kind == "after-hand-back-marker":
        # The message's state still names the claim: it is held until the claim ends.
        [held] = broker.driver.messages.get(PROJECT, "q", [handed])
        assert held.claim_id == claim.id
    # Its index entry is still the claimed one: no claim takes it before the claim ends.
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10) is None
    clock.now = START + 60
    later = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10)
    assert sorted((m.id, m.claim_count) for m in later.messages) == sorted(
        [(handed, 2), (kept, 2)])
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10) is None
    assert counts(broker) == (0, 2, 0)


def test_a_hand_back_costs_a_release_of_one_message_and_the_events(make_driver):
    log = RequestLog()
    clock = FakeClock(START)
    driver = make_driver(clock=clock, wrap=log.wrap, **NO_FLUSH)
    broker = Synchronous(Broker(driver.target, Limits()))
    handed, _ = post(broker.driver, "q", 2)
    claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=2)
    total, spent, released = log.measure(
        lambda: broker.release_message(PROJECT, "q", handed, claim.id, 30))
    assert released.due == START + 30
    # GET m/ (the claim check); GET and PUT of its marker; POST m/ (the state); PUT of
    # the new entry, DELETE of the old; HEAD m/; PUT of the events.
    assert (total, dict(spent)) == (8, {"get_object": 2, "put_object": 3, "post_object": 1,
                                        "delete_object": 1, "head_object": 1})
    assert [e.message_id for e in broker.driver.trail.events(PROJECT, "q")
            if e.kind == events.RELEASED] == [handed]


def test_a_retry_policy_costs_a_claim_no_request(make_driver):
    log = RequestLog()
    driver = make_driver(clock=FakeClock(START), wrap=log.wrap, **NO_FLUSH)
    broker = Synchronous(Broker(driver.target, Limits()))
    retrying_queue(broker, "retrying")
    broker.create_queue(PROJECT, "plain", {})
    costs = {}
    for queue in ("retrying", "plain"):
        post(broker.driver, queue, 1)
        costs[queue] = log.measure(
            lambda q=queue: broker.claim(PROJECT, q, ttl=60, grace=60, limit=1))[:2]
    assert costs["retrying"] == costs["plain"]
