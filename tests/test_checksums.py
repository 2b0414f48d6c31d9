"""Zaqar's ``[DEFAULT] enable_checksum`` over HTTP (the in-process client): every read
path that returns a message body gives its ``checksum``, ``MD5:<hex>`` of the body as
``json.dumps`` writes it, on every driver (each keeps the body's key order)."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from tests.apps import HTTP_DRIVERS, http_client

HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "sums"}
# Keys out of order, non-ASCII text, a float and nesting: all part of what is hashed.
BODIES = [{"zeta": 1, "alpha": [1.5, "é", None], "nested": {"b": True, "a": "x"}},
          "plain text", 42]


def zaqar_checksum(body):
    """What Zaqar's storage.utils.get_checksum gives: MD5 of jsonutils.dump_as_bytes."""
    return "MD5:" + hashlib.md5(json.dumps(body).encode("utf-8")).hexdigest()


def post(client, queue, bodies):
    resp = client.simulate_post(f"/v2/queues/{queue}/messages", headers=HEADERS,
                                json={"messages": [{"body": b} for b in bodies]})
    assert resp.status_code == 201, resp.text
    return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]


def checksummed(conf, name):
    conf.set_override("enable_checksum", True)
    return http_client(name, conf)


@pytest.fixture(params=HTTP_DRIVERS)
def summing(request, make_conf):
    return checksummed(make_conf(), request.param)


def assert_checksums(messages):
    assert messages
    for m in messages:
        assert m["checksum"] == zaqar_checksum(m["body"]), m


def test_every_read_path_gives_zaqar_checksums(summing):
    client = summing
    ids = post(client, "q", BODIES)
    one = client.simulate_get(f"/v2/queues/q/messages/{ids[0]}", headers=HEADERS)
    assert one.status_code == 200
    assert one.json["body"] == BODIES[0]
    assert_checksums([one.json])
    listed = client.simulate_get("/v2/queues/q/messages", headers=HEADERS,
                                 params={"echo": "true"})
    assert len(listed.json["messages"]) == 3
    assert_checksums(listed.json["messages"])
    by_ids = client.simulate_get("/v2/queues/q/messages", headers=HEADERS,
                                 params={"ids": ",".join(ids)})
    assert_checksums(by_ids.json["messages"])
    claimed = client.simulate_post("/v2/queues/q/claims", headers=HEADERS,
                                   json={"ttl": 60, "grace": 60}, params={"limit": 2})
    assert claimed.status_code == 201
    assert_checksums(claimed.json["messages"])
    read = client.simulate_get(claimed.headers["location"], headers=HEADERS)
    assert_checksums(read.json["messages"])
    popped = client.simulate_delete("/v2/queues/q/messages", headers=HEADERS,
                                    params={"pop": 1})
    assert [m["body"] for m in popped.json["messages"]] == [42]
    assert_checksums(popped.json["messages"])


def test_checksum_is_the_known_md5_of_the_body(make_conf):
    client = checksummed(make_conf(), "sqlite")
    (message_id,) = post(client, "q", [{"event": "created"}])
    got = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS)
    # md5(b'{"event": "created"}'), as Zaqar writes it.
    assert got.json["checksum"] == "MD5:" + hashlib.md5(b'{"event": "created"}').hexdigest()


def test_an_edited_body_gets_its_new_checksum(make_conf):
    client = checksummed(make_conf(), "sqlite")
    (message_id,) = post(client, "q", ["before"])
    edited = client.simulate_patch(f"/v2/queues/q/messages/{message_id}", headers=HEADERS,
                                   json={"body": "after"})
    assert edited.status_code == 200, edited.text
    assert edited.json["checksum"] == zaqar_checksum("after")
    got = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS)
    assert got.json["checksum"] == zaqar_checksum("after")


def test_a_null_body_has_no_checksum_as_in_zaqar(make_conf):
    client = checksummed(make_conf(), "sqlite")
    (message_id,) = post(client, "q", [None])
    got = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS)
    assert got.status_code == 200
    assert "checksum" not in got.json


def test_off_by_default_no_message_has_a_checksum(make_conf):
    client = http_client("sqlite", make_conf())
    (message_id,) = post(client, "q", ["x"])
    got = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS)
    claimed = client.simulate_post("/v2/queues/q/claims", headers=HEADERS, json={})
    assert "checksum" not in got.json
    assert "checksum" not in claimed.json["messages"][0]


def test_python_zaqarclient_reads_the_checksum(make_conf):
    """python-zaqarclient builds Message(**view) and keeps ``checksum``."""
    from zaqarclient.queues.v2 import message as zmessage

    client = checksummed(make_conf(), "sqlite")
    (message_id,) = post(client, "q", [{"k": "v"}])
    view = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS).json
    parsed = zmessage.Message(queue=None, **view)
    assert parsed.checksum == zaqar_checksum({"k": "v"})
