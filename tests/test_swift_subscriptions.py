"""What only the Swift driver promises of subscriptions, on a real Swift.

One subscription per subscriber even when creations race (they bid for the subscriber's
lock), a subscriber freed by a deletion at once and by a creator that died after winning
its lock once ``ABANDONED`` has passed, versions that an update cut short leaves behind,
``subscribed_queues`` as one listing whatever the queues and projects, and the reaper.
The contract suite (tests/contract/test_subscriptions.py) states the behaviour itself.
"""

from __future__ import annotations

import threading

import pytest
from swiftclient.exceptions import ClientException

from delayq import errors
from delayq.storage.swift import layout
from delayq.storage.swift.subscriptions import ABANDONED
from delayq.subscription import SubscriptionChange
from tests.contract.drivers import FakeClock
from tests.test_swift_driver import NO_FLUSH, PROJECT, START, RequestLog

pytestmark = pytest.mark.timeout(120)

HOOK = "http://127.0.0.1:9/hook"
OTHER = "http://127.0.0.1:9/other"


def subscribe(driver, queue: str = "q", subscriber: str = HOOK, ttl: int = 3600,
              project: str = PROJECT) -> str | None:
    return driver.subscriptions.create(project, queue, subscriber, ttl, {"n": 1})


def stored(raw, prefix: str, start: str = "") -> list[str]:
    """The names in the subscriptions container (beginning with *start*)."""
    _, listing = raw.get_container(layout.subscriptions_container(prefix), prefix=start,
                                   full_listing=True)
    return [item["name"] for item in listing]


