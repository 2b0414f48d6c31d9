"""Project isolation (issue 8): no request with one X-Project-ID can read, claim, delete,
or learn the existence of another project's queues or messages.

Project A fills a store: a plain queue with a live claim, a delayed queue, a queue with a
dead-letter policy and its dead-letter queue holding dead-lettered messages. Other
projects — one unrelated, ones whose ids are prefixes, suffixes or extensions of A's, A's
id percent-encoded (the form the Redis and Swift drivers put in key and container names),
and ids made of ``%``, ``*``, ``:`` and ``/`` (any X-Project-ID up to 256 characters is
accepted; a request without one is 400: tests/test_project_header.py) — then send every
request of the API on A's queue names, message ids and claim id.

"Indistinguishable from absent" is checked literally: each intruder's exact sequence of
requests is replayed against a second, empty store of the same driver, and every
response must be the same (status, body and headers, with only the values the server
generates — ids, ages, timestamps — masked). Afterwards A's queues, messages, claim and
stats must be exactly as they were.

Each driver runs it on a fresh store (tests/apps.py); Swift, the slow one, with fewer
intruders.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from falcon import testing

from tests.apps import HTTP_DRIVERS, http_client, sqlite_conf

PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"
OWNER = "acme/a:1"
# A's queues: a claim is live on "jobs"; "later" delays its messages; "work" sends a
# message to "dead" on its second claim.
JOBS, LATER, WORK, DEAD = "jobs", "later", "work", "dead"
A_QUEUES = (JOBS, LATER, WORK, DEAD)
ENCODED_OWNER = "acme%2Fa%3A1"
INTRUDERS = (
    "acme/b:1",        # unrelated
    "acme/a",          # a prefix of A's id
    "acme",            # a shorter prefix
    "acme/a:10",       # A's id is a prefix of it
    "acme/a:1/",
    "a:1",             # a suffix of A's id
    "xacme/a:1",       # A's id is a suffix of it
    ENCODED_OWNER,     # A's id as the Redis and Swift drivers write it into names
    "ACME/A:1",
    "%",
    "*",
    "acme/a:1%00",
)


class Plan(NamedTuple):
    """How much of the attack one driver gets: the suite's time is bounded (~30 s)."""

    intruders: tuple[str, ...]
    queues: tuple[str, ...] = A_QUEUES
    again: bool = True  # probe again once the intruder has queues of A's names


# SQLite and MongoDB compare the project as a whole column or field, so what matters
# there is the requests; Redis and Swift write the project into key and container names
# (percent-encoded), so the intruders most likely to collide with A go there. MongoDB on
# mongomock is the cheapest, so it takes every intruder; Swift, at several backend
# requests per API request, takes one intruder and the two queues holding a claim and
# dead-lettered messages.
PLANS = {
    "sqlite": Plan(("acme/b:1", "%")),
    "redis": Plan((ENCODED_OWNER,)),
    "mongodb": Plan(INTRUDERS),
    "swift": Plan((ENCODED_OWNER,), queues=(JOBS, DEAD), again=False),
}
# Values the server makes up per request or per store: compared by presence only.
GENERATED_KEYS = {"id", "href", "age", "claim_id", "created", "moved_at", "delay_expires"}
GENERATED_HEADERS = ("location", "content-location")


def headers_of(project: str, client_id: str) -> dict[str, str]:
    return {"Client-ID": client_id, "X-Project-ID": project}


class Recorder:
    """Sends each request to the store under test and to an empty one; records both."""

    def __init__(self, store: testing.TestClient, empty: testing.TestClient,
                 headers: dict[str, str]) -> None:
        self.store = store
        self.empty = empty
        self.headers = headers
        self.pairs: list[tuple[str, Any, Any]] = []

    def __call__(self, method: str, path: str, **kwargs: Any
                 ) -> tuple[testing.Result, testing.Result]:
        """Send the same request to both stores: ``(store's response, empty's)``."""
        return self.each(method, (path, path), **kwargs)

    def each(self, method: str, paths: tuple[str, str], **kwargs: Any
             ) -> tuple[testing.Result, testing.Result]:
        """A request to each store on a path of its own (one naming a claim it made)."""
        kwargs["headers"] = {**self.headers, **kwargs.get("headers", {})}
        got = self.store.simulate_request(method, paths[0], **kwargs)
        expected = self.empty.simulate_request(method, paths[1], **kwargs)
        what = f"{method} {paths[0]} {kwargs.get('params') or ''}"
        self.pairs.append((what, observed(got), observed(expected)))
        return got, expected


