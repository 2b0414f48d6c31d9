"""HTTP tests of every resource and status code of the API reference, through the
in-process client.

Each test runs once per driver on a fresh store of its own (the ``client`` fixture:
SQLite, Redis, MongoDB). Real time is used
only where it is cheap: one delayed-queue test sleeps a little over a second. Claim
expiry (claim ttl is at least 60 s) is never waited for; releasing a claim stands in.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest

PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"
RESERVED_DEFAULTS = {
    "_default_message_ttl": 3600,
    "_max_messages_post_size": 262144,
    "_default_message_delay": 0,
    "_max_claim_count": None,
    "_dead_letter_queue": None,
    "_dead_letter_queue_messages_ttl": None,
    "_enable_encrypt_messages": False,
}
# python-zaqarclient builds Message(queue, **view): any other key raises TypeError.
ZAQARCLIENT_MESSAGE_KEYS = {"id", "href", "ttl", "age", "body", "claim_id", "claim_count",
                            "checksum"}
DEFAULT_VIEW_KEYS = {"id", "href", "ttl", "age", "body", "claim_count"}
DETAIL_KEYS = {"created", "delay_expires", "source_queue", "moved_at"}
ISO8601 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# Helpers


@pytest.fixture
def other_client(headers) -> dict[str, str]:
    """Another client (Client-ID) in the same project."""
    return {**headers, "Client-ID": str(uuid.uuid4())}


@pytest.fixture
def project_b() -> dict[str, str]:
    """A client of another project."""
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "project-b"}


def post(client, headers, queue, *bodies, **fields) -> list[str]:
    """Post one message per body; the new ids, in order."""
    resp = client.simulate_post(f"/v2/queues/{queue}/messages", headers=headers,
                                json={"messages": [{"body": b, **fields} for b in bodies]})
    assert resp.status_code == 201, resp.text
    return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]


def claim(client, headers, queue, *, limit=None, body=None):
    """Claim messages: ``(claim_id, messages)``, or None on 204."""
    params = {"limit": limit} if limit is not None else None
    resp = client.simulate_post(f"/v2/queues/{queue}/claims", headers=headers,
                                params=params, json=body if body is not None else {})
    if resp.status_code == 204:
        assert resp.text == ""
        return None
    assert resp.status_code == 201, resp.text
    claim_id = resp.headers["location"].rsplit("/", 1)[1]
    return claim_id, resp.json["messages"]


def follow(client, headers, href):
    """GET a ``links[next]`` href the way python-zaqarclient does (path + query)."""
    assert href.startswith("/v2/")
    parts = urlsplit(href)
    return client.simulate_get(parts.path, query_string=parts.query, headers=headers)


def message_ids(messages) -> list[str]:
    return [m["id"] for m in messages]


def listing(client, headers, queue, **params):
    params = {"echo": "true", **params}
    resp = client.simulate_get(f"/v2/queues/{queue}/messages", headers=headers,
                               params=params)
    assert resp.status_code == 200, resp.text
    return resp.json


def stats(client, headers, queue) -> dict:
    resp = client.simulate_get(f"/v2/queues/{queue}/stats", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json["messages"]


def get_message(client, headers, queue, message_id, **params):
    return client.simulate_get(f"/v2/queues/{queue}/messages/{message_id}",
                               headers=headers, params=params or None)


def assert_zaqar_message(view, queue, *, claim_id=None):
    """The default message view: exactly Zaqar's keys, href with claim_id when claimed."""
    assert set(view) <= ZAQARCLIENT_MESSAGE_KEYS
    expected = DEFAULT_VIEW_KEYS | ({"claim_id"} if claim_id else set())
    assert set(view) == expected
    href = f"/v2/queues/{queue}/messages/{view['id']}"
    assert view["href"] == (f"{href}?claim_id={claim_id}" if claim_id else href)
    assert isinstance(view["age"], int) and view["age"] >= 0
    assert isinstance(view["ttl"], int)
    if claim_id:
        assert view["claim_id"] == claim_id


def assert_error(resp, status):
    assert resp.status_code == status, resp.text
    assert isinstance(resp.json["title"], str) and resp.json["title"]
    assert isinstance(resp.json["description"], str) and resp.json["description"]


# Service resources


# Zaqar's public relations (its home document outside admin mode), and rel/health.
ZAQAR_RELATIONS = {
    "rel/queues", "rel/queue", "rel/queue_stats", "rel/queue_share", "rel/queue_purge",
    "rel/messages", "rel/post_messages", "rel/messages_delete", "rel/message_delete",
    "rel/message_get", "rel/claim", "rel/post_claim", "rel/patch_claim",
    "rel/delete_claim", "rel/subscriptions_get", "rel/subscriptions_post",
    "rel/subscription", "rel/subscription_patch", "rel/ping"}
