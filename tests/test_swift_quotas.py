"""The Swift driver's quota leases (``storage/swift/quotas.py``), beyond the contract
suite (tests/contract/test_quotas.py), whose bursts run in one process, where requests
for a lease also wait on the process's own lock: here separate drivers, which share
nothing but Swift, as API servers do; a lease left by a holder that died; a holder
whose lease ran short; and the Swift requests a quota costs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from swiftclient.client import Connection

from delayq import errors
from delayq.message import NewMessage
from delayq.storage.swift import layout, quotas
from delayq.storage.swift.driver import Driver
from tests.contract.drivers import FakeClock
from tests.test_swift_driver import CLIENT, NO_FLUSH, PROJECT, START, RequestLog

pytestmark = pytest.mark.timeout(180)

DRIVERS = 4  # each with leases of its own, as separate API servers have


def post(driver: Driver, queue: str, count: int = 1, **quota: int) -> list[str]:
    return driver.messages.post(PROJECT, queue, CLIENT,
                                [NewMessage({"n": i}, 3600, 0) for i in range(count)],
                                **quota)


def held(driver: Driver, queue: str) -> int:
    return driver.queues.stats(PROJECT, queue).total


def burst(drivers: list[Driver], count: int, work: Callable[[Driver, int], Any]
          ) -> list[Any]:
    """``work(driver, i)`` for i in range(count), each in a thread of its own, released
    together, request i on driver i % len(drivers); what each returned or raised."""
    barrier = threading.Barrier(count)
    outcomes: list[Any] = [None] * count

    def run(i: int) -> None:
        driver = drivers[i % len(drivers)]
        barrier.wait(timeout=60)
        try:
            outcomes[i] = work(driver, i)
        except Exception as exc:  # noqa: BLE001 - asserted on
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
        assert not thread.is_alive()
    unexpected = [o for o in outcomes
                  if isinstance(o, Exception) and not isinstance(o, errors.QuotaExceeded)]
    assert unexpected == []
    return outcomes


def refused(outcomes: list[Any]) -> int:
    return sum(isinstance(o, errors.QuotaExceeded) for o in outcomes)


def test_posts_through_drivers_sharing_only_swift_store_exactly_the_quota(make_driver):
    drivers = [make_driver(clock=FakeClock(START)) for _ in range(DRIVERS)]
    outcomes = burst(drivers, 60, lambda d, i: post(d, "q", message_quota=20))
    assert refused(outcomes) == 40
    assert held(drivers[0], "q") == 20


def test_creations_through_drivers_sharing_only_swift_make_exactly_the_quota(make_driver):
    drivers = [make_driver(clock=FakeClock(START)) for _ in range(DRIVERS)]
    outcomes = burst(drivers, 60, lambda d, i: (
        d.queues.create(PROJECT, f"q{i}", {}, queue_quota=4) if i % 2
        else post(d, f"q{i}", queue_quota=4)))
    assert refused(outcomes) == 56
    assert drivers[0].queues.count(PROJECT) == 4
    made = {f"q{i}" for i, o in enumerate(outcomes) if not isinstance(o, Exception)}
    assert {name for name, _ in drivers[0].queues.page(PROJECT, None, 10)} == made


def lease_name(queue: str) -> str:
    return f"{quotas.POSTS_PREFIX}{layout.project_part(PROJECT)}/{queue}"


def test_a_lease_its_holder_left_behind_holds_posts_only_until_it_expires(make_driver,
                                                                          prefix, raw):
    """What a holder that died between its bid and its DELETE leaves: the lease object,
    which Swift lets a bid take again once its X-Delete-After has passed."""
    driver = make_driver(clock=FakeClock(START))
    post(driver, "q", message_quota=5)  # the quotas container exists from here on
    container = layout.quotas_container(prefix)
    raw.put_object(container, lease_name("q"), layout.encode(layout.lease_body("dead")),
                   headers={"X-Delete-After": "2"})
    started = time.monotonic()
    post(driver, "q", message_quota=5)
    waited = time.monotonic() - started
    assert 0.9 < waited < 2 + quotas.LAST_PAUSE + 1.5
    assert held(driver, "q") == 2


def test_a_holder_whose_lease_ran_short_writes_nothing(make_driver, monkeypatch, prefix,
                                                       raw):
    driver = make_driver(clock=FakeClock(START))
    post(driver, "q", message_quota=5)
    monkeypatch.setattr(quotas, "LEASE_MARGIN", quotas.LEASE_TIME)
    with pytest.raises(errors.StorageUnavailable, match="ran short"):
        post(driver, "q", message_quota=5)
    assert held(driver, "q") == 1
    # It deleted its lease all the same: the next post takes it at once.
    _, listing = raw.get_container(layout.quotas_container(prefix))
    assert listing == []
    monkeypatch.undo()
    post(driver, "q", message_quota=5)
    assert held(driver, "q") == 2


def test_a_lapsed_holder_never_deletes_its_successors_lease(make_driver, prefix,
                                                            raw: Connection):
    driver = make_driver(clock=FakeClock(START))
    leases = driver._quotas._leases
    lease = leases._take(lease_name("q"))
    assert lease is not None
    # Its lease lapsed and another holder took the name: a later X-Delete-At.
    container = layout.quotas_container(prefix)
    raw.put_object(container, lease.name, layout.encode(layout.lease_body("next")),
                   headers={"X-Delete-At": str(int(lease.delete_at) + 30)})
    leases._release(lease)
    assert b'"next"' in raw.get_object(container, lease.name)[1]


def costs(make_driver, **quota: int) -> dict[str, tuple[int, dict[str, int]]]:
    """Swift requests of a creation of a new queue, of an existing one, and of a post
    into it, under *quota* (``queue_quota``, ``message_quota``)."""
    log = RequestLog()
    driver = make_driver(clock=FakeClock(START), wrap=log.wrap, apart=True, **NO_FLUSH)
    # There as after the deployment's first lease: its creation is no cost of a quota.
    driver._objects.swift.put_container(layout.quotas_container(driver._objects.prefix))
    queue_quota = quota.get("queue_quota", 0)
    spent = {}
    for name, operation in (
            ("create", lambda: driver.queues.create(PROJECT, "q", {},
                                                   queue_quota=queue_quota)),
            ("create again", lambda: driver.queues.create(PROJECT, "q", {},
                                                         queue_quota=queue_quota)),
            ("post", lambda: post(driver, "q", 2, **quota))):
        total, counts, _ = log.measure(operation)
        spent[name] = (total, dict(counts))
    return spent


def test_a_quota_costs_its_lease_and_one_count_and_a_quota_of_0_nothing(make_driver):
    # A quota of 0 (or not given) costs no request at all.
    none = costs(make_driver)
    assert costs(make_driver, queue_quota=0, message_quota=0) == none
    # A creation under a queue quota: a listing, the lease (PUT, GET, DELETE), a listing
    # again; the creation of one that exists, the listing that finds it.
    queues = costs(make_driver, queue_quota=5)
    assert queues["create"][0] == none["create"][0] + 5
    assert queues["create again"][0] == none["create again"][0] + 1
    assert queues["post"] == none["post"]  # into a queue that exists: no queue quota
    # A post under a message quota: the lease and a listing of the index.
    messages = costs(make_driver, message_quota=5)
    assert messages["post"][0] == none["post"][0] + 4
    assert messages["post"][1]["get_container"] == none["post"][1].get("get_container",
                                                                        0) + 1


class LeaseBids:
    """Counts the PUTs of a connection into the quotas container: the lease bids."""

    def __init__(self, prefix: str) -> None:
        self.container = layout.quotas_container(prefix)
        self.count = 0
        self._lock = threading.Lock()

    def wrap(self, conn: Connection) -> Any:
        bids = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(conn, name)

            def put_object(self, container: str, *args: Any, **kwargs: Any) -> Any:
                if container == bids.container:
                    with bids._lock:
                        bids.count += 1
                return conn.put_object(container, *args, **kwargs)

        return Counting()


def test_a_burst_in_one_process_hands_the_lease_on_instead_of_bidding_each_time(
        make_driver, prefix):
    bids = LeaseBids(prefix)
    driver = make_driver(clock=FakeClock(START), wrap=bids.wrap)
    outcomes = burst([driver], 30, lambda d, i: post(d, "q", message_quota=20))
    assert refused(outcomes) == 10
    assert held(driver, "q") == 20
    # A bid each second at most (HAND_OVER), where each post would make one otherwise.
    assert bids.count < 10
