"""``GET /metrics`` through the in-process client, on every driver: the counters move
with posts, claims, pops, deletes and dead-letter moves; the latency histogram labels
requests by route template; the per-queue gauges match the queue's state."""

from __future__ import annotations

import time
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families


def scrape(client, *projects: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape: ``{(name, sorted labels): value}``."""
    query = "&".join(f"project={p}" for p in projects)
    result = client.simulate_get("/metrics", query_string=query)
    assert result.status_code == 200, result.text
    assert result.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(result.text)
            for s in family.samples}


def counter(samples, name: str) -> float:
    return samples[(f"delayq_messages_{name}_total", ())]


COUNTERS = ("posted", "claimed", "deleted", "dead_lettered", "expired")


def counters(client) -> dict[str, float]:
    samples = scrape(client)
    return {name: counter(samples, name) for name in COUNTERS}


def post(client, headers, queue: str, count: int, **message) -> list[str]:
    result = client.simulate_post(f"/v2/queues/{queue}/messages", headers=headers,
                                  json={"messages": [{"body": i, **message}
                                                     for i in range(count)]})
    assert result.status_code == 201, result.text
    return [href.rsplit("/", 1)[-1] for href in result.json["resources"]]


def claim(client, headers, queue: str, limit: int) -> tuple[str, list[str]]:
    result = client.simulate_post(f"/v2/queues/{queue}/claims", headers=headers,
                                  params={"limit": limit}, json={"ttl": 60, "grace": 60})
    assert result.status_code == 201, result.text
    claim_id = result.json["messages"][0]["href"].rsplit("claim_id=", 1)[-1]
    return claim_id, [m["id"] for m in result.json["messages"]]


def test_counters_follow_posts_claims_pops_and_deletes(client, headers):
    queue = f"q-{uuid.uuid4().hex[:8]}"
    before = counters(client)
    ids = post(client, headers, queue, 5)
    claim_id, claimed = claim(client, headers, queue, 2)
    result = client.simulate_delete(f"/v2/queues/{queue}/messages/{claimed[0]}",
                                    headers=headers, params={"claim_id": claim_id})
    assert result.status_code == 204
    free = [i for i in ids if i not in claimed]
    result = client.simulate_delete(f"/v2/queues/{queue}/messages", headers=headers,
                                    params={"ids": ",".join([free[0], "0" * 24])})
    assert result.status_code == 204
    result = client.simulate_delete(f"/v2/queues/{queue}/messages", headers=headers,
                                    params={"pop": 1})
    assert result.status_code == 200 and len(result.json["messages"]) == 1
    after = counters(client)
    # Deleting a message that does not exist deletes nothing and counts nothing.
    assert {k: after[k] - before[k] for k in COUNTERS} == {
        "posted": 5, "claimed": 3, "deleted": 3, "dead_lettered": 0, "expired": 0}


def test_dead_letter_moves_are_counted(client, headers):
    queue, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq-{uuid.uuid4().hex[:8]}"
    result = client.simulate_put(f"/v2/queues/{queue}", headers=headers,
                                 json={"_max_claim_count": 1, "_dead_letter_queue": dlq})
    assert result.status_code == 201
    post(client, headers, queue, 2)
    before = counters(client)
    claim_id, _ = claim(client, headers, queue, 2)
    assert client.simulate_delete(f"/v2/queues/{queue}/claims/{claim_id}",
                                  headers=headers).status_code == 204
    # Both were claimed once already: this claim moves them instead of taking them.
    result = client.simulate_post(f"/v2/queues/{queue}/claims", headers=headers,
                                  json={"ttl": 60, "grace": 60})
    assert result.status_code == 204
    after = counters(client)
    assert after["dead_lettered"] - before["dead_lettered"] == 2
    assert after["claimed"] - before["claimed"] == 2


def test_request_latency_is_labelled_by_route_template(client, headers):
    queue = f"q-{uuid.uuid4().hex[:8]}"
    labels = (("method", "POST"), ("route", "/v2/queues/{name}/messages"),
              ("status", "2xx"))
    key = ("delayq_request_duration_seconds_count", labels)
    before = scrape(client).get(key, 0)
    post(client, headers, queue, 1)
    post(client, headers, queue, 1)
    client.simulate_get("/v2/queues/nope/messages/x", headers={})  # a 400, another series
    client.simulate_get("/v2/nowhere/at/all", headers=headers)  # no route: a 404
    samples = scrape(client)
    assert samples[key] - before == 2
    assert samples[("delayq_request_duration_seconds_count",
                    (("method", "GET"), ("route", "/v2/queues/{name}/messages/{message_id}"),
                     ("status", "4xx")))] >= 1
    assert samples[("delayq_request_duration_seconds_count",
                    (("method", "GET"), ("route", "unmatched"), ("status", "4xx")))] >= 1
    # Neither paths nor /metrics itself make series.
    assert not [k for k in samples if ("route", "/metrics") in k[1] or queue in str(k)]


def test_queue_gauges_free_claimed_delayed(client, headers):
    project = headers["X-Project-ID"]
    # Dotted names: each its own series, named as the queue is.
    delayed_queue = f"d.{uuid.uuid4().hex[:8]}"
    queue = f"{delayed_queue}.q"
    client.simulate_put(f"/v2/queues/{delayed_queue}", headers=headers,
                        json={"_default_message_delay": 600})
    post(client, headers, delayed_queue, 3)
    post(client, headers, queue, 4)
    claim(client, headers, queue, 1)

    samples = scrape(client, project)
    def gauge(kind: str, name: str) -> float:
        return samples[(f"delayq_queue_{kind}_messages",
                        (("project", project), ("queue", name)))]
    assert [gauge(k, delayed_queue) for k in ("free", "claimed", "delayed")] == [0, 0, 3]
    assert [gauge(k, queue) for k in ("free", "claimed", "delayed")] == [3, 1, 0]
    # No project asked for: no gauges.
    assert not [k for k in scrape(client) if k[0].startswith("delayq_queue_")]


def test_delayed_gauge_turns_free_when_due(client, headers):
    project = headers["X-Project-ID"]
    queue = f"d-{uuid.uuid4().hex[:8]}"
    client.simulate_put(f"/v2/queues/{queue}", headers=headers,
                        json={"_default_message_delay": 1})
    labels = (("project", project), ("queue", queue))
    # Before the post: the messages are due a second after the post began at the
    # earliest, so a scrape done within that second must see them delayed. (Timed from
    # after the post, a slow post on a busy machine let them come due mid-scrape.)
    started = time.monotonic()
    post(client, headers, queue, 2, delay=1)
    samples = scrape(client, project)
    if time.monotonic() - started < 1:
        assert samples[("delayq_queue_delayed_messages", labels)] == 2
    time.sleep(1.2)
    samples = scrape(client, project)
    assert samples[("delayq_queue_delayed_messages", labels)] == 0
    assert samples[("delayq_queue_free_messages", labels)] == 2


@pytest.mark.parametrize("query", ["project=" + "p" * 300])
def test_bad_project_parameter_is_400(client, query):
    assert client.simulate_get("/metrics", query_string=query).status_code == 400