REQUEST_ID = re.compile(r"^req-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                        r"[0-9a-f]{12}$")


def test_home_document(client, headers):
    for path in ("/v2", "/v2/"):
        resp = client.simulate_get(path, headers=headers)
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json-home"
        assert resp.headers["cache-control"] == "max-age=86400"
        resources = json.loads(resp.text)["resources"]
        assert set(resources) == ZAQAR_RELATIONS | {"rel/health"}
    # rel/claim is one claim, as in Zaqar; claims are made through rel/post_claim.
    assert resources["rel/claim"] == {
        "href-template": "/v2/queues/{queue_name}/claims/{claim_id}",
        "href-vars": {"queue_name": "param/queue_name", "claim_id": "param/claim_id"},
        "hints": {"allow": ["GET"], "formats": {"application/json": {}}}}
    assert resources["rel/post_claim"]["href-template"] == \
        "/v2/queues/{queue_name}/claims{?limit}"
    assert resources["rel/post_claim"]["hints"]["accept-post"] == ["application/json"]
    assert resources["rel/message_delete"]["href-vars"]["claim"] == "param/claim_id"
    # Every template names a route the server has.
    for relation in resources.values():
        path = relation.get("href-template", relation.get("href")).split("{?")[0]
        path = re.sub(r"\{[a-z_]+\}", "x", path)
        assert client.simulate_options(path, headers=headers).status_code != 404, path


def test_versions_document(client):
    # As Zaqar: 300 Multiple Choices, no project needed.
    resp = client.simulate_get("/")
    assert resp.status_code == 300
    assert resp.json == {"versions": [{
        "id": "2", "status": "CURRENT", "updated": "2014-9-24T04:06:47Z",
        "media-types": [{"base": "application/json",
                         "type": "application/vnd.openstack.messaging-v2+json"}],
        "links": [{"href": "/v2/", "rel": "self"}]}]}


def test_every_response_has_a_new_request_id(client, headers):
    sent = "req-" + str(uuid.uuid4())
    answers = [client.simulate_get("/"), client.simulate_get("/v2", headers=headers),
               client.simulate_put("/v2/queues/q1", headers=headers),
               client.simulate_get("/v2/queues/q1/messages", headers=headers),
               client.simulate_get("/v2/queues/q1/claims/nope", headers=headers),  # 404
               client.simulate_get("/v2/nothing", headers=headers),  # no route
               client.simulate_get("/v2/queues"),  # 400, no project
               client.simulate_get("/v2/queues", headers={
                   **headers, "X-OpenStack-Request-Id": sent})]
    ids = [resp.headers["x-openstack-request-id"] for resp in answers]
    assert all(REQUEST_ID.match(i) for i in ids), ids
    # New for each request; the client's own is not echoed (oslo keeps it apart).
    assert len(set(ids)) == len(ids) and sent not in ids


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_ping(client, headers, method):
    resp = client.simulate_request(method, "/v2/ping", headers=headers)
    assert resp.status_code == 204
    assert resp.text == ""


def test_health(client, headers):
    resp = client.simulate_get("/v2/health", headers=headers)
    assert resp.status_code == 200
    assert resp.json["storage_reachable"] is True
    # Zaqar's detailed health: each operation tried, in its order, timed.
    operations = resp.json["operation_status"]
    assert list(operations) == ["create_queue", "post_messages", "claim_messages",
                                "list_messages", "delete_messages", "delete_claim",
                                "bulk_delete_messages", "delete_queue"]
    for status in operations.values():
        assert status["succeeded"] is True and status["ref"] is None
        assert isinstance(status["seconds"], float) and status["seconds"] >= 0
    # Its probes leave nothing behind in the client's project.
    assert client.simulate_get("/v2/queues", headers=headers).json["queues"] == []


def test_unknown_route_and_method_are_4xx_json(client, headers):
    assert client.simulate_get("/v2/nothing", headers=headers).status_code == 404
    resp = client.simulate_post("/v2/queues/q", headers=headers)
    assert resp.status_code == 405
    assert "title" in resp.json


# Queues: list


def test_queue_list_empty(client, headers):
    resp = client.simulate_get("/v2/queues", headers=headers)
    assert resp.status_code == 200
    assert resp.json == {"queues": [], "links": []}
    resp = client.simulate_get("/v2/queues", headers=headers, params={"with_count": "true"})
    assert resp.json["count"] == 0
    assert resp.json["links"] == []


def test_queue_list_paging_detailed_and_count(client, headers):
    names = ["q-e", "q-a", "q-d", "q-b", "q-c"]
    for name in names:
        resp = client.simulate_put(f"/v2/queues/{name}", headers=headers,
                                   json={"description": name})
        assert resp.status_code == 201
    resp = client.simulate_get("/v2/queues", headers=headers,
                               params={"limit": 2, "detailed": "true", "with_count": "true"})
    assert resp.status_code == 200
    body = resp.json
    assert body["count"] == 5
    seen = []
    pages = 0
    while True:
        pages += 1
        for view in body["queues"]:
            assert view["href"] == f"/v2/queues/{view['name']}"
            assert view["metadata"] == {**RESERVED_DEFAULTS, "description": view["name"]}
            seen.append(view["name"])
        if not body["queues"]:
            assert body["links"] == []
            break
        assert len(body["queues"]) <= 2
        (link,) = [link for link in body["links"] if link["rel"] == "next"]
        query = parse_qs(urlsplit(link["href"]).query)
        assert query["marker"] == [body["queues"][-1]["name"]]
        assert query["limit"] == ["2"]
        resp = follow(client, headers, link["href"])
        assert resp.status_code == 200
        body = resp.json
        assert pages < 10
    assert seen == sorted(names)
    # Not detailed: no metadata; default limit 10 holds all five.
    resp = client.simulate_get("/v2/queues", headers=headers)
    assert [q["name"] for q in resp.json["queues"]] == sorted(names)
    assert all("metadata" not in q for q in resp.json["queues"])
    assert "count" not in resp.json


def test_queue_list_marker(client, headers):
    for name in ("a", "b", "c"):
        client.simulate_put(f"/v2/queues/{name}", headers=headers)
    resp = client.simulate_get("/v2/queues", headers=headers, params={"marker": "a"})
    assert [q["name"] for q in resp.json["queues"]] == ["b", "c"]
    resp = client.simulate_get("/v2/queues", headers=headers, params={"marker": "c"})
    assert resp.json == {"queues": [], "links": []}


# Queues: create, metadata, head, patch, delete


def test_put_queue_201_then_204_metadata_unchanged(client, headers):
    resp = client.simulate_put("/v2/queues/q1", headers=headers, json={"color": "red"})
    assert resp.status_code == 201
    assert resp.text == ""
    assert resp.headers["location"].endswith("/v2/queues/q1")
    resp = client.simulate_put("/v2/queues/q1", headers=headers, json={"color": "blue"})
    assert resp.status_code == 204
    resp = client.simulate_put("/v2/queues/q1", headers=headers)
    assert resp.status_code == 204
    resp = client.simulate_get("/v2/queues/q1", headers=headers)
    assert resp.json["color"] == "red"


def test_put_queue_without_body(client, headers):
    resp = client.simulate_put("/v2/queues/q1", headers=headers)
    assert resp.status_code == 201
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == RESERVED_DEFAULTS


def test_get_metadata_has_every_reserved_attribute(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"description": "billing"})
    resp = client.simulate_get("/v2/queues/q1", headers=headers)
    assert resp.status_code == 200
    assert resp.json == {**RESERVED_DEFAULTS, "description": "billing"}


def test_get_metadata_keeps_set_reserved_attributes(client, headers):
    metadata = {"_default_message_ttl": 120, "_max_messages_post_size": 1024,
                "_default_message_delay": 5, "_max_claim_count": 3,
                "_dead_letter_queue": "dlq", "_dead_letter_queue_messages_ttl": 600,
                "_enable_encrypt_messages": False}
    assert client.simulate_put("/v2/queues/q1", headers=headers,
                               json=metadata).status_code == 201
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == metadata


def test_reserved_null_means_unset(client, headers):
    resp = client.simulate_put("/v2/queues/q1", headers=headers,
                               json={"_max_claim_count": None, "_dead_letter_queue": None})
    assert resp.status_code == 201
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == RESERVED_DEFAULTS


def test_get_never_created_queue_is_the_defaults(client, headers):
    # As Zaqar: python-zaqarclient reads the metadata of a queue its first post makes.
    resp = client.simulate_get("/v2/queues/nope", headers=headers)
    assert resp.status_code == 200
    assert resp.json == RESERVED_DEFAULTS
    # Reading it made nothing.
    assert client.simulate_head("/v2/queues/nope", headers=headers).status_code == 404
    assert client.simulate_get("/v2/queues", headers=headers).json["queues"] == []


def test_head_queue(client, headers):
    assert client.simulate_head("/v2/queues/q1", headers=headers).status_code == 404
    client.simulate_put("/v2/queues/q1", headers=headers)
    resp = client.simulate_head("/v2/queues/q1", headers=headers)
    assert resp.status_code == 204


def patch(client, headers, queue, operations, content_type=PATCH_TYPE):
    return client.simulate_patch(f"/v2/queues/{queue}", body=json.dumps(operations),
                                 headers={**headers, "Content-Type": content_type})


def test_patch_add_replace_remove(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"a": 1, "b": 2})
    resp = patch(client, headers, "q1", [
        {"op": "replace", "path": "/metadata/a", "value": 5},
        {"op": "add", "path": "/metadata/c", "value": {"x": [1]}},
        {"op": "remove", "path": "/metadata/b"},
        {"op": "replace", "path": "/metadata/_default_message_ttl", "value": 120},
        {"op": "add", "path": "/metadata/_default_message_delay", "value": 3},
    ])
    assert resp.status_code == 200, resp.text
    expected = {**RESERVED_DEFAULTS, "a": 5, "c": {"x": [1]},
                "_default_message_ttl": 120, "_default_message_delay": 3}
    assert resp.json == expected
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == expected


