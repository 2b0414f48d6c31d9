"""Script calls on a connection of the calling thread's own (single Redis server).

Every transition of the driver is one ``EVALSHA``, and a request usually makes one. Sent
through redis-py's command machinery (the pool's lock and bookkeeping, the retry
wrapper, argument filtering, health checks, its parser's read loop), that call costs
several times the CPU of the round trip itself, a large share of what a whole request
costs the server. A ``ScriptLink`` keeps one redis-py ``Connection`` per thread (of the
client's pool's class and settings, so host, password, TLS and database are the
client's). redis-py connects it and makes the handshake; the link then writes each
packed command to its socket and reads the reply with a ``hiredis.Reader`` of its own,
whose error replies are redis-py's exception classes (``parse_error``), so callers see
what redis-py would raise. The API's threads live as long as its worker, so these
connections are as many as the threads that call scripts; one whose thread has ended is
closed when another thread makes its own.

What the client's own path did is kept:

- a timeout raises redis-py's ``TimeoutError`` and a failed read or write its
  ``ConnectionError``; either closes the connection, so a late reply is never read as
  the answer to another command;
- a connection error on a connection that served a call before (Redis restarted, an
  idle connection cut by a firewall) is retried once on a new connection, as the
  client's ``Retry`` did; a timeout is not (the script may have run);
- a script Redis no longer knows (``NOSCRIPT``, after a restart without persistence or
  a ``SCRIPT FLUSH``) is loaded and called again.

A Redis Cluster routes each call by its key's slot: its clients keep redis-py's path.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from typing import Any

import hiredis
from redis import exceptions
from redis.connection import Connection, ConnectionPool

# How these connections show in CLIENT LIST (set once, as each connects).
CLIENT_NAME = "delayq-scripts"
# Bytes read from the socket at a time: a claim's reply for a few messages fits.
READ_SIZE = 65536


class _Line:
    """One thread's connection, its socket once connected and the reader of its replies."""

    __slots__ = ("conn", "sock", "reader", "buffer", "used")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.sock: socket.socket | None = None
        self.reader: Any = None
        self.buffer = bytearray(READ_SIZE)
        self.used = False  # a call succeeded on the current connection

    def open(self) -> socket.socket:
        """The connected socket, connecting (and making the handshake) if need be."""
        conn = self.conn
        conn.connect()
        # redis-py's parser read the handshake's replies; this reader starts empty, at
        # the first reply after them.
        self.reader = hiredis.Reader(protocolError=exceptions.InvalidResponse,
                                     replyError=conn._parser.parse_error)
        self.sock = kernel_timeouts(conn._sock)
        self.used = False
        return self.sock

    def drop(self) -> None:
        """Close the connection: whatever it was in the middle of is abandoned."""
        self.sock = self.reader = None
        self.conn.disconnect()


class ScriptLink:
    """``EVALSHA`` calls over per-thread connections of *pool*."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._local = threading.local()
        self._lock = threading.Lock()
        self._lines: dict[int, _Line] = {}  # by thread ident

    def _new_line(self) -> _Line:
        """This thread's line, made at its first call."""
        line = _Line(self._pool.connection_class(
            **{**self._pool.connection_kwargs, "client_name": CLIENT_NAME}))
        with self._lock:
            alive = {thread.ident for thread in threading.enumerate()}
            for ident in [i for i in self._lines if i not in alive]:
                self._lines.pop(ident).drop()
            # An ended thread's ident may be this thread's now.
            replaced = self._lines.pop(threading.get_ident(), None)
            if replaced is not None:
                replaced.drop()
            self._lines[threading.get_ident()] = line
        self._local.line = line
        return line

    def evalsha(self, sha: str, script: str, keys: list[Any], args: list[Any]) -> Any:
        """The reply of script *sha* (source *script*, loaded again if Redis lost it)."""
        command = hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))
        try:
            line = self._local.line
        except AttributeError:
            line = self._new_line()
        # call(line, command), written out: this is every script call's path.
        try:
            return round_trip(line, command)
        except exceptions.NoScriptError:
            pass
        except exceptions.ConnectionError:
            if not line.used:
                raise
            try:
                return round_trip(line, command)  # on a new connection
            except exceptions.NoScriptError:  # a restarted Redis may have lost it
                pass
        call(line, hiredis.pack_command(("SCRIPT", "LOAD", script)))
        return call(line, command)

    def close(self) -> None:
        """Disconnect every thread's connection (each reconnects if used again)."""
        with self._lock:
            for line in self._lines.values():
                line.drop()


def call(line: _Line, command: bytes) -> Any:
    """The reply to *command*, sent again on a new connection if the line's connection,
    which had served a call before, turns out broken (Redis restarted, a firewall cut an
    idle connection)."""
    try:
        return round_trip(line, command)
    except exceptions.ConnectionError:
        # redis-py's TimeoutError is not a ConnectionError: a timed-out script may have
        # run, so it is never sent again.
        if not line.used:
            raise
        return round_trip(line, command)  # on a new connection


def round_trip(line: _Line, command: bytes) -> Any:
    """Send *command* on *line* and return its reply; raise an error reply as redis-py
    would, and close the connection on any failure of the socket."""
    sock = line.sock or line.open()
    reader = line.reader
    try:
        sock.sendall(command)
        reply = reader.gets()
        while reply is False:  # RESP2 has no booleans: False is "not enough data yet"
            read = sock.recv_into(line.buffer)
            if not read:
                raise exceptions.ConnectionError("Connection closed by server.")
            reader.feed(line.buffer, 0, read)
            reply = reader.gets()
    except (TimeoutError, BlockingIOError) as exc:  # Python's timeout; the kernel's
        line.drop()
        raise exceptions.TimeoutError(f"Timeout talking to Redis: {exc}") from exc
    except OSError as exc:
        line.drop()
        raise exceptions.ConnectionError(f"Error talking to Redis: {exc}") from exc
    except BaseException:
        line.drop()
        raise
    line.used = True
    if isinstance(reply, Exception):
        raise reply
    return reply


def kernel_timeouts(sock: socket.socket) -> socket.socket:
    """*sock* in blocking mode, its timeout kept by the kernel (``SO_RCVTIMEO`` and
    ``SO_SNDTIMEO``): a read or write that waits that long fails with ``EAGAIN``
    (``BlockingIOError``).

    On a socket with a Python timeout, CPython calls ``poll()`` before every send and
    receive: two system calls of the four a script call makes. TLS sockets keep Python's
    timeout, since OpenSSL reports the kernel's as a want-read error.
    """
    timeout = sock.gettimeout()
    if timeout is None or isinstance(sock, ssl.SSLSocket):
        return sock
    seconds = int(timeout)
    timeval = struct.pack("ll", seconds, int((timeout - seconds) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.settimeout(None)
    return sock
