"""What only the Redis driver promises of retry waits, beyond the contract suite: what a
message claimed under a retry policy costs (it is indexed twice while its claim lives,
in ``d`` by its due time and in ``wc`` by its claim's expiry), and that nothing of it is
left once the messages are gone."""

from __future__ import annotations

import pytest
import redis

from delayq import events
from delayq.retry import Backoff
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from tests.contract.drivers import FakeClock
from tests.redis_servers import SERVERS
from tests.test_redis_driver import PROJECT, namespace, post, queue_keys, used_memory

BACKOFF = Backoff((30, 60))
MAX_BYTES_PER_WAITING_MESSAGE = 350


@pytest.fixture(scope="module")
def own_server():
    """A Redis of this module's own, so INFO memory sees only what the tests store."""
    return SERVERS.fresh()


def claim_all(driver: Driver, count: int, backoff: Backoff | None = BACKOFF) -> list:
    claims = []
    while sum(len(c.messages) for c in claims) < count:
        claims.append(driver.claims.create(PROJECT, "q", ttl=600, grace=60, limit=100,
                                   dead_letter=None, backoff=backoff))
    return claims


def test_a_tiny_message_claimed_with_a_wait_costs_at_most_350_bytes(own_server):
    client = redis.Redis(port=own_server.port)
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), events_settings=events.OFF))
    post(driver, "q", 1)  # the queue's own state exists before the baseline
    driver.queues.purge(PROJECT, "q")
    before = used_memory(client)
    count = 20_000
    post(driver, "q", count, body={"n": 1})
    claim_all(driver, count)
    per_message = (used_memory(client) - before) / count
    driver.queues.delete(PROJECT, "q")
    driver.close()
    assert per_message <= MAX_BYTES_PER_WAITING_MESSAGE, f"{per_message:.0f} bytes"


@pytest.mark.parametrize("ending", ["expiry", "deletion"])
def test_no_key_of_a_wait_outlives_the_messages(own_server, ending):
    client = redis.Redis(port=own_server.port)
    clock = FakeClock()
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), clock=clock,
                    events_settings=events.OFF))
    post(driver, "q", 1)
    driver.queues.purge(PROJECT, "q")
    baseline = queue_keys(client, driver, "q")
    ids = post(driver, "q", 300, ttl=3600)
    claims = claim_all(driver, 300)
    driver.claims.renew(PROJECT, "q", claims[0].id, 600, 60, BACKOFF)
    driver.claims.release(PROJECT, "q", claims[1].id, BACKOFF)
    driver.claims.release_message(PROJECT, "q", claims[2].messages[0].id, claims[2].id, 10)
    # Claims renewed and released without a policy: back to 'c' and 'r'.
    driver.claims.renew(PROJECT, "q", claims[2].id, 600, 60)
    assert client.exists(driver.key_names.queue(PROJECT, "q")[:-1] + "wc")
    if ending == "expiry":
        clock.advance(2 * 3600)
        assert driver.reap_queue(PROJECT, "q")
    else:
        clock.advance(610)  # every claim has expired; the waits run
        stats = driver.queues.stats(PROJECT, "q")
        released = len(claims[1].messages) + 1
        assert (stats.claimed, stats.delayed, stats.free) == (0, 300 - released, released)
        driver.messages.delete_many(PROJECT, "q", ids)
        clock.advance(3600)  # claim records outlive their messages until they expire
        assert driver.reap_queue(PROJECT, "q")
    assert queue_keys(client, driver, "q") == baseline
    driver.close()


def test_a_claimed_message_is_indexed_once_as_claimed_however_its_wait_changes(
        own_server):
    clock = FakeClock()
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), clock=clock,
                    events_settings=events.OFF))
    client = redis.Redis(port=own_server.port)
    prefix = driver.key_names.queue(PROJECT, "q")[:-1]
    [mid] = post(driver, "q", 1)

    def where() -> tuple[str, ...]:
        return tuple(name for name in ("r", "d", "c", "wc")
                     if client.zcard(prefix + name))

    [claim] = claim_all(driver, 1)
    assert where() == ("d", "wc")
    driver.claims.renew(PROJECT, "q", claim.id, 600, 60)  # due stays after the new expiry
    assert where() == ("d", "wc")
    clock.advance(590)
    driver.claims.renew(PROJECT, "q", claim.id, 600, 60)  # now expires after it is due
    assert where() == ("c",)
    driver.claims.renew(PROJECT, "q", claim.id, 600, 60, BACKOFF)
    assert where() == ("d", "wc")
    driver.messages.delete(PROJECT, "q", mid, claim.id)
    assert where() == ()
    driver.close()
