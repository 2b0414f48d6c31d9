"""Messages pushed down a WebSocket, against the real ``delayq-server`` (2 workers): a
``subscription_create`` without a subscriber subscribes the socket, a message posted
over HTTP arrives as a frame when it comes due and not before, is deleted once the
client acknowledges it, is handed back after the retry policy's wait when the socket
drops mid-delivery, is dead-lettered after ``_max_claim_count``, and survives the worker holding the
socket being killed mid-delivery; a ``topic_subscription_create`` without a subscriber
subscribes the socket to a topic, each such socket pushed every message published. Then
a browser (headless Chromium) does the same."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
import websocket

from tests.chromium import rendered
from tests.server import api_client, child_pids, delayq_server

pytestmark = pytest.mark.timeout(120)

PROJECT = "socket-push"
ACK_TIMEOUT = 1.0  # push_timeout: how long a pushed frame waits for its acknowledgement
DELAY = 2
SLACK = 1.5  # seconds a push may come after its due time on a loaded machine
# Waits after attempts 1, 2, ...: 2 s (one minimum-delay retry), then longer.
POLICY = {"retries_with_no_delay": 0, "minimum_delay_retries": 1, "minimum_delay": 2,
          "maximum_delay": 12, "maximum_delay_retries": 0}
NO_WAIT = {"retries_with_no_delay": 5}
PAGE = Path(__file__).parent / "websocket_push.html"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = {"drivers:transport:wsgi": {"workers": 2},
              "notification": {"push_timeout": ACK_TIMEOUT, "push_scan_interval": 0.5}}
    with delayq_server(tmp_path_factory.mktemp("websocket-push"), config=config) as running:
        yield running


@pytest.fixture
def api(server):
    with api_client(server, PROJECT) as client:
        yield client


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v2/ws"


def headers() -> dict[str, str]:
    return {"X-Project-ID": PROJECT, "Client-ID": str(uuid.uuid4())}


def queue_name() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


def subscribed_socket(server, queue: str, policy: dict | None = None
                      ) -> websocket.WebSocket:
    """A socket subscribed to *queue* (a subscription_create without a subscriber)."""
    ws = websocket.create_connection(ws_url(server), timeout=15)
    body: dict = {"queue_name": queue, "ttl": 3600}
    if policy is not None:
        body["options"] = {"_retry_policy": policy}
    ws.send(json.dumps({"action": "subscription_create", "headers": headers(),
                        "body": body}))
    answer = json.loads(ws.recv())
    assert answer["headers"] == {"status": 201}, answer
    assert answer["body"]["message"] == f"Subscription {queue} created."
    return ws


def next_push(ws: websocket.WebSocket) -> tuple[float, dict]:
    """The next pushed frame (answers to our own frames skipped) and when it came."""
    while True:
        frame = json.loads(ws.recv())
        if "request" not in frame:
            return time.time(), frame


def acknowledge(ws: websocket.WebSocket, frame: dict) -> None:
    ws.send(json.dumps({"action": "message_delete", "headers": headers(), "body": {
        "queue_name": frame["queue_name"], "message_id": frame["id"],
        "claim_id": frame["claim_id"]}}))


def delayed_queue(api: httpx.Client) -> str:
    """A new delayed queue: only there does a message's own delay count (as in Zaqar)."""
    queue = queue_name()
    assert api.put(f"/queues/{queue}", json={"_default_message_delay": 1}).status_code == 201
    return queue


def post(api: httpx.Client, queue: str, body: object, delay: int = 0) -> tuple[float, str]:
    """Post one message; when it is due (time.time()) and its id."""
    posted = time.time()
    answer = api.post(f"/queues/{queue}/messages",
                      json={"messages": [{"body": body, "ttl": 600, "delay": delay}]})
    assert answer.status_code == 201, answer.text
    return posted + delay, answer.json()["resources"][0].rsplit("/", 1)[1]


def test_a_delayed_message_is_pushed_when_due_and_deleted_once_acknowledged(server, api):
    queue = delayed_queue(api)
    ws = subscribed_socket(server, queue)
    due, mid = post(api, queue, {"event": "due"}, delay=DELAY)
    arrived, frame = next_push(ws)
    assert due <= arrived <= due + SLACK
    assert frame["id"] == mid and frame["body"] == {"event": "due"}
    assert frame["queue_name"] == queue and frame["Message_Type"] == "Notification"
    assert frame["claim_count"] == 1 and frame["claim_id"]
    acknowledge(ws, frame)
    answer = json.loads(ws.recv())
    assert answer["request"]["action"] == "message_delete"
    assert answer["headers"] == {"status": 204}
    time.sleep(ACK_TIMEOUT + 0.5)  # past the acknowledgement's wait: nothing comes back
    assert api.get(f"/queues/{queue}/messages/{mid}").status_code == 404
    ws.close()


def test_the_socket_subscription_is_listed_and_deleted_when_the_socket_closes(server, api):
    queue = queue_name()
    ws = subscribed_socket(server, queue)
    [listed] = api.get(f"/queues/{queue}/subscriptions").json()["subscriptions"]
    assert listed["subscriber"].startswith("ws://socket.delayq/")
    ws.close()
    deadline = time.monotonic() + 10
    while api.get(f"/queues/{queue}/subscriptions").json()["subscriptions"]:
        assert time.monotonic() < deadline, "the socket's subscription outlived it"
        time.sleep(0.1)


