"""The audits on a scenario whose every figure is known in advance (issue 6, item 5).

The scenario is played through the HTTP API (the in-process app) on a fake clock, on
SQLite and on a real Redis, so every delay, lateness, expiry and time in a dead-letter
queue is exact. ``delayq.spark_jobs.cli.main`` then audits the store in this process, on
the test run's one local Spark session, and every figure of audit.json must equal the
value worked out below by hand (percentiles by tests/audit_helpers.dist, the contract's
linear interpolation written out in Python, never Spark).

The timeline, in seconds after T0 (the fake clock's start). Project A = "audit-a";
project B's name holds HTML specials, for the report. Claims are ttl 60, grace 60, so a
claim made at s lapses at s + 60; messages live 3600 s unless said otherwise.

  0      queues: d10 d20 d30 d60 (delays 10/20/30/60 s), plain (no delay), work (2 claims,
         then "dlq"), jobs (no policy yet), retry (1 claim, then "parking"), parking
         (2 claims, then "graveyard", created by the move), misc (1 claim, then "dlq"),
         dlq; B: d10 (delay 10)
         post d10: 4 | d20: 2 | d30: 3 | d60: e1 (queue delay 60), e2 (delay 120, ttl 60:
         expires at 60, before it is due), e3 (delay 300), e4 (delay 0: not delayed) |
         plain: 3 (one asks for a delay 50, which a normal queue ignores) | work: w1-w4 |
         jobs: ja, jb | retry: r1, r2 | misc: m1 | B d10: 2
  1      claim work (w1-w4, count 1), jobs (ja jb, 1), retry (r1 r2, 1), misc (m1, 1),
         plain (one message)
  2      delete w4 under its claim (never dead-lettered); delete the plain one likewise
  3      pop one plain message
  5      claim d60: e4 only (the others are not due)
  10     claim one of d10 (lateness 0)          11    claim one of B d10 (lateness 1)
  12.5   claim one of d10 (lateness 2.5)        15    claim one of d10 (lateness 5)
  20     pop the last of d10 (lateness 10)      21    claim one of d20 (lateness 1)
  30     claim two of d30 (lateness 0, 0)       40    claim the other d20 (lateness 20)
  61     claim work (w1-w3, count 2); jobs (ja jb, count 2); retry: r1 r2 move to parking
         (count 1); e2 has expired at 60
  61.25  claim d60: e1 only (lateness 1.25)
  62     post jobs jc, jd; claim them (count 1); claim parking (r1 r2, count 2)
  63     delete r2 from parking under its claim (2 s in parking)
  70     claim misc: m1 moves to dlq (count 1)  75    pop dlq: m1 (5 s in dlq); claim d10
         again (first deliveries stay the first)
  121    claim work: w1-w3 move to dlq (count 2)
  122    claim parking: r1 moves on to graveyard (count 2; 61 s in parking)
  125    jobs gets a policy: 1 claim, then dlq, 100 s there
  130    claim jobs: ja jb (count 2) and jc jd (count 1) move to dlq, expiring at 230
  131    delete w1 from dlq (10 s)              142.5 delete ja from dlq (12.5 s)
  150    purge graveyard (r1: 28 s); post d30 c4 (delay 600)
  160    delete jc from dlq (30 s); purge d30 (its undelivered c3 and c4 end)
  230    jb and jd expire in dlq (100 s)
  279    post B d10 x3 (due 289: still waiting at the audit)
  280    AS_OF
  281+   after the audit time, so ignored: post B d10 x4, post d10 a5, delete w2 from
         dlq, claim e3 (due at 300)
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from falcon import testing

from delayq import conf as delayq_conf
from delayq import events
from delayq.api.app import create_app
from delayq.synchronous import Synchronous
from tests import spark_session
from tests.audit_helpers import (
    check_report,
    dead_letter_row,
    delay_row,
    dist,
    load_audit,
    parquet_rows,
    percentile,
    rfc3339,
    rows,
)
from tests.chromium import rendered
from tests.contract.drivers import FakeClock
from tests.server import write_config

spark = pytest.fixture(scope="session")(spark_session.spark_fixture)

# The scenario's clock starts a quarter of an hour before the real one, whole seconds: an
# audit time must not be later than the store's clock (the real one, when delayq-audit
# opens the store), and its messages still live by the real clock while the module runs.
T0 = float(int(time.time()) - 900)
AS_OF = T0 + 280
A = "audit-a"
B = "audit-b<&>"
CLIENT = str(uuid.uuid4())
PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"

WORK_BODIES = {
    "w1": {"order": {"id": 1, "kind": "refund"}, "reason": "timeout"},
    "w2": {"order": {"id": 2, "kind": "refund"}, "reason": "card_declined"},
    "w3": {"order": {"id": 3, "kind": "sale"}, "reason": "timeout", "tags": ["a", "b"]},
    "w4": {"never": "moved", "reason": "deleted first"},
}
JOBS_BODIES = {
    "ja": {"order": {"id": 4, "kind": "refund"}, "reason": "timeout", "retry": True},
    "jb": "plain text",
    "jc": [1, 2],
    "jd": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": None,
           "reason": "timeout"},
}
RETRY_BODIES = {"r1": {"step": "charge"}, "r2": {"step": "notify"}}


# The HTTP API on a fake clock


class Api:
    """The in-process app over one driver; every call checks its status."""

    def __init__(self, client: testing.TestClient, clock: FakeClock) -> None:
        self.client = client
        self.clock = clock

    def at(self, offset: float) -> None:
        assert T0 + offset >= self.clock.now, "the scenario only moves forward"
        self.clock.now = T0 + offset

    @staticmethod
    def headers(project: str) -> dict[str, str]:
        return {"Client-ID": CLIENT, "X-Project-ID": project}

    def create(self, queue: str, project: str = A, **metadata: Any) -> None:
        resp = self.client.simulate_put(f"/v2/queues/{queue}", headers=self.headers(project),
                                        json=metadata)
        assert resp.status_code == 201, resp.text

    def patch(self, queue: str, project: str = A, **metadata: Any) -> None:
        operations = [{"op": "replace", "path": f"/metadata/{key}", "value": value}
                      for key, value in metadata.items()]
        resp = self.client.simulate_patch(
            f"/v2/queues/{queue}", headers={**self.headers(project),
                                             "Content-Type": PATCH_TYPE},
            body=json.dumps(operations))
        assert resp.status_code == 200, resp.text
        for key, value in metadata.items():
            assert resp.json[key] == value

    def post(self, queue: str, *messages: dict[str, Any], project: str = A) -> list[str]:
        resp = self.client.simulate_post(f"/v2/queues/{queue}/messages",
                                         headers=self.headers(project),
                                         json={"messages": list(messages)})
        assert resp.status_code == 201, resp.text
        return [href.rsplit("/", 1)[1] for href in resp.json["resources"]]

    def claim(self, queue: str, limit: int = 10, project: str = A
              ) -> tuple[str | None, dict[str, int]]:
        """``(claim id, {message id: claim count})``; ``(None, {})`` on 204."""
        resp = self.client.simulate_post(f"/v2/queues/{queue}/claims",
                                         headers=self.headers(project),
                                         params={"limit": limit},
                                         json={"ttl": 60, "grace": 60})
        if resp.status_code == 204:
            return None, {}
        assert resp.status_code == 201, resp.text
        claim_id = resp.headers["location"].rsplit("/", 1)[1]
        return claim_id, {m["id"]: m["claim_count"] for m in resp.json["messages"]}

    def delete(self, queue: str, message_id: str, claim_id: str | None = None,
               project: str = A) -> None:
        params = {"claim_id": claim_id} if claim_id else None
        resp = self.client.simulate_delete(f"/v2/queues/{queue}/messages/{message_id}",
                                           headers=self.headers(project), params=params)
        assert resp.status_code == 204, resp.text

    def pop(self, queue: str, count: int, project: str = A) -> list[str]:
        resp = self.client.simulate_delete(f"/v2/queues/{queue}/messages",
                                           headers=self.headers(project),
                                           params={"pop": count})
        assert resp.status_code == 200, resp.text
        return [m["id"] for m in resp.json["messages"]]

    def purge(self, queue: str, project: str = A) -> None:
        resp = self.client.simulate_post(f"/v2/queues/{queue}/purge",
                                         headers=self.headers(project), json={})
        assert resp.status_code == 204, resp.text

    def get(self, queue: str, message_id: str, project: str = A) -> dict[str, Any] | None:
        resp = self.client.simulate_get(f"/v2/queues/{queue}/messages/{message_id}",
                                        headers=self.headers(project))
        if resp.status_code == 404:
            return None
        assert resp.status_code == 200, resp.text
        return resp.json


def bodies(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"body": body} for body in values.values()]


def play(api: Api) -> dict[str, str]:
    """Play the module docstring's timeline; the ids of the named messages.

    Every step checks the queue did what the timeline says, so the expected figures
    below describe what really happened.
    """
    ids: dict[str, str] = {}

    def name(names: list[str], got: list[str]) -> None:
        assert len(got) == len(names)
        ids.update(zip(names, got, strict=True))

    api.at(0)
    for queue, delay in (("d10", 10), ("d20", 20), ("d30", 30), ("d60", 60)):
        api.create(queue, _default_message_delay=delay)
    api.create("plain")
    api.create("work", _max_claim_count=2, _dead_letter_queue="dlq")
    api.create("jobs")
    api.create("retry", _max_claim_count=1, _dead_letter_queue="parking")
    api.create("parking", _max_claim_count=2, _dead_letter_queue="graveyard")
    api.create("misc", _max_claim_count=1, _dead_letter_queue="dlq")
    api.create("dlq")
    api.create("d10", project=B, _default_message_delay=10)
    d10 = api.post("d10", *({"body": {"n": n}} for n in range(1, 5)))
    d20 = api.post("d20", {"body": "b1"}, {"body": "b2"})
    d30 = api.post("d30", *({"body": f"c{n}"} for n in range(1, 4)))
    name(["e1", "e2", "e3", "e4"], api.post(
        "d60", {"body": "e1"}, {"body": "e2", "delay": 120, "ttl": 60},
        {"body": "e3", "delay": 300}, {"body": "e4", "delay": 0}))
    plain = api.post("plain", {"body": 1}, {"body": 2}, {"body": 3, "delay": 50})
    name(list(WORK_BODIES), api.post("work", *bodies(WORK_BODIES)))
    name(["ja", "jb"], api.post("jobs", *bodies({k: JOBS_BODIES[k] for k in ("ja", "jb")})))
    name(list(RETRY_BODIES), api.post("retry", *bodies(RETRY_BODIES)))
    name(["m1"], api.post("misc", {"body": 42}))
    b_d10 = api.post("d10", {"body": "x1"}, {"body": "x2"}, project=B)

    api.at(1)
    work_claim, got = api.claim("work")
    assert got == {ids[w]: 1 for w in ("w1", "w2", "w3", "w4")}
    assert api.claim("jobs")[1] == {ids["ja"]: 1, ids["jb"]: 1}
    assert api.claim("retry")[1] == {ids["r1"]: 1, ids["r2"]: 1}
    assert api.claim("misc")[1] == {ids["m1"]: 1}
    plain_claim, got = api.claim("plain", limit=1)
    [plain_claimed] = got
    assert plain_claimed in plain
    api.at(2)
    api.delete("work", ids["w4"], work_claim)
    api.delete("plain", plain_claimed, plain_claim)
    api.at(3)
    [popped] = api.pop("plain", 1)
    assert popped in plain and popped != plain_claimed
    api.at(5)
    assert api.claim("d60")[1] == {ids["e4"]: 1}

    # Delayed queues: one delivery at a time, each at a known instant after due.
    delivered: list[str] = []
    for offset in (10, 12.5, 15):
        api.at(offset)
        if offset == 10:
            assert api.claim("d60")[1] == {}, "nothing of d60 is due at 10"
        [got] = api.claim("d10", limit=1)[1]
        delivered.append(got)
        if offset == 10:
            api.at(11)
            [x] = api.claim("d10", limit=1, project=B)[1]
            assert x in b_d10
    api.at(20)
    delivered += api.pop("d10", 1)
    assert sorted(delivered) == sorted(d10)
    api.at(21)
    [first_b] = api.claim("d20", limit=1)[1]
    api.at(30)
    c_claimed = api.claim("d30", limit=2)[1]
    assert len(c_claimed) == 2 and set(c_claimed) < set(d30)
    api.at(40)
    assert list(api.claim("d20", limit=1)[1]) == [b for b in d20 if b != first_b]

    api.at(61)
    assert api.claim("work")[1] == {ids[w]: 2 for w in ("w1", "w2", "w3")}
    assert api.claim("jobs")[1] == {ids["ja"]: 2, ids["jb"]: 2}
    assert api.claim("retry") == (None, {})  # r1 and r2 move to parking
    assert api.get("d60", ids["e2"]) is None, "e2 expired at 60"
    api.at(61.25)
    assert api.claim("d60")[1] == {ids["e1"]: 1}
    api.at(62)
    name(["jc", "jd"], api.post("jobs", *bodies({k: JOBS_BODIES[k] for k in ("jc", "jd")})))
    assert api.claim("jobs")[1] == {ids["jc"]: 1, ids["jd"]: 1}
    parking_claim, got = api.claim("parking")
    assert got == {ids["r1"]: 2, ids["r2"]: 2}
    api.at(63)
    api.delete("parking", ids["r2"], parking_claim)
    api.at(70)
    assert api.claim("misc") == (None, {})  # m1 moves to dlq
    api.at(75)
    assert api.pop("dlq", 1) == [ids["m1"]]
    again = api.claim("d10")[1]
    assert set(again) == set(delivered[:3]) and all(n == 2 for n in again.values())

    api.at(121)
    assert api.claim("work") == (None, {})  # w1-w3 move to dlq
    api.at(122)
    assert api.claim("parking") == (None, {})  # r1 moves on to graveyard
    assert api.get("graveyard", ids["r1"])["claim_count"] == 2
    api.at(125)
    api.patch("jobs", _max_claim_count=1, _dead_letter_queue="dlq",
              _dead_letter_queue_messages_ttl=100)
    api.at(130)
    assert api.claim("jobs") == (None, {})  # ja jb jc jd move to dlq
    api.at(131)
    api.delete("dlq", ids["w1"])
    api.at(142.5)
    api.delete("dlq", ids["ja"])
    api.at(150)
    api.purge("graveyard")
    name(["c4"], api.post("d30", {"body": "c4", "delay": 600}))
    api.at(160)
    api.delete("dlq", ids["jc"])
    api.purge("d30")
    api.at(229)
    assert api.get("dlq", ids["jb"]) is not None
    api.at(230)
    assert api.get("dlq", ids["jb"]) is None and api.get("dlq", ids["jd"]) is None
    assert api.get("dlq", ids["w2"]) is not None
    api.at(279)
    name(["x3"], api.post("d10", {"body": "x3"}, project=B))

    # After the audit time: none of this may count.
    api.at(281)
    name(["x4"], api.post("d10", {"body": "x4"}, project=B))
    api.at(290)
    name(["a5"], api.post("d10", {"body": "a5"}))
    api.at(295)
    api.delete("dlq", ids["w2"])
    api.at(300)
    # e3 is due; e1 and e4 are free again (their claims lapsed long ago).
    assert api.claim("d60")[1] == {ids["e1"]: 2, ids["e3"]: 1, ids["e4"]: 2}
    return ids


# Expected figures


def expected_delay() -> list[dict[str, Any]]:
    nothing_delayed = {"jobs": 4, "misc": 1, "plain": 3, "retry": 2, "work": 4}
    return [
        delay_row(A, "d10", messages=4, delays=[10] * 4, lateness=[0, 2.5, 5, 10]),
        delay_row(A, "d20", messages=2, delays=[20] * 2, lateness=[1, 20]),
        delay_row(A, "d30", messages=4, delays=[30, 30, 30, 600], lateness=[0, 0]),
        delay_row(A, "d60", messages=4, delays=[60, 120, 300], lateness=[1.25],
                  expired_before_due=1, waiting=1),
        *(delay_row(A, queue, messages=n) for queue, n in nothing_delayed.items()),
        delay_row(B, "d10", messages=3, delays=[10] * 3, lateness=[1], waiting=1),
    ]


# Body keys of the dead-lettered work messages, w1-w3. The contract's keys are "dotted
# paths into nested objects"; it does not say in so many words whether the object "order"
# is a key besides "order.id" and "order.kind". Read as: every path is a key, an object's
# too (as delayq/spark_jobs/bodies.py documents it); only scalars have values.
WORK_KEYS = [("order", 3), ("order.id", 3), ("order.kind", 3), ("reason", 3), ("tags", 1)]


def latest(ids: dict[str, str], *names: str) -> list[str]:
    """The ids of messages moved at one instant, as latest_moved_ids lists them: by id."""
    return sorted(ids[name] for name in names)


def expected_dead_letter(ids: dict[str, str]) -> list[dict[str, Any]]:
    timeout = json.dumps("timeout")
    return [
        dead_letter_row(
            A, "dlq", "jobs", counts=[2, 2, 1, 1], times=[12.5, 30, 100, 100],
            # ja, jd and "" (jb's string, jc's array) lead; then jd's keys, ascending.
            top_keys=[("", 2), ("reason", 2), *((k, 1) for k in "abcdefgh")],
            top_values=[("reason", timeout, 2), ("", json.dumps("plain text"), 1),
                        *((k, str(n), 1) for n, k in enumerate("abcdefgh", start=1))],
            # ja and jc deleted, jb and jd expired; jobs received its four posts.
            received=4, endings={"deleted": 2, "expired": 2},
            latest=latest(ids, "ja", "jb", "jc", "jd")),
        dead_letter_row(A, "dlq", "misc", counts=[1], times=[5], top_keys=[("", 1)],
                        top_values=[("", "42", 1)], received=1, endings={"popped": 1},
                        latest=[ids["m1"]]),
        dead_letter_row(
            A, "dlq", "work", counts=[2, 2, 2], times=[10], top_keys=WORK_KEYS,
            top_values=[("order.kind", json.dumps("refund"), 2), ("reason", timeout, 2),
                        ("order.id", "1", 1), ("order.id", "2", 1), ("order.id", "3", 1),
                        ("order.kind", json.dumps("sale"), 1),
                        ("reason", json.dumps("card_declined"), 1)],
            # w4 was posted too, and deleted before the moves.
            received=4, endings={"deleted": 1}, latest=latest(ids, "w1", "w2", "w3")),
        # parking received r1 and r2, moved in from retry; r1 moved on, and was purged.
        dead_letter_row(A, "graveyard", "parking", counts=[2], times=[28],
                        top_keys=[("step", 1)], top_values=[("step", json.dumps("charge"), 1)],
                        received=2, endings={"purged": 1}, latest=[ids["r1"]]),
        dead_letter_row(A, "parking", "retry", counts=[1, 1], times=[2, 61],
                        top_keys=[("step", 2)],
                        top_values=[("step", json.dumps("charge"), 1),
                                    ("step", json.dumps("notify"), 1)],
                        received=2, endings={"deleted": 1, "dead_lettered": 1},
                        latest=latest(ids, "r1", "r2")),
    ]


def assert_rows_equal(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Row by row, field by field, so a failure names the queue and the figure."""
    assert [(r["project"], r["queue"], r.get("source")) for r in got] == [
        (r["project"], r["queue"], r.get("source")) for r in expected]
    for row, want in zip(got, expected, strict=True):
        where = (row["project"], row["queue"], row.get("source"))
        for key, value in want.items():
            assert row.get(key, "<absent>") == value, (where, key, row.get(key, "<absent>"))


