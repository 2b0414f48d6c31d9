"""Without authentication a request to a project's route names its project: without
``X-Project-ID``, or with an empty one, it is 400 with Zaqar's error, and acts in no
project. Routes outside projects take requests without it. In process, on SQLite."""

from __future__ import annotations

import uuid

import falcon.inspect
import pytest
from falcon import testing

from delayq.api import policy
from delayq.api.app import create_app
from delayq.storage.registry import load_driver
from delayq.synchronous import Synchronous
from tests.apps import sqlite_conf

MISSING = {"title": "Project-Id Missing",
           "description": "The header X-PROJECT-ID was missing"}
EMPTY = {"title": "Empty project header not allowed",
         "description": "X-PROJECT-ID cannot be an empty string. Specify the right header "
                        "X-PROJECT-ID and retry."}
# A value for each route parameter: the request must be refused before any is looked up.
PARAMETERS = {"name": "q", "message_id": "0123456789abcdef01234567",
              "claim_id": "0123456789abcdef01234567",
              "subscription_id": "0123456789abcdef01234567"}
BODIES = {"POST": {"messages": [{"body": 1}]}, "PUT": {}, "PATCH": {}}


def project_routes(app: object) -> list[tuple[str, str]]:
    """Every (method, path) the app serves below /v2/queues and /v2/topics, parameters
    filled in."""
    return sorted((method.method, route.path.format(**PARAMETERS))
                  for route in falcon.inspect.inspect_routes(app)
                  if route.path.startswith((policy.QUEUES, policy.TOPICS))
                  for method in route.methods if not method.internal)


@pytest.fixture(params=["noauth", "noauth with signed URLs"])
def store(request, tmp_path):
    """A plain client of the app (no default headers) and the driver it serves from;
    the second app has the authentication middleware, for its signed URLs."""
    conf = sqlite_conf(tmp_path)
    if request.param == "noauth with signed URLs":
        conf.set_override("secret_key", "a-key", group="signed_url")
    driver = Synchronous(load_driver(conf))
    yield testing.TestClient(create_app(conf, driver=driver.target)), driver
    driver.close()


@pytest.mark.parametrize("sent, error", [({}, MISSING), ({"X-Project-ID": ""}, EMPTY)],
                         ids=["absent", "empty"])
def test_every_project_route_without_a_project_is_400_and_does_nothing(store, sent, error):
    client, driver = store
    routes = project_routes(client.app)
    assert len(routes) == len([r for r in policy.RULES.values()
                               if r not in ("ping:get", "health:get", "metrics:get")])
    for method, path in routes:
        response = client.simulate_request(
            method, path, json=BODIES.get(method),
            headers={"Client-ID": str(uuid.uuid4()), **sent})
        assert response.status_code == 400, (method, path, response.text)
        assert response.headers["content-type"] == "application/json"
        assert response.json == (None if method == "HEAD" else error), (method, path)
    # Nothing landed in the project nobody named.
    assert driver.queues.count("") == 0
    assert driver.queues.page("", None, 10) == []


def test_the_same_requests_with_a_project_act_in_it(store):
    client, driver = store
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "p1"}
    assert client.simulate_post("/v2/queues/q/messages", headers=headers,
                                json=BODIES["POST"]).status_code == 201
    assert driver.queues.count("p1") == 1
    assert driver.queues.count("") == 0


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/", 300), ("GET", "/v2", 200), ("GET", "/v2/ping", 204),
    ("HEAD", "/v2/ping", 204), ("GET", "/v2/health", 200), ("HEAD", "/v2/health", 204),
    ("GET", "/metrics", 200)])
def test_routes_outside_projects_need_no_project(store, method, path, status):
    client, _ = store
    response = client.simulate_request(method, path)
    assert response.status_code == status, response.text


def test_a_signed_request_without_a_project_is_400(tmp_path):
    conf = sqlite_conf(tmp_path)
    conf.set_override("secret_key", "a-key", group="signed_url")
    client = testing.TestClient(create_app(conf))
    signed = client.simulate_post("/v2/queues/q/share",
                                  headers={"X-Project-ID": "p1"}).json
    sent = {"Client-ID": str(uuid.uuid4()), "URL-Signature": signed["signature"],
            "URL-Expires": signed["expires"], "URL-Methods": ",".join(signed["methods"]),
            "URL-Paths": ",".join(signed["paths"])}
    response = client.simulate_get("/v2/queues/q/messages", headers=sent)
    assert response.status_code == 400, response.text
    assert response.json == MISSING
    response = client.simulate_get("/v2/queues/q/messages",
                                   headers={**sent, "X-Project-ID": "p1"})
    assert response.status_code == 200, response.text
