"""Message encryption at rest, over HTTP (the in-process client): Zaqar's queue flag
``_enable_encrypt_messages`` and ``[transport] message_encryption_key``. Bodies of an
encrypted queue are stored sealed (read straight from the SQLite file and the Redis
keys: no plaintext) and come back as posted on every read path, on every driver, also
after a dead-letter move and a redrive, under key rotation; a flag that is no boolean,
or one set where no key is configured, is refused."""

from __future__ import annotations

import json
import sqlite3
import uuid

import pytest
import redis

from delayq import encryption
from tests.apps import HTTP_DRIVERS, http_client

HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "crypt"}
FLAG = "_enable_encrypt_messages"
SECRET = "plaintext-nobody-may-read-7f3a"
# The secret in three forms a store might keep: a string body, a key, a nested value.
BODIES = [SECRET, {SECRET: 1}, {"card": {"number": SECRET, "amount": 2.5}}]


def keyed(conf, *keys):
    conf.set_override("message_encryption_key", list(keys), group="transport")
    return conf


def post(client, queue, *bodies):
    resp = client.simulate_post(f"/v2/queues/{queue}/messages", headers=HEADERS,
                                json={"messages": [{"body": b, "ttl": 600} for b in bodies]})
    assert resp.status_code == 201, resp.text
    return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]


def encrypted_queue(client, queue, **metadata):
    resp = client.simulate_put(f"/v2/queues/{queue}", headers=HEADERS,
                               json={FLAG: True, **metadata})
    assert resp.status_code == 201, resp.text


def patch_flag(client, queue, value, op="add"):
    return client.simulate_patch(
        f"/v2/queues/{queue}",
        headers={**HEADERS, "Content-Type": "application/openstack-messaging-v2.0-json-patch"},
        body=json.dumps([{"op": op, "path": f"/metadata/{FLAG}", "value": value}]))


def body_of(client, queue, message_id):
    resp = client.simulate_get(f"/v2/queues/{queue}/messages/{message_id}", headers=HEADERS)
    assert resp.status_code == 200, resp.text
    return resp.json["body"]


def claim(client, queue, limit=10):
    resp = client.simulate_post(f"/v2/queues/{queue}/claims", headers=HEADERS,
                                params={"limit": limit}, json={"ttl": 60, "grace": 60})
    assert resp.status_code in (201, 204), resp.text
    return resp


@pytest.fixture(params=HTTP_DRIVERS)
def crypt(request, make_conf):
    return http_client(request.param, keyed(make_conf(), "first-key"))


def test_every_read_path_returns_the_posted_bodies(crypt):
    client = crypt
    encrypted_queue(client, "q")
    ids = post(client, "q", *BODIES)
    assert [body_of(client, "q", i) for i in ids] == BODIES
    listed = client.simulate_get("/v2/queues/q/messages", headers=HEADERS,
                                 params={"echo": "true"})
    assert [m["body"] for m in listed.json["messages"]] == BODIES
    by_ids = client.simulate_get("/v2/queues/q/messages", headers=HEADERS,
                                 params={"ids": ",".join(ids)})
    assert [m["body"] for m in by_ids.json["messages"]] == BODIES
    # Zaqar's claim answers with ciphertext; delayq's with the bodies.
    made = claim(client, "q", limit=2)
    assert [m["body"] for m in made.json["messages"]] == BODIES[:2]
    read = client.simulate_get(made.headers["location"], headers=HEADERS)
    assert [m["body"] for m in read.json["messages"]] == BODIES[:2]
    claim_id = made.headers["location"].rsplit("/", 1)[1]
    released = client.simulate_patch(f"/v2/queues/q/messages/{ids[0]}", headers=HEADERS,
                                     params={"claim_id": claim_id}, json={"delay": 0})
    assert released.status_code == 200, released.text
    assert released.json["body"] == BODIES[0]
    popped = client.simulate_delete("/v2/queues/q/messages", headers=HEADERS,
                                    params={"pop": 1})
    assert [m["body"] for m in popped.json["messages"]] == [BODIES[2]]


def test_an_edit_stays_encrypted_and_reads_back(crypt):
    client = crypt
    encrypted_queue(client, "q")
    (message_id,) = post(client, "q", "before")
    edited = client.simulate_patch(f"/v2/queues/q/messages/{message_id}", headers=HEADERS,
                                   json={"body": {"after": SECRET}})
    assert edited.status_code == 200, edited.text
    assert edited.json["body"] == {"after": SECRET}
    assert body_of(client, "q", message_id) == {"after": SECRET}