def test_the_percentile_helper_is_the_contracts_rule():
    # Worked by hand: x[i] + (x[i+1] - x[i]) * f, i + f = p * (n - 1).
    assert dist([10, 0, 5, 2.5]) == {"p50": 3.75, "p90": 8.5, "p99": 9.85, "max": 10}
    assert dist([1, 20]) == {"p50": 10.5, "p90": 18.1, "p99": 19.81, "max": 20}
    assert dist([30, 30, 30, 600]) == {"p50": 30, "p90": 429, "p99": 582.9, "max": 600}
    assert dist([60, 120, 300]) == {"p50": 120, "p90": 264, "p99": 296.4, "max": 300}
    assert dist([12.5, 30, 100, 100]) == {"p50": 65, "p90": 100, "p99": 100, "max": 100}
    assert dist([2, 61]) == {"p50": 31.5, "p90": 55.1, "p99": 60.41, "max": 61}
    assert dist([7]) == {"p50": 7, "p90": 7, "p99": 7, "max": 7}
    assert dist([]) is None
    assert percentile([1, 1, 2, 2], 0.5) == 1.5


# The filled stores


@dataclass
class Store:
    backend: str
    config_file: Path
    uri: str | None
    ids: dict[str, str]
    options: dict[str, str] = field(default_factory=dict)

    def driver(self):
        """A driver on the real clock, as the audit opens it."""
        from delayq.storage.registry import load_driver

        return Synchronous(load_driver(delayq_conf.load([], config_files=[str(self.config_file)])))


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def store(request, tmp_path_factory) -> Store:
    directory = tmp_path_factory.mktemp(f"audit-{request.param}")
    clock = FakeClock(T0)
    conf = delayq_conf.load([])
    if request.param == "sqlite":
        from delayq.storage.sqlite.driver import Driver as SqliteDriver

        path = directory / "delayq.sqlite"
        driver = Synchronous(SqliteDriver(str(path), clock=clock))
        sections = {"drivers": {"message_store": "sqlite"},
                    "drivers:message_store:sqlite": {"path": path}}
        uri = f"sqlite://{path}"
    else:
        from delayq.storage.redis.driver import Driver as RedisDriver
        from tests.redis_servers import SERVERS

        namespace = f"t{uuid.uuid4().hex[:12]}"
        server_uri = SERVERS.single().uri
        driver = Synchronous(RedisDriver(server_uri, namespace=namespace, clock=clock))
        sections = {"drivers": {"message_store": "redis"},
                    "drivers:message_store:redis": {"uri": server_uri,
                                                    "namespace": namespace,
                                                    "reap_interval": 0}}
        uri = None  # a URI cannot name a namespace
    try:
        ids = play(Api(testing.TestClient(create_app(conf, driver=driver.target)), clock))
    finally:
        driver.close()
    config_file = write_config(directory / "delayq.conf", sections)
    return Store(request.param, config_file, uri, ids)


