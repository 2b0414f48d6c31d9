"""Push delivery end to end: the real ``delayq-server`` (gunicorn, 2 workers, on SQLite
and on Redis) pushes to real HTTP receivers started here — one that succeeds, one that
answers 500, one that times out, and a port nobody listens on. Never early, retries
spaced as the policy says, dead-lettered after the last attempt, exactly the expected
number of requests, and a worker SIGKILLed mid-push loses nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter

import httpx
import pytest

from tests.server import api_client, child_pids, delayq_server, free_port
from tests.webhook_receiver import Received, receiver

pytestmark = pytest.mark.timeout(120)

PROJECT = "push"
TIMEOUT = 1.0  # push_timeout: a claim of a push lasts 1 + 10 s
# Waits after attempts 1, 2, 3, ...: 0, then 1 (one minimum-delay retry), then the linear
# backoff 1, 6, then 11 (the maximum) for every later attempt.
POLICY = {"retries_with_no_delay": 1, "minimum_delay_retries": 1, "minimum_delay": 1,
          "maximum_delay": 11, "maximum_delay_retries": 0}
SLACK = 1.5  # seconds a push may come after its instant on a loaded machine
CONNECTING = 0.1  # seconds from a push's start to its arrival at a receiver, at most
LOOPBACK = "127.0.0.0/8"


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def server(tmp_path_factory, request):
    driver = request.param
    config = {"drivers:transport:wsgi": {"workers": 2},
              # The receivers are on loopback, which subscribers may not be at unless
              # the operator allows it.
              "notification": {"push_timeout": TIMEOUT, "push_scan_interval": 0.5,
                               "allowed_webhook_networks": LOOPBACK},
              "transport": {"max_message_delay": 900,
                            # Encrypted queues' bodies are pushed decrypted.
                            "message_encryption_key": "push-key"}}
    if driver == "redis":
        from tests.redis_servers import SERVERS

        config["drivers"] = {"message_store": "redis"}
        config["drivers:message_store:redis"] = {"uri": SERVERS.single().uri,
                                                 "namespace": f"p{uuid.uuid4().hex[:10]}"}
    with delayq_server(tmp_path_factory.mktemp("push"), config=config) as running:
        yield running


@pytest.fixture
def api(server):
    with api_client(server, PROJECT) as client:
        yield client


def queue_name() -> str:
    return f"q{uuid.uuid4().hex[:10]}"


def subscribe(api: httpx.Client, queue: str, subscriber: str, **options) -> str:
    response = api.post(f"/queues/{queue}/subscriptions",
                        json={"subscriber": subscriber, "ttl": 3600, "options": options})
    assert response.status_code == 201, response.text
    return response.json()["subscription_id"]


def post(api: httpx.Client, queue: str, *messages: dict) -> list[str]:
    response = api.post(f"/queues/{queue}/messages", json={"messages": list(messages)})
    assert response.status_code == 201, response.text
    return [href.rsplit("/", 1)[1] for href in response.json()["resources"]]


def total(api: httpx.Client, queue: str) -> int:
    return api.get(f"/queues/{queue}/stats").json()["messages"]["total"]


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def test_a_message_is_pushed_once_when_due_as_zaqar_shapes_it_then_deleted(api):
    queue = queue_name()
    api.put(f"/queues/{queue}", json={"_default_message_delay": 2})
    with receiver() as hook:
        subscribe(api, queue, hook.url)
        before = time.time()
        [now_id] = post(api, queue, {"body": {"n": 0}, "ttl": 300, "delay": 0})
        [later_id] = post(api, queue, {"body": {"n": 1}, "ttl": 300, "delay": 3})
        first, second = hook.wait_for(2, timeout=10)
        assert first.json == {"id": now_id, "body": {"n": 0}, "ttl": 300,
                              "age": first.json["age"], "claim_count": 1,
                              "queue_name": queue, "Message_Type": "Notification"}
        assert first.headers["Content-Type"] == "application/json"
        assert second.json["id"] == later_id
        assert first.at - before < SLACK
        assert second.at >= before + 3  # never early
        assert second.at - (before + 3) < SLACK
        wait_until(lambda: total(api, queue) == 0, 5, "pushed messages deleted")
        time.sleep(1)
        assert len(hook.requests()) == 2
        wait_until(lambda: counter(api, "delayq_messages_pushed_total") >= 2, 5,
                   "the pushes counted in /metrics")


def test_an_encrypted_queue_pushes_the_body_as_posted(api):
    queue = queue_name()
    assert api.put(f"/queues/{queue}",
                   json={"_enable_encrypt_messages": True}).status_code == 201
    with receiver() as hook:
        subscribe(api, queue, hook.url)
        [message_id] = post(api, queue, {"body": {"secret": "s3"}, "ttl": 300})
        (pushed,) = hook.wait_for(1, timeout=10)
        assert pushed.json["id"] == message_id
        assert pushed.json["body"] == {"secret": "s3"}
        assert b"sealed" not in pushed.body


def counter(api: httpx.Client, name: str) -> float:
    text = api.get(api.base_url.copy_with(path="/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " "))


def test_post_data_and_post_headers_shape_the_request(api):
    queue = queue_name()
    with receiver() as hook:
        subscribe(api, queue, hook.url, post_data='{"wrapped": "$zaqar_message$", "k": 1}',
                  post_headers={"X-Token": "s3cret"})
        [mid] = post(api, queue, {"body": "hi", "ttl": 60})
        [got] = hook.wait_for(1, timeout=10)
        assert got.json["k"] == 1 and got.json["wrapped"]["id"] == mid
        assert got.json["wrapped"]["body"] == "hi"
        assert got.headers["X-Token"] == "s3cret"


def failing(received: Received) -> tuple[int, float]:
    return 500, 0.0


def test_failed_pushes_are_retried_as_the_policy_spaces_them_then_dead_lettered(api):
    queue, dead = queue_name(), queue_name()
    api.put(f"/queues/{queue}", json={"_max_claim_count": 4, "_dead_letter_queue": dead})
    with receiver(failing) as hook:
        subscribe(api, queue, hook.url, _retry_policy=POLICY)
        [mid] = post(api, queue, {"body": "x", "ttl": 600})
        pushes = hook.wait_for(4, timeout=20)
        gaps = [b.at - a.at for a, b in zip(pushes, pushes[1:], strict=False)]
        # After attempts 1, 2 and 3: waits of 0, 1 and 1 s; the 4th is the last.
        for gap, wait in zip(gaps, [0, 1, 1], strict=True):
            assert wait <= gap < wait + SLACK, gaps
        wait_until(lambda: total(api, dead) == 1, 10, "dead-lettered")
        moved = api.get(f"/queues/{dead}/messages/{mid}", params={"details": "true"})
        assert moved.json()["source_queue"] == queue
        assert moved.json()["claim_count"] == 4
        time.sleep(1.5)
        assert [r.json["id"] for r in hook.requests()] == [mid] * 4
        assert total(api, queue) == 0
        wait_until(lambda: counter(api, "delayq_push_failures_total") >= 4, 5,
                   "the failed pushes counted in /metrics")


def test_a_subscriber_that_times_out_is_retried_and_then_answers(api):
    attempts = Counter()

    def slow_first(received: Received) -> tuple[int, float]:
        attempts[received.json["id"]] += 1
        return (200, TIMEOUT + 1) if attempts[received.json["id"]] == 1 else (200, 0)

    queue = queue_name()
    with receiver(slow_first) as hook:
        subscribe(api, queue, hook.url, _retry_policy={**POLICY, "retries_with_no_delay": 0})
        [mid] = post(api, queue, {"body": "slow", "ttl": 600})
        first, second = hook.wait_for(2, timeout=15)
        # The first push timed out 1 s after it started; the retry waited the policy's
        # 1 s. Its timer started before its request arrived here, by the time its
        # connection took to open and send (CONNECTING, well under 0.1 s on loopback).
        assert second.at - first.at >= TIMEOUT + 1 - CONNECTING
        wait_until(lambda: total(api, queue) == 0, 10, "delivered and deleted")
        time.sleep(1)
        assert [r.json["id"] for r in hook.requests()] == [mid, mid]


def test_a_refused_connection_is_a_failed_delivery(api):
    queue, dead = queue_name(), queue_name()
    api.put(f"/queues/{queue}", json={"_max_claim_count": 2, "_dead_letter_queue": dead})
    subscribe(api, queue, f"http://127.0.0.1:{free_port()}/nobody", _retry_policy=POLICY)
    [mid] = post(api, queue, {"body": "x", "ttl": 600})
    wait_until(lambda: total(api, dead) == 1, 15, "dead-lettered after 2 refused pushes")
    assert api.get(f"/queues/{dead}/messages/{mid}").json()["claim_count"] == 2


def test_a_redirect_is_a_failed_delivery_and_is_not_followed(api):
    queue, dead = queue_name(), queue_name()
    api.put(f"/queues/{queue}", json={"_max_claim_count": 2, "_dead_letter_queue": dead})
    with receiver() as elsewhere:
        def redirect(received: Received) -> tuple[int, float, dict[str, str]]:
            # 307 keeps the method and body: the redirect a client would most readily
            # follow with the same POST.
            return 307, 0.0, {"Location": elsewhere.url}

        with receiver(redirect) as hook:
            subscribe(api, queue, hook.url, _retry_policy=POLICY)
            [mid] = post(api, queue, {"body": "x", "ttl": 600})
            wait_until(lambda: total(api, dead) == 1, 15, "dead-lettered after 2 redirects")
            assert [r.json["id"] for r in hook.requests()] == [mid, mid]
        assert elsewhere.requests() == []


def test_two_workers_push_each_message_once(api):
    queue = queue_name()
    with receiver() as hook:
        subscribe(api, queue, hook.url)
        sent = []
        for start in range(0, 200, 20):
            sent += post(api, queue, *({"body": n, "ttl": 600} for n in range(start, start + 20)))
        pushes = hook.wait_for(200, timeout=30)
        wait_until(lambda: total(api, queue) == 0, 10, "all deleted")
        time.sleep(1)
        assert Counter(r.json["id"] for r in hook.requests()) == Counter(sent)
        assert len(pushes) == 200


def test_a_slow_subscriber_does_not_hold_up_other_queues(api):
    stuck, quick = queue_name(), queue_name()

    def hang(received: Received) -> tuple[int, float]:
        return 200, TIMEOUT + 0.5

    with receiver(hang) as slow, receiver() as fast:
        subscribe(api, stuck, slow.url, _retry_policy=POLICY)
        subscribe(api, quick, fast.url)
        post(api, stuck, *({"body": n, "ttl": 600} for n in range(20)))
        time.sleep(0.3)  # the stuck queue's pushes are under way
        began = time.time()
        post(api, quick, *({"body": n, "ttl": 600} for n in range(10)))
        fast.wait_for(10, timeout=10)
        assert max(r.at for r in fast.requests()) - began < SLACK


def test_a_worker_killed_mid_push_loses_nothing(api, server):
    held = threading.Event()
    release = threading.Event()

    def hold_the_first(received: Received) -> tuple[int, float]:
        if not held.is_set():
            held.set()
            release.wait(20)
            return 200, 0.0  # its worker is dead by now: nobody reads this
        return 200, 0.0

    queue = queue_name()
    with receiver(hold_the_first) as hook:
        subscribe(api, queue, hook.url)
        [mid] = post(api, queue, {"body": "survives", "ttl": 600})
        assert held.wait(10)
        for pid in child_pids(server.proc.pid):  # every worker: one of them is pushing
            os.kill(pid, signal.SIGKILL)
        release.set()
        # The push's claim (1 + 10 s) ends, then a new worker pushes it again.
        pushes = hook.wait_for(2, timeout=30)
        assert [r.json["id"] for r in pushes] == [mid, mid]
        wait_until(lambda: total(api, queue) == 0, 10, "deleted after the second push")


def test_python_zaqarclient_manages_subscriptions_unchanged(server):
    from zaqarclient.queues import client as zaqar_client

    zaqar = zaqar_client.Client(server.url, version=2, conf={
        "client_uuid": str(uuid.uuid4()),
        "auth_opts": {"backend": "noauth", "options": {"os_project_id": PROJECT}}})
    name = queue_name()
    queue = zaqar.queue(name, force_create=True)
    with receiver() as hook:
        made = zaqar.subscription(name, subscriber=hook.url, ttl=600,
                                  options={"post_headers": {"X-From": "zaqarclient"}})
        assert made.id and made.subscriber == hook.url and made.ttl == 600
        [listed] = list(zaqar.subscriptions(name))
        assert (listed.id, listed.subscriber, listed.options) == (
            made.id, hook.url, {"post_headers": {"X-From": "zaqarclient"}})
        assert [s.id for s in queue.subscriptions()] == [made.id]
        made.update({"ttl": 900})
        again = zaqar.subscription(name, id=made.id)
        assert (again.ttl, again.confirmed) == (900, False)
        queue.post({"body": {"via": "zaqarclient"}, "ttl": 60})
        [got] = hook.wait_for(1, timeout=10)
        assert got.json["body"] == {"via": "zaqarclient"}
        assert got.headers["X-From"] == "zaqarclient"
        made.delete()
        assert list(zaqar.subscriptions(name)) == []
        # Every process sees a deletion by its next round (push_scan_interval, 0.5 s).
        time.sleep(1.0)
        queue.post({"body": "unheard", "ttl": 60})
        time.sleep(1.5)
        assert len(hook.requests()) == 1
