"""The WebSocket API with ``auth_strategy = keystone``: a socket serves nothing until
``authenticate`` carries a token Keystone confirms; then it acts in the token's
project, under the policy, as HTTP does; a pre-signed URL's frames are served without
a token. The Keystone and delayq servers are those of tests/test_keystone_auth.py."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import websocket

from tests.test_keystone_auth import keystone, server  # noqa: F401 - the fixtures

pytestmark = pytest.mark.timeout(300)


def connect(running) -> websocket.WebSocket:
    return websocket.create_connection(
        running.url.replace("http://", "ws://") + "/v2/ws", timeout=30)


def ask(ws: websocket.WebSocket, action: str, headers: dict | None = None,
        **body: object) -> tuple[int, object]:
    sent = {"Client-ID": str(uuid.uuid4()), **(headers or {})}
    ws.send(json.dumps({"action": action, "headers": sent, "body": body}))
    answer = json.loads(ws.recv())
    return answer["headers"]["status"], answer["body"]


def authenticated(running, keystone_server, user: str) -> websocket.WebSocket:
    ws = connect(running)
    token = keystone_server.token(keystone_server.user(user))
    assert ask(ws, "authenticate", {"X-Auth-Token": token}) == (
        200, {"message": "Authentified."})
    return ws


def test_frames_are_refused_until_authenticated(server, keystone):  # noqa: F811
    ws = connect(server)
    assert ask(ws, "queue_list", {"X-Project-ID": "alpha"}) == (
        403, {"error": "Not authentified."})
    assert ask(ws, "authenticate", {"X-Auth-Token": "not-a-token"}) == (
        401, {"error": "Authentication failed."})
    assert ask(ws, "queue_list")[0] == 403
    token = keystone.token(keystone.user("alice"))
    assert ask(ws, "authenticate", {"X-Auth-Token": token})[0] == 200
    assert ask(ws, "queue_list")[0] == 200
    ws.close()


def test_a_socket_acts_in_its_tokens_project_whatever_the_frames_say(
        server, keystone):  # noqa: F811
    name = f"ws-{uuid.uuid4().hex[:8]}"
    alice = authenticated(server, keystone, "alice")
    bob = authenticated(server, keystone, "bob")
    assert ask(alice, "queue_create", queue_name=name)[0] == 201
    beta = keystone.project_ids["beta"]
    alpha = keystone.project_ids["alpha"]
    # Bob names alice's project: the token's project (beta) serves the frame anyway.
    status, listed = ask(bob, "queue_list", {"X-Project-ID": alpha})
    assert status == 200 and name not in [q["name"] for q in listed["queues"]]
    status, listed = ask(alice, "queue_list", {"X-Project-ID": beta})
    assert status == 200 and name in [q["name"] for q in listed["queues"]]
    alice.close()
    bob.close()


def test_the_policy_applies_as_on_http(server, keystone):  # noqa: F811
    name = f"ws-{uuid.uuid4().hex[:8]}"
    alice = authenticated(server, keystone, "alice")
    pat = authenticated(server, keystone, "pat")  # producer: may post, not claim
    ask(alice, "queue_create", queue_name=name)
    assert ask(pat, "message_post", queue_name=name, messages=[{"body": 1}])[0] == 201
    status, body = ask(pat, "claim_create", queue_name=name)
    assert status == 403 and "claims:create" in body["error"]
    alice.close()
    pat.close()


def test_a_signed_frame_is_served_without_a_token(server, keystone):  # noqa: F811
    name = f"ws-{uuid.uuid4().hex[:8]}"
    alice = authenticated(server, keystone, "alice")
    ask(alice, "queue_create", queue_name=name)
    token = keystone.token(keystone.user("alice"))
    signed = httpx.post(f"{server.url}/v2/queues/{name}/share",
                        headers={"X-Auth-Token": token},
                        json={"paths": ["messages"], "methods": ["GET", "POST"]},
                        timeout=30).json()
    guest = connect(server)
    signature = {"URL-Signature": signed["signature"], "URL-Expires": signed["expires"],
                 "URL-Methods": ",".join(signed["methods"]),
                 "URL-Paths": ",".join(signed["paths"]), "X-Project-ID": signed["project"]}
    assert ask(guest, "message_post", signature, queue_name=name,
               messages=[{"body": "from a guest"}])[0] == 201
    # The signature covers the messages only: a claim is refused, as on HTTP (404).
    assert ask(guest, "claim_create", signature, queue_name=name)[0] == 404
    status, listed = ask(alice, "message_list", queue_name=name, echo=True)
    assert [m["body"] for m in listed["messages"]] == ["from a guest"]
    alice.close()
    guest.close()
