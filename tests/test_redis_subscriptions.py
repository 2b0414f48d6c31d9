"""What only the Redis driver promises of subscriptions, beyond the contract suite: the
subscribed-queues index, in a cluster slot of its own, stays right when a writer dies
between its two steps or writers settle out of order; expired subscriptions of deleted
queues are reaped."""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import threading

import redis

from delayq.storage.redis.driver import Driver
from delayq.storage.redis.subscriptions import RESERVATION_MARGIN
from delayq.subscription import SubscriptionChange
from delayq.synchronous import Synchronous, shared_loop
from tests.contract.drivers import FakeClock
from tests.redis_servers import SERVERS
from tests.test_redis_driver import PROJECT, namespace

SPAWN = multiprocessing.get_context("spawn")
HOOK = "http://127.0.0.1:9/hook"


def test_a_writer_dying_before_the_index_hears_leaves_the_queue_listed_not_missing():
    from tests.redis_crash import subscribe_and_die

    uri, ns, clock = SERVERS.cluster_uri(), namespace(), FakeClock()
    driver = Synchronous(Driver(uri, namespace=ns, clock=clock))
    child = SPAWN.Process(target=subscribe_and_die,
                          args=(uri, ns, PROJECT, "q", 60, clock.now))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    [subscription] = driver.subscriptions.page(PROJECT, "q", None, 10)
    assert driver.subscriptions.subscribed_queues() == [(PROJECT, "q")]
    clock.advance(60)  # the subscription is over; its reservation lasts a margin more
    assert driver.subscriptions.get(PROJECT, "q", subscription.id) is None
    assert driver.subscriptions.subscribed_queues() == [(PROJECT, "q")]
    clock.advance(RESERVATION_MARGIN)
    assert driver.subscriptions.subscribed_queues() == []
    driver.close()


def test_the_index_takes_a_queues_writes_in_order_whatever_order_they_settle_in():
    clock = FakeClock()
    driver = Synchronous(Driver(SERVERS.cluster_uri(), namespace=namespace(), clock=clock))
    # A creation, run up to its last step (telling the index) and held there.
    subscriptions = driver.target.subscriptions
    update_index = subscriptions._update_index
    reached, resume = threading.Event(), threading.Event()

    async def held(*args) -> None:
        reached.set()
        await asyncio.get_running_loop().run_in_executor(None, resume.wait)
        await update_index(*args)

    subscriptions._update_index = held
    creation = asyncio.run_coroutine_threadsafe(
        subscriptions.create(PROJECT, "q", HOOK, 600, {}), shared_loop().loop)
    assert reached.wait(30)
    subscriptions._update_index = update_index
    [subscription] = driver.subscriptions.page(PROJECT, "q", None, 10)
    driver.subscriptions.update(PROJECT, "q", subscription.id, SubscriptionChange(ttl=60))
    driver.subscriptions.delete(PROJECT, "q", subscription.id)
    # the held creation's reservation
    assert driver.subscriptions.subscribed_queues() == [(PROJECT, "q")]
    resume.set()
    assert creation.result(30) == subscription.id
    assert driver.subscriptions.subscribed_queues() == []  # the creation's settle came too late
    driver.close()


def test_the_reaper_removes_expired_subscriptions_of_deleted_queues():
    server = SERVERS.single()
    client = redis.Redis(port=server.port)
    clock = FakeClock()
    driver = Synchronous(Driver(server.uri, namespace=namespace(), clock=clock))
    driver.queues.create(PROJECT, "gone", {})
    driver.subscriptions.create(PROJECT, "gone", HOOK, 60, {})
    driver.queues.delete(PROJECT, "gone")
    prefix = driver.key_names.queue(PROJECT, "gone")[:-1]
    subscription_keys = [prefix + name for name in ("u", "ui", "ux", "us")]
    assert client.exists(*subscription_keys) == 4
    clock.advance(60)
    driver.reap()
    assert client.exists(*subscription_keys) == 0
    driver.close()
