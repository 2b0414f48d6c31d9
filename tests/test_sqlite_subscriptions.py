"""A SQLite database made before subscriptions were confirmed: opened by this release,
its subscriptions read as confirmed (as Zaqar reads its records without the field), and
new ones store their state."""

from __future__ import annotations

import sqlite3

from delayq.storage.sqlite.driver import Driver
from delayq.subscription import SubscriptionChange
from delayq.synchronous import Synchronous

OLD_TABLE = """CREATE TABLE subscriptions (
    id TEXT PRIMARY KEY, project TEXT NOT NULL, queue TEXT NOT NULL,
    subscriber TEXT NOT NULL, ttl INTEGER NOT NULL, options TEXT NOT NULL,
    created REAL NOT NULL, expires REAL NOT NULL)"""


def test_an_older_database_gains_the_confirmed_column(tmp_path):
    path = str(tmp_path / "old.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(OLD_TABLE)
        db.execute("INSERT INTO subscriptions VALUES ('a' || hex(randomblob(15)), 'p', 'q', "
                   "'http://h.example/', 3600, '{}', 0, 9e12)")
    driver = Synchronous(Driver(path))
    try:
        [old] = driver.subscriptions.page("p", "q", None, 10)
        assert old.confirmed is True
        new = driver.subscriptions.create("p", "q", "http://i.example/", 60, {},
                                          confirmed=False)
        assert driver.subscriptions.get("p", "q", new).confirmed is False
        driver.subscriptions.update("p", "q", new, SubscriptionChange(confirmed=True))
        assert driver.subscriptions.get("p", "q", new).confirmed is True
    finally:
        driver.close()
    # Opened again (another worker, a restart): the column is not added twice.
    again = Synchronous(Driver(path))
    try:
        assert len(again.subscriptions.page("p", "q", None, 10)) == 2
    finally:
        again.close()
