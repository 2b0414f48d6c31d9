"""``delayq-audit``'s guard rails, run as a user runs it: the console script in a
subprocess, with the environment a user has (tests/test_audit_server.py's ``run_audit``).

- Nothing to audit (an empty store, a project or queues the store does not have, no
  event before the audit time) is never an all-clear: exit status 3, the reason on
  stderr, and outputs that say "nothing audited" without a figure. When the scope matches
  no queue, Spark is not even started.
- An audit time later than the store's clock, an output directory that cannot be
  written: refused before anything else, exit status 2.
- Relative paths (the configuration file, the SQLite database it names, taken from the
  working directory as the server takes it, the output directory) mean the same from
  Spark's processes as from the working directory delayq-audit started in; a queue of
  ``--queues`` the store does not have is named.
- A successful run says nothing on stderr that is not its own progress: no warning.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import pytest

from delayq.message import NewMessage
from delayq.storage.sqlite.driver import Driver as SqliteDriver
from delayq.synchronous import Synchronous
from tests import spark_session
from tests.audit_helpers import load_audit, parquet_rows, rows
from tests.server import write_config
from tests.test_audit_server import run_audit

PROJECT = "guards"
CLIENT = "5f8e2a4c-93b1-4c7e-8f0a-2d6b1e9c3a70"
# The one line the JVM prints on every start (Spark's launcher adds the module): not
# delayq-audit's, and no configuration turns it off.
JVM_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"

pytestmark = pytest.mark.timeout(300)


def sqlite_store(directory: Path, messages: int) -> Path:
    """A SQLite store in *directory* with *messages* posted to queue ``orders`` (one
    claimed and deleted), named by a configuration file with a relative path."""
    directory.mkdir(parents=True, exist_ok=True)
    driver = Synchronous(SqliteDriver(str(directory / "delayq.sqlite")))
    try:
        if messages:
            ids = driver.messages.post(PROJECT, "orders", CLIENT,
                                       [NewMessage({"n": n}, 3600) for n in range(messages)])
            claim = driver.claims.create(PROJECT, "orders", ttl=60, grace=60, limit=1,
                                 dead_letter=None)
            driver.messages.delete(PROJECT, "orders", ids[0], claim.id)
    finally:
        driver.close()
    return write_config(directory / "delayq.conf", {
        "drivers": {"message_store": "sqlite"},
        "drivers:message_store:sqlite": {"path": "delayq.sqlite"}})


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    return sqlite_store(tmp_path_factory.mktemp("guards") / "store", 3)


@pytest.fixture(scope="module")
def empty(tmp_path_factory) -> Path:
    return sqlite_store(tmp_path_factory.mktemp("guards-empty") / "store", 0)


def said_by_audit(stderr: str) -> list[str]:
    """The lines of stderr that are not Spark's progress bar nor the JVM's one line."""
    lines = stderr.replace("\r", "\n").splitlines()
    return [line for line in lines
            if line.strip() and line != JVM_LINE and not line.startswith("[Stage")]


def assert_nothing_audited(out: Path, reason: str) -> None:
    audit = load_audit(out)
    assert re.search(reason, audit["nothing_audited"]), audit["nothing_audited"]
    assert audit["delay"] == {"queues": []} and audit["dead_letter"] == {"queues": []}
    assert audit["events"] == 0
    assert parquet_rows(out / "delay.parquet") == []
    assert parquet_rows(out / "dead_letter.parquet") == []
    page = (out / "report.html").read_text()
    assert "Nothing audited" in page
    assert html.escape(audit["nothing_audited"]) in page
    # No figure and no verdict: neither a green card nor a count of early deliveries.
    assert 'class="card good"' not in page and "early deliveries" not in page


NOTHING = {
    "empty-store": ("empty", [], r"the store has no queue"),
    "unknown-project": ("filled", ["--project", "nobody"], r"project 'nobody' has no queue"),
    "unknown-queues": ("filled", ["--queues", "ordrs,order"],
                       r"none of the queues ordrs, order"),
}


@pytest.mark.parametrize("case", list(NOTHING))
def test_a_scope_that_matches_nothing_says_so_without_starting_spark(case, filled, empty,
                                                                     tmp_path):
    store, extra, reason = NOTHING[case]
    config = {"filled": filled, "empty": empty}[store]
    out = tmp_path / "out"
    run = run_audit("all", "--config-file", str(config), "--output", str(out), *extra,
                    cwd=config.parent, timeout=120)
    assert run.code == 3, run.stderr
    said = said_by_audit(run.stderr)
    assert any(re.search(reason, line) for line in said), said
    assert not any(line.startswith("delayq-audit: Spark") for line in said), said
    assert "Traceback" not in run.stderr
    assert_nothing_audited(out, reason)


def test_relative_paths_missing_queues_and_no_warnings(filled):
    """Run from the store's directory with every path relative; --queues names one
    queue that is there and one that is not. Then an audit time before the store's
    first event: nothing audited, after Spark read the trail."""
    spark_session.require_java()
    directory = filled.parent
    run = run_audit("delay", "--config-file", filled.name, "--output", "out",
                    "--queues", "orders,ordrs", "--master", "local[2]", cwd=directory)
    assert run.code == 0, run.stderr
    said = said_by_audit(run.stderr)
    assert all(line.startswith("delayq-audit: ") for line in said), said
    assert not any(re.search(r"warn", line, re.IGNORECASE) for line in said), said
    assert any("ordrs" in line for line in said), said

    audit = load_audit(directory / "out")
    assert audit["missing_queues"] == ["ordrs"]
    assert audit["nothing_audited"] is None and audit["events"] == 5
    [row] = rows(audit, "delay")
    assert (row["queue"], row["messages"], row["delayed"]) == ("orders", 3, 0)
    assert "ordrs" in (directory / "out" / "report.html").read_text()

    before = run_audit("all", "--config-file", filled.name, "--output", "before",
                       "--as-of", "1000000000", "--master", "local[2]", cwd=directory)
    assert before.code == 3, before.stderr
    assert_nothing_audited(directory / "before", r"no event at or before 2001-09-09")


def test_an_audit_time_later_than_the_stores_clock_is_refused(filled, tmp_path):
    ahead = time.time() + 3600
    run = run_audit("all", "--config-file", str(filled), "--output", str(tmp_path / "out"),
                    "--as-of", str(ahead), cwd=filled.parent, timeout=120)
    assert run.code == 2, run.stderr
    assert re.search(r"--as-of .* is later than the store's clock", run.stderr), run.stderr
    assert not (tmp_path / "out" / "audit.json").exists()


def test_an_output_directory_that_cannot_be_written_is_refused_first(filled, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = run_audit("all", "--config-file", str(filled), "--output", str(blocker / "out"),
                    cwd=filled.parent, timeout=120)
    assert run.code == 2, run.stderr
    assert re.search(r"cannot write into --output .*a-file/out", run.stderr), run.stderr
    assert "delayq-audit: store:" not in run.stderr, "the store was read first"
