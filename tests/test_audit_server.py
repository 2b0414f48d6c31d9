"""``delayq-audit`` as an operator runs it, against a running delayq (issue 6, "Done when").

The real ``delayq-server`` (tests/server.py) on SQLite and on Redis is filled over loopback
HTTP by python-zaqarclient, in real time: delays of 1 and 2 s, a dead-letter policy of two
claims (claims released rather than left to lapse, so nothing waits 60 s). Then the
``delayq-audit`` console script runs as a subprocess, with the environment a user has:
no PYSPARK_PYTHON, and a ``python3`` on PATH that need not have pyspark or delayq.

Figures that do not depend on timing (counts, delays, moves, claim counts, body keys) are
exact; lateness and time in the dead-letter queue are bounded by what the client saw: a
message posted at or after ``before_post`` and claimed before ``claimed_at`` was at most
``claimed_at - before_post - delay`` late.

Also: bad input (missing or contradictory options, an unknown subcommand, a bad
``--as-of``, a store that is not there) exits non-zero with a message and no traceback.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from zaqarclient.queues.v2 import core

from delayq.synchronous import Synchronous
from tests import spark_session
from tests.audit_helpers import (
    AUDIT_SCRIPT,
    check_report,
    claim_counts,
    dist,
    load_audit,
    parquet_rows,
    rows,
)
from tests.server import RunningServer, delayq_server, free_port, write_config
from tests.test_server_e2e import make_client, posted_ids

PROJECT = "audit-e2e"
AUDIT_TIMEOUT = 240
EPSILON = 0.05  # the client's and the server's clocks are this machine's, read apart

pytestmark = pytest.mark.timeout(300)


def user_env() -> dict[str, str]:
    """The environment a user runs delayq-audit in: nothing set up for Spark by us."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    return env


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    lines_while_running: int = 0  # stderr lines read before the process had exited


def run_audit(*argv: str, cwd: Path, timeout: float = AUDIT_TIMEOUT) -> Run:
    """Run the console script; stderr is read as it comes, to see progress live."""
    proc = subprocess.Popen([str(AUDIT_SCRIPT), *argv], cwd=cwd, env=user_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    live = [0]

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)
            if proc.poll() is None:
                live[0] += 1

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        stdout = proc.stdout.read()
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"delayq-audit {' '.join(argv)} ran over {timeout} s; "
                             f"stderr:\n{''.join(lines)}") from None
    reader.join(30)
    return Run(proc.returncode, stdout, "".join(lines), live[0])


# JVM and Spark start-up chatter: not progress of the audit.
JVM_NOISE = re.compile(r"^(WARNING: |Setting default log level|To adjust logging level|"
                       r"Using Spark's default log4j|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO) |"
                       r"\s*$)")


def progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not JVM_NOISE.match(line)]


# Filling a running delayq in real time


@dataclass
class Filled:
    before_post: float = 0.0
    delivered_at: dict[str, float] = field(default_factory=dict)  # id -> claim returned
    delay: dict[str, int] = field(default_factory=dict)  # id -> its delay
    queue_ids: dict[str, list[str]] = field(default_factory=dict)  # delayed queue -> ids
    moved_before: float = 0.0  # the moving claim was sent after this
    left_dlq_by: float = 0.0  # the delete from the DLQ had returned by this


def deliver(queue, count: int, filled: Filled, deadline: float) -> None:
    """Claim *queue* every 20 ms until *count* messages were claimed; note when."""
    got = 0
    while got < count:
        assert time.time() < deadline, f"{queue.name}: {got} of {count} claimed in time"
        claimed = list(queue.claim(ttl=60, grace=60, limit=10))
        now = time.time()
        for message in claimed:
            filled.delivered_at[message.id] = now
        got += len(claimed)
        if got < count:
            time.sleep(0.02)


