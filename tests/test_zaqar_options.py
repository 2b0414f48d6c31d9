"""Zaqar's ``[transport]`` options for clients: ``client_id_uuid_safe`` with
``min_length_client_id`` and ``max_length_client_id``, and
``message_delete_with_claim_id``, over HTTP (the in-process client), on every driver
where the store sees the difference."""

from __future__ import annotations

import uuid

import pytest

from delayq.validation import Limits
from tests.apps import HTTP_DRIVERS, http_client

PROJECT = {"X-Project-ID": "options"}


def as_client(client_id: str) -> dict[str, str]:
    return {**PROJECT, "Client-ID": client_id}


def post(client, headers, queue, *bodies):
    resp = client.simulate_post(f"/v2/queues/{queue}/messages", headers=headers,
                                json={"messages": [{"body": b} for b in bodies]})
    assert resp.status_code == 201, resp.text
    return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]


def listed(client, headers, queue, echo):
    resp = client.simulate_get(f"/v2/queues/{queue}/messages", headers=headers,
                               params={"echo": str(echo).lower()})
    assert resp.status_code == 200, resp.text
    return sorted(m["body"] for m in resp.json["messages"])


def claim(client, headers, queue, limit=10):
    resp = client.simulate_post(f"/v2/queues/{queue}/claims", headers=headers,
                                params={"limit": limit}, json={"ttl": 60, "grace": 60})
    assert resp.status_code == 201, resp.text
    return resp.headers["location"].rsplit("/", 1)[1], [m["id"] for m in resp.json["messages"]]


# client_id_uuid_safe


@pytest.fixture(params=HTTP_DRIVERS)
def any_client_id(request, make_conf):
    return http_client(request.param, make_conf(client_id_uuid_safe="off"))


def test_off_takes_any_client_id_and_tells_clients_apart(any_client_id):
    client = any_client_id
    # 16 characters, the length of a UUID's bytes, and one of 36 that is no UUID.
    producer, other = as_client("producer-0000001"), as_client("x" * 36)
    post(client, producer, "q", "from producer")
    post(client, other, "q", "from other")
    assert listed(client, producer, "q", echo=False) == ["from other"]
    assert listed(client, other, "q", echo=False) == ["from producer"]
    assert listed(client, producer, "q", echo=True) == ["from other", "from producer"]
    claim_id, ids = claim(client, producer, "q")
    assert len(ids) == 2
    resp = client.simulate_delete(f"/v2/queues/q/messages/{ids[0]}", headers=other,
                                  params={"claim_id": claim_id})
    assert resp.status_code == 204


def test_off_gives_a_uuid_in_its_canonical_form(any_client_id):
    client = any_client_id
    canonical = str(uuid.uuid4())
    post(client, as_client(canonical.upper()), "q", "mine")
    assert listed(client, as_client(canonical), "q", echo=False) == []
    assert listed(client, as_client(canonical.replace("-", "")), "q", echo=False) == []


@pytest.mark.parametrize("client_id", ["short", "y" * 37])
def test_off_refuses_a_client_id_out_of_the_lengths(make_conf, client_id):
    client = http_client("sqlite", make_conf(client_id_uuid_safe="off"))
    resp = client.simulate_get("/v2/queues/q/messages", headers=as_client(client_id))
    assert resp.status_code == 400
    assert resp.json["title"] == "Wrong client ID length"
    assert resp.json["description"] == (
        f"Client-ID must be 10 to 36 characters long; got {len(client_id)}.")


def test_off_takes_the_lengths_configured(make_conf):
    client = http_client("sqlite", make_conf(client_id_uuid_safe="off",
                                             min_length_client_id=2,
                                             max_length_client_id=3))
    assert client.simulate_get("/v2/queues/q/messages",
                               headers=as_client("ab")).status_code == 200
    resp = client.simulate_get("/v2/queues/q/messages", headers=as_client("abcd"))
    assert resp.json["description"] == "Client-ID must be 2 to 3 characters long; got 4."