def observed(resp: testing.Result) -> tuple[int, Any, dict[str, bool]]:
    """What a client can tell from a response, less the values the server generates."""
    try:
        body: Any = masked(resp.json) if resp.text else ""
    except json.JSONDecodeError:
        body = resp.text
    if resp.headers.get("content-type", "").startswith("text/plain"):
        body = gauges(resp.text)
    return resp.status_code, body, {h: h in resp.headers for h in GENERATED_HEADERS}


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "*" if k in GENERATED_KEYS else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(v, str) and v.startswith("/v2/") for v in value):
            return ["*"] * len(value)  # a post's resources: hrefs of new ids
        return [masked(v) for v in value]
    return value


def gauges(text: str) -> list[str]:
    """The per-queue gauge samples of a /metrics scrape (counters are store-wide)."""
    return [line for line in text.splitlines() if line.startswith("delayq_queue_")]


# Project A


class Owner:
    """Project A's queues, messages and claim, and what A can see of them."""

    def __init__(self, client: testing.TestClient) -> None:
        self.client = client
        self.headers = headers_of(OWNER, str(uuid.uuid4()))
        self.ids: dict[str, list[str]] = {}
        self.claim_id = ""

    def fill(self) -> None:
        put = self.client.simulate_put
        assert put(f"/v2/queues/{JOBS}", headers=self.headers,
                   json={"owner": "a"}).status_code == 201
        assert put(f"/v2/queues/{LATER}", headers=self.headers,
                   json={"_default_message_delay": 600}).status_code == 201
        assert put(f"/v2/queues/{DEAD}", headers=self.headers).status_code == 201
        assert put(f"/v2/queues/{WORK}", headers=self.headers,
                   json={"_max_claim_count": 1,
                         "_dead_letter_queue": DEAD}).status_code == 201
        self.ids[JOBS] = self.post(JOBS, "j1", "j2", "j3")
        self.ids[LATER] = self.post(LATER, "l1", "l2")
        dead = self.post(WORK, "w1", "w2")
        claim_id, _ = self.claim(WORK, limit=10)
        self.release(WORK, claim_id)
        assert self.claim(WORK) is None  # the second claim moved both to DEAD
        self.ids[DEAD] = dead
        self.ids[WORK] = self.post(WORK, "w3")
        self.claim_id, claimed = self.claim(JOBS, limit=1)
        assert [m["id"] for m in claimed] == self.ids[JOBS][:1]

    def post(self, queue: str, *bodies: str) -> list[str]:
        resp = self.client.simulate_post(f"/v2/queues/{queue}/messages", headers=self.headers,
                                         json={"messages": [{"body": b} for b in bodies]})
        assert resp.status_code == 201, resp.text
        return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]

    def claim(self, queue: str, limit: int = 1) -> tuple[str, list[dict]] | None:
        resp = self.client.simulate_post(f"/v2/queues/{queue}/claims", headers=self.headers,
                                         params={"limit": limit}, json={"ttl": 300})
        if resp.status_code == 204:
            return None
        assert resp.status_code == 201, resp.text
        return resp.headers["location"].rsplit("/", 1)[1], resp.json["messages"]

    def release(self, queue: str, claim_id: str) -> None:
        resp = self.client.simulate_delete(f"/v2/queues/{queue}/claims/{claim_id}",
                                           headers=self.headers)
        assert resp.status_code == 204

    def state(self) -> dict[str, Any]:
        """Everything A can read, ages left out (they grow)."""
        get = self.client.simulate_get
        seen: dict[str, Any] = {}
        for queue in A_QUEUES:
            seen[queue] = [
                get(f"/v2/queues/{queue}", headers=self.headers).json,
                get(f"/v2/queues/{queue}/stats", headers=self.headers).json,
                get(f"/v2/queues/{queue}/messages", headers=self.headers,
                    params={"include_claimed": "true", "include_delayed": "true",
                            "echo": "true", "details": "true", "limit": 20}).json]
        seen["claim"] = get(f"/v2/queues/{JOBS}/claims/{self.claim_id}",
                            headers=self.headers).json
        seen["queues"] = get("/v2/queues", headers=self.headers,
                             params={"detailed": "true", "with_count": "true"}).json
        seen["gauges"] = gauges(get("/metrics", params={"project": OWNER}).text)
        return without_ages(seen)


def without_ages(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_ages(v) for k, v in value.items() if k != "age"}
    if isinstance(value, list):
        return [without_ages(v) for v in value]
    return value


# The intruder's requests