def run_cli(*argv: str, status: int = 0) -> None:
    """``delayq-audit`` in this process (on the run's Spark session); it must exit with
    *status* (0: success)."""
    from delayq.spark_jobs.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    assert (code or 0) == status, f"delayq-audit {' '.join(argv)} exited with {code}"


@pytest.fixture(params=["read here", "through the data source"])
def trail_read(request, monkeypatch) -> str:
    """How the audit reads the trail: in this process (``small_trail``, the fast path
    for a trail this small) or through the ``delayq`` data source."""
    if request.param == "through the data source":
        from delayq.spark_jobs import small_trail

        # No trail is small enough, not even an empty one.
        monkeypatch.setattr(small_trail, "MAX_EVENTS", -1)
    return request.param


# The audits


def test_all_gives_every_figure_of_the_scenario(spark, store, trail_read, tmp_path):
    out = tmp_path / "out"
    run_cli("all", "--config-file", str(store.config_file), "--output", str(out),
            "--as-of", repr(AS_OF))
    audit = load_audit(out)

    assert audit["as_of"] == AS_OF
    assert rfc3339(audit["as_of_text"]) == AS_OF
    rfc3339(audit["generated_at"])
    assert audit["source"] == {"driver": store.backend, "project": None, "queues": None}

    delay = rows(audit, "delay")
    assert_rows_equal(delay, expected_delay())
    assert all(r["early_deliveries"] == 0 for r in delay)
    dead = rows(audit, "dead_letter")
    assert_rows_equal(dead, expected_dead_letter(store.ids))

    # Parquet: the same rows (read back with pyarrow, not Spark).
    delay_parquet = parquet_rows(out / "delay.parquet")
    assert sorted((r["project"], r["queue"], r["messages"], r["delayed"], r["delivered"],
                   r["expired_before_due"], r["waiting"]) for r in delay_parquet) == sorted(
        (r["project"], r["queue"], r["messages"], r["delayed"], r["delivered"],
         r["expired_before_due"], r["waiting"]) for r in delay)
    dead_parquet = parquet_rows(out / "dead_letter.parquet")
    assert sorted((r["project"], r["queue"], r["source"], r["moved"], r["left"],
                   r["still_in_dlq"]) for r in dead_parquet) == sorted(
        (r["project"], r["queue"], r["source"], r["moved"], r["left"], r["still_in_dlq"])
        for r in dead)
    by_key = {(r["project"], r["queue"]): r for r in delay_parquet}
    assert by_key[(A, "d10")]["lateness_seconds"]["p99"] == pytest.approx(9.85)

    check_report(out / "report.html",
                 ["d10", "d20", "d30", "d60", "plain", "work", "jobs", "retry", "misc", "dlq",
                  "parking", "graveyard"],
                 raw_texts_never_shown=[B])
    check_rendered_report(out / "report.html", store.ids)