def test_patch_remove_reserved_default_is_noop(client, headers):
    """python-zaqarclient removes every current key it was not given, reserved ones too."""
    client.simulate_put("/v2/queues/q1", headers=headers, json={"a": 1})
    resp = patch(client, headers, "q1", [
        {"op": "remove", "path": f"/metadata/{name}"} for name in RESERVED_DEFAULTS])
    assert resp.status_code == 200, resp.text
    assert resp.json == {**RESERVED_DEFAULTS, "a": 1}


def test_patch_as_python_zaqarclient_sends_it(client, headers):
    """queue.metadata(new_meta=...) GETs the metadata, then sends ``add`` for each new key
    whose current value is null, ``replace`` for the others, and ``remove`` for every key
    left in its copy of the current metadata, the null reserved ones included."""
    client.simulate_put("/v2/queues/q1", headers=headers, json={"old": 1})
    current = client.simulate_get("/v2/queues/q1", headers=headers).json
    new_meta = {"_max_claim_count": 2, "_dead_letter_queue": "dlq", "old": 5}
    left = dict(current)
    ops = []
    for key, value in new_meta.items():
        if current.get(key) is not None:
            ops.append({"op": "replace", "path": f"/metadata/{key}", "value": value})
            left.pop(key)
        else:
            ops.append({"op": "add", "path": f"/metadata/{key}", "value": value})
    ops += [{"op": "remove", "path": f"/metadata/{key}"} for key in left]
    resp = patch(client, headers, "q1", ops)
    assert resp.status_code == 200, resp.text
    assert resp.json == {**RESERVED_DEFAULTS, **new_meta}
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == resp.json


def test_patch_remove_set_reserved_restores_default(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"_default_message_ttl": 120})
    resp = patch(client, headers, "q1",
                 [{"op": "remove", "path": "/metadata/_default_message_ttl"}])
    assert resp.status_code == 200
    assert resp.json["_default_message_ttl"] == 3600


def test_patch_dead_letter_policy_both_at_once(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers)
    resp = patch(client, headers, "q1", [
        {"op": "add", "path": "/metadata/_max_claim_count", "value": 2},
        {"op": "add", "path": "/metadata/_dead_letter_queue", "value": "dlq"}])
    assert resp.status_code == 200
    assert resp.json["_max_claim_count"] == 2
    assert resp.json["_dead_letter_queue"] == "dlq"


@pytest.mark.parametrize("op", ["replace", "remove"])
def test_patch_missing_user_key_409(client, headers, op):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"a": 1})
    operation = {"op": op, "path": "/metadata/missing"}
    if op == "replace":
        operation["value"] = 1
    resp = patch(client, headers, "q1", [operation])
    assert_error(resp, 409)
    assert "missing" in resp.json["description"]
    assert client.simulate_get("/v2/queues/q1", headers=headers).json["a"] == 1


@pytest.mark.parametrize("content_type", ["application/json", "text/plain",
                                          "application/json-patch+json"])
def test_patch_wrong_content_type_415(client, headers, content_type):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"a": 1})
    resp = patch(client, headers, "q1", [{"op": "add", "path": "/metadata/a", "value": 2}],
                 content_type=content_type)
    assert_error(resp, 415)
    assert client.simulate_get("/v2/queues/q1", headers=headers).json["a"] == 1


def test_patch_result_is_revalidated(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers)
    resp = patch(client, headers, "q1",
                 [{"op": "add", "path": "/metadata/_default_message_delay", "value": -1}])
    assert_error(resp, 400)
    assert "_default_message_delay" in resp.json["description"]
    resp = patch(client, headers, "q1",
                 [{"op": "add", "path": "/metadata/_max_claim_count", "value": 3}])
    assert_error(resp, 400)
    assert "_dead_letter_queue" in resp.json["description"]
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == RESERVED_DEFAULTS


def test_patch_missing_queue_404(client, headers):
    resp = patch(client, headers, "nope", [{"op": "add", "path": "/metadata/a", "value": 1}])
    assert_error(resp, 404)
    assert client.simulate_head("/v2/queues/nope", headers=headers).status_code == 404


def test_delete_queue(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"a": 1})
    ids = post(client, headers, "q1", 1, 2)
    claim(client, headers, "q1", limit=1)
    resp = client.simulate_delete("/v2/queues/q1", headers=headers)
    assert resp.status_code == 204
    assert resp.text == ""
    assert client.simulate_head("/v2/queues/q1", headers=headers).status_code == 404
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == RESERVED_DEFAULTS
    assert client.simulate_delete("/v2/queues/q1", headers=headers).status_code == 204
    assert client.simulate_delete("/v2/queues/never", headers=headers).status_code == 204
    assert stats(client, headers, "q1") == {"free": 0, "claimed": 0, "delayed": 0,
                                            "total": 0}
    # Recreated: empty, fresh metadata; the old messages are gone.
    assert client.simulate_put("/v2/queues/q1", headers=headers).status_code == 201
    assert client.simulate_get("/v2/queues/q1", headers=headers).json == RESERVED_DEFAULTS
    assert listing(client, headers, "q1", include_claimed="true")["messages"] == []
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               params={"ids": ",".join(ids)})
    assert resp.status_code == 404


def test_post_creates_queue_lazily(client, headers):
    post(client, headers, "lazy", "x")
    resp = client.simulate_get("/v2/queues/lazy", headers=headers)
    assert resp.status_code == 200
    assert resp.json == RESERVED_DEFAULTS
    names = [q["name"] for q in client.simulate_get("/v2/queues", headers=headers).json[
        "queues"]]
    assert names == ["lazy"]


# Stats and purge


def test_stats_missing_queue_zeros(client, headers):
    resp = client.simulate_get("/v2/queues/nope/stats", headers=headers)
    assert resp.status_code == 200
    assert resp.json == {"messages": {"free": 0, "claimed": 0, "delayed": 0, "total": 0}}


def test_stats_counts_oldest_newest(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers)
    assert stats(client, headers, "q1") == {"free": 0, "claimed": 0, "delayed": 0,
                                            "total": 0}
    ids = post(client, headers, "q1", "a", "b", "c")
    claim(client, headers, "q1", limit=1)
    counts = stats(client, headers, "q1")
    assert (counts["free"], counts["claimed"], counts["delayed"], counts["total"]) == \
        (2, 1, 0, 3)
    for key, message_id in (("oldest", ids[0]), ("newest", ids[-1])):
        entry = counts[key]
        assert {"age", "created", "href", "claim_count"} <= set(entry)
        assert entry["href"] == f"/v2/queues/q1/messages/{message_id}"
        assert isinstance(entry["age"], int) and entry["age"] >= 0
        assert ISO8601.match(entry["created"])
    assert counts["oldest"]["claim_count"] == 1
    assert counts["newest"]["claim_count"] == 0


@pytest.mark.parametrize("body", [None, {"resource_types": ["messages"]},
                                  {"resource_types": ["messages", "subscriptions"]}])
def test_purge(client, headers, body):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"keep": True})
    post(client, headers, "q1", 1, 2, 3)
    claim(client, headers, "q1", limit=1)
    resp = client.simulate_post("/v2/queues/q1/purge", headers=headers, json=body)
    assert resp.status_code == 204
    assert stats(client, headers, "q1") == {"free": 0, "claimed": 0, "delayed": 0,
                                            "total": 0}
    assert client.simulate_get("/v2/queues/q1", headers=headers).json["keep"] is True
    post(client, headers, "q1", 4)
    assert stats(client, headers, "q1")["free"] == 1


