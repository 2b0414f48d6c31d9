"""The SQLite driver's signals: datagrams between the processes of the database's host.

SQLite notifies no one of a commit, but every process that opens the database runs on
one host (WAL mode needs a local disk), so the processes tell each other. A listening
process binds a Unix datagram socket in Linux's abstract namespace, named
``delayq-signals-TOKEN`` (``TOKEN`` random), and registers it with empty files named
``TOKEN`` in the *signal directory* beside the database, ``PATH-signals/``:

- ``all/TOKEN`` while it listens: it hears every queue's ``SUBSCRIPTIONS``;
- ``queues/DIGEST/TOKEN`` while it also follows a queue (a long-poll waiter, a pusher
  there): it hears the queue's ``MESSAGES``. ``DIGEST`` is a hash of the project and the
  queue name, which may hold any character.

A write transaction keeps the signals of its changes (``Database.signal``) and, once
committed, sends each as one datagram to every socket registered for it. A post to a
queue nobody follows costs one failed directory lookup and wakes no process; each
datagram costs its sender a system call and its receiver a wake-up, paid only where a
waiter or a pusher wants it. A rolled-back transaction sends nothing.

A datagram is the change's letter, the project, a NUL and the queue, in UTF-8. Sending
never blocks: a listener whose buffer is full misses the signal, and its poll intervals
cover it. A registration whose socket refuses (its process died without unregistering)
is removed by the sender that finds it. A socket is bound before it is registered and
unregistered before it is closed, so a refusal always means a dead process.

Any local process may send to an abstract socket: a forged signal costs its receiver one
question to the store, nothing more, as a signal carries no message.

Only Linux has the abstract namespace; elsewhere, and for an in-memory database, the
driver does not signal (``signals`` is False) and the poll intervals apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import sys
import threading
from pathlib import Path

from delayq.storage import base
from delayq.storage.base.signals import Change, Receive, Signal

LOG = logging.getLogger(__name__)

DIRECTORY_SUFFIX = "-signals"
EVERY_QUEUE = "all"  # the registrations of every listener
QUEUES = "queues"  # the registrations per followed queue
ADDRESS_PREFIX = "\0delayq-signals-"
SEPARATOR = b"\0"
CHANGES = {change.value.encode(): change for change in Change}
RECEIVE_SIZE = 4096  # a datagram's most bytes: a project id and a queue name fit
# A registration made while another process removes the same queue's emptied directory
# is tried again, at most this many times.
REGISTER_ATTEMPTS = 5


def supported(path: str) -> bool:
    """Whether processes sharing the database at *path* can signal each other."""
    return (sys.platform == "linux" and path not in ("", ":memory:")
            and not path.startswith("file:"))


class Signals(base.Signals):
    """The signals of the database at *path*: ``send`` (from a committed transaction, any
    thread) and ``listen`` (one task of a process's loop, which also runs ``followed``)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.signals = supported(path)
        self.directory = Path(path + DIRECTORY_SUFFIX)
        # Strings, not Paths: every post of the process looks its queue's directory up.
        self._top = str(self.directory)
        self._every_queue = os.path.join(self.directory, EVERY_QUEUE)
        self._queues = os.path.join(self.directory, QUEUES)
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._token: str | None = None  # set while listening

    def queue_directory(self, project: str, queue: str) -> str:
        digest = hashlib.blake2b(f"{project}\0{queue}".encode(), digest_size=12).hexdigest()
        return os.path.join(self._queues, digest)

    # Sending

    def send(self, signals: list[Signal]) -> None:
        """Send *signals* to the processes registered for them; never blocks, never
        raises."""
        if not self.signals:
            return
        with self._lock:
            for signal in signals:
                if signal.change is Change.MESSAGES:
                    where = self.queue_directory(signal.project, signal.queue)
                else:
                    where = self._every_queue
                try:
                    peers = os.listdir(where)
                except OSError:  # nobody registered
                    continue
                datagram = encode(signal)
                for peer in peers:
                    self._send_one(datagram, where, peer)

    def _send_one(self, datagram: bytes, where: str, peer: str) -> None:
        try:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            self._sender.sendto(datagram, ADDRESS_PREFIX + peer)
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(where, peer))  # its process is gone
        except OSError as exc:  # a full buffer: the listener's poll covers it
            LOG.debug("SQLite signal not sent to %s: %s", peer, exc)

    def close(self) -> None:
        """Close the sending socket; the next ``send`` opens another."""
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None

    # Listening

    async def listen(self, receive: Receive) -> None:
        loop = asyncio.get_running_loop()
        if not self.signals:
            await loop.create_future()  # until cancelled
        token = secrets.token_hex(8)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.bind(ADDRESS_PREFIX + token)
            self._token = token
            ended: asyncio.Future[None] = loop.create_future()
            try:
                register(self._top, self._every_queue, token)
                for project, queue in self.following():
                    register(self._top, self.queue_directory(project, queue), token)
                loop.add_reader(sock.fileno(), _drain, sock, receive, ended)
                await ended  # until cancelled, or the socket fails
            finally:
                loop.remove_reader(sock.fileno())
                self._token = None
                unregister(self._every_queue, token)
                for project, queue in self.following():
                    unregister(self.queue_directory(project, queue), token)

    def followed(self, project: str, queue: str, wanted: bool) -> None:
        token = self._token
        if token is None:  # registered when listening starts
            return
        where = self.queue_directory(project, queue)
        try:
            if wanted:
                register(self._top, where, token)
            else:
                unregister(where, token)
        except OSError as exc:  # the poll interval covers the queue
            LOG.warning("Cannot register for signals of queue %s in %s: %s", queue,
                        where, exc)


def register(top: str, where: str, token: str) -> None:
    """Register *token* in *where*, made if missing, as are the directories from the
    signal directory *top* to it; never *top*'s parent, the database's directory: one
    that is gone must not come back, empty, to be taken for the database."""
    for attempt in range(REGISTER_ATTEMPTS):
        with contextlib.suppress(FileExistsError):
            os.mkdir(top)
        os.makedirs(where, exist_ok=True)
        try:
            Path(where, token).touch()
            return
        except FileNotFoundError:  # another process removed the emptied directory
            if attempt == REGISTER_ATTEMPTS - 1:
                raise


def unregister(where: str, token: str) -> None:
    """Remove *token*'s registration from *where*, and *where* once empty."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(where, token))
    with contextlib.suppress(OSError):  # not empty: others are registered
        os.rmdir(where)


def _drain(sock: socket.socket, receive: Receive, ended: asyncio.Future[None]) -> None:
    """Hand every datagram waiting on *sock* to *receive*."""
    while True:
        try:
            datagram = sock.recv(RECEIVE_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            if not ended.done():
                ended.set_exception(exc)
            return
        signal = decode(datagram)
        if signal is not None:
            receive(signal)


def encode(signal: Signal) -> bytes:
    return (signal.change.value.encode() + signal.project.encode() + SEPARATOR
            + signal.queue.encode())


def decode(datagram: bytes) -> Signal | None:
    """The signal *datagram* carries; None for anything else."""
    change = CHANGES.get(datagram[:1])
    project, separator, queue = datagram[1:].partition(SEPARATOR)
    if change is None or not separator:
        return None
    try:
        return Signal(change, project.decode(), queue.decode())
    except UnicodeDecodeError:
        return None
