"""A Redis at its memory limit (``maxmemory``, ``maxmemory-policy noeviction``).

Each test fills a redis-server of its own through the driver until Redis refuses a post
for memory, then checks what still works there, as the operator guide states it: reads,
and every way of freeing memory — purge, queue deletion, deletes by id, the delete of one
message (with its claim) and pop — each recording its events in the queue's trail, and
handing claimed messages back, which takes them out of the claimed set first.
Time is a test clock, so a test decides when messages expire.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from falcon import testing

from delayq import errors
from delayq.api.app import create_app
from delayq.claim import Claim
from delayq.message import NewMessage
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from tests.contract.drivers import FakeClock
from tests.redis_servers import SERVERS, RedisServer

PROJECT = "p"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
MAXMEMORY = "3mb"
PAD = {"pad": "x" * 200}
# How far below what Redis uses its limit is put once a post was refused: the buffers of
# the next command (its arguments, its reply) could otherwise take Redis back under the
# limit by a few kilobytes and make it accept a write it refused a moment ago.
HELD_OVER = 200_000
OOM = "maxmemory"  # Redis's OOM error says "command not allowed when used memory > ..."


@dataclass
class Full:
    server: RedisServer
    driver: Driver
    client: redis.Redis
    clock: FakeClock
    posted: list[str]  # the free messages of queue q
    claim: Claim  # a live claim on three messages of q, made before Redis was full

    def events(self, queue: str = "q") -> list[str]:
        return [event.kind for event in self.driver.trail.events(PROJECT, queue)]

    def refuses_a_post(self) -> bool:
        try:
            self.driver.messages.post(PROJECT, "other", CLIENT, [NewMessage(1, 60, 0)])
        except errors.StorageUnavailable as exc:
            assert OOM in str(exc)
            return True
        return False

    def used_memory(self) -> int:
        """What Redis uses once the structures freed in the background (UNLINK) are."""
        deadline = time.monotonic() + 10
        while self.client.info("memory")["lazyfree_pending_objects"]:
            assert time.monotonic() < deadline, "Redis is still freeing after 10 s"
            time.sleep(0.01)
        return self.client.info("memory")["used_memory"]

    def limit(self) -> int:
        return int(self.client.config_get("maxmemory")["maxmemory"])

    def hold_over(self) -> None:
        """Put Redis's limit HELD_OVER below what it uses, and check it refuses a post."""
        self.client.config_set("maxmemory", self.used_memory() - HELD_OVER)
        assert self.refuses_a_post()


def fill(driver: Driver, queue: str) -> list[str]:
    """Post to *queue* until Redis refuses a post for memory; the ids posted."""
    posted: list[str] = []
    with pytest.raises(errors.StorageUnavailable, match=OOM):
        for _ in range(10_000):
            posted += driver.messages.post(PROJECT, queue, CLIENT,
                                           [NewMessage(PAD, 3600, 0)] * 50)
    return posted


@pytest.fixture
def full() -> Iterator[Full]:
    server = SERVERS.fresh("--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction")
    clock = FakeClock()
    driver = Synchronous(Driver(server.uri, namespace=f"t{uuid.uuid4().hex[:12]}", clock=clock))
    client = redis.Redis(port=server.port)
    driver.messages.post(PROJECT, "q", CLIENT, [NewMessage(1, 3600, 0)] * 3)
    claim = driver.claims.create(PROJECT, "q", ttl=600, grace=600, limit=3, dead_letter=None)
    assert claim is not None and len(claim.messages) == 3
    # Queue s: its bucket's earliest expiry (60 s) is a message deleted since.
    first = driver.messages.post(PROJECT, "s", CLIENT, [NewMessage(1, 60, 0)])
    driver.messages.post(PROJECT, "s", CLIENT, [NewMessage(1, 3600, 0)] * 3)
    driver.messages.delete_many(PROJECT, "s", first)
    state = Full(server, driver, client, clock, fill(driver, "q"), claim)
    state.hold_over()
    yield state
    driver.close()
    client.close()
    server.stop()


def test_a_full_redis_refuses_posts_and_claims_and_serves_reads(full):
    assert full.refuses_a_post()
    with pytest.raises(errors.StorageUnavailable, match=OOM):
        full.driver.queues.create(PROJECT, "new", {})
    with pytest.raises(errors.StorageUnavailable, match=OOM):
        full.driver.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1, dead_letter=None)
    assert len(full.driver.messages.get(PROJECT, "q", full.posted[:10])) == 10
    stats = full.driver.queues.stats(PROJECT, "q")
    assert (stats.free, stats.claimed) == (len(full.posted), 3)
    assert full.driver.claims.get(PROJECT, "q", full.claim.id).id == full.claim.id


