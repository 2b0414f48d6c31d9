"""One history with an event of every kind, replayed on two drivers to compare their trails.

The MongoDB and Swift drivers write their events outside the change they record; their
trail of this history must still be, field for field, the one SQLite writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from delayq.broker import Broker
from delayq.storage.base import Driver
from delayq.synchronous import Synchronous
from delayq.validation import Limits, MessageEdit
from tests.contract import helpers as contract
from tests.contract.drivers import DriverSpec, FakeClock, open_driver


def trail_scenario(broker: Broker, clock: FakeClock) -> dict[str, str]:
    """A history with an event of every kind but expired (which drivers whose backend
    expires messages do not write), through *broker*; names of messages and claims -> ids."""
    project = contract.PROJECT
    contract.create(broker, "q", _max_claim_count=1, _dead_letter_queue="dlq",
                    _dead_letter_queue_messages_ttl=300)
    contract.create(broker, "slow", _default_message_delay=30)
    names: dict[str, str] = {}
    [names["delayed"]] = contract.post(broker, "slow", {"wait": 1}, ttl=600)
    [names["worn"]] = contract.post(broker, "q", {"order": 1, "tags": ["a", "b"]}, ttl=900)
    names["first claim"] = contract.claim(broker, "q", limit=1, ttl=60, grace=120).id
    clock.advance(61)
    kept, held, popped, bulk = contract.post(broker, "q", "kept", "held", "popped", "bulk",
                                             ttl=900)
    names.update(kept=kept, held=held, popped=popped, bulk=bulk)
    # Due at 66 instead of 30: the slow claim below still finds it due.
    broker.edit_message(project, "slow", names["delayed"],
                        MessageEdit(body={"wait": 2}, delay=5))
    clock.advance(2)
    second = contract.claim(broker, "q", limit=2, ttl=100, grace=60)  # moves "worn"
    names["second claim"] = second.id
    clock.advance(3)
    broker.delete_message(project, "q", kept, second.id)
    broker.release_message(project, "q", held, second.id, 10)
    broker.delete_messages(project, "q", [bulk, held])
    [names["after"]] = contract.post(broker, "q", "after")
    clock.advance(1)
    broker.pop(project, "q", 5)
    clock.advance(1)
    names["dlq claim"] = contract.claim(broker, "dlq", ttl=60).id
    broker.delete_message(project, "dlq", names["worn"], names["dlq claim"])
    clock.advance(31)
    names["slow claim"] = contract.claim(broker, "slow", ttl=60).id
    clock.advance(1)
    [names["redriven"]] = contract.post(broker, "dlq", "again", ttl=900)
    assert broker.redrive(project, "dlq", destination="q") == 1
    broker.purge_queue(project, "q")
    broker.delete_queue(project, "slow")
    return names


def comparable(driver, names: dict[str, str]) -> list[tuple]:
    """Every queue's trail with ids replaced by their names and bodies parsed."""
    named = {value: name for name, value in names.items()}
    rows = []
    for project, queue in driver.trail.queues(contract.PROJECT):
        for event in driver.trail.events(project, queue):
            row = event.as_row()
            row["message_id"] = named.get(row["message_id"], row["message_id"])
            row["claim_id"] = named.get(row["claim_id"], row["claim_id"])
            row["body"] = json.loads(row["body"]) if row["body"] is not None else None
            rows.append(tuple(row.items()))
    return sorted(rows, key=lambda row: (dict(row)["time"], repr(row)))


def replayed_trail(make_driver: Callable[[FakeClock], Driver], start: float) -> list[tuple]:
    """The trail of the history played on a driver from *make_driver*, clock at *start*."""
    clock = FakeClock(start)
    driver = make_driver(clock)
    return comparable(driver, trail_scenario(Synchronous(Broker(driver.target, Limits())), clock))


def sqlite_trail(directory: Path, start: float) -> list[tuple]:
    """The trail SQLite writes of the history, in a file in *directory*."""
    spec = DriverSpec("sqlite", {"path": str(directory / "trail.sqlite")})
    clock = FakeClock(start)
    driver = Synchronous(open_driver(spec, clock))
    try:
        broker = Synchronous(Broker(driver.target, Limits()))
        return comparable(driver, trail_scenario(broker, clock))
    finally:
        driver.close()