def test_strict_is_the_default_and_refuses_what_off_takes(make_conf):
    client = http_client("sqlite", make_conf())
    resp = client.simulate_get("/v2/queues/q/messages", headers=as_client("producer-0001"))
    assert (resp.status_code, resp.json["title"]) == (400, "Wrong UUID value")


def test_lengths_that_admit_no_client_id_stop_the_server():
    with pytest.raises(ValueError, match="min_length_client_id = 40 is above "
                                         "max_length_client_id = 36"):
        Limits(min_length_client_id=40).check()


# message_delete_with_claim_id


@pytest.fixture(params=HTTP_DRIVERS)
def with_claim_ids(request, make_conf):
    return http_client(request.param, make_conf(message_delete_with_claim_id=True))


def all_ids(client, headers, queue):
    resp = client.simulate_get(f"/v2/queues/{queue}/messages", headers=headers,
                               params={"include_claimed": "true", "echo": "true"})
    return sorted(m["id"] for m in resp.json["messages"])


def test_deleting_one_message_takes_its_claim(with_claim_ids):
    client, me = with_claim_ids, as_client(str(uuid.uuid4()))
    [mid] = post(client, me, "q", "m")
    resp = client.simulate_delete(f"/v2/queues/q/messages/{mid}", headers=me)
    assert resp.status_code == 400
    assert "claim_id is required" in resp.json["description"]
    claim_id, _ = claim(client, me, "q")
    resp = client.simulate_delete(f"/v2/queues/q/messages/{mid}", headers=me,
                                  params={"claim_id": claim_id})
    assert resp.status_code == 204
    assert all_ids(client, me, "q") == []


def test_deleting_by_ids_takes_the_claims_holding_each(with_claim_ids):
    client, me = with_claim_ids, as_client(str(uuid.uuid4()))
    first = post(client, me, "q", "a", "b")
    claim_a, _ = claim(client, me, "q")
    loose = post(client, me, "q", "c")
    ids = ",".join(first)
    for params in ({"ids": ids}, {"claim_ids": claim_a, "pop": "1"}):
        resp = client.simulate_delete("/v2/queues/q/messages", headers=me, params=params)
        assert resp.status_code == 400, params
        assert "ids and claim_ids go together" in resp.json["description"]
    # One message no claim holds: refused whole.
    resp = client.simulate_delete("/v2/queues/q/messages", headers=me,
                                  params={"ids": ",".join(first + loose),
                                          "claim_ids": claim_a})
    assert resp.status_code == 400
    assert all_ids(client, me, "q") == sorted(first + loose)
    # Held by another claim: refused whole too.
    claim_c, _ = claim(client, me, "q")
    resp = client.simulate_delete("/v2/queues/q/messages", headers=me,
                                  params={"ids": ",".join(first + loose),
                                          "claim_ids": claim_a})
    assert resp.status_code == 403
    assert all_ids(client, me, "q") == sorted(first + loose)
    resp = client.simulate_delete("/v2/queues/q/messages", headers=me,
                                  params={"ids": ",".join(first + loose),
                                          "claim_ids": f"{claim_a},{claim_c}"})
    assert resp.status_code == 204
    assert all_ids(client, me, "q") == []


def test_pops_need_no_claim(with_claim_ids):
    client, me = with_claim_ids, as_client(str(uuid.uuid4()))
    post(client, me, "q", "a")
    resp = client.simulate_delete("/v2/queues/q/messages", headers=me, params={"pop": "1"})
    assert resp.status_code == 200
    assert [m["body"] for m in resp.json["messages"]] == ["a"]


def test_off_deletes_by_ids_whatever_claim_ids_say(make_conf):
    client, me = http_client("sqlite", make_conf()), as_client(str(uuid.uuid4()))
    ids = post(client, me, "q", "a", "b")
    claim(client, me, "q", limit=1)
    resp = client.simulate_delete("/v2/queues/q/messages", headers=me,
                                  params={"ids": ",".join(ids), "claim_ids": "nonsense"})
    assert resp.status_code == 204
    assert all_ids(client, me, "q") == []