def test_a_full_redis_counts_a_queue_whose_expiry_index_is_stale(full):
    # Queue stats first reap what has expired: in queue s, nothing, though its index of
    # expiries says its bucket holds a message that expired at 60 s.
    full.clock.advance(120)
    stats = full.driver.queues.stats(PROJECT, "s")
    assert (stats.free, stats.total) == (3, 3)
    assert full.refuses_a_post()


@pytest.mark.parametrize("how", ["purge", "delete"])
def test_a_full_redis_purges_and_deletes_queues_and_records_them(full, how):
    before = full.events()
    if how == "purge":
        full.driver.queues.purge(PROJECT, "q")
        assert full.driver.queues.stats(PROJECT, "q").total == 0
    else:
        full.driver.queues.delete(PROJECT, "q")
        assert full.driver.queues.get(PROJECT, "q") is None
    assert full.events() == before + ["purged"]
    # The memory is free again: under the limit, and posts are accepted.
    assert full.used_memory() < full.limit()
    assert not full.refuses_a_post()


def test_a_full_redis_deletes_messages_by_id_and_records_them(full):
    before = full.events()
    gone = full.posted[:10]
    full.driver.messages.delete_many(PROJECT, "q", gone)
    assert full.driver.messages.get(PROJECT, "q", gone) == []
    assert full.events() == before + ["deleted"] * 10


def test_a_full_redis_deletes_a_claimed_message_with_its_claim_and_records_it(full):
    message = full.claim.messages[0]
    full.driver.messages.delete(PROJECT, "q", message.id, full.claim.id)
    assert full.driver.messages.get(PROJECT, "q", [message.id]) == []
    last = list(full.driver.trail.events(PROJECT, "q"))[-1]
    assert (last.kind, last.message_id, last.claim_id) == ("deleted", message.id,
                                                           full.claim.id)


def test_a_full_redis_takes_claimed_messages_back(full):
    first, *rest = full.claim.messages
    released = full.driver.claims.release_message(PROJECT, "q", first.id, full.claim.id, 30)
    assert (released.id, released.due) == (first.id, full.clock.now + 30)
    full.driver.claims.release(PROJECT, "q", full.claim.id)
    stats = full.driver.queues.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed) == (len(full.posted) + len(rest), 0, 1)
    assert full.events()[-1] == "released"


def test_a_full_redis_refuses_subscriptions_and_deletes_them(full):
    full.client.config_set("maxmemory", 0)
    subscription = full.driver.subscriptions.create(PROJECT, "q", "http://h/", 600, {})
    full.hold_over()
    with pytest.raises(errors.StorageUnavailable, match=OOM):
        full.driver.subscriptions.create(PROJECT, "q", "http://other/", 600, {})
    assert full.driver.subscriptions.subscribed_queues() == [(PROJECT, "q")]
    full.driver.subscriptions.delete(PROJECT, "q", subscription)
    assert full.driver.subscriptions.subscribed_queues() == []


def test_a_full_redis_pops_and_records_it(full):
    before = full.events()
    popped = full.driver.messages.pop(PROJECT, "q", 5)
    assert [m.id for m in popped] == full.posted[:5]
    assert full.events() == before + ["popped"] * 5


def test_over_http_a_full_redis_answers_503_to_posts_and_204_to_purge_and_delete(
        full, make_conf, caplog):
    client = testing.TestClient(create_app(make_conf(), driver=full.driver.target))
    headers = {"Client-ID": CLIENT, "X-Project-ID": PROJECT}
    with caplog.at_level(logging.WARNING, logger="delayq.api.errors"):
        refused = client.simulate_post("/v2/queues/q/messages", headers=headers,
                                       json={"messages": [{"body": PAD}]})
    assert refused.status_code == 503
    assert refused.json["description"] == ("The message store (redis) is temporarily "
                                           "unavailable; retry the request later.")
    assert any(OOM in record.getMessage() for record in caplog.records)
    purged = client.simulate_post("/v2/queues/q/purge", headers=headers, json={})
    assert purged.status_code == 204, purged.text
    assert full.driver.queues.stats(PROJECT, "q").total == 0
    # Full again, the queue now empty: its deletion frees no message before the
    # 'purged' event, and still deletes and records it.
    full.hold_over()
    deleted = client.simulate_delete("/v2/queues/q", headers=headers)
    assert deleted.status_code == 204, deleted.text
    assert full.driver.queues.get(PROJECT, "q") is None
    assert full.events()[-2:] == ["purged", "purged"]