def check_rendered_report(path: Path, ids: dict[str, str]) -> None:
    """What report.html shows in a browser: delayed queues alone in the delay section,
    the latest first; dead-letter rows the most moved first, with their rates and how
    their messages left; the latest moved ids."""
    with rendered(path) as page:
        titles = page.evaluate(
            "[...document.querySelectorAll('section.queue h3')].map(h => h.innerText)")
        dead = page.evaluate("[...document.querySelector('table.dead-letters').rows]"
                             ".map(r => [...r.cells].map(c => c.innerText))")
        text = page.text
        card = page.evaluate("getComputedStyle([...document.querySelectorAll('.card')]"
                             ".find(c => c.innerText.includes('early deliveries of'))"
                             ").backgroundColor")
        jobs = ("[...document.querySelectorAll('section.queue')].find(s => "
                "s.querySelector('h3').innerText.startsWith('dlq ← jobs'))")
        jobs_panel = page.evaluate(f"{jobs}.innerText")
        jobs_ids = page.evaluate(f"[...{jobs}.querySelectorAll('.ids code')]"
                                 ".map(c => c.innerText)")
    # Most late (lateness p99) first: d20 19.81 s, d10 9.85 s, d60 1.25 s, B's d10 1 s,
    # d30 0 s. Then most moved first; misc and parking moved one each (by name).
    assert titles == [
        f"d20 project {A}", f"d10 project {A}", f"d60 project {A}", f"d10 project {B}",
        f"d30 project {A}", f"dlq ← jobs project {A}", f"dlq ← work project {A}",
        f"parking ← retry project {A}", f"dlq ← misc project {A}",
        f"graveyard ← parking project {A}"]
    assert "Posted to without a delay (messages): jobs (4), misc (1), plain (3), " \
           "retry (2), work (4)" in text
    assert "0\nearly deliveries of 16 delayed" in text
    assert card == "rgb(218, 251, 225)"  # green: delayed messages, none early
    assert dead[0] == ["dead-letter queue", "source", "project", "moved", "source received",
                       "dead-letter rate", "deleted", "popped", "redriven", "moved on",
                       "expired", "purged", "still there"]
    assert dead[1:] == [
        ["dlq", "jobs", A, "4", "4", "100%", "2", "0", "0", "0", "2", "0", "0"],
        ["dlq", "work", A, "3", "4", "75%", "1", "0", "0", "0", "0", "0", "2"],
        ["parking", "retry", A, "2", "2", "100%", "1", "0", "0", "1", "0", "0", "0"],
        ["dlq", "misc", A, "1", "1", "100%", "0", "1", "0", "0", "0", "0", "0"],
        ["graveyard", "parking", A, "1", "2", "50%", "0", "0", "0", "0", "0", "1", "0"]]
    assert "LATEST MOVED (NEWEST FIRST)\n" in jobs_panel
    assert jobs_ids == latest(ids, "ja", "jb", "jc", "jd")
    assert "deleted 2popped 0redriven 0moved on 0expired 2purged 0still there 0" in jobs_panel