def test_purge_subscriptions_only_keeps_messages(client, headers):
    post(client, headers, "q1", 1)
    resp = client.simulate_post("/v2/queues/q1/purge", headers=headers,
                                json={"resource_types": ["subscriptions"]})
    assert resp.status_code == 204
    assert stats(client, headers, "q1")["total"] == 1


# Messages: post


def test_post_messages_201(client, headers):
    resp = client.simulate_post("/v2/queues/q1/messages", headers=headers, json={
        "messages": [{"body": {"event": "a"}, "ttl": 300}, {"body": [1, 2]},
                     {"body": None, "ttl": 60}, {"body": "text", "delay": 5}]})
    assert resp.status_code == 201
    hrefs = resp.json["resources"]
    assert len(hrefs) == 4
    assert all(re.fullmatch(r"/v2/queues/q1/messages/[^/?]+", h) for h in hrefs)
    ids = [h.rsplit("/", 1)[1] for h in hrefs]
    assert len(set(ids)) == 4
    assert resp.headers["location"] == f"/v2/queues/q1/messages?ids={','.join(ids)}"
    views = listing(client, headers, "q1")["messages"]
    assert message_ids(views) == ids
    assert [v["body"] for v in views] == [{"event": "a"}, [1, 2], None, "text"]
    # ttl defaults to the queue's _default_message_ttl; delay on a normal queue is ignored.
    assert [v["ttl"] for v in views] == [300, 3600, 60, 3600]
    assert stats(client, headers, "q1")["delayed"] == 0


def test_post_is_bounded_by_bytes_not_count(client, headers):
    # As Zaqar: more than max_messages_per_page (20) messages in one post are stored,
    # all of them, as long as the post fits in max_messages_post_size.
    resp = client.simulate_post("/v2/queues/q1/messages", headers=headers,
                                json={"messages": [{"body": i} for i in range(150)]})
    assert resp.status_code == 201, resp.text
    assert len(resp.json["resources"]) == 150
    assert stats(client, headers, "q1")["free"] == 150
    # The size still bounds it: as many tiny messages as pass 256 KiB are refused.
    oversize = {"messages": [{"body": 0}] * 30000}
    resp = client.simulate_post("/v2/queues/q2/messages", headers=headers, json=oversize)
    assert_error(resp, 400)
    assert "262144" in resp.json["description"]


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# Bodies JSON holds that the fast response encoder (orjson) refuses, beside ones it takes.
EXACT_BODIES = [10 ** 30, -(2 ** 63) - 1, 2 ** 64, "\ud800 lone", {"k": ["\udfff"]},
                nested(300), "é ☃ 😀", {"é": "\u0000"}, 1e-7, 2 ** 64 - 1]  # one page


def test_every_body_comes_back_exactly_as_posted(client, headers):
    # ASCII escapes: the test client's own JSON would be UTF-8, which no lone surrogate has.
    resp = client.simulate_post("/v2/queues/q1/messages", headers=headers, body=json.dumps(
        {"messages": [{"body": body} for body in EXACT_BODIES]}))
    assert resp.status_code == 201, resp.text
    ids = [href.rsplit("/", 1)[1] for href in resp.json["resources"]]
    for views in (listing(client, headers, "q1")["messages"],
                  claim(client, headers, "q1", limit=len(ids))[1]):
        assert message_ids(views) == ids
        assert [v["body"] for v in views] == EXACT_BODIES
    for message_id, body in zip(ids, EXACT_BODIES, strict=True):
        resp = get_message(client, headers, "q1", message_id)
        assert resp.status_code == 200
        assert json.loads(resp.content.decode("utf-8"))["body"] == body


def test_post_uses_queue_default_ttl(client, headers):
    client.simulate_put("/v2/queues/q1", headers=headers, json={"_default_message_ttl": 90})
    post(client, headers, "q1", "x")
    assert listing(client, headers, "q1")["messages"][0]["ttl"] == 90


def test_client_id_without_dashes_is_accepted(client, headers):
    """python-zaqarclient sends uuid4().hex when no client_uuid is configured."""
    hexed = {**headers, "Client-ID": uuid.uuid4().hex}
    post(client, hexed, "q1", "x")
    assert len(listing(client, hexed, "q1")["messages"]) == 1


# Messages: list


def test_list_echo_hides_own_messages(client, headers, other_client):
    ids = post(client, headers, "q1", 1, 2)
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers)
    assert resp.status_code == 200
    assert resp.json == {"messages": [], "links": []}
    for echo in ("false", "False"):
        assert listing(client, headers, "q1", echo=echo)["messages"] == []
    for echo in ("true", "True"):
        assert message_ids(listing(client, headers, "q1", echo=echo)["messages"]) == ids
    resp = client.simulate_get("/v2/queues/q1/messages", headers=other_client)
    assert message_ids(resp.json["messages"]) == ids
    for view in resp.json["messages"]:
        assert_zaqar_message(view, "q1")


def test_list_missing_queue_empty(client, headers):
    assert listing(client, headers, "nope") == {"messages": [], "links": []}


def test_list_include_claimed(client, headers):
    ids = post(client, headers, "q1", 1, 2, 3)
    claim_id, _ = claim(client, headers, "q1", limit=2)
    assert message_ids(listing(client, headers, "q1")["messages"]) == ids[2:]
    views = listing(client, headers, "q1", include_claimed="true")["messages"]
    assert message_ids(views) == ids
    for view in views[:2]:
        assert_zaqar_message(view, "q1", claim_id=claim_id)
    assert_zaqar_message(views[2], "q1")


def test_list_marker_paging(client, headers):
    ids = post(client, headers, "q1", *range(5))
    body = listing(client, headers, "q1", limit=2)
    seen = []
    for _ in range(10):
        seen += message_ids(body["messages"])
        if not body["messages"]:
            assert body["links"] == []
            break
        (link,) = body["links"]
        assert link["rel"] == "next"
        query = parse_qs(urlsplit(link["href"]).query)
        assert query["limit"] == ["2"] and query["echo"] == ["true"]
        resp = follow(client, headers, link["href"])
        assert resp.status_code == 200
        body = resp.json
    assert seen == ids


def test_list_after_a_message_id_marker(client, headers):
    """Zaqar's API reference gives a message's id as the marker."""
    ids = post(client, headers, "q1", *range(5))
    body = listing(client, headers, "q1", marker=ids[1], limit=2)
    assert message_ids(body["messages"]) == ids[2:4]
    (link,) = body["links"]
    resp = follow(client, headers, link["href"])
    assert resp.status_code == 200
    assert message_ids(resp.json["messages"]) == ids[4:]


def test_list_limit(client, headers):
    post(client, headers, "q1", *range(20))
    post(client, headers, "q1", *range(5))
    assert len(listing(client, headers, "q1")["messages"]) == 10
    assert len(listing(client, headers, "q1", limit=20)["messages"]) == 20
    assert len(listing(client, headers, "q1", limit=1)["messages"]) == 1


# Delayed messages in the API (one short sleep)