def fill(url: str) -> Filled:
    client = make_client(url, PROJECT)
    req, trans = client._request_and_transport()
    core.queue_create(trans, req, "d1", metadata={"_default_message_delay": 1})
    core.queue_create(trans, req, "d2", metadata={"_default_message_delay": 2})
    core.queue_create(trans, req, "work",
                      metadata={"_max_claim_count": 2, "_dead_letter_queue": "dead"})
    d1, d2, work = (client.queue(name, auto_create=False) for name in ("d1", "d2", "work"))
    plain = client.queue("plain", force_create=True)
    filled = Filled(before_post=time.time())
    filled.queue_ids["d1"] = posted_ids(d1.post([{"body": {"n": 1}}, {"body": {"n": 2}}]))
    filled.queue_ids["d2"] = posted_ids(d2.post([{"body": "queue delay"},
                                                 {"body": "own", "delay": 1}]))
    filled.delay.update(dict.fromkeys(filled.queue_ids["d1"], 1))
    filled.delay.update(zip(filled.queue_ids["d2"], (2, 1), strict=True))
    posted_ids(plain.post([{"body": "p1"}, {"body": "p2", "delay": 5}]))
    work_ids = posted_ids(work.post([{"body": {"kind": "refund", "n": 1}},
                                     {"body": {"kind": "refund"}}, {"body": {"kind": "sale"}}]))

    # Twice claimed and released, then moved by the third claim.
    for count in (1, 2):
        claim = work.claim(ttl=60, grace=60, limit=10)
        claimed = list(claim)
        assert sorted(m.id for m in claimed) == sorted(work_ids)
        assert {m.claim_count for m in claimed} == {count}
        claim.delete()
    filled.moved_before = time.time()
    assert list(work.claim(ttl=60, grace=60, limit=10)) == []
    dead = client.queue("dead", auto_create=False)
    dead.message(work_ids[0]).delete()
    filled.left_dlq_by = time.time()
    assert [m.body for m in plain.pop(1)] == ["p1"]

    deadline = filled.before_post + 20
    deliver(d1, 2, filled, deadline)
    deliver(d2, 2, filled, deadline)
    return filled


def lateness_bound(filled: Filled, ids: list[str]) -> float:
    return max(filled.delivered_at[i] - filled.before_post - filled.delay[i] for i in ids)


def assert_between(figures: dict[str, float], low: float, high: float) -> None:
    values = [figures["p50"], figures["p90"], figures["p99"], figures["max"]]
    assert low <= values[0] <= values[1] <= values[2] <= values[3] <= high + EPSILON, (
        figures, low, high)


@pytest.fixture(params=["sqlite", "redis"])
def running(request, tmp_path) -> Iterator[tuple[str, RunningServer, Path]]:
    """A delayq-server on SQLite or Redis: the driver's name, the server, its config."""
    if request.param == "sqlite":
        config = {"drivers": {"message_store": "sqlite"}}
    else:
        from tests.redis_servers import SERVERS

        config = {"drivers": {"message_store": "redis"},
                  "drivers:message_store:redis": {"uri": SERVERS.single().uri,
                                                  "namespace": f"t{uuid.uuid4().hex[:12]}"}}
    with delayq_server(tmp_path / "server", config=config) as server:
        yield request.param, server, server.cwd / "delayq.conf"


def test_delayq_audit_all_against_a_running_delayq(running, tmp_path):
    spark_session.require_java()
    backend, server, config_file = running
    filled = fill(server.url)
    out = tmp_path / "audit"
    run = run_audit("all", "--config-file", str(config_file), "--output", str(out),
                    "--master", "local[2]", cwd=tmp_path)
    assert run.code == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    # No warning that is not the user's business: Python's (a UDF's type hints), the
    # Redis driver's about the server's persistence (the test server has none), Spark's.
    assert not re.search(r"Warning|appendonly|persistence| WARN ", run.stderr), run.stderr
    progress = progress_lines(run.stderr)
    assert len(progress) >= 2, f"no progress on stderr:\n{run.stderr}"
    assert run.lines_while_running >= 1, "stderr said nothing until delayq-audit had ended"

    audit = load_audit(out)
    assert audit["source"] == {"driver": backend, "project": None, "queues": None}
    assert audit["as_of"] >= max(filled.delivered_at.values()) - EPSILON
    assert audit["as_of"] <= time.time() + EPSILON

    delay = {r["queue"]: r for r in rows(audit, "delay")}
    assert [(r["project"], r["queue"]) for r in rows(audit, "delay")] == [
        (PROJECT, q) for q in ("d1", "d2", "plain", "work")]
    for queue, delays in (("d1", [1, 1]), ("d2", [2, 1])):
        row = delay[queue]
        assert (row["messages"], row["delayed"], row["delivered"], row["early_deliveries"],
                row["expired_before_due"], row["waiting"]) == (2, 2, 2, 0, 0, 0), row
        assert row["delay_seconds"] == dist(delays), row
        assert_between(row["lateness_seconds"], 0.0,
                       lateness_bound(filled, filled.queue_ids[queue]))
    for queue, messages in (("plain", 2), ("work", 3)):
        row = delay[queue]
        assert (row["messages"], row["delayed"], row["delay_seconds"], row["delivered"],
                row["lateness_seconds"], row["early_deliveries"], row["waiting"]) == (
            messages, 0, None, 0, None, 0, 0), row

    [dead] = rows(audit, "dead_letter")
    assert (dead["project"], dead["queue"], dead["source"]) == (PROJECT, "dead", "work")
    assert (dead["moved"], dead["left"], dead["still_in_dlq"]) == (3, 1, 2)
    assert dead["claim_count"] == claim_counts([2, 2, 2])
    in_dlq = dead["time_in_dlq_seconds"]
    assert in_dlq["p50"] == in_dlq["max"]
    assert_between(in_dlq, 0.0, filled.left_dlq_by - filled.moved_before)
    assert dead["top_keys"] == [{"key": "kind", "count": 3}, {"key": "n", "count": 1}]
    assert dead["top_values"] == [
        {"key": "kind", "value": '"refund"', "count": 2},
        {"key": "kind", "value": '"sale"', "count": 1},
        {"key": "n", "value": "1", "count": 1}]

    assert len(parquet_rows(out / "delay.parquet")) == 4
    assert len(parquet_rows(out / "dead_letter.parquet")) == 1
    check_report(out / "report.html", ["d1", "d2", "plain", "work", "dead"])


