"""Clock skew: two ``delayq-server`` processes whose clocks run 30 s ahead of and 30 s
behind the true time (libfaketime, Debian's ``faketime`` package, preloaded into the
master and its workers), serving one Redis, never deliver a message early.

The Redis driver takes every time it decides with from the Redis server's ``TIME``
(``delayq.storage.clock``), so the processes agree on when a message is due however
their own clocks disagree. The test process keeps the true time: a message posted at
true time *t* with delay *d* must not reach any consumer before *t + d*.
"""

from __future__ import annotations

import contextlib
import glob
import threading
import time
import uuid
from email.utils import parsedate_to_datetime

import httpx
import pytest

from tests.redis_servers import SERVERS
from tests.server import RunningServer, delayq_server

pytestmark = pytest.mark.timeout(120)

SKEW = 30  # seconds each server's clock is off, one ahead, one behind
MESSAGES = 18
DELAYS = (1, 2, 3)  # seconds, in turn
CLAIM_DEADLINE = 20.0  # seconds for every message to be claimed
LATE_ALLOWED = 3.0  # seconds after its due time a message must have been claimed by


def faketime_library() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime is missing: install Debian's faketime package "
                    "(scripts/test.sh does)")
    return found[0]


def skewed(offset: int) -> dict[str, str]:
    """Environment that runs a process (and its children) *offset* seconds off."""
    # The monotonic clock is shifted too, by a constant, so it still measures durations
    # truly (libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC makes Python's
    # time.sleep fail with EINVAL).
    return {"LD_PRELOAD": faketime_library(), "FAKETIME": f"{offset:+d}s"}


def headers(project: str) -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}


def server_clock_offset(server: RunningServer) -> float:
    """How far the server's own clock is from ours, read off its ``Date`` header."""
    before = time.time()
    response = httpx.get(f"{server.url}/v2/ping")
    after = time.time()
    stamp = parsedate_to_datetime(response.headers["date"]).timestamp()
    return stamp - (before + after) / 2


@pytest.fixture
def skewed_servers(tmp_path) -> tuple[RunningServer, RunningServer]:
    namespace = f"skew{uuid.uuid4().hex[:12]}"
    config = {"drivers": {"message_store": "redis"},
              "drivers:message_store:redis": {"uri": SERVERS.single().uri,
                                              "namespace": namespace},
              "transport": {"max_message_delay": 60}}
    with contextlib.ExitStack() as stack:
        servers = tuple(
            stack.enter_context(delayq_server(tmp_path / f"server{offset:+d}", config=config,
                                              args=["--workers", "2"],
                                              env=skewed(offset)))
            for offset in (SKEW, -SKEW))
        yield servers


def test_the_servers_clocks_are_skewed(skewed_servers):
    ahead, behind = skewed_servers
    # Date has whole seconds: within 2 s of the skew means the preload took.
    assert abs(server_clock_offset(ahead) - SKEW) < 2
    assert abs(server_clock_offset(behind) + SKEW) < 2


def test_no_message_is_delivered_early_by_either_server(skewed_servers):
    project = f"p{uuid.uuid4().hex[:8]}"
    queue = "skewed"
    ahead, behind = skewed_servers
    url = f"/v2/queues/{queue}"
    with httpx.Client(base_url=ahead.url, headers=headers(project)) as client:
        assert client.put(url, json={"_default_message_delay": 1}).status_code == 201

    # Posts alternate between the servers: each message's earliest delivery, on our
    # clock, is when its post was sent plus its delay.
    not_before: dict[str, float] = {}
    for i in range(MESSAGES):
        server = skewed_servers[i % 2]
        delay = DELAYS[i % len(DELAYS)]
        sent = time.time()
        response = httpx.post(f"{server.url}{url}/messages", headers=headers(project),
                              json={"messages": [{"body": {"i": i}, "ttl": 300,
                                                  "delay": delay}]})
        assert response.status_code == 201, response.text
        (href,) = response.json()["resources"]
        not_before[href.rsplit("/", 1)[-1]] = sent + delay

    claimed_at: dict[str, float] = {}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def consume(server: RunningServer) -> None:
        deadline = time.monotonic() + CLAIM_DEADLINE
        try:
            with httpx.Client(base_url=server.url, headers=headers(project)) as client:
                while time.monotonic() < deadline:
                    with lock:
                        if len(claimed_at) == MESSAGES:
                            return
                    response = client.post(f"{url}/claims", params={"limit": 3},
                                           json={"ttl": 60, "grace": 60})
                    received = time.time()
                    if response.status_code == 204:
                        time.sleep(0.05)
                        continue
                    assert response.status_code == 201, response.text
                    messages = response.json()["messages"]
                    with lock:
                        for message in messages:
                            assert message["id"] not in claimed_at
                            claimed_at[message["id"]] = received
                    claim_id = response.headers["location"].rsplit("/", 1)[-1]
                    for message in messages:
                        deleted = client.delete(f"{url}/messages/{message['id']}",
                                                params={"claim_id": claim_id})
                        assert deleted.status_code == 204, deleted.text
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    consumers = [threading.Thread(target=consume, args=(server,)) for server in skewed_servers]
    for thread in consumers:
        thread.start()
    for thread in consumers:
        thread.join()
    if failures:
        raise failures[0]

    assert sorted(claimed_at) == sorted(not_before), "some messages were never claimed"
    early = {id_: not_before[id_] - at for id_, at in claimed_at.items()
             if at < not_before[id_]}
    assert not early, f"delivered early (seconds): {early}"
    # Nor held back by the server whose clock is behind.
    late = {id_: at - not_before[id_] for id_, at in claimed_at.items()
            if at - not_before[id_] > LATE_ALLOWED}
    assert not late, f"delivered late (seconds): {late}"