def test_delayed_queue_visibility(client, headers):
    # Long enough for every check before it is due, even on Swift on a busy machine (a
    # claim there takes a quarter of a second, several times that when the machine is
    # loaded); only the rest of it is slept.
    delay = 5
    resp = client.simulate_put("/v2/queues/dq", headers=headers,
                               json={"_default_message_delay": delay})
    assert resp.status_code == 201
    (delayed,) = post(client, headers, "dq", "later")
    # The server stamped the post before it answered: it is due by then + delay. (Taken
    # before the post, a slow post made the message look late.)
    due = time.monotonic() + delay
    (now,) = post(client, headers, "dq", "now", delay=0)
    assert message_ids(listing(client, headers, "dq")["messages"]) == [now]
    assert message_ids(listing(client, headers, "dq", include_delayed="true")["messages"]) \
        == [delayed, now]
    counts = stats(client, headers, "dq")
    assert (counts["free"], counts["delayed"], counts["total"]) == (1, 1, 2)
    # Readable by id while delayed, with its expiry in the details view.
    resp = get_message(client, headers, "dq", delayed, details="true")
    assert resp.status_code == 200
    assert ISO8601.match(resp.json["delay_expires"])
    assert get_message(client, headers, "dq", now, details="true").json[
        "delay_expires"] is None
    # Neither claimable nor poppable yet.
    claim_id, messages = claim(client, headers, "dq")
    assert message_ids(messages) == [now]
    client.simulate_delete(f"/v2/queues/dq/claims/{claim_id}", headers=headers)
    resp = client.simulate_delete("/v2/queues/dq/messages", headers=headers,
                                  params={"pop": 5})
    assert message_ids(resp.json["messages"]) == [now]
    claimed = claim(client, headers, "dq")
    # Checked first, so that a machine too slow for the test says so instead of looking
    # like an early delivery.
    assert time.monotonic() < due, "the checks before the due time took longer than it"
    assert claimed is None
    time.sleep(due - time.monotonic() + 0.1)
    # Swift's time is the proxy clock as this process estimates it (within half a round
    # trip of its last reading): on a loaded machine it may lag ours by a little.
    deadline = time.monotonic() + 2
    while not listing(client, headers, "dq")["messages"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert message_ids(listing(client, headers, "dq")["messages"]) == [delayed]
    assert stats(client, headers, "dq")["delayed"] == 0
    _, messages = claim(client, headers, "dq")
    assert message_ids(messages) == [delayed]



def test_deliver_at_sets_the_delay_expiry(client, headers):
    client.simulate_put("/v2/queues/dq", headers=headers,
                        json={"_default_message_delay": 60})
    at = int(time.time()) + 600
    text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    (mid,) = post(client, headers, "dq", "later", deliver_at=text)
    assert get_message(client, headers, "dq", mid, details="true").json[
        "delay_expires"] == text
    assert claim(client, headers, "dq") is None
    assert stats(client, headers, "dq")["delayed"] == 1


@pytest.mark.parametrize(("fields", "complaint"), [
    ({"deliver_at": "in ten minutes"}, "messages[0].deliver_at must be an RFC 3339"),
    ({"deliver_at": "2026-11-24T10:00:00Z", "delay": 5}, "has both delay and deliver_at"),
    ({"deliver_at": "2999-01-01T00:00:00Z"}, "at most max_message_delay (900) seconds"),
])
def test_a_bad_deliver_at_is_a_400_that_stores_nothing(client, headers, fields, complaint):
    client.simulate_put("/v2/queues/dq", headers=headers,
                        json={"_default_message_delay": 60})
    resp = client.simulate_post("/v2/queues/dq/messages", headers=headers,
                                json={"messages": [{"body": 1}, {"body": 2, **fields}]})
    assert resp.status_code == 400
    assert complaint.replace("[0]", "[1]") in resp.json["description"]
    assert stats(client, headers, "dq")["total"] == 0


# Editing one message (delayq): PATCH /v2/queues/{name}/messages/{id}


def edit_message(client, headers, queue, message_id, document,
                 content_type="application/json"):
    return client.simulate_patch(f"/v2/queues/{queue}/messages/{message_id}",
                                 body=json.dumps(document),
                                 headers={**headers, "Content-Type": content_type})


@pytest.mark.parametrize("content_type", ["application/json",
                                          "application/merge-patch+json; charset=utf-8"])
def test_edit_answers_the_detailed_view(client, headers, content_type):
    client.simulate_put("/v2/queues/dq", headers=headers,
                        json={"_default_message_delay": 60})
    (mid,) = post(client, headers, "dq", {"v": 1}, ttl=600)
    resp = edit_message(client, headers, "dq", mid, {"body": {"v": 2}, "delay": 0},
                        content_type)
    assert resp.status_code == 200, resp.text
    view = resp.json
    assert set(view) == DEFAULT_VIEW_KEYS | DETAIL_KEYS
    assert (view["id"], view["body"], view["ttl"], view["delay_expires"]) == (
        mid, {"v": 2}, 600, None)
    assert get_message(client, headers, "dq", mid).json["body"] == {"v": 2}
    _, messages = claim(client, headers, "dq")
    assert message_ids(messages) == [mid]


def test_edit_delays_a_message_again(client, headers):
    client.simulate_put("/v2/queues/dq", headers=headers,
                        json={"_default_message_delay": 60})
    (mid,) = post(client, headers, "dq", "x", delay=0)
    resp = edit_message(client, headers, "dq", mid, {"delay": 300})
    assert resp.status_code == 200, resp.text
    assert ISO8601.match(resp.json["delay_expires"])
    assert claim(client, headers, "dq") is None
    assert stats(client, headers, "dq")["delayed"] == 1


def test_edit_of_a_claimed_message_is_a_409(client, headers):
    (mid,) = post(client, headers, "q1", "x")
    claim_id, _ = claim(client, headers, "q1")
    resp = edit_message(client, headers, "q1", mid, {"body": "y"})
    assert_error(resp, 409)
    assert "claimed" in resp.json["description"]
    client.simulate_delete(f"/v2/queues/q1/claims/{claim_id}", headers=headers)
    resp = edit_message(client, headers, "q1", mid, {"body": "y"})
    assert (resp.status_code, resp.json["claim_count"]) == (200, 1)


def test_edit_of_a_missing_message_is_a_404(client, headers, project_b):
    (mid,) = post(client, headers, "q1", "x")
    client.simulate_delete(f"/v2/queues/q1/messages/{mid}", headers=headers)
    assert_error(edit_message(client, headers, "q1", mid, {"body": "y"}), 404)
    (mid,) = post(client, headers, "q1", "x")
    assert_error(edit_message(client, headers, "missing", mid, {"body": "y"}), 404)
    assert_error(edit_message(client, project_b, "q1", mid, {"body": "y"}), 404)


@pytest.mark.parametrize(("document", "complaint"), [
    ({}, "changes nothing"), ({"delay": None}, "changes nothing"),
    ({"ttl": 60, "body": 1}, "'ttl'"), ([{"body": 1}], "JSON object"), ("x", "JSON object"),
    ({"delay": 5, "deliver_at": "2026-11-24T10:00:00Z"}, "both delay and deliver_at"),
    ({"delay": 901}, "delay must be between 0 and 900"), ({"delay": "5"}, "delay"),
    ({"delay": 1.5}, "delay"), ({"deliver_at": "soon"}, "deliver_at must be an RFC 3339"),
    ({"deliver_at": "2999-01-01T00:00:00Z"}, "at most max_message_delay"),
    ({"body": "a" * 101}, "103 bytes; the limit is 100"),
])
def test_a_bad_edit_is_a_400_that_changes_nothing(client, headers, document, complaint):
    client.simulate_put("/v2/queues/dq", headers=headers,
                        json={"_default_message_delay": 60, "_max_messages_post_size": 100})
    (mid,) = post(client, headers, "dq", "x", delay=0)
    resp = edit_message(client, headers, "dq", mid, document)
    assert_error(resp, 400)
    assert complaint in resp.json["description"]
    view = get_message(client, headers, "dq", mid, details="true").json
    assert (view["body"], view["delay_expires"]) == ("x", None)


@pytest.mark.parametrize("content_type", [None, "text/plain", PATCH_TYPE,
                                          "application/json-patch+json"])
def test_edit_with_another_content_type_is_a_415(client, headers, content_type):
    (mid,) = post(client, headers, "q1", "x")
    resp = client.simulate_patch(
        f"/v2/queues/q1/messages/{mid}", body=json.dumps({"body": "y"}),
        headers={**headers, **({"Content-Type": content_type} if content_type else {})})
    assert_error(resp, 415)
    assert get_message(client, headers, "q1", mid).json["body"] == "x"



def dead_lettered(client, headers, *bodies) -> list[str]:
    """Post *bodies* to "q" (one claim allowed) and move them to "dlq"."""
    client.simulate_put("/v2/queues/q", headers=headers,
                        json={"_max_claim_count": 1, "_dead_letter_queue": "dlq"})
    ids = post(client, headers, "q", *bodies)
    claim_id, _ = claim(client, headers, "q", limit=20)
    client.simulate_delete(f"/v2/queues/q/claims/{claim_id}", headers=headers)
    assert claim(client, headers, "q") is None  # the second claim moved them
    assert stats(client, headers, "dlq")["total"] == len(ids)
    return ids


def test_redrive_moves_messages_back_and_says_how_many(client, headers):
    ids = dead_lettered(client, headers, "a", "b", "c")
    resp = client.simulate_post("/v2/queues/dlq/redrive", headers=headers,
                                json={"limit": 2})
    assert (resp.status_code, resp.json) == (200, {"moved": 2})
    resp = client.simulate_post("/v2/queues/dlq/redrive", headers=headers)
    assert (resp.status_code, resp.json) == (200, {"moved": 1})
    assert sorted(message_ids(listing(client, headers, "q")["messages"])) == sorted(ids)
    view = get_message(client, headers, "q", ids[0], details="true").json
    assert (view["claim_count"], view["source_queue"], view["moved_at"]) == (0, None, None)
    resp = client.simulate_post("/v2/queues/missing/redrive", headers=headers)
    assert (resp.status_code, resp.json) == (200, {"moved": 0})


def test_redrive_to_a_destination(client, headers):
    ids = dead_lettered(client, headers, "a")
    resp = client.simulate_post("/v2/queues/dlq/redrive", headers=headers,
                                json={"destination": "retry"})
    assert (resp.status_code, resp.json) == (200, {"moved": 1})
    assert message_ids(listing(client, headers, "retry")["messages"]) == ids


@pytest.mark.parametrize(("document", "complaint"), [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"limit": "5"}, "limit"),
    ({"destination": "dlq"}, "destination"), ({"destination": "a b"}, "destination"),
    ({"destination": 5}, "destination"), ({"where": "q"}, "where"), ([], "JSON object"),
])
def test_a_bad_redrive_is_a_400_that_moves_nothing(client, headers, document, complaint):
    dead_lettered(client, headers, "a")
    resp = client.simulate_post("/v2/queues/dlq/redrive", headers=headers, json=document)
    assert resp.status_code == 400
    assert complaint in resp.json["description"]
    assert stats(client, headers, "dlq")["total"] == 1


