"""The SQLite driver's signals: datagrams between the processes of the database's host.

SQLite notifies no one of a commit, but every process that opens the database runs on
one host (WAL mode needs a local disk), so the processes tell each other. Each listening
process binds a Unix datagram socket in Linux's abstract namespace, named
``delayq-signals-TOKEN`` (``TOKEN`` random), and registers it as an empty file ``TOKEN`` in
the *signal directory* beside the database, ``PATH-signals/``. A write transaction keeps
the signals of its changes (``Database.signal``) and, once committed, sends each as one
datagram to every registered socket: a few microseconds a socket, no poll, no write to
the database. A rolled-back transaction sends nothing.

A datagram is the change's letter, the project, a NUL and the queue, in UTF-8. Sending
never blocks: a listener whose buffer is full misses the signal, and its poll intervals
cover it. A registration whose socket refuses (its process died without unregistering)
is removed by the sender that finds it. The socket is bound before it is registered, so
a sender never finds a registered socket that is not yet listening.

Any local process may send to an abstract socket: a forged signal costs its receiver one
question to the store, nothing more, as a signal carries no message.

Only Linux has the abstract namespace; elsewhere, and for an in-memory database, the
driver does not signal (``signals`` is False) and the poll intervals apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

from delayq.storage import base
from delayq.storage.base.signals import Change, Receive, Signal

LOG = logging.getLogger(__name__)

DIRECTORY_SUFFIX = "-signals"
ADDRESS_PREFIX = "\0delayq-signals-"
# A sender reads the registrations again when the directory changes, and at least this
# often: a filesystem whose modification times are coarse may not show a registration
# made within the same tick as the last reading.
PEERS_MAX_AGE = 1.0
SEPARATOR = b"\0"
CHANGES = {change.value.encode(): change for change in Change}
RECEIVE_SIZE = 4096  # a datagram's most bytes: a project id and a queue name fit


def supported(path: str) -> bool:
    """Whether processes sharing the database at *path* can signal each other."""
    return sys.platform == "linux" and path not in ("", ":memory:") and not path.startswith(
        "file:")


class Signals(base.Signals):
    """The signals of the database at *path*: ``send`` (from a committed transaction, any
    thread) and ``listen`` (one task of a process's loop)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.signals = supported(path)
        self.directory = Path(path + DIRECTORY_SUFFIX)
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._peers: list[str] = []
        self._peers_stamp: tuple[int, float] | None = None  # (directory mtime, when read)

    # Sending

    def send(self, signals: list[Signal]) -> None:
        """Send *signals* to every listening process; never blocks, never raises."""
        if not self.signals or not signals:
            return
        datagrams = [encode(signal) for signal in signals]
        with self._lock:
            try:
                peers = self._current_peers()
                sender = self._sender_socket()
            except OSError as exc:
                LOG.debug("SQLite signals not sent: %s", exc)
                return
            for peer in list(peers):
                for datagram in datagrams:
                    try:
                        sender.sendto(datagram, ADDRESS_PREFIX + peer)
                    except (ConnectionRefusedError, FileNotFoundError):
                        self._unregister(peer)  # its process is gone
                        break
                    except OSError:  # a full buffer: the listener's poll covers it
                        break

    def _sender_socket(self) -> socket.socket:
        if self._sender is None:
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sender.setblocking(False)
            self._sender = sender
        return self._sender

    def _current_peers(self) -> list[str]:
        try:
            mtime = os.stat(self.directory).st_mtime_ns
        except FileNotFoundError:
            return []
        now = time.monotonic()
        stamp = self._peers_stamp
        if stamp is None or stamp[0] != mtime or now - stamp[1] > PEERS_MAX_AGE:
            self._peers = [entry.name for entry in os.scandir(self.directory)]
            self._peers_stamp = (mtime, now)
        return self._peers

    def _unregister(self, peer: str) -> None:
        with contextlib.suppress(OSError):
            (self.directory / peer).unlink()
        with contextlib.suppress(ValueError):
            self._peers.remove(peer)

    def close(self) -> None:
        """Close the sending socket; the next ``send`` opens another."""
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None

    # Listening

    async def listen(self, receive: Receive) -> None:
        if not self.signals:
            await asyncio.get_running_loop().create_future()  # until cancelled
        loop = asyncio.get_running_loop()
        token = secrets.token_hex(8)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.bind(ADDRESS_PREFIX + token)
            self.directory.mkdir(exist_ok=True)
            registration = self.directory / token
            registration.touch()
            ended = loop.create_future()
            loop.add_reader(sock.fileno(), _drain, sock, receive, ended)
            try:
                await ended  # until cancelled, or the socket fails
            finally:
                loop.remove_reader(sock.fileno())
                with contextlib.suppress(OSError):
                    registration.unlink()


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