def test_dead_lettered_and_redriven_bodies_stay_readable(crypt):
    """The dead-letter queue does not ask for encryption: the moved body stays sealed
    in the store, and is opened wherever it is read."""
    client = crypt
    encrypted_queue(client, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    ids = post(client, "q", *BODIES)
    made = claim(client, "q")
    client.simulate_delete(made.headers["location"], headers=HEADERS)
    assert claim(client, "q").status_code == 204  # the second claim moved them
    assert [body_of(client, "dlq", i) for i in ids] == BODIES
    listed = client.simulate_get("/v2/queues/dlq/messages", headers=HEADERS,
                                 params={"echo": "true"})
    assert [m["body"] for m in listed.json["messages"]] == BODIES
    resp = client.simulate_post("/v2/queues/dlq/redrive", headers=HEADERS)
    assert (resp.status_code, resp.json) == (200, {"moved": 3})
    assert [body_of(client, "q", i) for i in ids] == BODIES
    # A redrive may reorder them (on Redis, by their ids).
    claimed = claim(client, "q").json["messages"]
    assert sorted(json.dumps(m["body"]) for m in claimed) == sorted(map(json.dumps, BODIES))


def test_the_flag_shows_in_queue_views(crypt):
    client = crypt
    encrypted_queue(client, "q")
    client.simulate_put("/v2/queues/plain", headers=HEADERS)
    assert client.simulate_get("/v2/queues/q", headers=HEADERS).json[FLAG] is True
    assert client.simulate_get("/v2/queues/plain", headers=HEADERS).json[FLAG] is False
    listed = client.simulate_get("/v2/queues", headers=HEADERS,
                                 params={"detailed": "true"}).json["queues"]
    assert {q["name"]: q["metadata"][FLAG] for q in listed} == {"plain": False, "q": True}


def test_turning_the_flag_off_keeps_sealed_bodies_readable(make_conf):
    client = http_client("sqlite", keyed(make_conf(), "k"))
    encrypted_queue(client, "q")
    (sealed,) = post(client, "q", SECRET)
    resp = patch_flag(client, "q", False, op="replace")
    assert resp.status_code == 200, resp.text
    (plain,) = post(client, "q", "plain now")
    assert body_of(client, "q", sealed) == SECRET
    assert body_of(client, "q", plain) == "plain now"


# The store, read directly


def test_the_sqlite_file_holds_no_plaintext(make_conf, tmp_path):
    conf = keyed(make_conf(), "k")
    client = http_client("sqlite", conf)
    encrypted_queue(client, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    ids = post(client, "q", *BODIES)
    client.simulate_post("/v2/queues/plain/messages", headers=HEADERS,
                         json={"messages": [{"body": "visible-control"}]})
    made = claim(client, "q")
    client.simulate_delete(made.headers["location"], headers=HEADERS)
    claim(client, "q")  # moves them to dlq: the trail records their bodies
    path = conf["drivers:message_store:sqlite"].path
    with sqlite3.connect(path) as db:
        dump = "\n".join(db.iterdump())
    assert "visible-control" in dump  # the dump does show bodies
    assert SECRET not in dump
    assert encryption.SEALED in dump
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("delayq.sqlite*")
                   if p.is_file())
    assert SECRET.encode() not in raw
    assert [body_of(client, "dlq", i) for i in ids] == BODIES


def redis_values(client: redis.Redis, namespace: str) -> list[bytes]:
    """Every value under *namespace*, whatever its type."""
    values: list[bytes] = []
    for key in client.scan_iter(match=f"{namespace}*"):
        kind = client.type(key)
        if kind == b"string":
            values.append(client.get(key))
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                values += [field, value]
        elif kind == b"list":
            values += client.lrange(key, 0, -1)
        elif kind == b"set":
            values += client.smembers(key)
        elif kind == b"zset":
            values += client.zrange(key, 0, -1)
        elif kind == b"stream":
            for _, fields in client.xrange(key):
                for field, value in fields.items():
                    values += [field, value]
    return values


def test_the_redis_keys_hold_no_plaintext(make_conf):
    conf = keyed(make_conf(), "k")
    client = http_client("redis", conf)
    encrypted_queue(client, "q", _max_claim_count=1, _dead_letter_queue="dlq")
    post(client, "q", *BODIES)
    client.simulate_post("/v2/queues/plain/messages", headers=HEADERS,
                         json={"messages": [{"body": "visible-control"}]})
    made = claim(client, "q")
    client.simulate_delete(made.headers["location"], headers=HEADERS)
    claim(client, "q")
    group = conf["drivers:message_store:redis"]
    store = redis.Redis.from_url(group.uri)
    try:
        values = b"\n".join(redis_values(store, group.namespace))
    finally:
        store.close()
    assert b"visible-control" in values
    assert SECRET.encode() not in values
    assert encryption.SEALED.encode() in values


# Key rotation


def test_keys_rotate_first_seals_all_open(make_conf):
    conf = keyed(make_conf(), "old")
    old = http_client("sqlite", conf)
    encrypted_queue(old, "q")
    (by_old,) = post(old, "q", "sealed with old")
    rotated = http_client("sqlite", keyed(conf, "new", "old"))
    (by_new,) = post(rotated, "q", "sealed with new")
    assert body_of(rotated, "q", by_old) == "sealed with old"
    assert body_of(rotated, "q", by_new) == "sealed with new"
    assert body_of(old, "q", by_old) == "sealed with old"
    # Once the old key is dropped, what it sealed is refused, never shown as ciphertext.
    dropped = http_client("sqlite", keyed(conf, "new"))
    assert body_of(dropped, "q", by_new) == "sealed with new"
    resp = dropped.simulate_get(f"/v2/queues/q/messages/{by_old}", headers=HEADERS)
    assert resp.status_code == 503
    assert by_old in resp.json["description"]
    assert "message_encryption_key" in resp.json["description"]


def test_a_server_without_the_keys_never_shows_ciphertext(make_conf):
    conf = keyed(make_conf(), "k")
    client = http_client("sqlite", conf)
    encrypted_queue(client, "q")
    (message_id,) = post(client, "q", SECRET)
    keyless = http_client("sqlite", keyed(conf))
    resp = keyless.simulate_get("/v2/queues/q/messages", headers=HEADERS,
                                params={"echo": "true"})
    assert resp.status_code == 503
    assert encryption.SEALED not in resp.text
    # Nor does it store a post to the encrypted queue in the clear.
    refused = keyless.simulate_post("/v2/queues/q/messages", headers=HEADERS,
                                    json={"messages": [{"body": "clear"}]})
    assert refused.status_code == 400
    assert "message_encryption_key" in refused.json["description"]
    assert body_of(client, "q", message_id) == SECRET


# Refusals


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, [], {}])
def test_a_flag_that_is_no_boolean_is_a_400(make_conf, value):
    client = http_client("sqlite", keyed(make_conf(), "k"))
    resp = client.simulate_put("/v2/queues/q", headers=HEADERS, json={FLAG: value})
    assert resp.status_code == 400
    assert FLAG in resp.json["description"]
    assert client.simulate_head("/v2/queues/q", headers=HEADERS).status_code == 404