# Messages: get by ids, bulk delete, pop


def test_get_by_ids_comma_and_repeated(client, headers):
    ids = post(client, headers, "q1", "a", "b", "c")
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               query_string=f"ids={ids[0]},{ids[2]}")
    assert resp.status_code == 200
    assert sorted(message_ids(resp.json["messages"])) == sorted([ids[0], ids[2]])
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               query_string=f"ids={ids[1]}&ids={ids[2]}")
    assert resp.status_code == 200
    assert sorted(message_ids(resp.json["messages"])) == sorted(ids[1:])
    for view in resp.json["messages"]:
        assert_zaqar_message(view, "q1")
    # Unknown ids among known ones are ignored; echo and claims do not matter.
    claim_id, _ = claim(client, headers, "q1", limit=1)
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               query_string=f"ids={ids[0]},{uuid.uuid4().hex}")
    (view,) = resp.json["messages"]
    assert_zaqar_message(view, "q1", claim_id=claim_id)


def test_get_by_ids_none_found_404(client, headers):
    post(client, headers, "q1", "a")
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               params={"ids": uuid.uuid4().hex})
    assert_error(resp, 404)
    resp = client.simulate_get("/v2/queues/nope/messages", headers=headers,
                               params={"ids": uuid.uuid4().hex})
    assert_error(resp, 404)


def test_delete_by_ids(client, headers):
    ids = post(client, headers, "q1", "a", "b", "c")
    claim(client, headers, "q1", limit=1)
    resp = client.simulate_delete("/v2/queues/q1/messages", headers=headers,
                                  query_string=f"ids={ids[0]},{ids[1]}&ids={uuid.uuid4().hex}")
    assert resp.status_code == 204
    assert resp.text == ""
    views = listing(client, headers, "q1", include_claimed="true")["messages"]
    assert message_ids(views) == [ids[2]]
    resp = client.simulate_delete("/v2/queues/nope/messages", headers=headers,
                                  params={"ids": ids[2]})
    assert resp.status_code == 204


def test_pop(client, headers):
    ids = post(client, headers, "q1", *range(5))
    claim(client, headers, "q1", limit=1)  # the oldest is claimed: pop skips it
    resp = client.simulate_delete("/v2/queues/q1/messages", headers=headers,
                                  params={"pop": 2})
    assert resp.status_code == 200
    popped = resp.json["messages"]
    assert message_ids(popped) == ids[1:3]
    assert [m["body"] for m in popped] == [1, 2]
    for view in popped:
        assert set(view) <= ZAQARCLIENT_MESSAGE_KEYS
        assert {"id", "ttl", "age", "body"} <= set(view)
    assert message_ids(listing(client, headers, "q1", include_claimed="true")[
        "messages"]) == [ids[0], *ids[3:]]
    resp = client.simulate_delete("/v2/queues/q1/messages", headers=headers,
                                  params={"pop": 20})
    assert message_ids(resp.json["messages"]) == ids[3:]
    resp = client.simulate_delete("/v2/queues/q1/messages", headers=headers,
                                  params={"pop": 1})
    assert resp.status_code == 200
    assert resp.json == {"messages": []}
    resp = client.simulate_delete("/v2/queues/nope/messages", headers=headers,
                                  params={"pop": 1})
    assert resp.status_code == 200
    assert resp.json == {"messages": []}


@pytest.mark.parametrize("query", ["", "ids=abc&pop=1", "pop=1&ids=abc"])
def test_delete_needs_exactly_one_of_ids_and_pop(client, headers, query):
    ids = post(client, headers, "q1", "a")
    resp = client.simulate_delete("/v2/queues/q1/messages", headers=headers,
                                  query_string=query)
    assert_error(resp, 400)
    assert "ids" in resp.json["description"] and "pop" in resp.json["description"]
    assert message_ids(listing(client, headers, "q1")["messages"]) == ids


# Messages: one message


