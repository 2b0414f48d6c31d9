"""Incremental re-audits (``delayq-audit ... --state DIR``) on a real SQLite file.

A store is filled in two rounds on a fake clock days before the real one. An audit with
a state after the first round, then one after the second, must give the figures of a
full audit of the second store, reading from the store only the second round's events.
The state belongs to one store and project and one format: another is refused before
Spark starts, a newer format too. A run killed at any point leaves a state the next run
uses, with the same figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from delayq.message import NewMessage
from delayq.queue import DeadLetterPolicy
from delayq.spark_jobs import state as state_module
from delayq.spark_jobs.cli import main
from delayq.spark_jobs.state import LAG, STATE_FILE
from delayq.storage.sqlite.driver import Driver as SqliteDriver
from delayq.synchronous import Synchronous
from tests import spark_session
from tests.audit_helpers import AUDIT_SCRIPT, load_audit
from tests.test_audit_server import user_env

pytestmark = pytest.mark.timeout(600)

spark = pytest.fixture(scope="session")(spark_session.spark_fixture)

PROJECT = "shop"
OTHER = "other"
CLIENT = str(uuid.uuid4())
SOURCE, DLQ, DELAYED = "orders", "orders-dlq", "slow"
POLICY = DeadLetterPolicy(1, DLQ, 600)
EXIT_OK, EXIT_USAGE = 0, 2


class Clock:
    """The store's clock, moved by the fill."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def fill_round(path: Path, clock: Clock, rnd: random.Random, posts: int) -> None:
    """One round of traffic: posts (some delayed, some to another project), claims that
    delete most and move the rest to the dead-letter queue, which is claimed and
    redriven in part. Messages of earlier rounds still queued take part.

    A round starts a second after the last one ended: a store's clock moves on, and an
    audit of the last round's instant has seen every event of it."""
    clock.now += 1
    driver = Synchronous(SqliteDriver(str(path), clock=clock))
    try:
        for project in (PROJECT, OTHER):
            driver.queues.create(project, SOURCE, {"_max_claim_count": 1,
                                                   "_dead_letter_queue": DLQ})
            driver.queues.create(project, DLQ, {"_dead_letter_queue_messages_ttl": 600})
            driver.queues.create(project, DELAYED, {"_default_message_delay": 20})
        for batch in range(posts // 20):
            project = PROJECT if batch % 3 else OTHER
            driver.messages.post(project, SOURCE, CLIENT, [
                NewMessage({"n": rnd.randrange(100), "kind": rnd.choice("ab")}, 3600, 0)
                for _ in range(20)])
            driver.messages.post(project, DELAYED, CLIENT, [
                NewMessage({"n": batch}, 3600, 20) for _ in range(5)])
            clock.now += 1
            held = driver.claims.create(project, SOURCE, ttl=30, grace=30, limit=15,
                                        dead_letter=POLICY)
            if held is not None:
                ids = [m.id for m in held.messages]
                driver.messages.delete_many(project, SOURCE, ids[: len(ids) * 2 // 3])
            clock.now += 31  # the claim lapses: the rest is moved by the next claim
            driver.claims.create(project, SOURCE, ttl=30, grace=30, limit=5,
                                 dead_letter=POLICY)
            clock.now += 21
            driver.claims.create(project, DELAYED, ttl=30, grace=30, limit=5,
                                 dead_letter=None)
            if batch % 4 == 0:
                driver.messages.redrive(project, DLQ, destination=None, limit=3)
            clock.now += 1
    finally:
        driver.close()


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> tuple[Path, Clock, random.Random]:
    directory = tmp_path_factory.mktemp("state-store")
    clock = Clock(time.time() - 3 * 86400)
    rnd = random.Random(41)
    path = directory / "delayq.sqlite"
    fill_round(path, clock, rnd, 400)
    return path, clock, rnd


def audit(database: Path, out: Path, *extra: str, command: str = "all") -> int:
    return main([command, "--uri", f"sqlite://{database}", "--output", str(out), *extra])


def figures(out: Path) -> dict:
    doc = load_audit(out)
    return {key: doc[key] for key in ("events", "delay", "dead_letter") if key in doc}


def test_a_re_audit_reads_only_what_came_after_and_equals_a_full_audit(
        spark, rounds, tmp_path):
    database, clock, rnd = rounds
    state = tmp_path / "state"
    as_of = repr(clock.now)
    assert audit(database, tmp_path / "first", "--state", str(state), "--as-of", as_of) \
        == EXIT_OK
    first = load_audit(tmp_path / "first")
    assert first["state"]["events_read_from_store"] == first["events"]
    assert first["state"]["events_held"] == first["events"]  # the fill is days old
    assert first["state"]["watermark"] == clock.now
    assert figures(tmp_path / "first")["dead_letter"]["queues"], "the fill moved nothing"

    # Two more rounds, each re-audited: messages of every round take part in the next,
    # so the last audit merges a message's rows of three layers.
    held = first["events"]
    for n in (2, 3):
        fill_round(database, clock, rnd, 100)
        as_of = repr(clock.now)
        out = tmp_path / f"round-{n}"
        assert audit(database, out, "--state", str(state), "--as-of", as_of) == EXIT_OK
        again = load_audit(out)
        read = again["state"]["events_read_from_store"]
        assert read == again["events"] - held
        assert 0 < read < again["events"] / 3
        assert again["state"]["events_held"] == again["events"]
        held = again["events"]
    assert audit(database, tmp_path / "full", "--as-of", as_of) == EXIT_OK
    full = load_audit(tmp_path / "full")
    assert figures(out) == figures(tmp_path / "full")
    assert full["state"] is None and full["events"] == held
    # The state's layers and nothing else are left: one of each run.
    layers = json.loads((state / STATE_FILE).read_text())["layers"]
    assert len(layers) == 3
    assert sorted(p.name for p in state.iterdir() if p.name != STATE_FILE) == sorted(layers)


def test_a_queue_list_and_a_project_pick_rows_and_layers_are_written_again_as_one(
        spark, rounds, tmp_path, monkeypatch):
    """With --project and --queues the state still holds the project's whole trail;
    past MAX_LAYERS layers, a run writes the state again as one layer."""
    monkeypatch.setattr(state_module, "MAX_LAYERS", 1)
    database, clock, rnd = rounds
    state = tmp_path / "state"
    args = ("--project", PROJECT, "--queues", DLQ)
    assert audit(database, tmp_path / "stated", "--state", str(state), *args,
                 "--as-of", repr(clock.now)) == EXIT_OK
    fill_round(database, clock, rnd, 40)
    as_of = repr(clock.now)
    assert audit(database, tmp_path / "again", "--state", str(state), *args,
                 "--as-of", as_of) == EXIT_OK
    assert audit(database, tmp_path / "full", *args, "--as-of", as_of) == EXIT_OK
    again, full = figures(tmp_path / "again"), figures(tmp_path / "full")
    # The rows agree; the events audited do not: without a state only the trails the
    # listed rows need are read.
    assert again["events"] > full["events"]
    assert again["delay"] == full["delay"] and again["dead_letter"] == full["dead_letter"]
    assert {row["queue"] for row in full["dead_letter"]["queues"]} == {DLQ}
    assert len(json.loads((state / STATE_FILE).read_text())["layers"]) == 1
    assert load_audit(tmp_path / "again")["state"]["events_read_from_store"] > 0


def test_an_as_of_before_the_watermark_reads_everything_and_keeps_the_state(
        spark, rounds, tmp_path):
    database, clock, _ = rounds
    state = tmp_path / "state"
    assert audit(database, tmp_path / "now", "--state", str(state),
                 "--as-of", repr(clock.now), command="delay") == EXIT_OK
    kept = (state / STATE_FILE).read_text()
    earlier = repr(clock.now - 600)
    assert audit(database, tmp_path / "past", "--state", str(state), "--as-of", earlier,
                 command="delay") == EXIT_OK
    assert audit(database, tmp_path / "full", "--as-of", earlier, command="delay") == EXIT_OK
    assert figures(tmp_path / "past") == figures(tmp_path / "full")
    assert (state / STATE_FILE).read_text() == kept


def test_the_watermark_lags_the_stores_clock(spark, tmp_path):
    """Events of the last LAG seconds before the store's clock are not held: a driver
    may still add events just before its now."""
    database = tmp_path / "delayq.sqlite"
    driver = Synchronous(SqliteDriver(str(database)))
    try:
        driver.messages.post(PROJECT, SOURCE, CLIENT, [NewMessage({"n": 1}, 3600, 0)])
    finally:
        driver.close()
    state = tmp_path / "state"
    assert audit(database, tmp_path / "out", "--state", str(state), command="delay") == EXIT_OK
    doc = load_audit(tmp_path / "out")
    assert doc["events"] == 1 and doc["state"]["events_held"] == 0
    assert doc["state"]["watermark"] == pytest.approx(doc["as_of"] - LAG, abs=5)


def test_a_state_of_another_store_project_or_a_newer_delayq_is_refused(
        spark, rounds, tmp_path, capsys):
    database, clock, rnd = rounds
    state = tmp_path / "state"
    assert audit(database, tmp_path / "out", "--state", str(state),
                 "--as-of", repr(clock.now), command="delay") == EXIT_OK
    capsys.readouterr()

    other = tmp_path / "other.sqlite"
    fill_round(other, Clock(clock.now - 86400), rnd, 20)
    assert audit(other, tmp_path / "o", "--state", str(state)) == EXIT_USAGE
    said = capsys.readouterr().err
    assert f"holds the trail of sqlite {database}, not of sqlite {other}" in said

    assert audit(database, tmp_path / "p", "--state", str(state), "--project", PROJECT) \
        == EXIT_USAGE
    assert "holds every project, not project shop" in capsys.readouterr().err

    doc = json.loads((state / STATE_FILE).read_text())
    (state / STATE_FILE).write_text(json.dumps({**doc, "format": doc["format"] + 1,
                                                "delayq": "99.0"}))
    assert audit(database, tmp_path / "n", "--state", str(state)) == EXIT_USAGE
    assert "was written by delayq 99.0" in capsys.readouterr().err


def test_a_run_killed_midway_leaves_a_state_the_next_run_uses(spark, rounds, tmp_path):
    """delayq-audit is killed (SIGKILL, Spark's JVM and Python workers with it) once its
    new layer has begun to be written: the state still reads, and the next run's
    figures are a full audit's."""
    database, clock, rnd = rounds
    state = tmp_path / "state"
    assert audit(database, tmp_path / "first", "--state", str(state),
                 "--as-of", repr(clock.now)) == EXIT_OK
    before = json.loads((state / STATE_FILE).read_text())
    fill_round(database, clock, rnd, 40)
    as_of = repr(clock.now)
    proc = subprocess.Popen(
        [str(AUDIT_SCRIPT), "all", "--uri", f"sqlite://{database}", "--output",
         str(tmp_path / "killed"), "--state", str(state), "--as-of", as_of,
         "--master", "local[2]"],
        env=user_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not any(p.name.startswith("layer-") and p.name not in before["layers"]
                      for p in state.iterdir()):
            assert proc.poll() is None, "delayq-audit ended before writing its state"
            assert time.monotonic() < deadline, "no new layer within 240 s"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    current = json.loads((state / STATE_FILE).read_text())
    assert current == before or current["events"] > before["events"]
    assert all((state / layer).is_dir() for layer in current["layers"])

    assert audit(database, tmp_path / "next", "--state", str(state), "--as-of", as_of) \
        == EXIT_OK
    assert audit(database, tmp_path / "full", "--as-of", as_of) == EXIT_OK
    assert figures(tmp_path / "next") == figures(tmp_path / "full")
    assert sorted(p.name for p in state.iterdir() if p.name != STATE_FILE) == sorted(
        json.loads((state / STATE_FILE).read_text())["layers"])
