"""Quotas under a burst, end to end: the real ``delayq-server`` with 2 workers, on SQLite,
Redis and Swift, takes hundreds of requests released at once over loopback HTTP, and
the project ends with exactly its quota.

The workers are separate processes: what holds the quota is the driver's atomic step,
not anything a worker keeps in memory. The burst is async (httpx), one connection per
request, so the requests reach the workers together.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import httpx
import pytest

from tests.redis_servers import SERVERS
from tests.server import RunningServer, delayq_server
from tests.swift_server import SWIFT

pytestmark = pytest.mark.timeout(240)

PROJECT = "bursts"
QUEUE_QUOTA = 3
MESSAGE_QUOTA = 40
BURST = 300


def store_config(name: str) -> dict:
    if name == "sqlite":
        return {}
    if name == "redis":
        return {"drivers": {"message_store": "redis"},
                "drivers:message_store:redis": {
                    "uri": SERVERS.single().uri, "namespace": f"b{uuid.uuid4().hex[:12]}"}}
    auth = SWIFT.auth()
    return {"drivers": {"message_store": "swift"},
            "drivers:message_store:swift": {
                "auth_url": auth.auth_url, "user": auth.user, "key": auth.key,
                "container_prefix": f"b{uuid.uuid4().hex[:12]}"}}


@pytest.fixture(params=["sqlite", "redis", "swift"])
def server(request, tmp_path) -> RunningServer:
    config = {"drivers:transport:wsgi": {"workers": 2},
              "quotas": {"max_queues_per_project": QUEUE_QUOTA,
                         "max_messages_per_queue": MESSAGE_QUOTA},
              **store_config(request.param)}
    with delayq_server(tmp_path / "server", config=config) as running:
        yield running


def headers() -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}


async def released_together(requests: list[tuple[str, str, object]], url: str
                            ) -> list[httpx.Response]:
    """Send each ``(method, path, json)`` on a connection of its own, all at once."""
    limits = httpx.Limits(max_connections=len(requests), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        start = asyncio.Event()

        async def one(method: str, path: str, body: object) -> httpx.Response:
            await start.wait()
            return await client.request(method, path, json=body, headers=headers())

        tasks = [asyncio.create_task(one(*r)) for r in requests]
        await asyncio.sleep(0)
        start.set()
        return await asyncio.gather(*tasks)


def burst(server: RunningServer, requests: list[tuple[str, str, object]]) -> Counter:
    responses = asyncio.run(released_together(requests, server.url))
    return Counter(r.status_code for r in responses)


def queue_names(server: RunningServer) -> list[str]:
    resp = httpx.get(f"{server.url}/v2/queues", params={"limit": 20}, headers=headers())
    return [q["name"] for q in resp.json()["queues"]]


def test_a_burst_of_queue_creations_makes_exactly_the_quota(server):
    statuses = burst(server, [("PUT", f"/v2/queues/q{i}", {}) for i in range(BURST)])
    assert statuses == {201: QUEUE_QUOTA, 403: BURST - QUEUE_QUOTA}
    assert len(queue_names(server)) == QUEUE_QUOTA


def test_a_burst_of_posts_stores_exactly_the_quota(server):
    assert httpx.put(f"{server.url}/v2/queues/q", json={},
                     headers=headers()).status_code == 201
    post = ("POST", "/v2/queues/q/messages", {"messages": [{"body": 1, "ttl": 3600}]})
    statuses = burst(server, [post] * BURST)
    assert statuses == {201: MESSAGE_QUOTA, 403: BURST - MESSAGE_QUOTA}
    stats = httpx.get(f"{server.url}/v2/queues/q/stats", headers=headers()).json()
    assert stats["messages"]["total"] == MESSAGE_QUOTA
