"""Redis calls on the event loop.

The API awaits the Redis driver's controllers on its loop: every call they make to
Redis is awaited, a script call on one server on the loop's connection of the fast path
(``storage/redis/fastpath.py``), any other call by the loop's ``redis.asyncio`` client,
while the loop serves other requests. These tests drive a real Redis from a real loop
(asyncio's own and uvloop, which the server uses): replies reach the calls that made
them however calls overlap, the loop keeps running while Redis is slow, and timeouts,
restarts, lost scripts and cancelled calls follow the rules of
``storage/redis/calls.py``, on one server and on a cluster.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
import redis
import uvloop

from delayq import errors
from delayq.broker import Broker
from delayq.message import NewMessage
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage
from tests.redis_servers import SERVERS, free_ports

PROJECT = "p"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run_loop(request):
    """Run a coroutine to its end on a new loop of the parameter's kind."""
    def run(coroutine):
        loop = LOOPS[request.param]()
        try:
            return loop.run_until_complete(coroutine)
        finally:
            loop.close()
    return run


@pytest.fixture
def server():
    """A Redis of the test's own: tests pause and restart it."""
    server = SERVERS.fresh()
    yield server
    server.stop()


@pytest.fixture
def driver(server):
    driver = Synchronous(Driver(server.uri, namespace=namespace()))
    yield driver
    driver.close()


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def post_one(driver: Driver, queue: str, body: object) -> str:
    [message_id] = driver.messages.post(PROJECT, queue, CLIENT, [NewMessage(body, 600, 0)])
    return message_id


async def post(driver: Driver, queue: str, body: object) -> str:
    """One message posted on the loop; its id."""
    [message_id] = await driver.target.messages.post(
        PROJECT, queue, CLIENT, [NewMessage(body, 600, 0)])
    return message_id


async def claim(driver: Driver, queue: str):
    return await driver.target.claims.create(PROJECT, queue, ttl=60, grace=60, limit=5,
                                             dead_letter=None)


async def warm(driver: Driver) -> None:
    """Open a connection of the loop's client, so that a paused Redis holds the call
    under test, not the new connection's handshake."""
    await driver.target.queues.stats(PROJECT, "warm")


def connections(port: int) -> int:
    """The clients connected to the server on *port*, the observer asking not counted."""
    with redis.Redis(port=port) as observer:
        return len(observer.client_list()) - 1


def test_overlapping_calls_get_their_own_replies_within_the_loops_connections(
        server, run_loop):
    driver = Synchronous(Driver(server.uri, namespace=namespace(), max_connections=4))
    queues = [f"q{i}" for i in range(50)]

    async def post_then_claim(queue: str) -> tuple[str, list[str], object]:
        posted = await post(driver, queue, {"queue": queue})
        taken = await claim(driver, queue)
        return posted, [m.id for m in taken.messages], taken.messages[0].body

    async def main() -> list:
        before = connections(server.port)
        results = await asyncio.gather(*(post_then_claim(q) for q in queues))
        # The 100 script calls overlapped on the loop's one connection (fastpath.py);
        # the posts' metadata reads waited for one of the 4 of the loop's client.
        assert connections(server.port) - before <= 1 + 4
        return results

    try:
        for queue, (posted, claimed, body) in zip(queues, run_loop(main()), strict=True):
            assert claimed == [posted]
            assert body == {"queue": queue}
    finally:
        driver.close()


def test_the_loop_serves_while_a_call_waits_for_redis(server, driver, run_loop):
    ticks = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def main() -> float:
        await warm(driver)
        stop = asyncio.Event()
        ticking = asyncio.ensure_future(ticker(stop))
        await asyncio.sleep(0.05)
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(500)  # every client's command waits 0.5 s, then runs
        started = time.monotonic()
        await post(driver, "q", "after the pause")
        waited = time.monotonic() - started
        stop.set()
        await ticking
        return started, waited

    started, waited = run_loop(main())
    assert waited >= 0.4
    # A blocking call would have stopped the ticker for the whole pause.
    during = [t for t in ticks if started < t < started + waited]
    assert len(during) >= 10, (len(during), waited)
    assert driver.queues.stats(PROJECT, "q").total == 1


