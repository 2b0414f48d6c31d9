"""Quotas over HTTP, on every driver: a request past ``[quotas] max_queues_per_project``
or ``max_messages_per_queue`` is a 403 JSON error naming the limit, and changes nothing.
The rules themselves are tested per driver in tests/contract/test_quotas.py.
"""

from __future__ import annotations

import pytest

from tests.apps import HTTP_DRIVERS, http_client

QUEUES, MESSAGES = 2, 25


@pytest.fixture(params=HTTP_DRIVERS)
def client(request, make_conf):
    """The app on each driver, with a project quota of 2 queues of 25 messages each."""
    conf = make_conf()
    conf.set_override("max_queues_per_project", QUEUES, group="quotas")
    conf.set_override("max_messages_per_queue", MESSAGES, group="quotas")
    return http_client(request.param, conf)


@pytest.fixture
def project_b() -> dict[str, str]:
    """A client of another project."""
    return {"Client-ID": "7b0e4f3c-2a51-4d8e-b6a9-0c1d2e3f4a5b", "X-Project-ID": "project-b"}


def post(client, headers, queue, count):
    return client.simulate_post(f"/v2/queues/{queue}/messages", headers=headers,
                                json={"messages": [{"body": n} for n in range(count)]})


def total(client, headers, queue) -> int:
    resp = client.simulate_get(f"/v2/queues/{queue}/stats", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json["messages"]["total"]


def assert_quota_error(resp, description):
    assert resp.status_code == 403, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.json == {"title": "Quota exceeded", "description": description}


def test_a_post_past_the_message_quota_is_a_403_and_stores_none(client, headers):
    assert post(client, headers, "q", 10).status_code == 201
    assert_quota_error(post(client, headers, "q", 20),
                       "Queue 'q' holds 10 messages; 20 more would pass "
                       "max_messages_per_queue (25).")
    assert total(client, headers, "q") == 10
    assert post(client, headers, "q", 15).status_code == 201
    assert total(client, headers, "q") == MESSAGES
    assert_quota_error(post(client, headers, "q", 1),
                       "Queue 'q' holds 25 messages; 1 more would pass "
                       "max_messages_per_queue (25).")
    # Room again once a message is gone.
    listed = client.simulate_get("/v2/queues/q/messages", headers=headers,
                                 params={"echo": "true", "limit": 1}).json["messages"]
    client.simulate_delete(f"/v2/queues/q/messages/{listed[0]['id']}", headers=headers)
    assert post(client, headers, "q", 1).status_code == 201


def test_a_put_past_the_queue_quota_is_a_403(client, headers, project_b):
    for name in ("a", "b"):
        assert client.simulate_put(f"/v2/queues/{name}", headers=headers).status_code == 201
    resp = client.simulate_put("/v2/queues/c", headers=headers)
    assert_quota_error(resp, "The project already has 2 queues: max_queues_per_project "
                             "is 2.")
    assert client.simulate_head("/v2/queues/c", headers=headers).status_code == 404
    # A queue that exists is put again as ever; another project has a quota of its own.
    assert client.simulate_put("/v2/queues/a", headers=headers).status_code == 204
    assert client.simulate_put("/v2/queues/c", headers=project_b).status_code == 201
    client.simulate_delete("/v2/queues/a", headers=headers)
    assert client.simulate_put("/v2/queues/c", headers=headers).status_code == 201


def test_a_post_that_would_create_a_queue_past_the_quota_is_a_403(client, headers):
    assert post(client, headers, "a", 1).status_code == 201
    assert post(client, headers, "b", 1).status_code == 201
    assert_quota_error(post(client, headers, "c", 1),
                       "The project already has 2 queues: max_queues_per_project is 2.")
    assert client.simulate_head("/v2/queues/c", headers=headers).status_code == 404
    listed = client.simulate_get("/v2/queues", headers=headers,
                                 params={"with_count": "true"}).json
    assert [q["name"] for q in listed["queues"]] == ["a", "b"] and listed["count"] == 2
    assert post(client, headers, "a", 1).status_code == 201


@pytest.mark.parametrize("driver", HTTP_DRIVERS)
def test_zero_is_no_limit(driver, make_conf, headers):
    conf = make_conf()
    conf.set_override("max_queues_per_project", 0, group="quotas")
    conf.set_override("max_messages_per_queue", 0, group="quotas")
    client = http_client(driver, conf)
    for name in ("a", "b", "c"):
        assert client.simulate_put(f"/v2/queues/{name}", headers=headers).status_code == 201
    for _ in range(3):
        assert post(client, headers, "d", 20).status_code == 201
    assert total(client, headers, "d") == 60