def test_the_audit_time_cuts_the_trail_and_the_filters_pick_queues(spark, store, trail_read,
                                                                   tmp_path):
    """Few runs, to keep the Spark time down: on SQLite (named by its URI) ``delay`` at
    T0 + 12.5 (RFC 3339; an event at that very instant counts) for two queues of project
    A; on Redis ``dlq`` at T0 + 131 for project A, and ``dlq`` for two queues."""
    out = tmp_path / "out"
    if store.uri:
        as_of = datetime.fromtimestamp(T0 + 12.5, UTC).isoformat().replace("+00:00", "Z")
        run_cli("delay", "--uri", store.uri, "--output", str(out), "--as-of", as_of,
                "--project", A, "--queues", "d10,d60")
        audit = load_audit(out)
        assert audit["as_of"] == T0 + 12.5
        assert rfc3339(audit["as_of_text"]) == T0 + 12.5
        assert audit["source"] == {"driver": store.backend, "project": A,
                                   "queues": ["d10", "d60"]}
        assert "dead_letter" not in audit
        assert_rows_equal(rows(audit, "delay"), [
            delay_row(A, "d10", messages=4, delays=[10] * 4, lateness=[0, 2.5]),
            delay_row(A, "d60", messages=4, delays=[60, 120, 300], waiting=3),
        ])
        assert (out / "report.html").is_file()
        assert not (out / "dead_letter.parquet").exists()
        return

    run_cli("dlq", "--config-file", str(store.config_file), "--output", str(out),
            "--as-of", repr(T0 + 131), "--project", A)
    audit = load_audit(out)
    assert audit["as_of"] == T0 + 131
    assert audit["source"] == {"driver": store.backend, "project": A, "queues": None}
    assert "delay" not in audit
    assert (out / "report.html").is_file()
    assert not (out / "delay.parquet").exists()
    jobs, misc, work, graveyard, parking = expected_dead_letter(store.ids)
    left_none = dict.fromkeys(jobs["endings"], 0)
    assert_rows_equal(rows(audit, "dead_letter"), [
        {**jobs, "time_in_dlq_seconds": None, "left": 0, "still_in_dlq": 4,
         "endings": left_none},
        misc,
        {**work, "left": 1, "still_in_dlq": 2},  # w1 deleted at 131 sharp: it counts
        {**graveyard, "time_in_dlq_seconds": None, "left": 0, "still_in_dlq": 1,
         "endings": left_none},
        parking,
    ])

    # --queues picks the dead-letter rows whose dead-letter queue or source queue is
    # listed, and never changes their figures: m1's time in dlq is in dlq's trail, r1's
    # in graveyard's, neither of which is listed.
    out = tmp_path / "picked"
    run_cli("dlq", "--config-file", str(store.config_file), "--output", str(out),
            "--as-of", repr(AS_OF), "--queues", "parking,misc")
    audit = load_audit(out)
    assert audit["source"] == {"driver": store.backend, "project": None,
                               "queues": ["parking", "misc"]}
    assert_rows_equal(rows(audit, "dead_letter"), [misc, graveyard, parking])


