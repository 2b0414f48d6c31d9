"""The subscriptions API (Zaqar's shapes and status codes) and handing a claimed message
back with a delay, over HTTP on every driver; bad input is a 4xx JSON error."""

from __future__ import annotations

import pytest

from tests.apps import HTTP_DRIVERS, http_client

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(params=HTTP_DRIVERS)
def client(request, make_conf):
    """The app on each driver, its subscribers allowed on loopback (where nothing is
    pushed: the in-process app does not push). tests/test_webhook_targets.py checks
    where subscribers may be."""
    conf = make_conf()
    conf.set_override("allowed_webhook_networks", ["127.0.0.0/8"], group="notification")
    return http_client(request.param, conf)


def url(queue: str = "q", *rest: str) -> str:
    return "/".join(("/v2/queues", queue, "subscriptions", *rest))


def create(client, headers, queue: str = "q", **document) -> str:
    document.setdefault("subscriber", HOOK)
    response = client.simulate_post(url(queue), json=document, headers=headers)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == url(queue)
    return response.json["subscription_id"]


def test_create_get_update_delete(client, headers):
    sid = create(client, headers, ttl=600, options={"post_headers": {"X-A": "1"}})
    got = client.simulate_get(url("q", sid), headers=headers)
    assert got.status_code == 200
    assert got.json == {"id": sid, "source": "q", "subscriber": HOOK, "ttl": 600,
                        "age": got.json["age"], "options": {"post_headers": {"X-A": "1"}},
                        "confirmed": False}
    patched = client.simulate_patch(url("q", sid), json={"ttl": 900, "options": {}},
                                    headers=headers)
    assert patched.status_code == 204
    got = client.simulate_get(url("q", sid), headers=headers).json
    assert (got["ttl"], got["options"]) == (900, {})
    assert client.simulate_delete(url("q", sid), headers=headers).status_code == 204
    missing = client.simulate_get(url("q", sid), headers=headers)
    assert missing.status_code == 404 and missing.json["title"] == "Not found"
    assert client.simulate_delete(url("q", sid), headers=headers).status_code == 204


def test_a_subscription_defaults_its_ttl_and_creates_its_queue(client, headers):
    sid = create(client, headers, "fresh")
    assert client.simulate_get(url("fresh", sid), headers=headers).json["ttl"] == 3600
    assert client.simulate_head("/v2/queues/fresh", headers=headers).status_code == 204


def test_a_second_subscription_of_one_subscriber_answers_the_first(client, headers):
    # As Zaqar: 201 with the same id; the first one's ttl and options are kept.
    sid = create(client, headers)
    before = client.simulate_get(url("q", sid), headers=headers).json
    again = client.simulate_post(url(), json={"subscriber": HOOK, "ttl": 120,
                                              "options": {"post_data": "x"}},
                                 headers=headers)
    assert again.status_code == 201
    assert again.json == {"subscription_id": sid}
    assert again.headers["location"] == url()
    after = client.simulate_get(url("q", sid), headers=headers).json
    assert (after["ttl"], after["options"]) == (before["ttl"], before["options"])
    listed = client.simulate_get(url(), headers=headers).json["subscriptions"]
    assert [s["id"] for s in listed] == [sid]


def test_listing_pages_and_links_as_zaqar(client, headers):
    ids = sorted(create(client, headers, subscriber=f"http://127.0.0.{n + 2}:9/hook")
                 for n in range(3))
    page = client.simulate_get(url(), params={"limit": 2}, headers=headers).json
    assert [s["id"] for s in page["subscriptions"]] == ids[:2]
    [link] = page["links"]
    assert link["rel"] == "next"
    rest = client.simulate_get(link["href"].split("?")[0], headers=headers,
                               query_string=link["href"].split("?")[1]).json
    assert [s["id"] for s in rest["subscriptions"]] == ids[2:]
    other = client.simulate_get(url(), headers={**headers, "X-Project-ID": "other"}).json
    assert other == {"subscriptions": [], "links": []}


def test_purge_deletes_subscriptions_when_asked_and_without_a_body(client, headers):
    create(client, headers)
    purge = "/v2/queues/q/purge"
    client.simulate_post(purge, json={"resource_types": ["messages"]}, headers=headers)
    assert len(client.simulate_get(url(), headers=headers).json["subscriptions"]) == 1
    assert client.simulate_post(purge, headers=headers).status_code == 204
    assert client.simulate_get(url(), headers=headers).json["subscriptions"] == []


