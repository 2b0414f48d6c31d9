"""python-zaqarclient's ``websocket`` transport, unchanged, against the real
``delayq-server``: queue, message, claim and subscription calls, as Zaqar's own
WebSocket users make them (the transport's lower-level API: its ``Request`` with the
action's body, which is how the transport sends everything)."""

from __future__ import annotations

import json
import uuid

import pytest
from zaqarclient import errors as client_errors
from zaqarclient.transport import errors as transport_errors
from zaqarclient.transport import get_transport_for
from zaqarclient.transport.request import Request

from tests.server import delayq_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("websocket-zaqarclient")
    with delayq_server(cwd, config={"drivers:transport:wsgi": {"workers": 1}}) as running:
        yield running


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v2/ws"


@pytest.fixture
def transport(server):
    project = f"ws-{uuid.uuid4().hex[:8]}"
    options = {"auth_opts": {"backend": "noauth", "options": {
        "os_project_id": project, "os_auth_token": "unused-without-keystone"}}}
    url = ws_url(server)
    with get_transport_for(url, version=2, options=options) as ws:
        ws.url = url
        yield ws


def send(ws, action: str, **body):
    """The action's answer: status and body, as the transport gives them."""
    response = ws.send(Request(ws.url, action, content=json.dumps(body) if body else None))
    return response.status_code, json.loads(response.content)


def test_queues(transport):
    assert send(transport, "queue_create", queue_name="fruit",
                metadata={"color": "red"}) == (201, "Queue fruit created.")
    assert send(transport, "queue_create", queue_name="fruit") == (204, "Queue fruit created.")
    status, metadata = send(transport, "queue_get", queue_name="fruit")
    assert status == 200 and metadata["color"] == "red"
    status, listed = send(transport, "queue_list", detailed=True)
    assert status == 200
    assert [(q["name"], q["metadata"]["color"]) for q in listed["queues"]] == [("fruit",
                                                                              "red")]
    status, stats = send(transport, "queue_get_stats", queue_name="fruit")
    assert status == 200 and stats["messages"]["total"] == 0
    assert send(transport, "queue_delete", queue_name="fruit") == (204,
                                                                  "Queue fruit removed.")
    assert send(transport, "queue_list")[1]["queues"] == []


def test_messages(transport):
    status, posted = send(transport, "message_post", queue_name="q", messages=[
        {"body": {"n": 1}, "ttl": 300}, {"body": {"n": 2}, "ttl": 300}])
    assert status == 201
    first, second = posted["message_ids"]
    # The transport's own Client-ID: a client does not see its own messages unless echo.
    status, listed = send(transport, "message_list", queue_name="q", echo=True)
    assert status == 200 and [m["body"] for m in listed["messages"]] == [{"n": 1}, {"n": 2}]
    status, got = send(transport, "message_get", queue_name="q", message_id=first)
    assert status == 200 and got["messages"]["body"] == {"n": 1}
    status, many = send(transport, "message_get_many", queue_name="q",
                        message_ids=[first, second])
    assert status == 200 and {m["id"] for m in many["messages"]} == {first, second}
    assert send(transport, "message_delete", queue_name="q", message_id=first)[0] == 204
    with pytest.raises(transport_errors.ResourceNotFound):
        send(transport, "message_get", queue_name="q", message_id=first)
    assert send(transport, "message_delete_many", queue_name="q",
                message_ids=[second])[0] == 204
    send(transport, "message_post", queue_name="q", messages=[{"body": 3}])
    status, popped = send(transport, "message_delete_many", queue_name="q", pop=1)
    assert status == 200 and [m["body"] for m in popped["messages"]] == [3]


def test_claims(transport):
    send(transport, "message_post", queue_name="jobs",
         messages=[{"body": i} for i in range(3)])
    status, claim = send(transport, "claim_create", queue_name="jobs", ttl=60, grace=60,
                         limit=2)
    assert status == 201 and len(claim["messages"]) == 2
    claim_id = claim["claim_id"]
    status, got = send(transport, "claim_get", queue_name="jobs", claim_id=claim_id)
    assert status == 200 and got["ttl"] == 60 and len(got["messages"]) == 2
    assert send(transport, "claim_update", queue_name="jobs", claim_id=claim_id,
                ttl=120) == (204, f"Claim {claim_id} updated.")
    assert send(transport, "claim_get", queue_name="jobs", claim_id=claim_id)[1]["ttl"] == 120
    claimed = claim["messages"][0]["id"]
    with pytest.raises(transport_errors.ForbiddenError):  # claimed: needs the claim id
        send(transport, "message_delete", queue_name="jobs", message_id=claimed)
    assert send(transport, "message_delete", queue_name="jobs", message_id=claimed,
                claim_id=claim_id)[0] == 204
    assert send(transport, "claim_delete", queue_name="jobs", claim_id=claim_id) == (
        204, f"Claim {claim_id} deleted.")
    with pytest.raises(transport_errors.ResourceNotFound):
        send(transport, "claim_get", queue_name="jobs", claim_id=claim_id)
    status, rest = send(transport, "claim_create", queue_name="jobs", limit=10)
    assert status == 201 and len(rest["messages"]) == 2


def test_subscriptions(transport):
    send(transport, "queue_create", queue_name="news")
    status, created = send(transport, "subscription_create", queue_name="news",
                           subscriber="mailto:someone@example.com", ttl=3600,
                           options={})
    assert status == 201 and created["message"] == "Subscription news created."
    subscription_id = created["subscription_id"]
    status, listed = send(transport, "subscription_list", queue_name="news")
    assert status == 200
    assert [s["id"] for s in listed["subscriptions"]] == [subscription_id]
    status, got = send(transport, "subscription_get", queue_name="news",
                       subscription_id=subscription_id)
    assert status == 200 and got["subscriber"] == "mailto:someone@example.com"
    assert send(transport, "subscription_delete", queue_name="news",
                subscription_id=subscription_id)[0] == 204
    assert send(transport, "subscription_list", queue_name="news")[1]["subscriptions"] == []


def test_errors_are_the_clients_exceptions_with_the_http_apis_descriptions(transport):
    with pytest.raises(transport_errors.MalformedRequest) as raised:
        send(transport, "queue_create", queue_name="no spaces")
    assert "queue" in str(raised.value).lower()
    with pytest.raises(client_errors.ZaqarError):
        send(transport, "no_such_action", queue_name="q")
