"""Child-process work for the Swift crash tests: a driver that dies at one step of a claim
(or holding a tally writer slot).

Each kind changes nothing but *when the process dies*: it wraps one step of the claim,
dead-letter, edit or hand-back protocol (a method of the driver's ``Objects`` or
``Markers``, delayq/storage/swift/objects.py and markers.py) so that the process kills
itself with SIGKILL right after (or, for the last step of a move or the state of a
hand-back, instead of) that step, as a crash would, leaving Swift exactly as that step
left it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from swiftclient.client import Connection

from delayq.broker import Broker
from delayq.idempotency import PostKey
from delayq.message import NewMessage
from delayq.storage.swift.driver import Driver
from delayq.storage.swift.layout import CLAIMED, MESSAGE_PREFIX, Entry, Record
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage, message_edit


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def dies_after(collaborator: Any, step: str, when: Callable[..., bool]) -> None:
    """Make *collaborator*'s method *step* kill the process once it has returned, when
    ``when(result, *arguments)``."""
    done = getattr(collaborator, step)

    def step_then_die(*args: Any) -> Any:
        result = done(*args)
        if when(result, *args):
            die()
        return result

    setattr(collaborator, step, step_then_die)


def after_winning(kind: str) -> Callable[[Driver], None]:
    """Dies once it has won a generation marker of *kind* (a claim's, before writing the
    message's state and moving its index entry; a move's, before marking the message
    moving; an edit's, before rewriting the message)."""
    return lambda driver: dies_after(
        driver._objects, "bid",
        lambda won, container, name, marker, headers: won and marker["kind"] == kind)


def after_writing_the_claim(driver: Driver) -> None:
    """Dies once the claimed message's state is written, before its index entry moves."""
    dies_after(driver._objects, "write_record",
               lambda _, container, message_id, record: bool(record.claim
                                                             and not record.moving))


def after_the_new_entry(driver: Driver) -> None:
    """Dies once the claimed message's new index entry is written, before the old one is
    deleted."""
    dies_after(driver._objects, "put_entry",
               lambda _, container, entry: entry.state == CLAIMED)


def after_marking_moving(driver: Driver) -> None:
    """Dies once the source message is marked moving, before the copy."""
    dies_after(driver._objects, "write_record",
               lambda _, container, message_id, record: bool(record.moving))


def after_copying(driver: Driver) -> None:
    """Dies once the message is copied into the dead-letter queue, before its index entry
    there is written."""
    dies_after(driver._objects, "create",
               lambda _, container, name, body, headers: name.startswith(MESSAGE_PREFIX))


def before_deleting_the_source(driver: Driver) -> None:
    """Dies once the copy and its index entry are in the dead-letter queue, before the
    message is deleted from the source."""

    def leave_source(source: str, message_id: str, record: Record, met: Entry | None
                     ) -> None:
        die()

    driver._markers.leave_source = leave_source


def after_rewriting_the_edited(driver: Driver) -> None:
    """Dies once the edited message is rewritten, before its index entry moves (an
    edit's move is the one that bumps the generation and keeps the claim count)."""
    objects = driver._objects
    move_entry = objects.move_entry

    def dying_move_entry(container: str, message_id: str, old: Entry, new: Entry) -> bool:
        if new.generation > old.generation and new.count == old.count:
            die()
        return move_entry(container, message_id, old, new)

    objects.move_entry = dying_move_entry


def after_the_key_bid(driver: Driver) -> None:
    """Dies once it has won the bid for a keyed post's key object, before any message."""
    dies_after(driver._objects, "bid",
               lambda won, container, name, post, headers: won and name.startswith("i/"))


def after_the_first_message(driver: Driver) -> None:
    """Dies once one message object of a keyed post is created (phase 1 under way)."""
    dies_after(driver._objects, "create",
               lambda created, container, name, body, headers:
               name.startswith(MESSAGE_PREFIX))


def after_marking_visible(driver: Driver) -> None:
    """Dies once a keyed post's messages are all created and its key object says so,
    before any index entry is written (phase 2 not begun)."""
    mark = driver._post_keys._mark

    def mark_then_die(container: str, name: str, state: str, until: str) -> None:
        mark(container, name, state, until)
        if state == "visible":
            die()

    driver._post_keys._mark = mark_then_die


def before_writing_the_released(driver: Driver) -> None:
    """Dies once the claim's marker says the handed-back message is released, before the
    message's state does."""

    def write_record(container: str, message_id: str, record: Record) -> None:
        die()

    driver._objects.write_record = write_record


def after_writing_the_released(driver: Driver) -> None:
    """Dies once the handed-back message's state is written, before its index entry
    moves."""
    dies_after(driver._objects, "write_record",
               lambda _, container, message_id, record: not record.claim)


KINDS: dict[str, Callable[[Driver], None]] = {
    "after-key-bid": after_the_key_bid,
    "after-first-message": after_the_first_message,
    "after-visible": after_marking_visible,
    "after-claim-bid": after_winning("claim"),
    "after-claim-record": after_writing_the_claim,
    "after-claim-entry": after_the_new_entry,
    "after-move-bid": after_winning("move"),
    "after-moving-mark": after_marking_moving,
    "after-copy": after_copying,
    "before-source-delete": before_deleting_the_source,
    "after-edit-bid": after_winning("edit"),
    "after-edit-write": after_rewriting_the_edited,
    "after-hand-back-marker": before_writing_the_released,
    "after-hand-back-record": after_writing_the_released}


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
    driver = Synchronous(Driver(connector(auth), prefix=prefix, clock=FixedClock(now)))
    KINDS[kind](driver)
    return Synchronous(Broker(driver.target, Limits()))


def tally_and_die(auth: tuple[str, str, str], prefix: str, project: str, queue: str,
                  now: float, client: str, lease: int) -> None:
    """Post two delayed messages to *queue* at time *now*, write their tallies under a
    writer slot leased for *lease* seconds, and die holding it (no close: the lease is
    left to expire)."""
    driver = Synchronous(Driver(connector(auth), prefix=prefix, clock=FixedClock(now),
                    tally_flush_interval=3600.0, tally_writer_lease=lease))
    driver.messages.post(project, queue, client,
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


def hand_back_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                      queue: str, now: float, message_id: str, claim_id: str, delay: float
                      ) -> None:
    """Hand *message_id* back from claim *claim_id* with *delay* at time *now*, with a
    driver that dies at *kind*."""
    dying_broker(kind, auth, prefix, now).release_message(project, queue, message_id,
                                                          claim_id, delay)
    raise SystemExit("the hand-back finished without reaching the crash point")


def edit_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                 queue: str, now: float, message_id: str, document: dict[str, Any]
                 ) -> None:
    """Edit *message_id* of *queue* at time *now* as *document* (a client's PATCH body)
    with a driver that dies at *kind*."""
    broker = dying_broker(kind, auth, prefix, now)
    broker.edit_message(project, queue, message_id, message_edit(document, broker.limits))
    raise SystemExit("the edit finished without reaching the crash point")


def keyed_post_and_die(kind: str, auth: tuple[str, str, str], prefix: str, project: str,
                       queue: str, now: float, key: PostKey, bodies: list[Any]) -> None:
    """Post *bodies* to *queue* under *key* at time *now* with a driver that dies at
    *kind*."""
    broker = dying_broker(kind, auth, prefix, now)
    broker.post(project, queue, "keyed-producer", [PostedMessage(b, None, None)
                                                   for b in bodies], size=0, key=key)
    raise SystemExit("the post finished without reaching the crash point")
