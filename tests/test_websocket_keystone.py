"""The WebSocket API with ``auth_strategy = keystone``: a socket serves nothing until
``authenticate`` carries a token Keystone confirms; then it acts in the token's
project, under the policy, as HTTP does; a pre-signed URL's frames are served without
a token. The Keystone and delayq servers are those of tests/test_keystone_auth.py; the
tests of a token's expiry have their own, whose tokens last ``SHORT_TOKEN`` seconds."""

from __future__ import annotations

import json
import struct
import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest
import websocket

from tests.keystone_server import KeystoneServer
from tests.server import delayq_server
from tests.test_keystone_auth import delayq_config, keystone, server  # noqa: F401

pytestmark = pytest.mark.timeout(300)

# Long enough to authenticate and be answered on a loaded machine (keystonemiddleware
# validates each token with a new admin token of its own, and Keystone truncates the
# expiry to the second), short enough to wait out.
SHORT_TOKEN = 20
EXPIRED_CODE = 4003


@pytest.fixture(scope="module")
def short_keystone():
    started = KeystoneServer(token_expiration=SHORT_TOKEN).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def short_server(short_keystone, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("keystone-short-tokens")
    config = delayq_config(short_keystone)
    # Pings come several times within a token's life: they never stand for its expiry.
    config["drivers:transport:websocket"] = {"ping_interval": SHORT_TOKEN / 4}
    with delayq_server(cwd, config=config) as running:
        yield running


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


def close_code(ws: websocket.WebSocket) -> int | None:
    """The code of the close frame the server sends next; fails on any other frame but
    the server's keep-alive pings (``short_server`` pings several times within a
    token's life), which websocket-client answers as it reads them."""
    keepalive = (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG)
    try:
        opcode, data = ws.recv_data(control_frame=True)
        while opcode in keepalive:
            opcode, data = ws.recv_data(control_frame=True)
    except (websocket.WebSocketConnectionClosedException, ConnectionError):
        return None
    assert opcode == websocket.ABNF.OPCODE_CLOSE, (opcode, data)
    return struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None


def seconds_until(moment: datetime) -> float:
    return (moment - datetime.now(UTC)).total_seconds()


def test_a_socket_is_closed_when_its_token_expires(short_server, short_keystone):
    ws = connect(short_server)
    token, expires = short_keystone.token_expiring(short_keystone.user("alice"))
    assert ask(ws, "authenticate", {"X-Auth-Token": token})[0] == 200
    assert seconds_until(expires) > 1, "the token expired before it could be used"
    assert ask(ws, "queue_list")[0] == 200  # served before the expiry
    assert close_code(ws) == EXPIRED_CODE
    assert seconds_until(expires) <= 0.05  # closed at the expiry, not before
    ws.close()


def test_a_newer_token_keeps_the_socket_open_past_the_first(short_server,
                                                            short_keystone):
    alice = short_keystone.user("alice")
    ws = connect(short_server)
    first, first_expires = short_keystone.token_expiring(alice)
    assert ask(ws, "authenticate", {"X-Auth-Token": first})[0] == 200
    time.sleep(max(seconds_until(first_expires) - SHORT_TOKEN / 2, 0))
    second, second_expires = short_keystone.token_expiring(alice)
    assert second_expires > first_expires
    assert seconds_until(first_expires) > 0.5, "the first token expired too soon"
    assert ask(ws, "authenticate", {"X-Auth-Token": second})[0] == 200

    time.sleep(max(seconds_until(first_expires) + 1, 0))
    assert seconds_until(second_expires) > 0.5, "the second token expired too soon"
    # Past the first token's expiry, the socket is open and serves frames.
    assert ask(ws, "queue_list")[0] == 200
    assert ask(ws, "ping_node")[0] == 204
    # The second token's expiry closes it.
    assert close_code(ws) == EXPIRED_CODE
    assert seconds_until(second_expires) <= 0.05
    ws.close()
