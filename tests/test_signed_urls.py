"""Pre-signed URLs without Keystone: ``POST /v2/queues/{name}/share`` and signed requests,
in process on SQLite, and signatures compared with Zaqar's own ``create_signed_url``."""

from __future__ import annotations

import random
import string
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from falcon import testing
from zaqar.common import urls as zaqar_urls

from delayq import signed_urls
from delayq.api.app import create_app
from tests.apps import sqlite_conf

KEY = "a-test-key"


@pytest.fixture
def client(tmp_path) -> testing.TestClient:
    conf = sqlite_conf(tmp_path)
    conf.set_override("secret_key", KEY, group="signed_url")
    return testing.TestClient(create_app(conf))


def project_headers(project: str = "p1") -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}


def signed_headers(signed: dict, **changes: str) -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": signed["project"],
            "URL-Signature": signed["signature"], "URL-Expires": signed["expires"],
            "URL-Methods": ",".join(signed["methods"]),
            "URL-Paths": ",".join(signed["paths"]), **changes}


def later(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%S")


def test_share_answers_zaqars_document_with_a_day_and_get_by_default(client):
    response = client.simulate_post("/v2/queues/q/share", headers=project_headers())
    assert response.status_code == 200, response.text
    signed = response.json
    assert set(signed) == {"paths", "methods", "project", "expires", "signature"}
    assert signed["paths"] == ["/v2/queues/q/messages"]
    assert signed["methods"] == ["GET"]
    assert signed["project"] == "p1"
    expires = datetime.fromisoformat(signed["expires"]).replace(tzinfo=UTC)
    assert timedelta(hours=23, minutes=59) < expires - datetime.now(UTC) <= timedelta(days=1)
    assert signed == {**signed, **zaqar_urls.create_signed_url(
        KEY, signed["paths"], project="p1", methods=["GET"], expires=signed["expires"])}


def test_a_signed_request_acts_in_the_signed_project_only(client):
    signed = client.simulate_post("/v2/queues/q/share", headers=project_headers("p1"),
                                  json={"methods": ["GET", "POST"],
                                        "paths": ["messages", "claims"]}).json
    posted = client.simulate_post("/v2/queues/q/messages", headers=signed_headers(signed),
                                  json={"messages": [{"body": "signed"}]})
    assert posted.status_code == 201, posted.text
    claimed = client.simulate_post("/v2/queues/q/claims", headers=signed_headers(signed),
                                   json={"ttl": 60})
    assert claimed.status_code == 201, claimed.text
    assert [m["body"] for m in claimed.json["messages"]] == ["signed"]
    # A claim's own path is below the signed claims path; PATCH was not signed.
    claim = claimed.headers["location"]
    assert client.simulate_get(claim, headers=signed_headers(signed)).status_code == 200
    assert client.simulate_patch(claim, headers=signed_headers(signed),
                                 json={"ttl": 60}).status_code == 404
    stats = client.simulate_get("/v2/queues/q/stats", headers=project_headers("p1"))
    assert stats.json["messages"]["claimed"] == 1
    other = client.simulate_get("/v2/queues/q/stats", headers=project_headers("p2"))
    assert other.json["messages"]["total"] == 0


@pytest.mark.parametrize("change", [
    {"URL-Signature": "0" * 64},
    {"URL-Methods": "GET,POST"},
    {"URL-Paths": "/v2/queues/q/messages,/v2/queues/q/claims"},
    {"URL-Paths": "/v2/queues/other/messages"},
    {"X-Project-ID": "p2"},
    {"URL-Expires": later(days=2)},
    {"URL-Expires": "1893456000"},
    {"URL-Expires": "not a date"},
])
def test_a_changed_signed_value_is_refused_with_404(client, change):
    signed = client.simulate_post("/v2/queues/q/share", headers=project_headers()).json
    assert client.simulate_get("/v2/queues/q/messages",
                               headers=signed_headers(signed)).status_code == 200
    response = client.simulate_get("/v2/queues/q/messages",
                                   headers=signed_headers(signed, **change))
    assert response.status_code == 404, response.text
    assert set(response.json) == {"title", "description"}


def test_a_path_that_only_starts_like_the_signed_one_is_refused(client):
    signed = client.simulate_post("/v2/queues/q/share", headers=project_headers()).json
    response = client.simulate_get("/v2/queues/q/messages-archive",
                                   headers=signed_headers(signed))
    assert response.status_code == 404


@pytest.mark.parametrize("body, wanted", [
    ({"paths": ["messages", "stats"]}, "paths"),
    ({"paths": "messages"}, "paths"),
    ({"methods": ["FETCH"]}, "methods"),
    ({"methods": "GET"}, "methods"),
    ({"expires": 1893456000}, "expires"),
    ({"expires": "1893456000"}, "number"),
    ({"expires": "2001-01-01T00:00:00"}, "past"),
    ({"expires": "tomorrow"}, "ISO 8601"),
    ({"project_id": "other"}, "Unknown keys"),
    ([], "JSON object"),
])
def test_a_bad_share_request_is_400(client, body, wanted):
    response = client.simulate_post("/v2/queues/q/share", headers=project_headers(),
                                    json=body)
    assert response.status_code == 400, response.text
    assert wanted in response.json["description"]


def test_expires_past_seven_days_is_400_by_default(client):
    """``[signed_url] max_expires`` defaults to 604800 seconds."""
    within = client.simulate_post("/v2/queues/q/share", headers=project_headers(),
                                  json={"expires": later(days=7, seconds=-5)})
    assert within.status_code == 200, within.text
    for expires in (later(days=7, seconds=5), "9999-12-31T23:59:59"):
        response = client.simulate_post("/v2/queues/q/share", headers=project_headers(),
                                        json={"expires": expires})
        assert response.status_code == 400, response.text
        assert response.json["title"] == "Invalid API request"
        assert "604800 seconds ([signed_url] max_expires)" in response.json["description"]


@pytest.fixture
def short_client(tmp_path) -> testing.TestClient:
    """Signed URLs that live at most an hour."""
    conf = sqlite_conf(tmp_path)
    conf.set_override("secret_key", KEY, group="signed_url")
    conf.set_override("max_expires", 3600, group="signed_url")
    return testing.TestClient(create_app(conf))


def test_a_share_lives_no_longer_than_max_expires(short_client):
    response = short_client.simulate_post("/v2/queues/q/share", headers=project_headers(),
                                          json={"expires": later(hours=2)})
    assert response.status_code == 400, response.text
    assert "at most 3600 seconds" in response.json["description"]
    # Without expires a share lives a day, or max_expires when that is shorter.
    signed = short_client.simulate_post("/v2/queues/q/share",
                                        headers=project_headers()).json
    expires = datetime.fromisoformat(signed["expires"]).replace(tzinfo=UTC)
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert short_client.simulate_get("/v2/queues/q/messages",
                                     headers=signed_headers(signed)).status_code == 200


def test_a_signed_url_that_expires_past_max_expires_is_refused_when_used(short_client):
    """A URL signed with the same key for longer (by Zaqar, or before the option was
    lowered) is refused: the bound holds when a URL is used, too."""
    def zaqar_signed(**delta: float) -> dict:
        return zaqar_urls.create_signed_url(KEY, ["/v2/queues/q/messages"], project="p1",
                                            methods=["GET"], expires=later(**delta))

    within = short_client.simulate_get("/v2/queues/q/messages",
                                       headers=signed_headers(zaqar_signed(minutes=50)))
    assert within.status_code == 200, within.text
    beyond = short_client.simulate_get("/v2/queues/q/messages",
                                       headers=signed_headers(zaqar_signed(days=30)))
    assert beyond.status_code == 404, beyond.text
    assert "max_expires" in beyond.json["description"]


def test_without_authentication_a_share_may_grant_any_method(client):
    """No policy, no identity: whoever may reach the port may do anything, and share it."""
    response = client.simulate_post(
        "/v2/queues/q/share", headers=project_headers(),
        json={"paths": ["messages", "subscriptions", "claims"],
              "methods": ["GET", "POST", "PATCH", "DELETE"]})
    assert response.status_code == 200, response.text


def test_without_a_secret_key_share_is_400_and_nothing_is_signed(tmp_path):
    client = testing.TestClient(create_app(sqlite_conf(tmp_path)))
    response = client.simulate_post("/v2/queues/q/share", headers=project_headers())
    assert response.status_code == 400
    assert "secret_key" in response.json["description"]


def random_text(rng: random.Random, alphabet: str, size: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(size))


def test_signatures_agree_with_zaqars_create_signed_url_both_ways():
    rng = random.Random(7)
    for _ in range(200):
        key = random_text(rng, string.printable, rng.randint(1, 40))
        queue = random_text(rng, string.ascii_letters + "_-", rng.randint(1, 20))
        paths = [f"/v2/queues/{queue}/{p}" for p in
                 rng.sample(signed_urls.SHAREABLE_PATHS, rng.randint(1, 3))]
        methods = rng.sample(["GET", "POST", "PATCH", "DELETE", "PUT"], rng.randint(1, 5))
        project = uuid.uuid4().hex
        expires = later(seconds=rng.randint(60, 10 ** 7))
        ours = signed_urls.sign(key, paths, project, methods, expires)
        theirs = zaqar_urls.create_signed_url(key, paths, project=project, methods=methods,
                                              expires=expires)
        assert ours.as_document() == theirs
        method = rng.choice(methods)
        assert signed_urls.allows(key, method=method, path=paths[0], project=project,
                                  signature=theirs["signature"], expires=theirs["expires"],
                                  methods=",".join(theirs["methods"]),
                                  paths=",".join(theirs["paths"]))
