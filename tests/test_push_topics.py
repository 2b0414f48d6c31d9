"""Topics end to end: the real ``delayq-server`` (gunicorn, 2 workers, on SQLite and on
Redis) fans every published message out to each of two real HTTP receivers, never
before its delay; a failing subscriber is retried by its policy and dead-lettered while
the other is pushed each message once; and the topic routes answer as Zaqar's."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.server import api_client, delayq_server
from tests.webhook_receiver import Received, receiver

pytestmark = pytest.mark.timeout(120)

PROJECT = "topics"
SLACK = 1.5  # seconds a push may come after its instant on a loaded machine
POLICY = {"retries_with_no_delay": 1, "minimum_delay_retries": 1, "minimum_delay": 1,
          "maximum_delay": 11, "maximum_delay_retries": 0}
JSON_PATCH = "application/openstack-messaging-v2.0-json-patch"


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def server(tmp_path_factory, request):
    config = {"drivers:transport:wsgi": {"workers": 2},
              "notification": {"push_timeout": 1.0, "push_scan_interval": 0.5,
                               "allowed_webhook_networks": "127.0.0.0/8"},
              "transport": {"max_message_delay": 900}}
    if request.param == "redis":
        from tests.redis_servers import SERVERS

        config["drivers"] = {"message_store": "redis"}
        config["drivers:message_store:redis"] = {"uri": SERVERS.single().uri,
                                                 "namespace": f"t{uuid.uuid4().hex[:10]}"}
    with delayq_server(tmp_path_factory.mktemp("topics"), config=config) as running:
        yield running


@pytest.fixture
def api(server):
    with api_client(server, PROJECT) as client:
        yield client


def topic_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def subscribe(api: httpx.Client, topic: str, subscriber: str, **options) -> str:
    response = api.post(f"/topics/{topic}/subscriptions",
                        json={"subscriber": subscriber, "ttl": 3600, "options": options})
    assert response.status_code == 201, response.text
    return response.json()["subscription_id"]


def publish(api: httpx.Client, topic: str, *messages: dict) -> list[str]:
    response = api.post(f"/topics/{topic}/messages", json={"messages": list(messages)})
    assert response.status_code == 201, response.text
    return [href.rsplit("/", 1)[1] for href in response.json()["resources"]]


def failing(received: Received) -> tuple[int, float]:
    return 500, 0.0


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def test_every_message_is_pushed_to_every_subscriber_never_early(api):
    topic = topic_name()
    assert api.put(f"/topics/{topic}",
                   json={"_default_message_delay": 2}).status_code == 201
    with receiver() as first, receiver() as second:
        subscribe(api, topic, first.url)
        subscribe(api, topic, second.url)
        before = time.time()
        publish(api, topic, {"body": {"n": 0}, "ttl": 300, "delay": 0},
                {"body": {"n": 1}, "ttl": 300, "delay": 3})
        for hook in (first, second):
            now, later = sorted(hook.wait_for(2, timeout=10), key=lambda r: r.at)
            assert (now.json["body"], later.json["body"]) == ({"n": 0}, {"n": 1})
            assert now.json["queue_name"] == topic
            assert now.at - before < SLACK
            assert later.at >= before + 3  # never early
        time.sleep(1)
        assert len(first.requests()) == len(second.requests()) == 2
    # The topic's own list keeps them, for its stats, until their ttl.
    assert api.get(f"/topics/{topic}/stats").json()["messages"]["total"] == 2


def test_a_failing_subscriber_is_retried_and_dead_lettered_alone(api):
    topic, dead = topic_name(), topic_name()
    api.put(f"/topics/{topic}", json={"_max_claim_count": 3, "_dead_letter_queue": dead})
    with receiver(failing) as broken, receiver() as healthy:
        subscribe(api, topic, broken.url, _retry_policy=POLICY)
        subscribe(api, topic, healthy.url)
        publish(api, topic, {"body": "x", "ttl": 600})
        pushes = broken.wait_for(3, timeout=20)
        gaps = [b.at - a.at for a, b in zip(pushes, pushes[1:], strict=False)]
        for gap, wait in zip(gaps, [0, 1], strict=True):  # the policy's waits
            assert wait <= gap < wait + SLACK, gaps
        # Dead letters go to the topic the policy names, readable as its messages.
        wait_until(lambda: api.get(f"/topics/{dead}/stats").json()["messages"]["total"]
                   == 1, 10, "dead-lettered")
        time.sleep(1.5)
        assert len(broken.requests()) == 3
        assert [r.json["body"] for r in healthy.requests()] == ["x"]


def test_the_topic_routes_answer_as_zaqar(api):
    topic = topic_name()
    assert api.get(f"/topics/{topic}").status_code == 404
    assert api.put(f"/topics/{topic}", json={"colour": "red"}).status_code == 201
    assert api.put(f"/topics/{topic}", json={}).status_code == 204
    assert api.get(f"/topics/{topic}").json()["colour"] == "red"
    patched = api.patch(f"/topics/{topic}", headers={"Content-Type": JSON_PATCH},
                        json=[{"op": "replace", "path": "/metadata/colour",
                               "value": "blue"}])
    assert patched.status_code == 200 and patched.json()["colour"] == "blue"
    listed = api.get("/topics", params={"limit": 20, "name": topic}).json()["topics"]
    assert {"name": topic, "href": f"/v2/topics/{topic}"} in listed
    assert topic not in [q["name"] for q in api.get("/queues").json()["queues"]]
    [mid] = publish(api, topic, {"body": "hello", "ttl": 300})
    got = api.get(f"/topics/{topic}/messages/{mid}").json()
    assert (got["body"], got["href"]) == ("hello", f"/v2/topics/{topic}/messages/{mid}")
    sid = subscribe(api, topic, "http://127.0.0.1:9/nobody")
    listed_subscriptions = api.get(f"/topics/{topic}/subscriptions").json()
    assert [s["id"] for s in listed_subscriptions["subscriptions"]] == [sid]
    assert api.delete(f"/topics/{topic}/subscriptions/{sid}").status_code == 204
    assert api.get(f"/topics/{topic}/subscriptions/{sid}").status_code == 404
    assert api.post(f"/topics/{topic}/purge").status_code == 204
    assert api.get(f"/topics/{topic}/stats").json()["messages"]["total"] == 0
    assert api.delete(f"/topics/{topic}").status_code == 204
    assert api.get(f"/topics/{topic}").status_code == 404
