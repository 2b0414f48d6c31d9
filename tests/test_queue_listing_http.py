"""GET /v2/queues with Zaqar's filters over HTTP: ``name``, metadata filters from every
other query parameter, ``with_count``, and next links that keep them all."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.apps import http_client

HEADERS = {"X-Project-ID": "listing"}


@pytest.fixture
def client(make_conf):
    client = http_client("sqlite", make_conf())
    for name, metadata in [("billing", {"tier": 1}), ("orders", {"tier": 2, "env": "prod"}),
                           ("orders.eu", {"tier": 2, "env": "prod"}),
                           ("orders.test", {"tier": 2, "env": "test"}),
                           ("x-orders", {"tier": "2", "env": "prod"})]:
        assert client.simulate_put(f"/v2/queues/{name}", headers=HEADERS,
                                   json=metadata).status_code == 201
    return client


def listing(client, query: str):
    resp = client.simulate_get("/v2/queues", headers=HEADERS, query_string=query)
    assert resp.status_code == 200, resp.text
    return resp.json


def test_filters_and_count(client):
    page = listing(client, "name=orders&env=prod&tier=2&with_count=true")
    assert [q["name"] for q in page["queues"]] == ["orders", "orders.eu"]
    assert page["count"] == 5  # every queue of the project, as Zaqar counts
    assert [q["name"] for q in listing(client, "tier=2")["queues"]] == [
        "orders", "orders.eu", "orders.test"]  # x-orders' tier is the string "2"
    assert listing(client, "name=nowhere") == {"queues": [], "links": []}


def test_next_links_keep_every_parameter(client):
    page = listing(client, "name=orders&env=prod&limit=1&detailed=true&with_count=true")
    assert [q["name"] for q in page["queues"]] == ["orders"]
    assert page["queues"][0]["metadata"]["env"] == "prod"
    names = ["orders"]
    while page["links"]:
        [link] = page["links"]
        query = parse_qs(urlsplit(link["href"]).query)
        assert {key: value for key, value in query.items() if key != "marker"} == {
            "name": ["orders"], "env": ["prod"], "limit": ["1"], "detailed": ["true"],
            "with_count": ["true"]}
        page = listing(client, urlsplit(link["href"]).query)
        assert page["count"] == 5
        names += [q["name"] for q in page["queues"]]
    assert names == ["orders", "orders.eu", "x-orders"]


def test_a_parameter_given_twice_is_a_400(client):
    resp = client.simulate_get("/v2/queues", headers=HEADERS, query_string="env=a&env=b")
    assert resp.status_code == 400
    assert resp.json["description"] == "Query parameter 'env' is given more than once."