# The data source


def read(spark, store: Store, kind: str, **options: Any):
    from delayq.spark_jobs import source

    source.register(spark)
    reader = spark.read.format("delayq").option("kind", kind)
    if store.uri:
        reader = reader.option("uri", store.uri)
    else:
        reader = reader.option("config_file", str(store.config_file))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def event_tuple(row: dict[str, Any]) -> tuple:
    return tuple(row[f] for f in events.FIELDS)


def trail(store: Store, project: str | None = None, queues: set[str] | None = None
          ) -> list[tuple]:
    """The trail as the driver itself reads it."""
    driver = store.driver()
    try:
        return [event_tuple(e.as_row())
                for p, q in driver.trail.queues(project)
                if queues is None or q in queues
                for e in driver.trail.events(p, q)]
    finally:
        driver.close()


def test_the_data_source_reads_every_event(spark, store):
    df = read(spark, store, "events")
    assert set(events.FIELDS) <= set(df.columns)
    got = [event_tuple(r.asDict()) for r in df.collect()]
    assert sorted(got, key=repr) == sorted(trail(store), key=repr)
    kinds = [r[2] for r in got]
    # 29 posts in project A, 4 in B; 11 moves; 2 purges (graveyard, d30).
    assert (kinds.count(events.POSTED), kinds.count(events.DEAD_LETTERED),
            kinds.count(events.PURGED)) == (33, 11, 2)
    moved = {r[4]: r for r in got if r[2] == events.DEAD_LETTERED and r[1] == "jobs"}
    assert json.loads(moved[store.ids["jd"]][12]) == JOBS_BODIES["jd"]


