"""Wake-ups across processes: two real ``delayq-server`` processes on one store, a write
through one, and the waiters and pushers of the other woken by the store's signals.

Both servers poll as seldom as the options allow (``claim_wait_poll_interval`` 20 s,
``push_scan_interval`` one hour), so an answer within ``WOKEN`` seconds can only come
from a signal.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import redis

from tests.redis_servers import SERVERS
from tests.server import RunningServer, delayq_server
from tests.test_server_e2e import http_headers, unique
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.timeout(120)

STORES = ["sqlite", "redis", "redis-cluster"]
POLL = 20  # claim_wait_poll_interval's largest value
WAIT = 15  # a long-poll claim's wait: shorter than POLL, so no poll ends it early
WOKEN = 5.0  # seconds within which a signal wakes a waiter or a pusher, at most
SETTLE = 1.0  # seconds for a long-poll claim to reach its server and wait


def store_config(store: str, tmp_path: Path) -> dict[str, dict[str, object]]:
    if store == "sqlite":
        return {"drivers:message_store:sqlite": {"path": str(tmp_path / "shared.sqlite")}}
    uri = SERVERS.single().uri if store == "redis" else SERVERS.cluster_uri()
    return {"drivers": {"message_store": "redis"},
            "drivers:message_store:redis": {"uri": uri,
                                            "namespace": f"w{uuid.uuid4().hex[:10]}"}}


@pytest.fixture(params=STORES)
def two_servers(request, tmp_path) -> Iterator[Callable[..., tuple[RunningServer, ...]]]:
    """Start two one-worker servers on one store: ``two_servers(push=(a, b))``."""
    store = store_config(request.param, tmp_path)
    with ExitStack() as stack:
        def start(push: tuple[bool, bool] = (True, True)) -> tuple[RunningServer, ...]:
            servers = []
            for n, pushes in enumerate(push):
                config = {**store,
                          "drivers:transport:wsgi": {"workers": 1,
                                                     "claim_wait_poll_interval": POLL},
                          "notification": {"push": pushes, "push_scan_interval": 3600,
                                           "allowed_webhook_networks": "127.0.0.0/8"}}
                servers.append(stack.enter_context(
                    delayq_server(tmp_path / f"server-{n}", config=config)))
            return tuple(servers)

        yield start


def long_poll_wakeup(consumer_side: RunningServer, producer_side: RunningServer) -> float:
    """Seconds from a post through *producer_side* to the answer of a claim waiting for
    it on *consumer_side*, which must claim that message."""
    queue = unique("waited")
    headers = http_headers()
    answered: dict[str, object] = {}

    def wait_for_claim() -> None:
        response = httpx.post(f"{consumer_side.url}/v2/queues/{queue}/claims",
                              params={"limit": 1, "wait": WAIT}, headers=headers,
                              json={"ttl": 60, "grace": 60}, timeout=WAIT + 10)
        answered["at"] = time.monotonic()
        answered["response"] = response

    consumer = threading.Thread(target=wait_for_claim)
    consumer.start()
    time.sleep(SETTLE)
    posted_at = time.monotonic()
    response = httpx.post(f"{producer_side.url}/v2/queues/{queue}/messages", headers=headers,
                          json={"messages": [{"body": "wake up", "ttl": 300}]})
    assert response.status_code == 201, response.text
    consumer.join(WAIT + 15)

    claimed = answered["response"]
    assert claimed.status_code == 201, claimed.text
    assert [m["body"] for m in claimed.json()["messages"]] == ["wake up"]
    return answered["at"] - posted_at


def test_a_post_through_one_server_wakes_a_claim_waiting_on_the_other(two_servers):
    consumer_side, producer_side = two_servers()
    assert long_poll_wakeup(consumer_side, producer_side) < WOKEN, consumer_side.stderr()


def test_a_subscription_made_through_one_server_is_pushed_by_the_other(two_servers):
    # Only the second server pushes: it learns of the subscription and of the post,
    # both made through the first, from the store's signals alone.
    front, pusher = two_servers(push=(False, True))
    queue = unique("pushed")
    headers = http_headers()
    with receiver() as hook:
        response = httpx.post(f"{front.url}/v2/queues/{queue}/subscriptions",
                              headers=headers, json={"subscriber": hook.url, "ttl": 3600})
        assert response.status_code == 201, response.text
        posted_at = time.time()
        response = httpx.post(f"{front.url}/v2/queues/{queue}/messages", headers=headers,
                              json={"messages": [{"body": "push me", "ttl": 300}]})
        assert response.status_code == 201, response.text
        pushed = hook.wait_for(1, timeout=WOKEN)
    assert pushed[0].json["body"] == "push me"
    assert pushed[0].at - posted_at < WOKEN, pusher.stderr()


def test_a_server_whose_signal_connection_drops_listens_again(tmp_path):
    # A Redis of its own: the kill below must reach no other test's listeners.
    server = SERVERS.fresh()
    try:
        store = {"drivers": {"message_store": "redis"},
                 "drivers:message_store:redis": {"uri": server.uri, "namespace": "w"}}
        config = {**store, "drivers:transport:wsgi": {"workers": 1,
                                                      "claim_wait_poll_interval": POLL}}
        with delayq_server(tmp_path / "a", config=config) as consumer_side, \
                delayq_server(tmp_path / "b", config=config) as producer_side:
            assert long_poll_wakeup(consumer_side, producer_side) < WOKEN
            killed = redis.Redis.from_url(server.uri).client_kill_filter(_type="pubsub")
            assert killed >= 2  # a listener of each server
            assert long_poll_wakeup(consumer_side, producer_side) < WOKEN, (
                consumer_side.stderr())
            # One warning for the outage, not one per attempt.
            assert consumer_side.stderr().count("Cannot listen to the store's signals") == 1
    finally:
        server.stop()