def test_get_message(client, headers):
    (message_id,) = post(client, headers, "q1", {"k": "v"}, ttl=120)
    resp = get_message(client, headers, "q1", message_id)
    assert resp.status_code == 200
    view = resp.json
    assert_zaqar_message(view, "q1")
    assert view["id"] == message_id
    assert view["body"] == {"k": "v"}
    assert view["ttl"] == 120
    assert view["claim_count"] == 0
    claim_id, _ = claim(client, headers, "q1")
    view = get_message(client, headers, "q1", message_id).json
    assert_zaqar_message(view, "q1", claim_id=claim_id)
    assert view["claim_count"] == 1


def test_get_message_404(client, headers):
    post(client, headers, "q1", "a")
    assert_error(get_message(client, headers, "q1", uuid.uuid4().hex), 404)
    assert_error(get_message(client, headers, "nope", uuid.uuid4().hex), 404)


def test_message_details_view(client, headers):
    (message_id,) = post(client, headers, "q1", "a")
    default = get_message(client, headers, "q1", message_id).json
    assert set(default) == DEFAULT_VIEW_KEYS
    resp = get_message(client, headers, "q1", message_id, details="true")
    assert resp.status_code == 200
    detailed = resp.json
    assert set(detailed) == DEFAULT_VIEW_KEYS | DETAIL_KEYS
    assert ISO8601.match(detailed["created"])
    assert detailed["delay_expires"] is None
    assert detailed["source_queue"] is None
    assert detailed["moved_at"] is None
    # details=true works on listings and ids too; the default views stay Zaqar's.
    views = listing(client, headers, "q1", details="true")["messages"]
    assert set(views[0]) == DEFAULT_VIEW_KEYS | DETAIL_KEYS
    resp = client.simulate_get("/v2/queues/q1/messages", headers=headers,
                               params={"ids": message_id, "details": "true"})
    assert set(resp.json["messages"][0]) == DEFAULT_VIEW_KEYS | DETAIL_KEYS
    assert set(listing(client, headers, "q1")["messages"][0]) == DEFAULT_VIEW_KEYS


def test_delete_message(client, headers):
    (message_id,) = post(client, headers, "q1", "a")
    resp = client.simulate_delete(f"/v2/queues/q1/messages/{message_id}", headers=headers)
    assert resp.status_code == 204
    assert resp.text == ""
    assert get_message(client, headers, "q1", message_id).status_code == 404
    # Already gone, never existed, or no queue: still 204.
    for queue, mid in (("q1", message_id), ("q1", uuid.uuid4().hex),
                       ("nope", uuid.uuid4().hex)):
        resp = client.simulate_delete(f"/v2/queues/{queue}/messages/{mid}", headers=headers)
        assert resp.status_code == 204


def test_delete_claimed_message(client, headers):
    first, second = post(client, headers, "q1", "a", "b")
    claim_1, messages = claim(client, headers, "q1", limit=1)
    assert message_ids(messages) == [first]
    claim_2, messages = claim(client, headers, "q1", limit=1)
    assert message_ids(messages) == [second]
    path = f"/v2/queues/q1/messages/{first}"
    # Claimed, no claim_id: 403.
    resp = client.simulate_delete(path, headers=headers)
    assert_error(resp, 403)
    # Claimed by another live claim than the one given: 403.
    resp = client.simulate_delete(path, headers=headers, params={"claim_id": claim_2})
    assert_error(resp, 403)
    # A claim id of no live claim (never made, or deleted): 400, as Zaqar answers.
    client.simulate_delete(f"/v2/queues/q1/claims/{claim_2}", headers=headers)
    for unknown in (uuid.uuid4().hex, claim_2):
        resp = client.simulate_delete(path, headers=headers, params={"claim_id": unknown})
        assert_error(resp, 400)
        assert resp.json["title"] == "Unable to delete"
    assert get_message(client, headers, "q1", first).status_code == 200
    # Its own claim: 204, and it is gone.
    resp = client.simulate_delete(path, headers=headers, params={"claim_id": claim_1})
    assert resp.status_code == 204
    assert get_message(client, headers, "q1", first).status_code == 404
    # The href of a claimed message is what python-zaqarclient deletes with.
    href = get_message(client, headers, "q1", second).json["href"]
    parts = urlsplit(href)
    resp = client.simulate_delete(parts.path, query_string=parts.query, headers=headers)
    assert resp.status_code == 204
    assert get_message(client, headers, "q1", second).status_code == 404


def test_delete_unclaimed_message_with_claim_id_400(client, headers):
    (message_id,) = post(client, headers, "q1", "a")
    claim_id, _ = claim(client, headers, "q1")
    client.simulate_delete(f"/v2/queues/q1/claims/{claim_id}", headers=headers)
    for cid in (claim_id, uuid.uuid4().hex):
        resp = client.simulate_delete(f"/v2/queues/q1/messages/{message_id}",
                                      headers=headers, params={"claim_id": cid})
        assert_error(resp, 400)
    assert get_message(client, headers, "q1", message_id).status_code == 200


# Claims


def test_claim_create(client, headers):
    ids = post(client, headers, "q1", *range(12))
    resp = client.simulate_post("/v2/queues/q1/claims", headers=headers,
                                json={"ttl": 120, "grace": 90})
    assert resp.status_code == 201
    claim_id = resp.headers["location"].rsplit("/", 1)[1]
    assert resp.headers["location"].endswith(f"/v2/queues/q1/claims/{claim_id}")
    messages = resp.json["messages"]
    assert message_ids(messages) == ids[:10]  # default limit 10, oldest first
    for view in messages:
        assert_zaqar_message(view, "q1", claim_id=claim_id)
        assert view["href"].endswith(f"?claim_id={claim_id}")
        # What python-zaqarclient takes the claim id from.
        assert view["href"].split("=")[-1] == claim_id
        assert view["claim_count"] == 1
    counts = stats(client, headers, "q1")
    assert (counts["free"], counts["claimed"]) == (2, 10)


def test_claim_limit(client, headers):
    ids = post(client, headers, "q1", *range(5))
    _, messages = claim(client, headers, "q1", limit=2)
    assert message_ids(messages) == ids[:2]
    _, messages = claim(client, headers, "q1", limit=20)
    assert message_ids(messages) == ids[2:]
    assert claim(client, headers, "q1", limit=1) is None


@pytest.mark.parametrize("body", [None, b"", {}, {"ttl": None, "grace": None}])
def test_claim_defaults(client, headers, body):
    post(client, headers, "q1", "a")
    kwargs = {"json": body} if isinstance(body, dict) else {"body": body}
    resp = client.simulate_post("/v2/queues/q1/claims", headers=headers, **kwargs)
    assert resp.status_code == 201, resp.text
    location = resp.headers["location"]
    resp = client.simulate_get(location, headers=headers)
    assert resp.status_code == 200
    assert (resp.json["ttl"], resp.json["grace"]) == (300, 60)


def test_claim_none_available_204(client, headers):
    assert claim(client, headers, "nope") is None
    client.simulate_put("/v2/queues/q1", headers=headers)
    assert claim(client, headers, "q1") is None
    post(client, headers, "q1", "a")
    assert claim(client, headers, "q1") is not None
    resp = client.simulate_post("/v2/queues/q1/claims", headers=headers, json={})
    assert resp.status_code == 204
    assert resp.text == ""


def test_claim_ignores_echo(client, headers):
    """A consumer claims its own messages too (echo is a listing filter only)."""
    ids = post(client, headers, "q1", "a")
    _, messages = claim(client, headers, "q1")
    assert message_ids(messages) == ids