@pytest.mark.parametrize(("document", "named"), [
    ({}, "subscriber"),
    ({"ttl": 600}, "subscriber is required"),
    ({"subscriber": "ftp://a.example.com/"}, "http:// or https://"),
    ({"subscriber": "mailto:nobody"}, "mailto:"),
    ({"subscriber": "http://"}, "http:// or https://"),
    ({"subscriber": 42}, "subscriber must be a URL"),
    ({"subscriber": HOOK, "ttl": 59}, "ttl must be between 60"),
    ({"subscriber": HOOK, "ttl": "600"}, "ttl must be an integer"),
    ({"subscriber": HOOK, "options": []}, "options must be a JSON object"),
    ({"subscriber": HOOK, "options": {"post_data": {}}}, "post_data must be a string"),
    ({"subscriber": HOOK, "options": {"post_headers": {"X-A": 1}}}, "post_headers"),
    ({"subscriber": HOOK, "options": {"post_headers": {"X-A": "a\r\nB: c"}}},
     "post_headers"),
    ({"subscriber": HOOK, "options": {"_retry_policy": {"minimum_delay": "1"}}},
     "options._retry_policy.minimum_delay must be an integer"),
    ({"subscriber": HOOK, "confirmed": True}, "Unknown subscription field"),
])
def test_a_bad_subscription_is_a_400_naming_the_problem(client, headers, document, named):
    response = client.simulate_post(url(), json=document, headers=headers)
    assert response.status_code == 400, response.text
    assert named in response.json["description"]


def test_a_bad_update_or_an_absent_subscription(client, headers):
    sid = create(client, headers)
    bad = client.simulate_patch(url("q", sid), json={"ttl": 1}, headers=headers)
    assert bad.status_code == 400
    assert client.simulate_patch(url("q", sid), json={}, headers=headers).status_code == 400
    absent = client.simulate_patch(url("q", "0" * 32), json={"ttl": 600}, headers=headers)
    assert absent.status_code == 404
    other = "http://127.0.0.2:9/hook"
    create(client, headers, subscriber=other)
    taken = client.simulate_patch(url("q", sid), json={"subscriber": other}, headers=headers)
    assert taken.status_code == 409


def test_a_queue_retry_policy_is_checked_and_kept(client, headers):
    policy = {"minimum_delay": 2, "maximum_delay": 20, "retry_backoff_function": "geometric"}
    put = client.simulate_put("/v2/queues/r", json={"_retry_policy": policy},
                              headers=headers)
    assert put.status_code == 201
    assert client.simulate_get("/v2/queues/r", headers=headers).json["_retry_policy"] == policy
    bad = client.simulate_put("/v2/queues/s", json={"_retry_policy": {"maximum_delay": 2}},
                              headers=headers)
    assert bad.status_code == 400 and "_retry_policy.maximum_delay" in bad.json["description"]


def claim(client, headers, queue: str = "q", limit: int = 10) -> tuple[str, list[dict]]:
    response = client.simulate_post(f"/v2/queues/{queue}/claims", params={"limit": limit},
                                    json={"ttl": 300, "grace": 60}, headers=headers)
    assert response.status_code == 201, response.text
    return response.headers["location"].rsplit("/", 1)[1], response.json["messages"]


def test_a_claimed_message_handed_back_waits_its_delay(client, headers):
    client.simulate_post("/v2/queues/q/messages", headers=headers,
                         json={"messages": [{"body": 1}, {"body": 2}]})
    claim_id, [first, second] = claim(client, headers)
    handed = client.simulate_patch(f"/v2/queues/q/messages/{first['id']}",
                                   params={"claim_id": claim_id}, json={"delay": 60},
                                   headers=headers)
    assert handed.status_code == 200, handed.text
    assert handed.json["id"] == first["id"] and handed.json["delay_expires"] is not None
    assert "claim_id" not in handed.json
    held = client.simulate_get(f"/v2/queues/q/claims/{claim_id}", headers=headers).json
    assert [m["id"] for m in held["messages"]] == [second["id"]]
    stats = client.simulate_get("/v2/queues/q/stats", headers=headers).json["messages"]
    assert (stats["claimed"], stats["delayed"], stats["free"]) == (1, 1, 0)
    assert client.simulate_post("/v2/queues/q/claims", json={},
                                headers=headers).status_code == 204


@pytest.mark.parametrize(("document", "status"), [
    ({"delay": -1}, 400), ({"delay": 901}, 400), ({"delay": "5"}, 400),
    ({"delay": 5, "body": "x"}, 400), ({}, 400),
])
def test_a_bad_hand_back_is_a_400(client, headers, document, status):
    client.simulate_post("/v2/queues/q/messages", headers=headers,
                         json={"messages": [{"body": 1}]})
    claim_id, [message] = claim(client, headers)
    response = client.simulate_patch(f"/v2/queues/q/messages/{message['id']}",
                                     params={"claim_id": claim_id}, json=document,
                                     headers=headers)
    assert response.status_code == status, response.text


