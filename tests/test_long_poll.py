"""Long-poll claims (``POST /v2/queues/{q}/claims?wait=S``) through the in-process app,
on every driver (the ``client`` fixture), in real time kept short.

Requests run concurrently on one event loop (falcon's ASGIConductor), as a worker
process serves them: a waiting claim must not hold up the post that ends its wait. The
poll interval is set far above every wait here, so each prompt answer is the work of a
wake-up (a post or release in the process) or of the backend's hint (a delayed message's
due time), never of polling; polling across processes is tests/test_server_e2e.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from falcon import testing

from delayq.conf import WSGI_GROUP
from tests.apps import HTTP_DRIVERS, http_client

# Well under any wait below: a waiter must answer this soon after a message is claimable.
PROMPT = 1.5
POLL_INTERVAL = 20


@pytest.fixture(params=HTTP_DRIVERS)
def client(request, make_conf):
    """The app on each driver (as tests/conftest.py's), polling too seldom to matter."""
    conf = make_conf()
    conf.set_override("claim_wait_poll_interval", POLL_INTERVAL, group=WSGI_GROUP)
    return http_client(request.param, conf)


def run(client, scenario: Callable[[testing.ASGIConductor], Awaitable[Any]]) -> Any:
    """Run *scenario* with a conductor of the client's app on a fresh event loop."""
    async def main() -> Any:
        async with testing.ASGIConductor(client.app) as conductor:
            return await scenario(conductor)

    return asyncio.run(main())


async def post(conductor, headers, queue: str, *bodies: Any) -> list[str]:
    resp = await conductor.simulate_post(f"/v2/queues/{queue}/messages", headers=headers,
                                         json={"messages": [{"body": b} for b in bodies]})
    assert resp.status_code == 201, resp.text
    return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]


async def timed_claim(conductor, headers, queue: str, wait: int | None, **params: Any
                      ) -> tuple[Any, float]:
    """A claim request and how long it took to answer, in seconds."""
    if wait is not None:
        params["wait"] = wait
    started = time.monotonic()
    resp = await conductor.simulate_post(f"/v2/queues/{queue}/claims", headers=headers,
                                         params=params, json={})
    return resp, time.monotonic() - started


def claimed(resp) -> list[Any]:
    assert resp.status_code == 201, resp.text
    return [m["body"] for m in resp.json["messages"]]


def test_a_wait_returns_a_message_posted_during_it(client, headers):
    async def scenario(conductor):
        await conductor.simulate_put("/v2/queues/q", headers=headers)
        waiting = asyncio.ensure_future(timed_claim(conductor, headers, "q", 10))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await post(conductor, headers, "q", "hello")
        return await waiting

    resp, took = run(client, scenario)
    assert claimed(resp) == ["hello"]
    assert took < 0.3 + PROMPT


def test_a_wait_returns_a_delayed_message_when_it_comes_due(client, headers):
    async def scenario(conductor):
        await conductor.simulate_put("/v2/queues/q", headers=headers,
                                     json={"_default_message_delay": 1})
        await post(conductor, headers, "q", "due")
        first, _ = await timed_claim(conductor, headers, "q", None)
        second = await timed_claim(conductor, headers, "q", 8)
        return first, second

    first, (resp, took) = run(client, scenario)
    assert first.status_code == 204  # not due yet: the wait had something to wait for
    assert claimed(resp) == ["due"]
    assert took < 1 + PROMPT


def test_a_wait_with_nothing_to_claim_ends_with_204_after_it(client, headers):
    async def scenario(conductor):
        await post(conductor, headers, "q", "taken")
        assert claimed((await timed_claim(conductor, headers, "q", None))[0]) == ["taken"]
        return await timed_claim(conductor, headers, "q", 1)

    resp, took = run(client, scenario)
    assert resp.status_code == 204
    assert resp.text == ""
    assert 1 <= took < 1 + PROMPT


def test_a_released_claim_ends_a_wait(client, headers):
    async def scenario(conductor):
        await post(conductor, headers, "q", "again")
        first, _ = await timed_claim(conductor, headers, "q", None)
        waiting = asyncio.ensure_future(timed_claim(conductor, headers, "q", 10))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        resp = await conductor.simulate_delete(first.headers["location"], headers=headers)
        assert resp.status_code == 204
        return await waiting

    resp, took = run(client, scenario)
    assert claimed(resp) == ["again"]
    assert took < 0.3 + PROMPT


def test_waiters_share_messages_and_the_rest_get_204(client, headers):
    async def scenario(conductor):
        await conductor.simulate_put("/v2/queues/q", headers=headers)
        waiters = [asyncio.ensure_future(timed_claim(conductor, headers, "q", 3, limit=2))
                   for _ in range(8)]
        await asyncio.sleep(0.3)
        await post(conductor, headers, "q", *range(5))
        return await asyncio.gather(*waiters)

    answers = run(client, scenario)
    # Waiters claim in turn, so on a slow store (Swift) the third answers a while after
    # the first: no promptness asserted here, only that the messages went round once.
    got = [claimed(resp) for resp, _ in answers if resp.status_code != 204]
    assert sorted(body for bodies in got for body in bodies) == list(range(5))
    assert sorted(len(bodies) for bodies in got) == [1, 2, 2]
    assert sorted(resp.status_code for resp, _ in answers) == [201] * 3 + [204] * 5


def test_no_wait_and_wait_0_answer_at_once(client, headers):
    async def scenario(conductor):
        await conductor.simulate_put("/v2/queues/q", headers=headers)
        return [await timed_claim(conductor, headers, "q", wait) for wait in (None, 0)]

    for resp, took in run(client, scenario):
        assert resp.status_code == 204
        assert took < 1