def test_a_call_that_timed_out_is_not_sent_again_and_the_next_one_reconnects(server,
                                                                              run_loop):
    driver = Synchronous(Driver(server.uri, namespace=namespace(), socket_timeout=0.5))
    post_one(driver, "q", "first")

    async def main() -> None:
        await warm(driver)
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(800)
        started = time.monotonic()
        # Sent again after its 0.5 s timeout, the post would run when the pause ends.
        with pytest.raises(errors.StorageUnavailable, match="Timeout"):
            await post(driver, "q", "timed out")
        assert 0.4 < time.monotonic() - started < 0.8
        await asyncio.sleep(1.0)
        # The timed-out post's connection was closed: Redis dropped it unrun.
        stats = await driver.target.queues.stats(PROJECT, "q")
        assert stats.total == 1
        await post(driver, "q", "on a new connection")
        assert (await driver.target.queues.stats(PROJECT, "q")).total == 2

    try:
        run_loop(main())
    finally:
        driver.close()


@pytest.mark.parametrize("credentials", [":s3cret", "default:s3cret"])
def test_the_loops_connection_authenticates_and_selects_the_database(server, run_loop,
                                                                     credentials):
    with redis.Redis(port=server.port) as admin:
        admin.config_set("requirepass", "s3cret")
    driver = Synchronous(Driver(f"redis://{credentials}@127.0.0.1:{server.port}/3",
                    namespace=namespace()))

    async def main() -> tuple[str, object]:
        posted = await post(driver, "q", "in database 3")
        return posted, await claim(driver, "q")

    try:
        posted, taken = run_loop(main())
        assert [m.id for m in taken.messages] == [posted]
        with redis.Redis(port=server.port, password="s3cret", db=3) as observer:
            assert observer.exists(driver.key_names.queue(PROJECT, "q"))
    finally:
        driver.close()


def test_calls_survive_a_restart_and_a_flushed_script_cache(server, driver, run_loop):

    async def main() -> None:
        first = await post(driver, "q", 1)
        server.stop()  # no persistence: the data and the loaded scripts are gone
        server.start()
        # The loop's connection served a call before and is dead now: the call is sent
        # again once on a new one, finds its script unknown, loads it and runs.
        again = [await post(driver, "q", 2)]
        redis.Redis(port=server.port).script_flush()
        again.append(await post(driver, "q", 3))
        found = await driver.target.messages.get(PROJECT, "q", [first, *again])
        assert [m.id for m in found] == again

    run_loop(main())


def test_calls_in_flight_when_redis_restarts_are_each_sent_again_once(server, driver,
                                                                      run_loop):
    queues = [f"q{i}" for i in range(20)]

    async def main() -> list[list[str]]:
        await warm(driver)
        server.stop()
        server.start()
        # The call that takes the dead connection finds it broken and is sent once
        # more on a new one; the others open new connections.
        posted = await asyncio.gather(*(post(driver, q, q) for q in queues))
        return [[m.id for m in await driver.target.messages.get(PROJECT, q, [i])]
                for q, i in zip(queues, posted, strict=True)]

    found = run_loop(main())
    assert all(len(ids) == 1 for ids in found)
    assert [driver.queues.stats(PROJECT, q).total for q in queues] == [1] * len(queues)


def test_a_cancelled_call_leaves_the_replies_of_later_calls_in_place(server, driver,
                                                                     run_loop):
    other = post_one(driver, "other", "other")

    async def main() -> None:
        await warm(driver)
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(300)
        waiting = asyncio.ensure_future(post(driver, "held", "held"))
        await asyncio.sleep(0.05)  # its command is written; its reply is 0.25 s away
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The cancelled call's reply comes first on the connection and is dropped: this
        # call gets its own.
        [message] = await driver.target.messages.get(PROJECT, "other", [other])
        assert (message.id, message.body) == (other, "other")

    run_loop(main())


def test_calls_from_threads_share_the_facades_connections(server, driver):
    ids = [post_one(driver, "q", i) for i in range(3)]
    before = connections(server.port)
    for i in range(10):
        thread = threading.Thread(target=post_one, args=(driver, "q", 3 + i))
        thread.start()
        thread.join()
    # One after another, the threads' calls reuse the facade loop's connections.
    assert connections(server.port) == before
    assert driver.queues.stats(PROJECT, "q").total == 13
    assert [m.id for m in driver.messages.get(PROJECT, "q", ids)] == ids