def test_get_claim(client, headers):
    ids = post(client, headers, "q1", "a", "b", "c")
    claim_id, _ = claim(client, headers, "q1", limit=2, body={"ttl": 100, "grace": 70})
    resp = client.simulate_get(f"/v2/queues/q1/claims/{claim_id}", headers=headers)
    assert resp.status_code == 200
    view = resp.json
    assert view["ttl"] == 100
    assert view["grace"] == 70
    assert isinstance(view["age"], int) and view["age"] >= 0
    assert view["href"] == f"/v2/queues/q1/claims/{claim_id}"
    assert message_ids(view["messages"]) == ids[:2]
    for message in view["messages"]:
        assert_zaqar_message(message, "q1", claim_id=claim_id)


def test_get_claim_404(client, headers):
    post(client, headers, "q1", "a")
    claim_id, _ = claim(client, headers, "q1")
    assert_error(client.simulate_get(f"/v2/queues/q1/claims/{uuid.uuid4().hex}",
                                     headers=headers), 404)
    assert_error(client.simulate_get(f"/v2/queues/other/claims/{claim_id}",
                                     headers=headers), 404)


def test_renew_claim(client, headers):
    post(client, headers, "q1", "a")
    claim_id, _ = claim(client, headers, "q1", body={"ttl": 60, "grace": 60})
    path = f"/v2/queues/q1/claims/{claim_id}"
    resp = client.simulate_patch(path, headers=headers, json={"ttl": 500, "grace": 120})
    assert resp.status_code == 204
    assert resp.text == ""
    view = client.simulate_get(path, headers=headers).json
    assert (view["ttl"], view["grace"]) == (500, 120)
    assert len(view["messages"]) == 1
    # Only ttl (python-zaqarclient sends only the keys given): grace takes the default.
    assert client.simulate_patch(path, headers=headers, json={"ttl": 90}).status_code == 204
    assert client.simulate_get(path, headers=headers).json["ttl"] == 90
    # The message is still held by the claim.
    assert stats(client, headers, "q1")["claimed"] == 1


def test_renew_unknown_claim_404(client, headers):
    post(client, headers, "q1", "a")
    resp = client.simulate_patch(f"/v2/queues/q1/claims/{uuid.uuid4().hex}",
                                 headers=headers, json={"ttl": 100})
    assert_error(resp, 404)
    resp = client.simulate_patch(f"/v2/queues/nope/claims/{uuid.uuid4().hex}",
                                 headers=headers, json={"ttl": 100})
    assert_error(resp, 404)


def test_release_claim(client, headers):
    ids = post(client, headers, "q1", "a", "b")
    claim_id, _ = claim(client, headers, "q1")
    assert claim(client, headers, "q1") is None
    path = f"/v2/queues/q1/claims/{claim_id}"
    resp = client.simulate_delete(path, headers=headers)
    assert resp.status_code == 204
    assert resp.text == ""
    assert client.simulate_get(path, headers=headers).status_code == 404
    assert client.simulate_patch(path, headers=headers, json={}).status_code == 404
    assert stats(client, headers, "q1")["free"] == 2
    # Claimable again, claim counts kept.
    new_id, messages = claim(client, headers, "q1")
    assert new_id != claim_id
    assert message_ids(messages) == ids
    assert [m["claim_count"] for m in messages] == [2, 2]
    # Releasing the old claim again does not touch the new one.
    assert client.simulate_delete(path, headers=headers).status_code == 204
    assert stats(client, headers, "q1")["claimed"] == 2
    for unknown in (f"/v2/queues/q1/claims/{uuid.uuid4().hex}",
                    f"/v2/queues/nope/claims/{uuid.uuid4().hex}"):
        assert client.simulate_delete(unknown, headers=headers).status_code == 204


def test_release_claim_of_another_queue_is_noop(client, headers):
    post(client, headers, "q1", "a")
    post(client, headers, "q2", "b")
    claim_id, _ = claim(client, headers, "q1")
    resp = client.simulate_delete(f"/v2/queues/q2/claims/{claim_id}", headers=headers)
    assert resp.status_code == 204
    assert stats(client, headers, "q1")["claimed"] == 1


# Project isolation


def test_project_isolation(client, headers, project_b):
    a, b = headers, project_b
    client.simulate_put("/v2/queues/shared", headers=a, json={"owner": "a"})
    ids = post(client, a, "shared", 1, 2, 3)
    claim_id, _ = claim(client, a, "shared", limit=1)
    # Invisible from B.
    assert client.simulate_get("/v2/queues/shared", headers=b).json == RESERVED_DEFAULTS
    assert client.simulate_head("/v2/queues/shared", headers=b).status_code == 404
    assert client.simulate_get("/v2/queues", headers=b).json == {"queues": [], "links": []}
    assert stats(client, b, "shared") == {"free": 0, "claimed": 0, "delayed": 0, "total": 0}
    assert listing(client, b, "shared", include_claimed="true")["messages"] == []
    assert get_message(client, b, "shared", ids[1]).status_code == 404
    resp = client.simulate_get("/v2/queues/shared/messages", headers=b,
                               params={"ids": ",".join(ids)})
    assert resp.status_code == 404
    assert client.simulate_get(f"/v2/queues/shared/claims/{claim_id}",
                               headers=b).status_code == 404
    assert client.simulate_patch(f"/v2/queues/shared/claims/{claim_id}", headers=b,
                                 json={"ttl": 100}).status_code == 404
    assert patch(client, b, "shared", [{"op": "add", "path": "/metadata/owner",
                                        "value": "b"}]).status_code == 404
    # Not claimable, poppable or deletable from B.
    assert claim(client, b, "shared") is None
    resp = client.simulate_delete("/v2/queues/shared/messages", headers=b,
                                  params={"pop": 5})
    assert resp.json == {"messages": []}
    assert client.simulate_delete(f"/v2/queues/shared/messages/{ids[1]}",
                                  headers=b).status_code == 204
    assert client.simulate_delete(f"/v2/queues/shared/messages/{ids[0]}", headers=b,
                                  params={"claim_id": claim_id}).status_code == 204
    assert client.simulate_delete("/v2/queues/shared/messages", headers=b,
                                  params={"ids": ",".join(ids)}).status_code == 204
    assert client.simulate_delete(f"/v2/queues/shared/claims/{claim_id}",
                                  headers=b).status_code == 204
    assert client.simulate_post("/v2/queues/shared/purge", headers=b).status_code == 204
    assert client.simulate_delete("/v2/queues/shared", headers=b).status_code == 204
    # A still has everything.
    assert client.simulate_get("/v2/queues/shared", headers=a).json["owner"] == "a"
    counts = stats(client, a, "shared")
    assert (counts["free"], counts["claimed"]) == (2, 1)
    assert client.simulate_get(f"/v2/queues/shared/claims/{claim_id}",
                               headers=a).status_code == 200
    # B's queue of the same name is its own.
    assert client.simulate_put("/v2/queues/shared", headers=b).status_code == 201
    assert "owner" not in client.simulate_get("/v2/queues/shared", headers=b).json
    (b_id,) = post(client, b, "shared", "b's")
    assert message_ids(listing(client, b, "shared")["messages"]) == [b_id]
    assert stats(client, a, "shared")["total"] == 3
    _, messages = claim(client, b, "shared")
    assert message_ids(messages) == [b_id]
    names = [q["name"] for q in client.simulate_get("/v2/queues", headers=a).json["queues"]]
    assert names == ["shared"]
    resp = client.simulate_get("/v2/queues", headers=a, params={"with_count": "true"})
    assert resp.json["count"] == 1
