"""The SQLite driver's signals (``delayq.storage.sqlite.signals``): who is registered
for what in the signal directory, and what a sender does with a dead registration."""

from __future__ import annotations

import asyncio
import os
import socket

from delayq.storage.base.signals import Change, Signal
from delayq.storage.sqlite.signals import ADDRESS_PREFIX, EVERY_QUEUE, Signals, decode


def registrations(signals: Signals, project: str, queue: str) -> list[str]:
    where = signals.queue_directory(project, queue)
    return sorted(os.listdir(where)) if os.path.isdir(where) else []


def test_a_listener_is_registered_for_the_queues_it_follows_while_it_listens(tmp_path):
    async def scenario() -> None:
        signals = Signals(str(tmp_path / "db.sqlite"))
        received: list[Signal] = []
        signals.follow("p", "before")
        task = asyncio.get_running_loop().create_task(signals.listen(received.append))
        await asyncio.sleep(0.01)
        assert len(registrations(signals, "p", "before")) == 1
        assert registrations(signals, "p", "after") == []
        signals.follow("p", "after")
        assert len(registrations(signals, "p", "after")) == 1
        assert len(os.listdir(signals.directory / EVERY_QUEUE)) == 1

        signals.send([Signal(Change.MESSAGES, "p", "after"),
                      Signal(Change.MESSAGES, "p", "nobody follows this"),
                      Signal(Change.SUBSCRIPTIONS, "p", "any")])
        for _ in range(100):
            if len(received) == 2:
                break
            await asyncio.sleep(0.01)
        assert received == [Signal(Change.MESSAGES, "p", "after"),
                            Signal(Change.SUBSCRIPTIONS, "p", "any")]

        signals.unfollow("p", "after")
        assert registrations(signals, "p", "after") == []
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert registrations(signals, "p", "before") == []
        assert not (signals.directory / EVERY_QUEUE).exists()
        signals.close()

    asyncio.run(scenario())


def test_a_sender_removes_the_registration_of_a_process_gone(tmp_path):
    signals = Signals(str(tmp_path / "db.sqlite"))
    where = signals.queue_directory("p", "q")
    os.makedirs(where)
    open(os.path.join(where, "deadbeefdeadbeef"), "w").close()  # nobody binds it
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as alive:
        alive.bind(ADDRESS_PREFIX + "0123456789abcdef")
        open(os.path.join(where, "0123456789abcdef"), "w").close()
        signals.send([Signal(Change.MESSAGES, "p", "q")])
        assert os.listdir(where) == ["0123456789abcdef"]
        assert decode(alive.recv(4096)) == Signal(Change.MESSAGES, "p", "q")
    signals.close()


def test_a_datagram_that_is_not_a_signal_is_ignored():
    assert decode(b"") is None
    assert decode(b"xproject\0queue") is None
    assert decode(b"mno separator") is None
    assert decode(b"m\xff\0queue") is None
    assert decode(b"sproj\0q") == Signal(Change.SUBSCRIPTIONS, "proj", "q")