def probe(send: Recorder, owner: Owner, queues: tuple[str, ...]) -> None:
    """Every request of the API on A's *queues*, message ids and claim id."""
    every_id = [i for ids in owner.ids.values() for i in ids]
    send("GET", "/v2/queues", params={"detailed": "true", "with_count": "true"})
    for queue in queues:
        base = f"/v2/queues/{queue}"
        send("GET", base)
        send("HEAD", base)
        send("GET", f"{base}/stats")
        send("PATCH", base, headers={"Content-Type": PATCH_TYPE},
             body=json.dumps([{"op": "add", "path": "/metadata/owner", "value": "b"}]))
        send("GET", f"{base}/messages", params={"include_claimed": "true",
                                                 "include_delayed": "true", "echo": "true"})
        send("GET", f"{base}/messages", params={"ids": ",".join(every_id)})
        path = f"{base}/messages/{owner.ids[queue][0]}"  # JOBS's first is the claimed one
        send("GET", path, params={"details": "true"})
        send("PATCH", path, json={"body": "b's", "delay": 0})
        send("DELETE", path, params={"claim_id": owner.claim_id})
        send("DELETE", path)
        send("DELETE", f"{base}/messages", params={"ids": ",".join(every_id)})
        claim = f"{base}/claims/{owner.claim_id}"
        send("GET", claim)
        send("PATCH", claim, json={"ttl": 100, "grace": 0})
        send("DELETE", claim)
        send("POST", f"{base}/claims", params={"limit": 10}, json={"ttl": 60})
        send("DELETE", f"{base}/messages", params={"pop": 5})
        send("POST", f"{base}/redrive", json={"limit": 10})
        send("POST", f"{base}/redrive", json={"destination": JOBS})
        send("POST", f"{base}/purge", json={"resource_types": ["messages"]})
        send("DELETE", base)
    send("GET", "/v2/queues", params={"detailed": "true", "with_count": "true"})


def own_queues(send: Recorder, owner: Owner) -> None:
    """The intruder makes queues named like A's: a dead-letter policy naming A's
    dead-letter queue must move into the intruder's own, and a redrive from it must go
    back to the intruder's own queue."""
    send("PUT", f"/v2/queues/{DEAD}")
    send("PUT", f"/v2/queues/{WORK}",
         json={"_max_claim_count": 1, "_dead_letter_queue": DEAD})
    send("POST", f"/v2/queues/{JOBS}/messages", json={"messages": [{"body": "b1"}]})
    send("POST", f"/v2/queues/{WORK}/messages", json={"messages": [{"body": "b2"}]})
    claimed = send("POST", f"/v2/queues/{WORK}/claims", json={"ttl": 60})
    assert [resp.status_code for resp in claimed] == [201, 201], claimed[0].text
    send.each("DELETE", tuple(resp.headers["location"] for resp in claimed))
    got, _ = send("POST", f"/v2/queues/{WORK}/claims")
    assert got.status_code == 204  # the claim moved the message to the intruder's DEAD
    send("GET", f"/v2/queues/{DEAD}/stats")
    send("GET", f"/v2/queues/{DEAD}/messages", params={"details": "true", "echo": "true"})
    send("POST", f"/v2/queues/{DEAD}/redrive")
    send("GET", f"/v2/queues/{WORK}/messages", params={"echo": "true"})
    send("POST", f"/v2/queues/{JOBS}/claims", json={"ttl": 60})
    send("GET", "/metrics", params={"project": send.headers["X-Project-ID"]})


# The test


@pytest.fixture(params=HTTP_DRIVERS)
def stores(request, tmp_path: Path) -> Iterator[tuple[str, testing.TestClient,
                                                        testing.TestClient]]:
    """The driver's name, a fresh store and a second, empty store of the same driver."""
    (tmp_path / "empty").mkdir()
    yield (request.param, http_client(request.param, sqlite_conf(tmp_path)),
           http_client(request.param, sqlite_conf(tmp_path / "empty")))


def test_no_project_can_reach_another_projects_queues(stores):
    driver, store, empty = stores
    owner = Owner(store)
    owner.fill()
    before = owner.state()
    assert before["queues"]["count"] == 4
    assert [len(before[q][2]["messages"]) for q in A_QUEUES] == [3, 2, 1, 2]
    plan = PLANS[driver]
    for project in plan.intruders:
        send = Recorder(store, empty, headers_of(project, str(uuid.uuid4())))
        probe(send, owner, plan.queues)
        own_queues(send, owner)
        if plan.again:  # A's ids and claim id on the intruder's queues of A's names
            probe(send, owner, plan.queues)
        for what, got, expected in send.pairs:
            assert got == expected, f"project {project!r}: {what}"
    assert owner.state() == before