def test_of_creators_racing_for_one_subscriber_exactly_one_wins_every_round(make_driver):
    clock = FakeClock(START)
    drivers = [make_driver(clock=clock) for _ in range(8)]
    subscribe(drivers[0], subscriber="http://127.0.0.1:9/first")  # the container exists
    for driver in drivers:
        driver._objects.swift.get_auth()  # logged in before the race, not during it
    for round_ in range(5):
        subscriber = f"http://127.0.0.1:9/round{round_}"
        start = threading.Barrier(len(drivers))
        created: list[str | None] = []
        lock = threading.Lock()

        def create(driver, subscriber=subscriber, start=start, created=created,
                   lock=lock) -> None:
            start.wait()
            got = subscribe(driver, subscriber=subscriber)
            with lock:
                created.append(got)

        threads = [threading.Thread(target=create, args=(d,)) for d in drivers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        [winner] = [got for got in created if got is not None]
        assert len(created) == len(drivers)
        assert [s.id for s in drivers[0].subscriptions.page(PROJECT, "q", None, 20)
                if s.subscriber == subscriber] == [winner]


def test_a_deleted_or_purged_subscriber_may_subscribe_again_at_once(make_driver):
    driver = make_driver(clock=FakeClock(START))
    first = subscribe(driver)
    driver.subscriptions.delete(PROJECT, "q", first)
    second = subscribe(driver)
    assert second not in (None, first)
    driver.subscriptions.purge(PROJECT, "q")
    assert subscribe(driver) not in (None, second)


def test_a_creator_that_died_after_winning_holds_the_subscriber_until_abandoned(
        make_driver):
    clock = FakeClock(START)
    driver = make_driver(clock=clock)
    subscribe(driver, subscriber=OTHER)  # the container exists
    # What a creator leaves when it dies between winning the lock and storing the
    # subscription: the lock of a subscription that is nowhere.
    now = driver._now_us()
    assert driver._subscriptions._take_lock(PROJECT, "q", HOOK, 1, "0" * 32, now)
    assert subscribe(driver) is None  # its winner could still be writing it
    clock.now = START + ABANDONED / 1_000_000 - 0.01
    assert subscribe(driver) is None
    clock.now = START + ABANDONED / 1_000_000
    created = subscribe(driver)
    assert created is not None
    assert [s.id for s in driver.subscriptions.page(PROJECT, "q", None, 10)
            if s.subscriber == HOOK] == [created]


def test_an_update_to_another_subscriber_takes_the_new_one_and_frees_the_old(make_driver):
    driver = make_driver(clock=FakeClock(START))
    moved = subscribe(driver)
    subscribe(driver, subscriber=OTHER)
    with pytest.raises(errors.SubscriptionExists):
        driver.subscriptions.update(PROJECT, "q", moved, SubscriptionChange(subscriber=OTHER))
    third = "https://example.com/third"
    driver.subscriptions.update(PROJECT, "q", moved, SubscriptionChange(subscriber=third))
    assert subscribe(driver, subscriber=third) is None
    assert subscribe(driver) is not None  # the old subscriber is free at once
    assert driver.subscriptions.get(PROJECT, "q", moved).subscriber == third


class FailingVersionDeletes:
    """A connection whose DELETEs of subscription versions fail: an updater dying between
    writing the new version and deleting the old one leaves both."""

    def __init__(self, conn) -> None:
        self._conn = conn

    def __getattr__(self, name: str):
        return getattr(self._conn, name)

    def delete_object(self, container: str, name: str, *args, **kwargs):
        if name.startswith(layout.SUBSCRIPTION_PREFIX):
            raise ClientException("refused", http_status=503)
        return self._conn.delete_object(container, name, *args, **kwargs)


def test_an_update_cut_short_leaves_an_older_version_that_reads_pass_over(
        make_driver, raw, prefix):
    clock = FakeClock(START)
    driver = make_driver(clock=clock)
    updater = make_driver(clock=clock, wrap=FailingVersionDeletes)
    sid = subscribe(driver, ttl=600)
    clock.now = START + 10
    with pytest.raises(errors.StorageUnavailable):
        updater.subscriptions.update(PROJECT, "q", sid, SubscriptionChange(ttl=60))
    assert len(stored(raw, prefix, layout.SUBSCRIPTION_PREFIX)) == 2
    got = driver.subscriptions.get(PROJECT, "q", sid)
    assert (got.ttl, got.expires) == (60, START + 70)
    assert [s.id for s in driver.subscriptions.page(PROJECT, "q", None, 10)] == [sid]
    # Once the newer version has expired the older one, whose ttl ran longer, stays
    # passed over: the newest version is the subscription.
    clock.now = START + 70
    assert driver.subscriptions.get(PROJECT, "q", sid) is None
    assert driver.subscriptions.subscribed_queues() == []
    driver.reap()
    assert stored(raw, prefix, layout.SUBSCRIPTION_PREFIX) == []


def test_subscribed_queues_is_one_listing_whatever_the_queues_and_projects(make_driver):
    log = RequestLog()
    driver = make_driver(clock=FakeClock(START), wrap=log.wrap, **NO_FLUSH)
    long_project = "p" * 200  # hashed into names
    expected = []
    for project in ("a", "b", long_project):
        for n in range(10):
            subscribe(driver, f"q{n}", project=project)
            subscribe(driver, f"q{n}", subscriber=OTHER, project=project)
            expected.append((project, f"q{n}"))
    # The first reading reads one subscription of the hashed project, once.
    total, spent, queues = log.measure(driver.subscriptions.subscribed_queues)
    assert queues == sorted(expected)
    assert (total, dict(spent)) == (2, {"get_container": 1, "get_object": 1})
    total, spent, queues = log.measure(driver.subscriptions.subscribed_queues)
    assert queues == sorted(expected)
    assert (total, dict(spent)) == (1, {"get_container": 1})


def test_subscription_requests(make_driver):
    log = RequestLog()
    clock = FakeClock(START)
    driver = make_driver(clock=clock, wrap=log.wrap, **NO_FLUSH)
    subscribe(driver, subscriber=OTHER)  # the container exists
    costs = {"create (a new subscriber)": log.measure(lambda: subscribe(driver))}
    sid = costs["create (a new subscriber)"][2]
    costs["create (a subscriber held)"] = log.measure(lambda: subscribe(driver))
    costs["get"] = log.measure(lambda: driver.subscriptions.get(PROJECT, "q", sid))
    costs["list"] = log.measure(lambda: driver.subscriptions.page(PROJECT, "q", None, 10))
    costs["update the ttl"] = log.measure(lambda: driver.subscriptions.update(
        PROJECT, "q", sid, SubscriptionChange(ttl=100)))
    costs["delete"] = log.measure(lambda: driver.subscriptions.delete(PROJECT, "q", sid))
    costs["create (a subscriber released)"] = log.measure(lambda: subscribe(driver))
    assert {name: total for name, (total, _, _) in costs.items()} == {
        # A listing of the subscriber's locks; the bid's PUT and GET; the PUT of the
        # subscription.
        "create (a new subscriber)": 4,
        # The listing, a GET of the newest lock, a listing of its subscription's
        # versions and a GET of the newest: held.
        "create (a subscriber held)": 4,
        "get": 2,  # a listing of its versions, a GET of the newest
        "list": 3,  # a listing of the queue's versions, a GET of each of the two
        "update the ttl": 4,  # get, the PUT of the new version, a DELETE of the old
        # get, the DELETE of each version; the locks' listing, a GET of the newest and
        # its PUT, released.
        "delete": 6,
        # As for a new one, with a GET of the lock released and a POST giving the lock
        # it supersedes its X-Delete-After.
        "create (a subscriber released)": 6,
    }


def test_the_reaper_removes_expired_subscriptions_and_swift_would_too(
        make_driver, raw, prefix):
    clock = FakeClock(START)
    driver = make_driver(clock=clock)
    subscribe(driver, ttl=60)
    kept = subscribe(driver, "kept", ttl=120)
    [name] = stored(raw, prefix, layout.queue_subscriptions(PROJECT, "q"))
    container = layout.subscriptions_container(prefix)
    assert int(raw.head_object(container, name)["x-delete-at"]) == int(START) + 61
    clock.now = START + 60
    driver.reap()
    assert [layout.SubscriptionName.parse(n).id
            for n in stored(raw, prefix, layout.SUBSCRIPTION_PREFIX)] == [kept]
    assert subscribe(driver) is not None  # its subscriber is free
