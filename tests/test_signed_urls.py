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
