"""A keyed post on Swift whose process dies part way (``storage/swift/post_keys.py``): a
repeat of the post completes it, and every message is then stored exactly once,
claimable, counted and recorded once."""

from __future__ import annotations

import multiprocessing
import signal
import uuid

import pytest

from delayq import events
from delayq.broker import Broker
from delayq.idempotency import PostKey
from delayq.storage.swift.post_keys import ROLL_FORWARD_AFTER
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage
from tests.contract.drivers import FakeClock, open_driver
from tests.contract.drivers import _swift as swift_spec
from tests.swift_server import SWIFT

SPAWN = multiprocessing.get_context("spawn")
PROJECT = "keys"
START = 4_000_000_000.25
BODIES = [{"n": n} for n in range(5)]
KEY = PostKey("order-17", "d" * 64, 300)


@pytest.mark.parametrize("kind", ["after-key-bid", "after-first-message", "after-visible"])
def test_a_repeat_completes_a_keyed_post_whose_process_died(tmp_path, kind):
    from tests.swift_crash import keyed_post_and_die

    spec = swift_spec(tmp_path)
    clock = FakeClock(START)
    driver = Synchronous(open_driver(spec, clock))
    try:
        auth = SWIFT.auth()
        child = SPAWN.Process(target=keyed_post_and_die, args=(
            kind, (auth.auth_url, auth.user, auth.key), spec.options["prefix"], PROJECT,
            "q", START, KEY, BODIES))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == -signal.SIGKILL

        broker = Synchronous(Broker(driver.target, Limits()))
        clock.advance(ROLL_FORWARD_AFTER + 1)
        ids = broker.post(PROJECT, "q", "keyed-producer",
                          [PostedMessage(b, None, None) for b in BODIES], size=0, key=KEY)
        assert len(ids) == len(BODIES)
        assert broker.post(PROJECT, "q", "keyed-producer",
                           [PostedMessage(b, None, None) for b in BODIES], size=0,
                           key=KEY) == ids
        stats = broker.stats(PROJECT, "q")
        assert (stats.free, stats.total) == (5, 5)
        claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10)
        assert [(m.id, m.body) for m in claim.messages] == list(zip(ids, BODIES,
                                                                    strict=True))
        # Counted and recorded by whoever ended phase 1: the repeat, unless the dead
        # process had (and died before it could count).
        counted = kind != "after-visible"
        posted = [e.message_id for e in driver.trail.events(PROJECT, "q")
                  if e.kind == events.POSTED]
        assert sorted(posted) == (sorted(ids) if counted else [])
        driver.flush_tallies()
        assert driver.queues.counts(PROJECT, "q").total == (5 if counted else 0)
    finally:
        driver.close()


def test_an_unrelated_key_is_untouched(tmp_path):
    driver = Synchronous(open_driver(swift_spec(tmp_path), FakeClock(START)))
    try:
        broker = Synchronous(Broker(driver.target, Limits()))
        other = PostKey(f"k-{uuid.uuid4().hex}", "e" * 64, 300)
        first = broker.post(PROJECT, "q", "c", [PostedMessage("x", None, None)], size=0,
                            key=other)
        assert broker.post(PROJECT, "q", "c", [PostedMessage("x", None, None)], size=0,
                           key=KEY) != first
    finally:
        driver.close()