def topic_socket(server, topic: str) -> websocket.WebSocket:
    """A socket subscribed to *topic* (a topic_subscription_create without a
    subscriber)."""
    ws = websocket.create_connection(ws_url(server), timeout=15)
    ws.send(json.dumps({"action": "topic_subscription_create", "headers": headers(),
                        "body": {"topic_name": topic, "ttl": 3600}}))
    answer = json.loads(ws.recv())
    assert answer["headers"] == {"status": 201}, answer
    assert answer["body"]["message"] == f"Subscription {topic} created."
    return ws


def test_sockets_subscribed_to_a_topic_each_get_every_message(server, api):
    topic = f"t-{uuid.uuid4().hex[:12]}"
    assert api.put(f"/topics/{topic}", json={}).status_code == 201
    # Two sockets, on either worker or both: each is pushed every message, by the
    # worker holding it (the other's pusher leaves its delivery queue alone).
    sockets = [topic_socket(server, topic) for _ in range(2)]
    listed = api.get(f"/topics/{topic}/subscriptions").json()["subscriptions"]
    assert len(listed) == 2
    assert all(s["subscriber"].startswith("ws://socket.delayq/") for s in listed)
    published = api.post(f"/topics/{topic}/messages",
                         json={"messages": [{"body": {"news": 1}, "ttl": 600}]})
    assert published.status_code == 201, published.text
    for ws in sockets:
        _, frame = next_push(ws)
        assert frame["queue_name"] == topic and frame["body"] == {"news": 1}
        assert frame["claim_count"] == 1 and frame["claim_id"]
        acknowledge(ws, frame)
        answer = json.loads(ws.recv())
        assert answer["request"]["action"] == "message_delete"
        assert answer["headers"] == {"status": 204}
    # Acknowledged: nothing comes back past the acknowledgement's wait.
    for ws in sockets:
        ws.settimeout(ACK_TIMEOUT + 1)
        with pytest.raises(websocket.WebSocketTimeoutException):
            next_push(ws)
        ws.close()
    deadline = time.monotonic() + 10
    while api.get(f"/topics/{topic}/subscriptions").json()["subscriptions"]:
        assert time.monotonic() < deadline, "the sockets' subscriptions outlived them"
        time.sleep(0.1)


def test_a_message_unacknowledged_when_the_socket_drops_comes_back_after_its_wait(
        server, api):
    queue = queue_name()
    first = subscribed_socket(server, queue, POLICY)
    _, mid = post(api, queue, "again")
    _, frame = next_push(first)
    assert frame["id"] == mid
    dropped = time.time()
    first.close()  # mid-delivery: never acknowledged
    second = subscribed_socket(server, queue, POLICY)
    arrived, again = next_push(second)
    assert again["id"] == mid and again["claim_count"] == 2
    assert arrived >= dropped + POLICY["minimum_delay"] - 0.2
    acknowledge(second, again)
    second.close()


def test_a_message_never_acknowledged_is_dead_lettered_after_max_claim_count(server, api):
    queue, dead = queue_name(), queue_name()
    api.put(f"/queues/{queue}", json={"_max_claim_count": 2, "_dead_letter_queue": dead})
    ws = subscribed_socket(server, queue, NO_WAIT)
    _, mid = post(api, queue, "never acknowledged")
    counts = [next_push(ws)[1]["claim_count"] for _ in range(2)]
    assert counts == [1, 2]
    deadline = time.monotonic() + 15
    while api.get(f"/queues/{dead}/messages/{mid}").status_code != 200:
        assert time.monotonic() < deadline, "not dead-lettered"
        time.sleep(0.2)
    ws.close()


def test_a_browser_page_shows_a_delayed_message_pushed_at_its_due_time(server, api):
    queue = delayed_queue(api)
    with rendered(PAGE) as page:
        page.evaluate(f"subscribe({json.dumps(ws_url(server))}, {json.dumps(PROJECT)}, "
                      f"{json.dumps(queue)})")
        wait_for(lambda: "subscribed: 201" in page.text, "the page subscribed")
        due, mid = post(api, queue, {"hello": "browser"}, delay=DELAY)
        wait_for(lambda: page.evaluate("window.arrivals.length") == 1, "the page got it",
                 DELAY + 10)
        [arrival] = page.evaluate("window.arrivals")
        assert arrival["id"] == mid and arrival["body"] == {"hello": "browser"}
        assert due <= arrival["at"] / 1000 <= due + SLACK
        assert 'pushed: {"hello":"browser"}' in page.text
        # The page acknowledged it: deleted.
        wait_for(lambda: api.get(f"/queues/{queue}/messages/{mid}").status_code == 404,
                 "the acknowledged message deleted")


def test_a_message_pushed_by_a_killed_worker_comes_back_when_its_claim_ends(server, api):
    queue = queue_name()
    first = subscribed_socket(server, queue, POLICY)
    _, mid = post(api, queue, "survives")
    _, frame = next_push(first)
    killed = time.time()
    for pid in child_pids(server.proc.pid):  # every worker: one of them holds the socket
        os.kill(pid, signal.SIGKILL)
    first.close()
    # gunicorn starts new workers; the dead socket's subscription stays, served by none.
    wait_for(lambda: healthy(api), "new workers serving", 30)
    second = subscribed_socket(server, queue, POLICY)
    second.settimeout(40)
    arrived, again = next_push(second)
    assert again["id"] == mid and again["claim_count"] == 2
    # Not before the push's claim (push_timeout + 10 s) ended.
    assert arrived >= killed + ACK_TIMEOUT + 10 - 0.5
    acknowledge(second, again)
    second.close()


def healthy(api: httpx.Client) -> bool:
    try:
        return api.get("/ping").status_code == 204
    except httpx.HTTPError:
        return False


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)