def test_a_null_flag_is_unset(make_conf):
    client = http_client("sqlite", keyed(make_conf(), "k"))
    resp = client.simulate_put("/v2/queues/q", headers=HEADERS, json={FLAG: None})
    assert resp.status_code == 201
    assert client.simulate_get("/v2/queues/q", headers=HEADERS).json[FLAG] is False


def test_the_flag_without_a_configured_key_is_refused(make_conf):
    client = http_client("sqlite", make_conf())
    resp = client.simulate_put("/v2/queues/q", headers=HEADERS, json={FLAG: True})
    assert resp.status_code == 400
    assert resp.json["title"] == "Encryption unavailable"
    assert "message_encryption_key" in resp.json["description"]
    assert client.simulate_put("/v2/queues/q", headers=HEADERS).status_code == 201
    patched = patch_flag(client, "q", True)
    assert patched.status_code == 400
    assert client.simulate_get("/v2/queues/q", headers=HEADERS).json[FLAG] is False
    # Turning it off needs no key.
    off = client.simulate_put("/v2/queues/off", headers=HEADERS, json={FLAG: False})
    assert off.status_code == 201


def test_a_body_shaped_as_a_sealed_one_is_refused(make_conf):
    client = http_client("sqlite", keyed(make_conf(), "k"))
    forged = {encryption.SEALED: "AES256-GCM:AAAA"}
    resp = client.simulate_post("/v2/queues/q/messages", headers=HEADERS,
                                json={"messages": [{"body": "fine"}, {"body": forged}]})
    assert resp.status_code == 400
    assert "messages[1].body" in resp.json["description"]
    (message_id,) = post(client, "q", "fine")
    edit = client.simulate_patch(f"/v2/queues/q/messages/{message_id}", headers=HEADERS,
                                 json={"body": forged})
    assert edit.status_code == 400
    assert body_of(client, "q", message_id) == "fine"
    # A larger object that merely has the member is an ordinary body.
    (other,) = post(client, "q", {**forged, "more": 1})
    assert body_of(client, "q", other) == {**forged, "more": 1}


def test_a_body_altered_in_the_store_is_refused_not_garbled(make_conf):
    """GCM's tag: a body sealed with a key the server does not have, planted in the
    store, is refused (503) rather than decrypted into garbage."""
    conf = keyed(make_conf(), "k")
    client = http_client("sqlite", conf)
    encrypted_queue(client, "q")
    (message_id,) = post(client, "q", SECRET)
    planted = encryption.BodyCipher(["another"]).seal("planted")
    with sqlite3.connect(conf["drivers:message_store:sqlite"].path) as db:
        (text,) = [row[0] for row in db.execute("SELECT body FROM messages")]
        assert encryption.SEALED in text and SECRET not in text
        db.execute("UPDATE messages SET body = ?", (json.dumps(planted),))
    resp = client.simulate_get(f"/v2/queues/q/messages/{message_id}", headers=HEADERS)
    assert resp.status_code == 503
    assert "planted" not in resp.text
