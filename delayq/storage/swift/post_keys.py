"""The Swift driver's idempotency keys (``delayq.idempotency``): a keyed post, written so
that its key and its messages are stored together or not at all.

Swift writes one object atomically and nothing more, so the key object itself,
``i/<sha256 of the key>`` in the queue's container (``layout.py``), is the post: won by a
bid (``Objects.bid``) before any message is written, it holds every message of the post
(id, state, body) and the post's digest and ids. From the moment it stands, the post is
decided; its messages are then written from it in two phases that anyone can complete:

1. ``posting``: each message object is created (``If-None-Match: *``), without index
   entry, so no claim, pop or redrive can reach it yet; then the key object is marked
   ``visible``, and the messages are counted (tallies) and recorded (``posted``
   events).
2. ``visible``: each message still there gets the index entry its state calls for; then
   the key object is marked ``posted``.

The process that won the bid runs both phases. A post that dies part way leaves the key
object in phase 1 or 2; a repeat of the post (any request meeting the key) waits for
``ROLL_FORWARD_AFTER`` seconds from the bid, then completes it, and is answered with the
post's ids. A message is created in phase 1 only, while no claim can have met it: one
missing in phase 2 was deleted by a client, and stays deleted. The request that ends
phase 1 counts and records the post: a process dying right after it loses them (as any
request's counts and events die with it on Swift), and two requests ending phase 1
together (the post's own, slower than ``ROLL_FORWARD_AFTER``, and a repeat) both count
it. A bid lost to another post under the same key makes the post a repeat of that one.

The one way a message of a keyed post can be stored twice: a post dies in phase 1, a
client deletes one of the message objects written by then through its id (found in a
listing: no claim can take it), and a repeat of the post then creates it again. Until
the repeat comes, the messages written in phase 1 show in listings and reads by id but
no claim takes them; with no repeat within the window, they stay so until they expire.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import events
from delayq.idempotency import PostKey, StoredKey
from delayq.message import NewMessage
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Record
from delayq.storage.swift.objects import Objects, delete_at, is_status, unavailable
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.tallies import Tallies

KEY_PREFIX = "i/"
STATE_HEADER = "X-Object-Meta-State"
POSTING, VISIBLE, POSTED = "posting", "visible", "posted"
# Seconds after its bid before a repeat completes a post still under way: the post's own
# request normally finishes it well within them.
ROLL_FORWARD_AFTER = 5.0
WAIT_STEP = 0.1  # seconds between two reads of a key object being completed


def key_name(key: str) -> str:
    """The key object of *key*: its digest, so any key makes a plain object name."""
    return KEY_PREFIX + hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyObject:
    """A key object as read: the post it decided, its state, its X-Delete-At."""

    post: dict[str, Any]
    state: str
    delete_at: str

    @property
    def stored(self) -> StoredKey:
        return StoredKey(self.post["digest"], self.post["ids"])

    def kept_at(self, now: int) -> bool:
        """Whether the key is kept at *now* (µs): its window is not over."""
        return self.post["at"] + self.post["window"] * US > now


class PostKeys:
    """Keyed posts into the queues of *objects*; *now* reads the clock (µs), *new_id*
    makes a message id."""

    def __init__(self, objects: Objects, tallies: Tallies, recorder: Recorder,
                 new_id: Callable[[int], str], now: Callable[[], int]) -> None:
        self._objects = objects
        self._tallies = tallies
        self._recorder = recorder
        self._new_id = new_id
        self._now = now

    def kept(self, project: str, queue: str, key: str, now: int) -> StoredKey | None:
        """What the queue keeps of *key*, the post it decided completed first; None when
        it keeps no such key (a key object whose window is over is deleted).

        One GET, without the rechecks of a 404 (``Objects.unless_absent``): a false
        "absent" makes the post bid for a key object that exists, lose, and be a repeat.
        """
        container = self._objects.container(project, queue)
        name = key_name(key)
        try:
            found = self._parse(*self._objects.swift.get_object(container, name))
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            return None
        if found.kept_at(now):
            return self._completed(project, queue, name, found).stored
        try:  # only this one, never a newer post's: X-If-Delete-At
            self._objects.swift.delete_object(container, name,
                                              headers={"X-If-Delete-At": found.delete_at})
        except ClientException as exc:
            if not is_status(exc, 404, 409, 412):
                raise
        return None

    def post(self, project: str, queue: str, client_id: str, messages: list[NewMessage],
             key: PostKey, now: int, create_queue: Callable[[], object]
             ) -> list[str] | StoredKey:
        """Decide the post by winning its key object's bid, then write it; its ids, or
        what is kept when another post under the key won. *create_queue* creates the
        queue when it is missing (under the queue quota)."""
        container = self._objects.container(project, queue)
        name = key_name(key.key)
        records = []
        for message in messages:
            record = Record(ttl=message.ttl, created=now, due=now + round(message.delay * US),
                            client=client_id, expires=now + message.ttl * US)
            records.append([self._new_id(now), record.headers(),
                            lay.encode(message.body).decode()])
        post: dict[str, Any] = {"digest": key.digest, "ids": [r[0] for r in records],
                                "at": now, "window": key.window, "messages": records}
        until = {"X-Delete-At": delete_at(now + key.window * US)}
        try:
            won = self._objects.bid(container, name, post, until)
        except ClientException as exc:
            if not is_status(exc, 404):
                raise
            create_queue()
            won = self._objects.bid(container, name, post, until)
        found = self._read(container, name, queue)
        if not won:
            return self._completed(project, queue, name, found).stored
        self._complete(project, queue, name, found)
        return post["ids"]

    @staticmethod
    def _parse(headers: dict[str, str], body: bytes) -> KeyObject:
        return KeyObject(json.loads(body), headers.get(STATE_HEADER.lower(), POSTING),
                         headers.get("x-delete-at", ""))

    def _read(self, container: str, name: str, queue: str) -> KeyObject:
        """The key object *name*, which a bid has made."""
        found = self._objects.get(container, name, newest=True)
        if found is None:
            raise unavailable.error(f"The key object of a post to queue {queue!r} went "
                                    "away as it was written (the queue was deleted "
                                    "meanwhile); retry.")
        return self._parse(*found)

    def _completed(self, project: str, queue: str, name: str, found: KeyObject
                   ) -> KeyObject:
        """*found*, its post completed: waited for while young, then done here."""
        container = self._objects.container(project, queue)
        while found.state != POSTED:
            if self._now() < found.post["at"] + ROLL_FORWARD_AFTER * US:
                time.sleep(WAIT_STEP)
                found = self._read(container, name, queue)
                continue
            self._complete(project, queue, name, found)
            break
        return found

    def _complete(self, project: str, queue: str, name: str, found: KeyObject) -> None:
        """Run the phases of *found*'s post that are not done yet (see the module)."""
        container = self._objects.container(project, queue)
        messages = found.post["messages"]
        if found.state == POSTING:
            self._create_messages(container, messages)
            self._mark(container, name, VISIBLE, found.delete_at)
            self._count(project, queue, messages, found.post["at"])
        for message_id, headers, _ in messages:
            record = (Record.from_headers(headers) if found.state == POSTING
                      else self._objects.read_record(container, message_id))
            if record is not None:
                self._objects.put_entry(container, record.entry(message_id))
        self._mark(container, name, POSTED, found.delete_at)

    def _create_messages(self, container: str, messages: list) -> None:
        """Phase 1: create each message object not created yet."""
        self._objects.parallel(lambda item: self._objects.create(
            container, lay.message_name(item[0]), item[2].encode(),
            {**item[1], "Content-Type": "application/json",
             "X-Delete-At": self._objects.stored_until(
                 int(item[1][lay.META_HEADER + "expires"]))}), messages)

    def _count(self, project: str, queue: str, messages: list, now: int) -> None:
        """Count the post's messages in the tallies and record them in the trail, once
        phase 1 is done (by whoever did it)."""
        records = [(message_id, Record.from_headers(headers))
                   for message_id, headers, _ in messages]
        for _, record in records:
            self._tallies.tally(project, queue, None, record)
        self._recorder.record(project, queue, now, [
            self._recorder.event(project, queue, events.POSTED, now, message_id=message_id,
                              due=record.due / US, ttl=record.ttl,
                              expires=record.expires / US)
            for message_id, record in records])

    def _mark(self, container: str, name: str, state: str, until: str) -> None:
        self._objects.swift.post_object(container, name,
                                        headers={STATE_HEADER: state, "X-Delete-At": until})