def test_the_data_source_filters_by_project_and_queues(spark, store):
    only_b = [event_tuple(r.asDict()) for r in read(spark, store, "events",
                                                    project=B).collect()]
    assert sorted(only_b, key=repr) == sorted(trail(store, B), key=repr)
    assert len(only_b) == 5 and {r[0] for r in only_b} == {B}

    picked = [event_tuple(r.asDict()) for r in read(spark, store, "events",
                                                    queues="d10,dlq").collect()]
    assert sorted(picked, key=repr) == sorted(trail(store, None, {"d10", "dlq"}), key=repr)
    assert {(r[0], r[1]) for r in picked} == {(A, "d10"), (B, "d10"), (A, "dlq")}

    both = read(spark, store, "events", project=A, queues="d20").collect()
    assert {(r["project"], r["queue"], r["kind"]) for r in both} == {
        (A, "d20", events.POSTED), (A, "d20", events.CLAIMED)}
    assert len(both) == 4


def test_the_data_source_reads_the_live_messages(spark, store):
    driver = store.driver()
    try:
        live = {(p, q, m.id) for p, q in driver.trail.queues(None)
                for m in driver.trail.messages(p, q)}
    finally:
        driver.close()
    ids = store.ids
    # Still held, by the real clock: e3 (claimed), w3 in dlq, x1-x4 and a1-a3, a5 ...
    assert {(A, "dlq", ids["w3"]), (A, "d60", ids["e3"]), (B, "d10", ids["x4"])} <= live
    assert (A, "dlq", ids["w1"]) not in live and (A, "graveyard", ids["r1"]) not in live
    df = read(spark, store, "messages")
    columns = set(df.columns)
    id_column = "id" if "id" in columns else "message_id"
    assert {"project", "queue", id_column} <= columns
    got = [(r["project"], r["queue"], r[id_column]) for r in df.collect()]
    assert sorted(got) == sorted(live)
    only = read(spark, store, "messages", project=A, queues="dlq").collect()
    assert sorted(r[id_column] for r in only) == sorted(
        m for p, q, m in live if (p, q) == (A, "dlq"))


