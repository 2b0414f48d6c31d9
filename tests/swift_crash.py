"""Child-process work for the Swift crash tests: a driver that dies at one step of a claim
(or holding a tally writer slot).

The subclasses change nothing but *when the process dies*: each kills itself with SIGKILL
right after one step of the claim or dead-letter protocol (delayq/storage/swift/driver.py),
as a crash would, leaving Swift exactly as that step left it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from swiftclient.client import Connection

from delayq.broker import Broker
from delayq.message import NewMessage
from delayq.storage.swift.driver import Driver
from delayq.storage.swift.layout import CLAIMED, MESSAGE_PREFIX, Entry, Record
from delayq.validation import Limits, message_edit


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DiesAfterWinningAClaim(Driver):
    """Dies once it has won a claim's generation marker, before writing the message's
    state and moving its index entry."""

    def _bid(self, container: str, name: str, marker: dict[str, Any],
             headers: dict[str, str]) -> bool:
        won = super()._bid(container, name, marker, headers)
        if won and marker["kind"] == "claim":
            die()
        return won


class DiesAfterWritingTheClaim(Driver):
    """Dies once the claimed message's state is written, before its index entry moves."""

    def _write_record(self, container: str, message_id: str, record: Record) -> None:
        super()._write_record(container, message_id, record)
        if record.claim and not record.moving:
            die()


class DiesAfterTheNewEntry(Driver):
    """Dies once the claimed message's new index entry is written, before the old one is
    deleted."""

    def _put_entry(self, container: str, entry: Entry) -> None:
        super()._put_entry(container, entry)
        if entry.state == CLAIMED:
            die()


class DiesAfterWinningAMove(Driver):
    """Dies once it has won a move's generation marker, before marking the message moving."""

    def _bid(self, container: str, name: str, marker: dict[str, Any],
             headers: dict[str, str]) -> bool:
        won = super()._bid(container, name, marker, headers)
        if won and marker["kind"] == "move":
            die()
        return won


class DiesAfterMarkingMoving(Driver):
    """Dies once the source message is marked moving, before the copy."""

    def _write_record(self, container: str, message_id: str, record: Record) -> None:
        super()._write_record(container, message_id, record)
        if record.moving:
            die()


class DiesAfterCopying(Driver):
    """Dies once the message is copied into the dead-letter queue, before its index entry
    there is written."""

    def _create(self, container: str, name: str, body: bytes, headers: dict[str, str]
                ) -> bool:
        created = super()._create(container, name, body, headers)
        if name.startswith(MESSAGE_PREFIX):
            die()
        return created


class DiesBeforeDeletingTheSource(Driver):
    """Dies once the copy and its index entry are in the dead-letter queue, before the
    message is deleted from the source."""

    def _leave_source(self, source: str, message_id: str, record: Record,
                      met: Entry | None) -> None:
        die()


class DiesAfterWinningAnEdit(Driver):
    """Dies once it has won an edit's generation marker, before rewriting the message."""

    def _bid(self, container: str, name: str, marker: dict[str, Any],
             headers: dict[str, str]) -> bool:
        won = super()._bid(container, name, marker, headers)
        if won and marker["kind"] == "edit":
            die()
        return won


class DiesAfterRewritingTheEdited(Driver):
    """Dies once the edited message is rewritten, before its index entry moves (an
    edit's move is the one that bumps the generation and keeps the claim count)."""

    def _move_entry(self, container: str, message_id: str, old: Entry, new: Entry
                    ) -> bool:
        if new.generation > old.generation and new.count == old.count:
            die()
        return super()._move_entry(container, message_id, old, new)


KINDS = {"after-claim-bid": DiesAfterWinningAClaim,
         "after-claim-record": DiesAfterWritingTheClaim,
         "after-claim-entry": DiesAfterTheNewEntry,
         "after-move-bid": DiesAfterWinningAMove,
         "after-moving-mark": DiesAfterMarkingMoving,
         "after-copy": DiesAfterCopying,
         "before-source-delete": DiesBeforeDeletingTheSource,
         "after-edit-bid": DiesAfterWinningAnEdit,
         "after-edit-write": DiesAfterRewritingTheEdited}


class FixedClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def connector(auth: tuple[str, str, str]) -> Callable[[], Connection]:
    auth_url, user, key = auth

    def connect() -> Connection:
        return Connection(authurl=auth_url, user=user, key=key, retries=0, timeout=30)

    return connect


def dying_broker(kind: str, auth: tuple[str, str, str], prefix: str, now: float
                 ) -> Broker:
    """A broker at time *now* over a driver that dies at *kind*."""
    return Broker(KINDS[kind](connector(auth), prefix=prefix, clock=FixedClock(now)),
                  Limits())


def tally_and_die(auth: tuple[str, str, str], prefix: str, project: str, queue: str,
                  now: float, client: str, lease: int) -> None:
    """Post two delayed messages to *queue* at time *now*, write their tallies under a
    writer slot leased for *lease* seconds, and die holding it (no close: the lease is
    left to expire)."""
    driver = Driver(connector(auth), prefix=prefix, clock=FixedClock(now),
                    tally_flush_interval=3600.0, tally_writer_lease=lease)
    driver.post_messages(project, queue, client,
                         [NewMessage({"n": n}, 3600, 60) for n in range(2)])
    driver.flush_tallies()
    die()


def claim_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                  queue: str, now: float) -> None:
    """Claim one message of *queue* at time *now* with a driver that dies at *kind*."""
    dying_broker(kind, auth, prefix, now).claim(project, queue, ttl=60, grace=60, limit=1)
    raise SystemExit("the claim finished without reaching the crash point")


def redrive_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                    queue: str, now: float) -> None:
    """Redrive one message of *queue* at time *now* with a driver that dies at *kind*."""
    dying_broker(kind, auth, prefix, now).redrive(project, queue, limit=1)
    raise SystemExit("the redrive finished without reaching the crash point")


def edit_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                 queue: str, now: float, message_id: str, document: dict[str, Any]
                 ) -> None:
    """Edit *message_id* of *queue* at time *now* as *document* (a client's PATCH body)
    with a driver that dies at *kind*."""
    broker = dying_broker(kind, auth, prefix, now)
    broker.edit_message(project, queue, message_id, message_edit(document, broker.limits))
    raise SystemExit("the edit finished without reaching the crash point")
