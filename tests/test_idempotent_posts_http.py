"""Idempotent posts over HTTP (the in-process client): the ``Idempotency-Key`` header
checked, a repeat answered exactly as the first post was, a reuse with another body a
422 JSON error, the window from ``[transport] idempotency_window``."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.apps import http_client

HEADERS = {"X-Project-ID": "keys", "Client-ID": str(uuid.uuid4())}
BODY = json.dumps({"messages": [{"body": {"order": 1}}, {"body": {"order": 2}}]})


@pytest.fixture
def client(make_conf):
    return http_client("sqlite", make_conf())


def keyed_post(client, key, body=BODY, queue="orders.eu"):
    return client.simulate_post(f"/v2/queues/{queue}/messages", body=body,
                                headers={**HEADERS, "Content-Type": "application/json",
                                         "Idempotency-Key": key})


def total(client, queue="orders.eu"):
    resp = client.simulate_get(f"/v2/queues/{queue}/stats", headers=HEADERS)
    return resp.json["messages"]["total"]


def test_a_repeat_is_answered_as_the_first_post_was(client):
    first = keyed_post(client, "order-1")
    assert first.status_code == 201
    for key in ("order-1", '"order-1"'):  # bare, or a structured-field string
        again = keyed_post(client, key)
        assert (again.status_code, again.headers["location"], again.json) == (
            201, first.headers["location"], first.json)
    assert total(client) == 2


def test_a_reuse_with_another_body_is_a_422_that_stores_nothing(client):
    keyed_post(client, "order-1")
    resp = keyed_post(client, "order-1", body=BODY.replace("2", "3"))
    assert resp.status_code == 422
    assert resp.json["title"] == "Idempotency key reused"
    assert "with another body within the last 300 seconds" in resp.json["description"]
    assert total(client) == 2


def test_the_same_messages_in_other_bytes_are_another_body(client):
    keyed_post(client, "order-1")
    assert keyed_post(client, "order-1", body=BODY.replace(", ", ",")).status_code == 422


@pytest.mark.parametrize("key", ["", "a b", "k" * 256, "caf\u00e9", 'a"b', "a\\b", '"'])
def test_a_bad_key_is_a_400_that_stores_nothing(client, key):
    resp = keyed_post(client, key)
    assert resp.status_code == 400
    assert resp.json["title"] == "Invalid Idempotency-Key"
    assert "1 to 255 visible ASCII characters" in resp.json["description"]
    assert total(client) == 0


def test_the_longest_key_and_any_visible_character_do(client):
    assert keyed_post(client, "k" * 255).status_code == 201
    assert keyed_post(client, "!#$%&'()*+,-./:;<=>?@[]^_`{|}~").status_code == 201
    assert total(client) == 4


def test_the_window_is_the_option(make_conf):
    client = http_client("sqlite", make_conf(idempotency_window=1))
    first = keyed_post(client, "order-1")
    time.sleep(1.1)
    second = keyed_post(client, "order-1")
    assert second.status_code == 201
    assert second.json != first.json
    assert total(client) == 4