# Columns of a message that depend on when it is read.
READ_TIME_COLUMNS = {"as_of", "age"}


def test_more_partitions_read_the_same_rows(spark, store):
    for kind in ("events", "messages"):
        one = read(spark, store, kind, partitions=1)
        three = read(spark, store, kind, partitions=3)
        assert three.rdd.getNumPartitions() > 1
        columns = [c for c in one.columns if c not in READ_TIME_COLUMNS]
        rows_one = sorted(repr(tuple(r)) for r in one.select(*columns).collect())
        rows_three = sorted(repr(tuple(r)) for r in three.select(*columns).collect())
        assert rows_one == rows_three and rows_one, kind


def test_an_audit_before_the_first_event_is_empty_and_replaces_the_last_one(spark, store,
                                                                            tmp_path):
    """A daily audit writes into the same directory every day: the new outputs replace
    the old ones. At T0 - 1 nothing had happened yet: no rows, and exit status 3 with
    the reason in audit.json."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    (out / "delay.parquet").mkdir(parents=True)
    pq.write_table(pa.table({"project": ["stale"], "queue": ["stale"]}),
                   str(out / "delay.parquet" / "part-stale.parquet"))
    (out / "audit.json").write_text('{"stale": true}')
    run_cli("all", "--config-file", str(store.config_file), "--output", str(out),
            "--as-of", repr(T0 - 1), status=3)
    audit = load_audit(out)
    assert audit["as_of"] == T0 - 1
    assert "no event at or before" in audit["nothing_audited"]
    assert (audit["delay"], audit["dead_letter"]) == ({"queues": []}, {"queues": []})
    assert parquet_rows(out / "delay.parquet") == []
    assert parquet_rows(out / "dead_letter.parquet") == []
    assert (out / "report.html").is_file()
