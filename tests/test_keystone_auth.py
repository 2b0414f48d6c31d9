"""End to end with ``auth_strategy = keystone``: a real Keystone (tests/keystone_server.py),
the real ``delayq-server`` (gunicorn, SQLite) with keystonemiddleware and the example
policy ``etc/policy.producer-consumer.yaml``, driven by python-zaqarclient's keystone and
signed-url backends and by plain httpx.

Keystone holds two projects, alpha and beta: alice is a member of alpha, bob of beta;
pat has only the ``producer`` role in alpha, cody only ``consumer``, rita only
``reader``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from falcon import testing
from keystoneauth1 import session
from keystoneauth1.identity import v3
from zaqar.common import urls as zaqar_urls
from zaqarclient.queues import client as zaqar
from zaqarclient.transport import errors as zerrors

from delayq import conf as delayq_conf
from delayq.api.app import create_app
from tests.keystone_server import ADMIN_PASSWORD, KEYSTONE
from tests.server import delayq_server, free_port, write_config

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_POLICY = ROOT / "etc" / "policy.producer-consumer.yaml"
SECRET_KEY = "signed-url-test-key"


@pytest.fixture(scope="module")
def keystone():
    KEYSTONE.start()
    yield KEYSTONE
    KEYSTONE.stop()


@pytest.fixture(scope="module")
def server(keystone, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("keystone-e2e")
    with delayq_server(cwd, config=delayq_config(keystone)) as running:
        yield running


def delayq_config(keystone) -> dict[str, dict[str, object]]:
    """The delayq configuration of these tests, authenticating with *keystone*."""
    return {
        "DEFAULT": {"auth_strategy": "keystone"},
        "keystone_authtoken": {
            "www_authenticate_uri": keystone.url, "auth_url": keystone.url,
            "auth_type": "password", "username": "admin", "password": ADMIN_PASSWORD,
            "project_name": "admin", "user_domain_id": "default",
            "project_domain_id": "default"},
        "oslo_policy": {"policy_file": EXAMPLE_POLICY},
        "signed_url": {"secret_key": SECRET_KEY},
        "drivers:transport:wsgi": {"workers": 1},
        # The subscriptions made here are for their rules only: nothing is pushed.
        "notification": {"push": False},
    }


def keystone_client(server, keystone, name: str) -> zaqar.Client:
    """python-zaqarclient with its keystone backend, logging in as *name*."""
    user = keystone.user(name)
    return zaqar.Client(server.url, version=2, conf={
        "client_uuid": str(uuid.uuid4()),
        "auth_opts": {"backend": "keystone", "options": {
            "os_auth_url": keystone.url, "os_username": user.name,
            "os_password": user.password, "os_project_name": user.project,
            "os_user_domain_id": "default", "os_project_domain_id": "default"}}})


def headers(token: str | None = None, **more: str) -> dict[str, str]:
    found = {"Client-ID": str(uuid.uuid4()), **more}
    if token is not None:
        found["X-Auth-Token"] = token
    return found


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def assert_json_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = response.json()
    assert set(document) == {"title", "description"}
    return document


def test_each_user_sees_only_their_own_project(server, keystone):
    alice = keystone_client(server, keystone, "alice")
    bob = keystone_client(server, keystone, "bob")
    name = unique("orders")
    orders = alice.queue(name, force_create=True)
    orders.post([{"body": {"order": 1}}, {"body": {"order": 2}}])

    assert name in [q.name for q in alice.queues()[0]]
    assert name not in [q.name for q in bob.queues()[0]]
    assert not bob.queue(name, auto_create=False).exists()
    assert [m.body for m in bob.queue(name, auto_create=False).messages(echo=True)] == []

    # Bob names alice's project in X-Project-ID: the token's project wins.
    token = keystone.token(keystone.user("bob"))
    alpha = keystone.project_ids["alpha"]
    listed = httpx.get(f"{server.url}/v2/queues", timeout=30,
                       headers=headers(token, **{"X-Project-ID": alpha}))
    assert listed.status_code == 200, listed.text
    assert name not in [q["name"] for q in listed.json()["queues"]]
    claimed = httpx.post(f"{server.url}/v2/queues/{name}/claims", json={"ttl": 60},
                         headers=headers(token, **{"X-Project-ID": alpha}), timeout=30)
    assert claimed.status_code == 204, claimed.text
    purged = httpx.post(f"{server.url}/v2/queues/{name}/purge", json={},
                        headers=headers(token, **{"X-Project-ID": alpha}), timeout=30)
    assert purged.status_code == 204, purged.text

    # Alice's messages are all still hers.
    assert sorted(m.body["order"] for m in orders.claim(ttl=60, grace=60, limit=10)) == [1, 2]


def test_no_token_or_a_bad_one_is_refused_with_401_json(server, keystone):
    for sent in (headers(), headers("not-a-token"), headers("gAAAAAB" + "x" * 150)):
        response = httpx.get(f"{server.url}/v2/queues", headers=sent, timeout=30)
        document = assert_json_error(response, 401)
        assert "X-Auth-Token" in document["description"]
        assert response.headers["www-authenticate"] == f'Keystone uri="{keystone.url}"'
    # X-Project-ID alone opens nothing.
    response = httpx.post(f"{server.url}/v2/queues/{unique('q')}/messages",
                          json={"messages": [{"body": 1}]},
                          headers=headers(**{"X-Project-ID": "alpha"}), timeout=30)
    assert_json_error(response, 401)

    with pytest.raises(zerrors.UnauthorizedError):
        zaqar.Client(server.url, version=2, conf={
            "client_uuid": str(uuid.uuid4()),
            "auth_opts": {"backend": "noauth", "options": {"os_project_id": "alpha"}},
        }).queue(unique("q"), force_create=True)


def test_ping_needs_no_token_health_and_metrics_need_an_admin(server, keystone):
    assert httpx.get(f"{server.url}/v2/ping", timeout=30).status_code == 204
    member = keystone.token(keystone.user("alice"))
    admin = keystone.session("admin", ADMIN_PASSWORD, "admin").get_token()
    for path in ("/v2/health", "/metrics"):
        assert_json_error(httpx.get(f"{server.url}{path}", timeout=30), 401)
        document = assert_json_error(
            httpx.get(f"{server.url}{path}", headers=headers(member), timeout=30), 403)
        assert ("health:get" if "health" in path else "metrics:get") in \
            document["description"]
        assert httpx.get(f"{server.url}{path}", headers=headers(admin),
                         timeout=30).status_code == 200


def test_the_example_policy_lets_a_producer_only_post_and_a_consumer_only_consume(
        server, keystone):
    name = unique("jobs")
    keystone_client(server, keystone, "alice").queue(name, force_create=True)
    pat = keystone_client(server, keystone, "pat").queue(name, auto_create=False)
    cody = keystone_client(server, keystone, "cody").queue(name, auto_create=False)

    pat.post([{"body": {"job": 1}}, {"body": {"job": 2}}])
    with pytest.raises(zerrors.ForbiddenError):
        pat.claim(ttl=60, grace=60)
    with pytest.raises(zerrors.ForbiddenError):
        list(pat.messages(echo=True))
    with pytest.raises(zerrors.ForbiddenError):
        cody.post({"body": {"job": 3}})

    claimed = list(cody.claim(ttl=60, grace=60, limit=10))
    assert sorted(m.body["job"] for m in claimed) == [1, 2]
    for message in claimed:
        message.delete()  # with its claim id: messages:delete
    assert keystone_client(server, keystone, "alice").queue(
        name, auto_create=False).stats["messages"]["total"] == 0

    pat_token = keystone.token(keystone.user("pat"))
    response = httpx.get(f"{server.url}/v2/queues/{name}/stats",
                         headers=headers(pat_token), timeout=30)
    assert "queues:stats" in assert_json_error(response, 403)["description"]


def signed_client(server, signed: dict) -> zaqar.Client:
    """python-zaqarclient on a pre-signed URL: no credentials, only the signature."""
    return zaqar.Client(server.url, version=2, conf={
        "client_uuid": str(uuid.uuid4()),
        "auth_opts": {"backend": "signed-url", "options": {
            "signature": signed["signature"], "expires": signed["expires"],
            "methods": signed["methods"], "paths": signed["paths"],
            "os_project_id": signed["project"]}}})


def signed_headers(signed: dict, **changes: str) -> dict[str, str]:
    sent = {"URL-Signature": signed["signature"], "URL-Expires": signed["expires"],
            "URL-Methods": ",".join(signed["methods"]),
            "URL-Paths": ",".join(signed["paths"]), "X-Project-ID": signed["project"]}
    return {**headers(), **sent, **changes}


def test_a_signed_url_lets_a_client_without_credentials_post_and_read(server, keystone):
    name = unique("shared")
    alice = keystone_client(server, keystone, "alice")
    queue = alice.queue(name, force_create=True)
    signed = queue.signed_url(paths=["messages"], methods=["GET", "POST"],
                              ttl_seconds=600)
    assert signed["project"] == keystone.project_ids["alpha"]
    assert signed["paths"] == [f"/v2/queues/{name}/messages"]

    guest = signed_client(server, signed).queue(name, auto_create=False)
    guest.post([{"body": "from a guest"}])
    assert [m.body for m in guest.messages(echo=True)] == ["from a guest"]
    assert [m.body for m in queue.messages(echo=True)] == ["from a guest"]


def test_a_signed_url_is_refused_with_404_for_anything_it_does_not_sign(server, keystone):
    name = unique("shared")
    alice = keystone_client(server, keystone, "alice")
    queue = alice.queue(name, force_create=True)
    signed = queue.signed_url(paths=["messages"], methods=["GET"], ttl_seconds=600)
    url = f"{server.url}/v2/queues/{name}/messages"
    assert httpx.get(url, headers=signed_headers(signed), timeout=30).status_code == 200

    tampered = signed["signature"][:-1] + ("0" if signed["signature"][-1] != "0" else "1")
    cases = {
        "tampered": ("GET", url, signed_headers(signed, **{"URL-Signature": tampered})),
        "other method": ("POST", url, signed_headers(signed)),
        "methods widened": ("POST", url, signed_headers(signed,
                                                       **{"URL-Methods": "GET,POST"})),
        "other queue": ("GET", f"{server.url}/v2/queues/{name}-2/messages",
                        signed_headers(signed)),
        "other path": ("GET", f"{server.url}/v2/queues/{name}", signed_headers(signed)),
        "other project": ("GET", url, signed_headers(
            signed, **{"X-Project-ID": keystone.project_ids["beta"]})),
    }
    for case, (method, target, sent) in cases.items():
        body = {"messages": [{"body": 1}]} if method == "POST" else None
        response = httpx.request(method, target, headers=sent, json=body, timeout=30)
        assert response.status_code == 404, (case, response.text)
        assert set(response.json()) == {"title", "description"}, case
    assert queue.stats["messages"]["total"] == 0


def test_an_expired_signed_url_is_refused(server, keystone):
    name = unique("shared")
    token = keystone.token(keystone.user("alice"))
    expires = (datetime.now(UTC) + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    shared = httpx.post(f"{server.url}/v2/queues/{name}/share", headers=headers(token),
                        json={"methods": ["GET"], "expires": expires}, timeout=30)
    assert shared.status_code == 200, shared.text
    url = f"{server.url}/v2/queues/{name}/messages"
    signed = shared.json()
    while datetime.now(UTC).replace(tzinfo=None) < datetime.fromisoformat(signed["expires"]):
        time.sleep(0.2)
    assert_json_error(httpx.get(url, headers=signed_headers(signed), timeout=30), 404)


def test_a_signature_made_by_zaqar_is_accepted(server, keystone):
    name = unique("zaqar-signed")
    alpha = keystone.project_ids["alpha"]
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    signed = zaqar_urls.create_signed_url(
        SECRET_KEY, [f"/v2/queues/{name}/messages"], project=alpha,
        methods=["POST", "GET"], expires=expires)
    url = f"{server.url}/v2/queues/{name}/messages"
    posted = httpx.post(url, headers=signed_headers(signed),
                        json={"messages": [{"body": "zaqar"}]}, timeout=30)
    assert posted.status_code == 201, posted.text
    queue = keystone_client(server, keystone, "alice").queue(name, auto_create=False)
    assert [m.body for m in queue.messages(echo=True)] == ["zaqar"]


def test_a_share_needs_a_token(server, keystone):
    name = unique("shared")
    assert_json_error(httpx.post(f"{server.url}/v2/queues/{name}/share", json={},
                                 headers=headers(), timeout=30), 401)


def share(server, token: str, name: str, **document: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v2/queues/{name}/share", json=document,
                      headers=headers(token), timeout=30)


def test_a_share_grants_only_what_its_maker_may_do(server, keystone):
    """The example policy lets a reader read messages but not post them, nor subscribe:
    a reader's share of GET is made, one of POST is 403 naming the rule it would
    bypass; a member, who may do everything, may share everything."""
    name = unique("shared")
    reader = keystone.token(keystone.user("rita"))
    member = keystone.token(keystone.user("alice"))
    keystone_client(server, keystone, "alice").queue(name, force_create=True).post(
        [{"body": "for readers"}])

    signed = share(server, reader, name, methods=["GET"], paths=["messages"])
    assert signed.status_code == 200, signed.text
    assert signed.json()["methods"] == ["GET"]
    url = f"{server.url}/v2/queues/{name}/messages"
    listed = httpx.get(url, params={"echo": "true"}, headers=signed_headers(signed.json()),
                       timeout=30)
    assert [m["body"] for m in listed.json()["messages"]] == ["for readers"]

    refused = {
        "messages:create": {"methods": ["POST"], "paths": ["messages"]},
        "subscription:create": {"methods": ["POST"], "paths": ["subscriptions"]},
        "subscription:get_all": {"methods": ["GET"], "paths": ["messages", "subscriptions"]},
        "messages:delete": {"methods": ["GET", "DELETE"]},
        "claims:create": {"methods": ["POST"], "paths": ["claims"]},
    }
    for rule, document in refused.items():
        response = assert_json_error(share(server, reader, name, **document), 403)
        assert rule in response["description"], (rule, response)
        # A member may share the same.
        assert share(server, member, name, **document).status_code == 200, rule
    everything = {"methods": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
                  "paths": ["messages", "subscriptions", "claims"]}
    assert share(server, member, name, **everything).status_code == 200
    assert_json_error(share(server, reader, name, **everything), 403)


def test_a_producer_or_consumer_shares_its_own_part_only(server, keystone):
    name = unique("shared")
    pat = keystone.token(keystone.user("pat"))
    cody = keystone.token(keystone.user("cody"))
    assert share(server, pat, name, methods=["POST"]).status_code == 200
    # A share is GET on messages unless it says otherwise.
    assert "messages:get_all" in assert_json_error(share(server, pat, name), 403)[
        "description"]
    for method in ("POST", "GET", "PATCH", "DELETE"):
        assert share(server, cody, name, methods=[method], paths=["claims"]
                     ).status_code == 200, method
    # A consumer deletes messages of its claims only; a URL's holder could delete any.
    document = assert_json_error(share(server, cody, name, methods=["DELETE"]), 403)
    assert "messages:delete" in document["description"]


def test_a_share_past_max_expires_is_400(server, keystone):
    member = keystone.token(keystone.user("alice"))
    name = unique("shared")
    too_late = (datetime.now(UTC) + timedelta(days=7, minutes=1)).strftime(
        "%Y-%m-%dT%H:%M:%S")
    document = assert_json_error(share(server, member, name, expires=too_late), 400)
    assert "max_expires" in document["description"]


def test_a_signed_url_cannot_make_another(server, keystone):
    """A URL Zaqar's code signs for the share route itself (any path can be signed with
    the key) does not let its holder share: sharing takes credentials."""
    name = unique("shared")
    alpha = keystone.project_ids["alpha"]
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    signed = zaqar_urls.create_signed_url(
        SECRET_KEY, [f"/v2/queues/{name}/share"], project=alpha, methods=["POST"],
        expires=expires)
    response = httpx.post(f"{server.url}/v2/queues/{name}/share", json={},
                          headers=signed_headers(signed), timeout=30)
    assert "cannot create pre-signed URLs" in assert_json_error(response, 403)[
        "description"]


def test_a_token_of_no_project_cannot_reach_queues(server, keystone):
    user = keystone.user("alice")
    unscoped = session.Session(auth=v3.Password(
        auth_url=keystone.url, username=user.name, password=user.password,
        user_domain_id="default", unscoped=True)).get_token()
    response = httpx.get(f"{server.url}/v2/queues", headers=headers(unscoped), timeout=30)
    assert "not scoped to a project" in assert_json_error(response, 403)["description"]


def test_keystone_unreachable_is_503_and_a_token_free_ping_still_answers(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}/v3"
    settings = write_config(tmp_path / "delayq.conf", {
        "DEFAULT": {"auth_strategy": "keystone"},
        "keystone_authtoken": {"www_authenticate_uri": closed, "auth_url": closed,
                               "auth_type": "password", "username": "delayq",
                               "password": "x", "project_name": "service",
                               "user_domain_id": "default", "project_domain_id": "default"},
        "drivers:message_store:sqlite": {"path": tmp_path / "delayq.sqlite"}})
    client = testing.TestClient(create_app(delayq_conf.load(["--config-file", str(settings)])))
    response = client.simulate_get("/v2/queues", headers=headers("gAAAAAB" + "y" * 150))
    assert response.status_code == 503, response.text
    assert set(response.json) == {"title", "description"}
    assert "identity service" in response.json["description"]
    assert client.simulate_get("/v2/ping").status_code == 204


# The example policy, role by role: every operation of the API on a queue of alpha,
# tried by each role on a queue alice (a member) prepared for it.

PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"
ROLES = {"member": "alice", "producer": "pat", "consumer": "cody", "reader": "rita"}
DENIED = "denied"  # 403 by the policy, naming the rule


@dataclass(frozen=True)
class Operation:
    rule: str
    method: str
    path: str
    needs: str = "queue"  # "queue", "message" (one free message), "claimed" (claimed)
    json: object = None
    params: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None


# Paths, with {q} (a queue), {mid} (its message) and {cid} (the claim on it).
QUEUE = "/v2/queues/{q}"
MESSAGES = f"{QUEUE}/messages"
MESSAGE = f"{MESSAGES}/{{mid}}"
CLAIMS = f"{QUEUE}/claims"
CLAIM = f"{CLAIMS}/{{cid}}"
SUBSCRIPTIONS = f"{QUEUE}/subscriptions"
A_CLAIM_ID = "0123456789abcdef01234567"  # of no claim

# Expected status per role: member, producer, consumer, reader.
ROLE_TABLE: dict[str, tuple[Operation, tuple[object, object, object, object]]] = {
    "list queues": (Operation("queues:get_all", "GET", "/v2/queues"),
                    (200, DENIED, DENIED, 200)),
    "create a queue": (Operation("queues:create", "PUT", QUEUE, needs="nothing", json={}),
                       (201, DENIED, DENIED, DENIED)),
    "read a queue": (Operation("queues:get", "GET", QUEUE),
                     (200, DENIED, DENIED, 200)),
    "check a queue exists": (Operation("queues:get", "HEAD", QUEUE),
                             (204, DENIED, DENIED, 204)),
    "change a queue": (Operation("queues:update", "PATCH", QUEUE, content_type=PATCH_TYPE,
                                 json=[{"op": "add", "path": "/metadata/color",
                                        "value": "red"}]),
                       (200, DENIED, DENIED, DENIED)),
    "read stats": (Operation("queues:stats", "GET", f"{QUEUE}/stats"),
                   (200, DENIED, DENIED, 200)),
    "purge": (Operation("queues:purge", "POST", f"{QUEUE}/purge", needs="message", json={}),
              (204, DENIED, DENIED, DENIED)),
    "redrive": (Operation("queues:redrive", "POST", f"{QUEUE}/redrive", json={}),
                (200, DENIED, DENIED, DENIED)),
    "delete a queue": (Operation("queues:delete", "DELETE", QUEUE),
                       (204, DENIED, DENIED, DENIED)),
    "share reading": (Operation("messages:get_all", "POST", f"{QUEUE}/share", json={}),
                      (200, DENIED, DENIED, 200)),
    "post messages": (Operation("messages:create", "POST", MESSAGES,
                                json={"messages": [{"body": "new"}]}),
                      (201, 201, DENIED, DENIED)),
    "list messages": (Operation("messages:get_all", "GET", MESSAGES, needs="message",
                                params={"echo": "true"}),
                      (200, DENIED, DENIED, 200)),
    "read messages by id": (Operation("messages:get_all", "GET", MESSAGES, needs="message",
                                      params={"ids": "{mid}"}),
                            (200, DENIED, DENIED, 200)),
    "read a message": (Operation("messages:get", "GET", MESSAGE, needs="message"),
                       (200, DENIED, DENIED, 200)),
    "edit a message": (Operation("messages:update", "PATCH", MESSAGE, needs="message",
                                 json={"body": "edited"}, content_type="application/json"),
                       (200, DENIED, DENIED, DENIED)),
    # Unclaimed: a consumer may not delete it; with a claim id of no claim holding it,
    # the policy lets the request through and the store refuses it (400, as in Zaqar).
    "delete an unclaimed message": (
        Operation("messages:delete", "DELETE", MESSAGE, needs="message"),
        (204, DENIED, DENIED, DENIED)),
    "delete an unclaimed message naming a claim": (
        Operation("messages:delete", "DELETE", MESSAGE, needs="message",
                  params={"claim_id": A_CLAIM_ID}),
        (400, DENIED, 400, DENIED)),
    # Claimed: with its claim id, the message of a consumer's claim is its to delete;
    # without, no one may delete it (the store's 403 for a member, the policy's else).
    "delete a claimed message with its claim id": (
        Operation("messages:delete", "DELETE", MESSAGE, needs="claimed",
                  params={"claim_id": "{cid}"}),
        (204, DENIED, 204, DENIED)),
    "delete a claimed message without its claim id": (
        Operation("messages:delete", "DELETE", MESSAGE, needs="claimed"),
        (403, DENIED, DENIED, DENIED)),
    "delete messages by id": (Operation("messages:delete_all", "DELETE", MESSAGES,
                                        needs="message", params={"ids": "{mid}"}),
                              (204, DENIED, DENIED, DENIED)),
    "pop": (Operation("messages:delete_all", "DELETE", MESSAGES, needs="message",
                      params={"pop": "1"}),
            (200, DENIED, DENIED, DENIED)),
    "claim": (Operation("claims:create", "POST", CLAIMS, needs="message", json={"ttl": 60}),
              (201, DENIED, 201, DENIED)),
    "read a claim": (Operation("claims:get", "GET", CLAIM, needs="claimed"),
                     (200, DENIED, 200, DENIED)),
    "renew a claim": (Operation("claims:update", "PATCH", CLAIM, needs="claimed",
                                json={"ttl": 120}),
                      (204, DENIED, 204, DENIED)),
    "release a claim": (Operation("claims:delete", "DELETE", CLAIM, needs="claimed"),
                        (204, DENIED, 204, DENIED)),
    "subscribe": (Operation("subscription:create", "POST", SUBSCRIPTIONS,
                            json={"subscriber": "https://8.8.8.8/delayq-test", "ttl": 600}),
                  (201, DENIED, DENIED, DENIED)),
    "list subscriptions": (Operation("subscription:get_all", "GET", SUBSCRIPTIONS),
                           (200, DENIED, DENIED, DENIED)),
}


def test_the_example_policy_role_by_role(server, keystone):
    tokens = {role: keystone.token(keystone.user(user)) for role, user in ROLES.items()}
    owner = tokens["member"]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        def prepare(needs: str) -> dict[str, str]:
            """A queue of alpha (and a message, and a claim on it) made by alice."""
            found = {"q": unique("roles")}
            if needs == "nothing":
                return found
            queue = f"/v2/queues/{found['q']}"
            assert http.put(queue, json={}, headers=headers(owner)).status_code == 201
            if needs in ("message", "claimed"):
                posted = http.post(f"{queue}/messages", json={"messages": [{"body": "m"}]},
                                   headers=headers(owner))
                found["mid"] = posted.json()["resources"][0].rsplit("/", 1)[1]
            if needs == "claimed":
                claimed = http.post(f"{queue}/claims", json={"ttl": 60},
                                    headers=headers(owner))
                found["cid"] = claimed.headers["location"].rsplit("/", 1)[1]
            return found

        def state(q: str) -> tuple:
            """What alice sees of the queue: whether it exists, its metadata and counts,
            its messages and subscriptions."""
            queue = f"/v2/queues/{q}"
            if http.head(queue, headers=headers(owner)).status_code == 404:
                return ()
            stats = http.get(f"{queue}/stats", headers=headers(owner)).json()["messages"]
            listed = http.get(f"{queue}/messages", params={"echo": "true",
                                                           "include_claimed": "true"},
                              headers=headers(owner)).json()["messages"]
            subscribed = http.get(f"{queue}/subscriptions", headers=headers(owner)).json()
            return (http.get(queue, headers=headers(owner)).json(),
                    {k: stats[k] for k in ("free", "claimed", "delayed", "total")},
                    sorted((m["id"], json.dumps(m["body"])) for m in listed),
                    len(subscribed["subscriptions"]))

        seen = {}
        for name, (operation, expected) in ROLE_TABLE.items():
            for (role, token), wanted in zip(tokens.items(), expected, strict=True):
                found = prepare(operation.needs)
                before = state(found["q"])
                path = operation.path.format(**found)
                sent = headers(token)
                if operation.content_type is not None:
                    sent["Content-Type"] = operation.content_type
                response = http.request(
                    operation.method, path, headers=sent,
                    params={k: v.format(**found) for k, v in operation.params.items()},
                    content=None if operation.json is None else json.dumps(operation.json))
                seen[(name, role)] = response.status_code
                if wanted == DENIED:
                    assert response.status_code == 403, (name, role, response.text)
                    if operation.method != "HEAD":
                        assert operation.rule in response.json()["description"], (
                            name, role, response.text)
                    assert state(found["q"]) == before, (name, role)
                else:
                    assert response.status_code == wanted, (name, role, response.text)
                    if wanted in (400, 403):  # refused by the store: nothing changed
                        assert state(found["q"]) == before, (name, role)
    # The consumer's deletes, spelled out: only the message of its claim, by claim id.
    assert seen[("delete an unclaimed message", "consumer")] == 403
    assert seen[("delete a claimed message without its claim id", "consumer")] == 403
    assert seen[("delete a claimed message with its claim id", "consumer")] == 204