# Bad input


@pytest.fixture(scope="module")
def sqlite_config(tmp_path_factory) -> Path:
    """A configuration naming a SQLite store that exists (with nothing in it)."""
    from delayq.storage.sqlite.driver import Driver

    directory = tmp_path_factory.mktemp("bad-input")
    path = directory / "delayq.sqlite"
    Synchronous(Driver(str(path))).close()
    return write_config(directory / "delayq.conf", {
        "drivers": {"message_store": "sqlite"},
        "drivers:message_store:sqlite": {"path": path}})


BAD = {
    "no-output": (["all", "--config-file", "{config}"], r"--output"),
    "config-and-uri": (["all", "--config-file", "{config}", "--uri", "sqlite:///{db}",
                        "--output", "{out}"], r"--config-file|--uri"),
    "no-store": (["delay", "--output", "{out}"], r"--config-file|--uri"),
    "unknown-subcommand": (["audit-everything", "--config-file", "{config}", "--output",
                            "{out}"], r"audit-everything|invalid choice|delay"),
    "no-subcommand": (["--config-file", "{config}", "--output", "{out}"], r"."),
    "bad-as-of": (["all", "--config-file", "{config}", "--output", "{out}", "--as-of",
                   "last tuesday"], r"as.of|last tuesday"),
    "bad-partitions": (["all", "--config-file", "{config}", "--output", "{out}",
                        "--partitions", "0"], r"partitions"),
    "missing-config-file": (["all", "--config-file", "{missing}.conf", "--output", "{out}"],
                            r"{missing}"),
    "missing-sqlite": (["dlq", "--uri", "sqlite://{missing}.sqlite", "--output", "{out}"],
                       r"{missing}|SQLite|sqlite"),
    "redis-down": (["all", "--uri", "redis://127.0.0.1:{port}/0", "--output", "{out}"],
                   r"redis|Redis|{port}"),
    # The store's address and the cause, once, credentials left out.
    "redis-down-says-where-and-why": (
        ["all", "--uri", "redis://:s3cret@127.0.0.1:{port}/0", "--output", "{out}"],
        r"^delayq-audit: error: the redis store at redis://127\.0\.0\.1:{port}/0 does not "
        r"answer: .*Connection refused[^\n]*\Z"),
    "as-of-ahead": (["all", "--config-file", "{config}", "--output", "{out}", "--as-of",
                     "2999-01-01T00:00:00Z"], r"later than the store's clock"),
    "output-not-writable": (["all", "--config-file", "{config}", "--output",
                             "{config}/out"], r"cannot write into --output"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_non_zero_with_a_message(case, sqlite_config, tmp_path):
    argv, message = BAD[case]
    values = {"config": str(sqlite_config), "db": str(sqlite_config.parent / "delayq.sqlite"),
              "out": str(tmp_path / "out"), "missing": str(tmp_path / "nowhere"),
              "port": str(free_port())}
    argv = [part.format(**values) for part in argv]
    started = time.monotonic()
    run = run_audit(*argv, cwd=tmp_path, timeout=120)
    assert run.code != 0, f"exit 0 for {argv}; stderr:\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    said = "\n".join(progress_lines(run.stderr))
    assert said.strip(), f"no message on stderr for {argv}"
    escaped = {key: re.escape(value) for key, value in values.items()}
    assert re.search(message.format(**escaped), said), said
    assert not (tmp_path / "out" / "audit.json").exists()
    assert time.monotonic() - started < 60, "bad input should not wait for long"
