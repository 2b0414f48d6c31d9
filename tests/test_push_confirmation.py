"""Subscription confirmation end to end, as Zaqar's ``require_confirmation`` defines it:
the real ``delayq-server`` (on SQLite and on Redis) sends a new subscription's subscriber
its confirmation request and nothing else, claims none of the queue's messages for it,
and pushes them once the subscriber confirms with the pre-signed URL it was sent; a
topic's subscriber likewise, with a URL for the topic's confirm path."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.server import api_client, delayq_server
from tests.test_push import LOOPBACK, post, queue_name, subscribe, total, wait_until
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.timeout(120)

PROJECT = "confirm"
KEY = "confirmation-key"


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def server(tmp_path_factory, request):
    config = {"notification": {"push_timeout": 1.0, "push_scan_interval": 0.5,
                               "allowed_webhook_networks": LOOPBACK,
                               "require_confirmation": True},
              "signed_url": {"secret_key": KEY}}
    if request.param == "redis":
        from tests.redis_servers import SERVERS

        config["drivers"] = {"message_store": "redis"}
        config["drivers:message_store:redis"] = {"uri": SERVERS.single().uri,
                                                 "namespace": f"c{uuid.uuid4().hex[:10]}"}
    with delayq_server(tmp_path_factory.mktemp("confirm"), config=config) as running:
        yield running


@pytest.fixture
def api(server):
    with api_client(server, PROJECT) as client:
        yield client


def test_an_unconfirmed_subscriber_gets_only_its_request_until_it_confirms(api, server):
    queue = queue_name()
    with receiver() as hook:
        sid = subscribe(api, queue, hook.url)
        [request] = hook.wait_for(1, timeout=10)
        path = f"/v2/queues/{queue}/subscriptions/{sid}/confirm"
        document = request.json
        assert document == {
            "Message_Type": "SubscriptionConfirmation",
            "Message": f"You have chosen to subscribe to the queue: {queue}",
            "URL-Signature": document["URL-Signature"], "URL-Methods": "PUT",
            "URL-Paths": path, "X-Project-ID": PROJECT,
            "URL-Expires": document["URL-Expires"],
            "WSGISubscribeURL": f"{server.url}{path}",
            "SubscribeBody": {"confirmed": True}, "UnsubscribeBody": {"confirmed": False},
            "queue_name": queue}
        assert api.get(f"/queues/{queue}/subscriptions/{sid}").json()["confirmed"] is False

        [mid] = post(api, queue, {"body": "held", "ttl": 300})
        time.sleep(2.5)  # five scan rounds: a push would have come
        assert len(hook.requests()) == 1
        # Never claimed on the subscription's behalf: still free, never claimed.
        assert api.get(f"/queues/{queue}/messages/{mid}").json()["claim_count"] == 0

        # The subscriber confirms with what it was sent, and no credentials.
        signed = {name: document[name] for name in (
            "URL-Signature", "URL-Methods", "URL-Paths", "X-Project-ID", "URL-Expires")}
        answer = httpx.put(document["WSGISubscribeURL"], json=document["SubscribeBody"],
                           headers=signed)
        assert answer.status_code == 204, answer.text
        first, pushed = hook.wait_for(2, timeout=10)
        assert pushed.json["id"] == mid and pushed.json["Message_Type"] == "Notification"
        wait_until(lambda: total(api, queue) == 0, 5, "the pushed message deleted")

        # Unconfirmed by the project: told so, and pushed nothing more.
        assert api.put(f"/queues/{queue}/subscriptions/{sid}/confirm",
                       json={"confirmed": False}).status_code == 204
        notice = hook.wait_for(3, timeout=10)[2].json
        assert notice["Message_Type"] == "UnsubscribeConfirmation"
        assert notice["URL-Paths"] == path
        post(api, queue, {"body": "after", "ttl": 300})
        time.sleep(2.5)
        assert len(hook.requests()) == 3 and total(api, queue) == 1


def test_a_signed_url_confirms_only_its_own_subscription(api):
    queue = queue_name()
    with receiver() as hook:
        mine = subscribe(api, queue, hook.url)
        other = subscribe(api, queue, hook.url + "/other")
        [first] = [r.json for r in hook.wait_for(2, timeout=10) if r.path == "/hook"]
        assert first["URL-Paths"].endswith(f"/{mine}/confirm")
        signed = {name: first[name] for name in (
            "URL-Signature", "URL-Methods", "URL-Paths", "X-Project-ID", "URL-Expires")}
        refused = api.put(f"/queues/{queue}/subscriptions/{other}/confirm",
                          json={"confirmed": True}, headers=signed)
        assert refused.status_code == 404


def test_a_topic_subscriber_confirms_with_the_topics_signed_url(api, server):
    topic = f"t{uuid.uuid4().hex[:10]}"
    # A queue of the topic's name: the topic's URL must confirm nothing of it.
    queue_sid = subscribe(api, topic, "http://127.0.0.1:9/queue-hook")
    with receiver() as hook:
        created = api.post(f"/topics/{topic}/subscriptions",
                           json={"subscriber": hook.url, "ttl": 3600})
        assert created.status_code == 201, created.text
        sid = created.json()["subscription_id"]
        [request] = hook.wait_for(1, timeout=10)
        path = f"/v2/topics/{topic}/subscriptions/{sid}/confirm"
        document = request.json
        assert document == {
            "Message_Type": "SubscriptionConfirmation",
            "Message": f"You have chosen to subscribe to the queue: {topic}",
            "URL-Signature": document["URL-Signature"], "URL-Methods": "PUT",
            "URL-Paths": path, "X-Project-ID": PROJECT,
            "URL-Expires": document["URL-Expires"],
            "WSGISubscribeURL": f"{server.url}{path}",
            "SubscribeBody": {"confirmed": True}, "UnsubscribeBody": {"confirmed": False},
            "queue_name": topic}

        # Unconfirmed: a publish pushes it nothing.
        published = api.post(f"/topics/{topic}/messages",
                             json={"messages": [{"body": "held", "ttl": 300}]})
        assert published.status_code == 201, published.text
        time.sleep(2.5)  # five scan rounds: a push would have come
        assert len(hook.requests()) == 1

        signed = {name: document[name] for name in (
            "URL-Signature", "URL-Methods", "URL-Paths", "X-Project-ID", "URL-Expires")}
        # The topic's URL confirms neither the queue of the same name's subscription...
        refused = httpx.put(f"{server.url}/v2/queues/{topic}/subscriptions/{queue_sid}"
                            "/confirm", json={"confirmed": True}, headers=signed)
        assert refused.status_code == 404
        # ...but its own, with no credentials; then publishes are pushed.
        answer = httpx.put(document["WSGISubscribeURL"], json=document["SubscribeBody"],
                           headers=signed)
        assert answer.status_code == 204, answer.text
        assert api.get(f"/topics/{topic}/subscriptions/{sid}").json()["confirmed"] is True
        assert api.post(f"/topics/{topic}/messages", json={
            "messages": [{"body": "after", "ttl": 300}]}).status_code == 201
        pushed = hook.wait_for(2, timeout=10)[1].json
        assert pushed["body"] == "after" and pushed["queue_name"] == topic
        assert pushed["Message_Type"] == "Notification"

        # Unconfirmed by the project: told so, with the topic's URL again.
        assert api.put(f"/topics/{topic}/subscriptions/{sid}/confirm",
                       json={"confirmed": False}).status_code == 204
        notice = hook.wait_for(3, timeout=10)[2].json
        assert notice["Message_Type"] == "UnsubscribeConfirmation"
        assert notice["URL-Paths"] == path