def test_a_hand_back_under_the_wrong_claim_is_refused(client, headers):
    client.simulate_post("/v2/queues/q/messages", headers=headers,
                         json={"messages": [{"body": 1}, {"body": 2}]})
    first_claim, [a] = claim(client, headers, limit=1)
    second_claim, [b] = claim(client, headers, limit=1)
    wrong = client.simulate_patch(f"/v2/queues/q/messages/{a['id']}",
                                  params={"claim_id": second_claim}, json={"delay": 5},
                                  headers=headers)
    assert wrong.status_code == 403
    gone = client.simulate_patch(f"/v2/queues/q/messages/{'0' * 32}",
                                 params={"claim_id": first_claim}, json={"delay": 5},
                                 headers=headers)
    assert gone.status_code == 404


@pytest.fixture(params=HTTP_DRIVERS)
def confirming(request, make_conf):
    """The app on each driver with ``[notification] require_confirmation`` on."""
    conf = make_conf()
    conf.set_override("allowed_webhook_networks", ["127.0.0.0/8"], group="notification")
    conf.set_override("require_confirmation", True, group="notification")
    return http_client(request.param, conf)


def confirm(client, headers, sid: str, document, queue: str = "q"):
    return client.simulate_put(url(queue, sid, "confirm"), json=document, headers=headers)


def test_a_subscription_awaits_confirmation_when_required(confirming, headers):
    sid = create(confirming, headers)
    assert confirming.simulate_get(url("q", sid), headers=headers).json["confirmed"] is False
    [listed] = confirming.simulate_get(url(), headers=headers).json["subscriptions"]
    assert listed["confirmed"] is False
    done = confirm(confirming, headers, sid, {"confirmed": True})
    assert done.status_code == 204 and done.headers["location"] == url("q", sid, "confirm")
    assert confirming.simulate_get(url("q", sid), headers=headers).json["confirmed"] is True
    assert confirm(confirming, headers, sid, {"confirmed": False}).status_code == 204
    assert confirming.simulate_get(url("q", sid), headers=headers).json["confirmed"] is False


def test_a_new_subscriber_is_unconfirmed_again(confirming, headers):
    sid = create(confirming, headers)
    confirm(confirming, headers, sid, {"confirmed": True})
    confirming.simulate_patch(url("q", sid), json={"ttl": 900}, headers=headers)
    assert confirming.simulate_get(url("q", sid), headers=headers).json["confirmed"] is True
    moved = confirming.simulate_patch(url("q", sid), json={"subscriber": HOOK + "2"},
                                      headers=headers)
    assert moved.status_code == 204
    assert confirming.simulate_get(url("q", sid), headers=headers).json["confirmed"] is False


def test_confirming_without_required_confirmation_is_stored_as_zaqar_does(client, headers):
    sid = create(client, headers)
    assert confirm(client, headers, sid, {"confirmed": True}).status_code == 204
    assert client.simulate_get(url("q", sid), headers=headers).json["confirmed"] is True
    # Confirmed, it is no longer made again: a repeated post is a conflict.
    again = client.simulate_post(url(), json={"subscriber": HOOK}, headers=headers)
    assert again.status_code == 409, again.text
    assert confirm(client, headers, sid, {"confirmed": False}).status_code == 204
    assert client.simulate_get(url("q", sid), headers=headers).json["confirmed"] is False


@pytest.mark.parametrize("body, named", [
    ({"confirmed": "yes"}, "boolean"), ({"confirmed": 1}, "boolean"),
    ({"confirmed": None}, "boolean"), ({}, "confirmed"), ([True], "confirmed"),
    ({"confirmed": True, "extra": 1}, "extra"), ("not json", "JSON"), ("", "confirmed"),
])
def test_a_bad_confirmation_is_a_400(client, headers, body, named):
    sid = create(client, headers)
    if isinstance(body, str):
        response = client.simulate_put(url("q", sid, "confirm"), body=body, headers=headers)
    else:
        response = confirm(client, headers, sid, body)
    assert response.status_code == 400, response.text
    assert response.json["title"] == ("Invalid request body" if body == "not json"
                                      else "Invalid API request")
    assert named in response.json["description"]
    assert client.simulate_get(url("q", sid), headers=headers).json["confirmed"] is False


def test_confirming_an_absent_subscription_is_a_404(client, headers):
    missing = confirm(client, headers, "0" * 32, {"confirmed": True})
    assert missing.status_code == 404 and missing.json["title"] == "Not found"
    sid = create(client, headers)
    other = confirm(client, {**headers, "X-Project-ID": "other"}, sid, {"confirmed": True})
    assert other.status_code == 404
    assert confirm(client, headers, sid, {"confirmed": True}, queue="bad$name").status_code == 400
