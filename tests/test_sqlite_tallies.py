"""SQLite's tallies (the O(log n) queue counts behind the /metrics gauges): a database
made before them is counted once when a driver first opens it, and a count reads only
the tallies' index, never the messages."""

from __future__ import annotations

import sqlite3

from delayq.message import NewMessage
from delayq.queue import QueueCounts
from delayq.storage.sqlite import sql
from delayq.storage.sqlite.driver import Driver
from delayq.storage.sqlite.tallies import ranges as tally_ranges
from delayq.synchronous import Synchronous
from tests.contract.drivers import FakeClock


def test_an_older_database_is_counted_once_when_first_opened(tmp_path):
    path = str(tmp_path / "old.sqlite")
    clock = FakeClock()
    driver = Synchronous(Driver(path, clock=clock))
    driver.messages.post("p", "q", "c", [NewMessage(body=i, ttl=600, delay=i % 3 * 60)
                                         for i in range(30)])
    driver.claims.create("p", "q", ttl=60, grace=60, limit=4, dead_letter=None)
    driver.close()
    # Undo the tallies, as in a database written by an earlier delayq.
    db = sqlite3.connect(path)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DROP TABLE tallies")
    db.execute("DROP TABLE schema_marks")
    db.commit()
    db.close()

    for _ in range(2):  # the second open must not count them again
        driver = Synchronous(Driver(path, clock=clock))
        counts = driver.queues.counts("p", "q")
        stats = driver.queues.stats("p", "q")
        assert counts == QueueCounts(stats.free, stats.claimed, stats.delayed)
        assert counts == QueueCounts(6, 4, 20)
        driver.close()


def test_a_count_reads_only_the_tallies_index(tmp_path):
    driver = Synchronous(Driver(str(tmp_path / "plan.sqlite")))
    plan = driver.database.db().execute("EXPLAIN QUERY PLAN " + sql.TALLIES_AFTER,
                                {"queue_id": 1, **tally_ranges(1.8e9)}).fetchall()
    details = [row[-1] for row in plan]
    assert details and all("messages" not in d for d in details), details
    reads = [d for d in details if "tallies" in d]
    assert len(reads) == 3 * sql.TALLY_LEVELS, details
    assert all(d.startswith("SEARCH tallies USING INDEX") for d in reads), details
    driver.close()
