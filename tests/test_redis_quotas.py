"""What only the Redis driver promises of the queue quota, beyond the contract suite:
a creation holds its queue's name in the project catalogue (a slot of its own in a
cluster) before it makes the queue, and a process dying between those steps leaves the
project over-counted only until its hold is past its deadline (``catalogue.py``)."""

from __future__ import annotations

import multiprocessing
import signal

import pytest

from delayq import errors
from delayq.message import NewMessage
from delayq.storage.redis.catalogue import HOLD_LEASE, HOLD_SKEW, Catalogue, Hold
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous, shared_loop
from tests.contract.drivers import FakeClock
from tests.redis_servers import SERVERS
from tests.test_redis_driver import PROJECT, namespace

SPAWN = multiprocessing.get_context("spawn")
ONE = [NewMessage("x", 3600, 0)]
LATE = HOLD_LEASE + HOLD_SKEW + 1  # seconds after which a hold is settled without it


@pytest.fixture(params=["single", "cluster"])
def uri(request) -> str:
    return SERVERS.single().uri if request.param == "single" else SERVERS.cluster_uri()


def names(driver: Driver) -> list[str]:
    return [name for name, _ in driver.queues.page(PROJECT, None, 100)]


def holds(driver: Driver) -> int:
    """The holds the project's catalogue keeps (``lua/catalogue_reserve.lua``)."""
    return driver._client.zcard(driver.key_names.catalogue(PROJECT)[:-len("queues")] + "qh")


def die_creating(uri: str, ns: str, point: str, queue: str, quota: int,
                 now: float) -> None:
    from tests.redis_crash import create_and_die

    child = SPAWN.Process(target=create_and_die,
                          args=(point, uri, ns, PROJECT, queue, quota, now))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL


def test_a_creation_dying_after_its_hold_counts_only_until_the_hold_is_late(uri):
    ns, clock = namespace(), FakeClock()
    driver = Synchronous(Driver(uri, namespace=ns, clock=clock))
    assert driver.queues.create(PROJECT, "a", {}, queue_quota=2)
    die_creating(uri, ns, "after-hold", "b", 2, clock.now)
    assert driver.queues.get(PROJECT, "b") is None
    assert driver.queues.count(PROJECT) == 2  # the hold counts: its write may yet come
    with pytest.raises(errors.QuotaExceeded, match="already has 2 queues"):
        driver.queues.create(PROJECT, "c", {}, queue_quota=2)

    clock.advance(LATE)  # no write under the hold can make "b" any more
    assert driver.queues.create(PROJECT, "c", {}, queue_quota=2)
    assert names(driver) == ["a", "c"]
    assert driver.queues.count(PROJECT) == 2
    assert holds(driver) == 0
    driver.close()


def test_a_creation_dying_after_making_its_queue_keeps_it_listed_and_counted(uri):
    ns, clock = namespace(), FakeClock()
    driver = Synchronous(Driver(uri, namespace=ns, clock=clock))
    assert driver.queues.create(PROJECT, "a", {}, queue_quota=2)
    die_creating(uri, ns, "before-settle", "b", 2, clock.now)
    assert names(driver) == ["a", "b"]
    clock.advance(LATE)
    with pytest.raises(errors.QuotaExceeded, match="already has 2 queues"):
        driver.messages.post(PROJECT, "c", "client", ONE, queue_quota=2)
    assert holds(driver) == 0  # settled: "b" exists, so it is counted for good
    assert names(driver) == ["a", "b"]
    assert driver.queues.count(PROJECT) == 2
    driver.close()


class StallsAfterItsFirstHold(Catalogue):
    """Its process stalls past the deadline of the first hold it takes."""

    clock: FakeClock
    stalled = False

    async def reserve(self, project: str, name: str, quota: int) -> Hold:
        hold = await super().reserve(project, name, quota)
        if not self.stalled:
            self.stalled = True
            self.clock.advance(HOLD_LEASE + 1)
        return hold


@pytest.mark.parametrize("how", ["create", "post", "redrive"])
def test_a_write_past_its_holds_deadline_makes_no_queue_and_holds_the_name_again(uri,
                                                                                  how):
    ns, clock = namespace(), FakeClock()
    driver = Synchronous(Driver(uri, namespace=ns, clock=clock))
    driver.messages.post(PROJECT, "source", "client", ONE, queue_quota=2)
    stalling = StallsAfterItsFirstHold(driver.key_names, driver._scripts, driver._now_arg)
    stalling.clock = clock
    driver.context.catalogue = stalling
    match how:
        case "create":
            assert driver.queues.create(PROJECT, "b", {}, queue_quota=2)
        case "post":
            driver.messages.post(PROJECT, "b", "client", ONE, queue_quota=2)
        case _:
            driver.messages.redrive(PROJECT, "source", destination="b", limit=1, queue_quota=2)
    assert stalling.stalled
    assert names(driver) == ["b", "source"]
    assert holds(driver) == 0
    with pytest.raises(errors.QuotaExceeded):
        driver.queues.create(PROJECT, "c", {}, queue_quota=2)
    driver.close()


def test_a_write_under_a_late_hold_makes_nothing(uri):
    clock = FakeClock()
    driver = Synchronous(Driver(uri, namespace=namespace(), clock=clock))
    hold = shared_loop().run(driver.context.catalogue.reserve(PROJECT, "q", 1))
    clock.advance(HOLD_LEASE + 0.001)
    key = driver.key_names.queue(PROJECT, "q")
    created, _listed, exists = shared_loop().run(driver._scripts.queue_create.call(
        [key], ["{}", "nonce", driver._now_arg(), hold.fence]))
    assert (created, exists) == (0, 0)
    assert driver.queues.get(PROJECT, "q") is None
    driver.close()


def test_a_queue_deleted_while_a_creation_holds_its_name_stays_counted_until_settled(
        uri):
    driver = Synchronous(Driver(uri, namespace=namespace()))
    assert driver.queues.create(PROJECT, "q", {}, queue_quota=1)
    # A creation of "q":
    hold = shared_loop().run(driver.context.catalogue.reserve(PROJECT, "q", 1))
    driver.queues.delete(PROJECT, "q")
    # The creation's write may yet make "q" again: its name keeps its place.
    with pytest.raises(errors.QuotaExceeded):
        driver.queues.create(PROJECT, "other", {}, queue_quota=1)
    shared_loop().run(driver.context.catalogue.settle(hold, False))  # it made none
    assert driver.queues.count(PROJECT) == 0
    assert driver.queues.create(PROJECT, "other", {}, queue_quota=1)
    assert names(driver) == ["other"]
    driver.close()