class Posting:
    """A post through the broker, noting the thread each ran on."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.threads: list[bool] = []

    async def post(self, body: object) -> list[str]:
        self.threads.append(threading.current_thread() is threading.main_thread())
        return await self.broker.post(PROJECT, "q", CLIENT, [posted(body)], 10)


def test_the_broker_awaits_redis_on_the_loop_and_a_slow_call_keeps_it_there(
        server, driver, run_loop):
    broker = Broker(driver.target, Limits())
    posting = Posting(broker)

    async def main() -> tuple[list[str], list[str]]:
        ids = await posting.post(1)  # opens the loop's connection
        with redis.Redis(port=server.port) as observer:
            observer.client_pause(300)
        ids += await posting.post(2)  # slow, but the loop went on: no hand-off
        ids += await posting.post(3)
        taken = await broker.claim(PROJECT, "q", ttl=60, grace=60, limit=5)
        for message in taken.messages:
            await broker.delete_message(PROJECT, "q", message.id, taken.id)
        return [m.id for m in taken.messages], ids

    claimed, ids = run_loop(main())
    # Awaited by the request's own coroutine, on the loop's thread.
    assert posting.threads == [True] * 3
    assert claimed == ids
    assert driver.queues.stats(PROJECT, "q").total == 0


@pytest.fixture
def unreachable():
    """A driver of a Redis that cannot be reached."""
    [port] = free_ports(1)  # nothing listens there
    driver = Synchronous(Driver(f"redis://127.0.0.1:{port}/0", namespace=namespace(),
                                connect_timeout=0.2))
    yield driver
    driver.close()


def test_calls_stay_on_the_loop_while_redis_cannot_be_reached(run_loop, unreachable):
    posting = Posting(Broker(unreachable.target, Limits()))

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(errors.StorageUnavailable):
                await posting.post("unreachable")

    run_loop(main())
    # Connecting is awaited too: no call leaves the loop.
    assert posting.threads == [True, True]


def posted(body: object) -> PostedMessage:
    return PostedMessage(body=body, ttl=600, delay=None, deliver_at=None)


def test_on_a_cluster_operations_are_awaited_on_the_loop_too(run_loop):
    driver = Synchronous(Driver(SERVERS.cluster_uri(), namespace=namespace()))

    async def main() -> tuple[list[str], object]:
        ids = await driver.target.messages.post(
            PROJECT, "q", CLIENT, [NewMessage("on a cluster", 600, 0)])
        taken = await driver.target.claims.create(PROJECT, "q", ttl=60, grace=60,
                                                  limit=5, dead_letter=None)
        await driver.target.messages.delete(PROJECT, "q", ids[0], taken.id)
        return ids, taken

    try:
        ids, taken = run_loop(main())
        assert [(m.id, m.body) for m in taken.messages] == [(ids[0], "on a cluster")]
        assert driver.queues.stats(PROJECT, "q").total == 0
    finally:
        driver.close()


@pytest.mark.parametrize("awaited", [False, True], ids=["blocking", "awaited"])
def test_on_a_cluster_a_call_that_timed_out_is_not_sent_again(awaited):
    driver = Synchronous(Driver(SERVERS.cluster_uri(), namespace=namespace(), socket_timeout=0.5))
    post_one(driver, "q", "first")
    node = driver._client.get_node_from_key(driver.key_names.queue(PROJECT, "q"))

    paused: list[float] = []  # when the pause took hold; the post is sent after it

    async def post_awaited() -> None:
        await warm(driver)
        pause()
        await post(driver, "q", "timed out")

    def pause() -> None:
        # Only the queue's node: the cluster is the session's, other tests use it.
        with redis.Redis(host=node.host, port=node.port) as observer:
            observer.client_pause(800)
        paused.append(time.monotonic())

    try:
        with pytest.raises(errors.StorageUnavailable, match="Timeout"):
            if awaited:
                asyncio.run(post_awaited())
            else:
                pause()
                post_one(driver, "q", "timed out")
        # Sent again after its 0.5 s timeout, the post would run when the pause ends (or
        # time out again). Timed from the pause: the warm-up and the observer's own
        # connection before it are no part of the call.
        assert time.monotonic() - paused[0] < 0.8
        time.sleep(1.0)
        assert driver.queues.stats(PROJECT, "q").total == 1
    finally:
        driver.close()
