"""The Redis wire: delayq's own connections to a single Redis server, and the
exchanges (script calls, commands) made on them.

Every transition of the driver is one ``EVALSHA``, and a request usually makes one. Sent
through redis-py's command machinery (the pool's lock and bookkeeping, the retry
wrapper, argument filtering, health checks, its parser's read loop), that call costs
several times the CPU of the round trip itself. A ``Wire`` keeps its own redis-py
``Connection``s (of the client's pool's class and settings, so host, password, TLS and
database are the client's): redis-py connects each and makes the handshake; the wire
then writes each packed command to the socket and reads the reply with a
``hiredis.Reader`` of its own, whose error replies are redis-py's exception classes
(``parse_error``), so callers see what redis-py would raise.

An exchange is the rules of one call, written once as a generator that yields the
commands to send and is sent their replies (``script_exchange``, ``command_exchange``):
a connection that had served a call and turns out broken (Redis restarted, a firewall
cut an idle connection) is tried once more on a new connection, and a script Redis no
longer knows (``NOSCRIPT``: a restart without persistence, ``SCRIPT FLUSH``) is loaded
and called again. A timeout is never sent again: the script may have run. Where an
exchange waits depends on who runs it:

- ``Wire.awaited``, awaited on an event loop (operations the API runs on its loop):
  on the loop's *pipe*, one connection per loop, without blocking it: the command is
  written at once, the loop serves other requests, and the reply wakes the call
  (``Pipe``). Over TLS the call blocks on the thread's line instead: OpenSSL's
  non-blocking reads and writes differ from a plain socket's;
- ``Wire.wait``, anywhere else (a pool thread, the reaper, a test): on the calling
  thread's *line*, blocking (``Line``). One whose thread has ended is closed when another
  thread makes its own.

A timeout raises redis-py's ``TimeoutError`` and a failed read or write its
``ConnectionError``; either closes the connection, so a late reply is never read as the
answer to another command. A Redis Cluster routes each call by its key's slot: its
calls keep redis-py's path, blocking (``storage/redis/scripts.py``).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from asyncio import get_running_loop
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import hiredis
from redis import exceptions
from redis.connection import Connection, ConnectionPool, SSLConnection

# How these connections show in CLIENT LIST (set once, as each connects).
CLIENT_NAME = "delayq-scripts"
# Bytes read from the socket at a time: a claim's reply for a few messages fits.
READ_SIZE = 65536


class Broken(exceptions.ConnectionError):
    """A connection that had served a call failed: the call is made once more, on a new
    connection (Redis restarted, a firewall cut an idle connection)."""


def _connection_error(used: bool, text: str) -> exceptions.ConnectionError:
    return (Broken if used else exceptions.ConnectionError)(text)


# An exchange: yields the commands to send, is sent their replies (an error reply as an
# exception value), returns the call's reply.
Exchange = Generator[bytes, Any, Any]


class Line:
    """One thread's connection: each command is written and its reply waited for,
    blocking."""

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
        self.reader = new_reader(conn)
        self.sock = kernel_timeouts(conn._sock)
        self.used = False
        return self.sock

    def drop(self) -> None:
        """Close the connection: whatever it was in the middle of is abandoned."""
        self.sock = self.reader = None
        self.conn.disconnect()

    def run(self, exchange: Exchange) -> Any:
        """Run *exchange* on this connection; its reply."""
        try:
            command = exchange.send(None)
            while True:
                try:
                    reply = self.round_trip(command)
                except BaseException as exc:
                    command = exchange.throw(exc)
                else:
                    command = exchange.send(reply)
        except StopIteration as done:
            return done.value

    def round_trip(self, command: bytes) -> Any:
        """Send *command* and return its reply, an error reply as an exception value;
        close the connection on any failure of the socket."""
        sock = self.sock or self.open()
        reader = self.reader
        try:
            sock.sendall(command)
            reply = reader.gets()
            while reply is False:  # RESP2 has no booleans: False is "not enough data yet"
                read = sock.recv_into(self.buffer)
                if not read:
                    raise _connection_error(self.used, "Connection closed by server.")
                reader.feed(self.buffer, 0, read)
                reply = reader.gets()
        except (TimeoutError, BlockingIOError) as exc:  # Python's timeout; the kernel's
            self.drop()
            raise exceptions.TimeoutError(f"Timeout talking to Redis: {exc}") from exc
        except OSError as exc:
            self.drop()
            raise _connection_error(self.used, f"Error talking to Redis: {exc}") from exc
        except BaseException:
            self.drop()
            raise
        self.used = True
        return reply


class Pipe:
    """One event loop's connection, shared by the calls of every request it serves.

    A call writes its command at once and awaits its reply, while the loop goes on
    serving; Redis answers a connection's commands in the order it
    received them, so the replies read settle the waiting calls first to last. When
    several requests call at once, their commands and replies share system calls, and
    no request waits for another's round trip.

    The socket's timeout is kept as the thread's line keeps it, within a quarter: when
    the oldest waiting call has been the oldest for that long (Redis answered nothing
    meanwhile), every waiting call fails with ``TimeoutError`` and the connection is
    closed (a late reply is never read as another call's). A watchdog looks every
    quarter of the timeout while calls wait, so a call itself reads no clock. A lost
    connection fails every waiting call with ``ConnectionError`` (``Broken`` when it had
    served a reply).

    Connecting, with redis-py's handshake, blocks: it happens once per loop, and again
    only after the connection was lost.
    """

    __slots__ = ("conn", "loop", "sock", "reader", "buffer", "waiting", "used",
                 "timeout", "watchdog", "unsent", "oldest", "looks")

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.loop = loop
        self.sock: socket.socket | None = None
        self.reader: Any = None
        self.buffer = bytearray(READ_SIZE)
        self.waiting: deque[asyncio.Future] = deque()  # unanswered calls, oldest first
        self.used = False
        self.timeout: float | None = conn.socket_timeout
        self.watchdog: asyncio.TimerHandle | None = None
        self.oldest: asyncio.Future | None = None  # the oldest call at the last look
        self.looks = 0  # looks in a row that found it still waiting
        self.unsent = bytearray()  # what the socket did not take yet

    def open(self) -> socket.socket:
        """The connected socket, connecting (and making the handshake) if need be; from
        then on the loop reads it."""
        conn = self.conn
        conn.connect()
        self.reader = new_reader(conn)
        sock = self.sock = conn._sock
        sock.setblocking(False)
        self.used = False
        self.loop.add_reader(sock.fileno(), self._readable)
        return sock

    async def run(self, exchange: Exchange) -> Any:
        """Run *exchange* on this connection, awaiting each reply; its reply."""
        try:
            command = exchange.send(None)
            while True:
                try:
                    reply = await self.send(command)
                except BaseException as exc:  # cancellation too: the exchange sees it
                    command = exchange.throw(exc)
                else:
                    command = exchange.send(reply)
        except StopIteration as done:
            return done.value

    def send(self, command: bytes) -> asyncio.Future:
        """Write *command* (or queue it behind what waits to be written); the future of
        its reply: the reply itself, an error reply as an exception *value*."""
        sock = self.sock or self.open()
        future = self.loop.create_future()
        self.waiting.append(future)
        if self.watchdog is None and self.timeout is not None:
            self.looks = 0
            self.watchdog = self.loop.call_later(self.timeout / 4, self._watch)
        if self.unsent:  # keep the order: behind what waits to be written
            self.unsent += command
        else:
            try:
                sent = sock.send(command)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # fails this call's future too, and stops the watchdog
                self.fail(_connection_error(self.used, f"Error talking to Redis: {exc}"))
                sent = len(command)
            if sent < len(command):
                self.unsent += command[sent:]
                self.loop.add_writer(sock.fileno(), self._writable)
        return future

    def _readable(self) -> None:
        try:
            read = self.sock.recv_into(self.buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.fail(_connection_error(self.used, f"Error talking to Redis: {exc}"))
            return
        if not read:
            self.fail(_connection_error(self.used, "Connection closed by server."))
            return
        reader = self.reader
        reader.feed(self.buffer, 0, read)
        waiting = self.waiting
        try:
            reply = reader.gets()
            while reply is not False:
                self.used = True
                future = waiting.popleft()
                if not future.done():  # a cancelled call's reply is dropped
                    future.set_result(reply)
                reply = reader.gets()
        except Exception as exc:  # a protocol error, or a reply nobody waits for
            self.fail(exceptions.ConnectionError(f"Error reading from Redis: {exc!r}"))

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.fail(_connection_error(self.used, f"Error talking to Redis: {exc}"))
            return
        del self.unsent[:sent]
        if not self.unsent:
            self.loop.remove_writer(self.sock.fileno())

    def _watch(self) -> None:
        """Every quarter of the timeout while calls wait: fail them all once the oldest
        has been the oldest for four looks."""
        self.watchdog = None
        if not self.waiting:
            self.oldest = None
            return
        oldest = self.waiting[0]
        self.looks = self.looks + 1 if oldest is self.oldest else 1
        self.oldest = oldest
        if self.looks > 4:  # seen at five looks: it has waited four quarters at least
            self.fail(exceptions.TimeoutError(
                f"Timeout talking to Redis: no reply in {self.timeout} s"))
            return
        self.watchdog = self.loop.call_later(self.timeout / 4, self._watch)

    def fail(self, exc: Exception) -> None:
        """Close the connection; every call waiting on it raises *exc*."""
        waiting, self.waiting = self.waiting, deque()
        self.drop()
        for future in waiting:
            if not future.done():
                # One exception each: every call raises it in its own coroutine, and
                # a shared one would gather all their tracebacks.
                future.set_exception(type(exc)(*exc.args))

    def drop(self) -> None:
        """Close the connection: whatever it was in the middle of is abandoned."""
        sock, self.sock, self.reader, self.oldest = self.sock, None, None, None
        self.unsent.clear()
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if sock is not None and not self.loop.is_closed():
            self.loop.remove_reader(sock.fileno())
            self.loop.remove_writer(sock.fileno())
        self.conn.disconnect()


class Wire:
    """Exchanges over connections of *pool*: the running loop's when awaited
    (``awaited``), else the calling thread's own (``wait``)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._local = threading.local()
        self._lock = threading.Lock()
        self._lines: dict[int, Line] = {}  # by thread ident
        self._pipes: dict[asyncio.AbstractEventLoop, Pipe] = {}
        self._pipes_allowed = not issubclass(pool.connection_class, SSLConnection)

    def wait(self, exchange: Exchange) -> Any:
        """The reply of *exchange*, run on this thread's line, blocking."""
        return self._thread_line().run(exchange)

    def awaited(self, exchange: Exchange) -> Any:
        """An awaitable of the reply of *exchange*, run on the running loop's pipe (over
        TLS: on the thread's line, blocking)."""
        if not self._pipes_allowed:
            return _ready(self.wait(exchange))
        loop = get_running_loop()
        return (self._pipes.get(loop) or self._new_pipe(loop)).run(exchange)

    def _connection(self) -> Connection:
        return self._pool.connection_class(
            **{**self._pool.connection_kwargs, "client_name": CLIENT_NAME})

    def _thread_line(self) -> Line:
        try:
            return self._local.line
        except AttributeError:
            return self._new_line()

    def _new_line(self) -> Line:
        """This thread's line, made at its first call."""
        line = Line(self._connection())
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

    def _new_pipe(self, loop: asyncio.AbstractEventLoop) -> Pipe:
        """*loop*'s pipe, made at its first call."""
        pipe = Pipe(self._connection(), loop)
        with self._lock:
            for closed in [other for other in self._pipes if other.is_closed()]:
                self._pipes.pop(closed).drop()
            self._pipes[loop] = pipe
        return pipe

    def close(self) -> None:
        """Disconnect every connection (each reconnects if used again)."""
        with self._lock:
            for line in self._lines.values():
                line.drop()
            for pipe in self._pipes.values():
                pipe.fail(exceptions.ConnectionError("The Redis wire was closed."))


async def _ready(value: Any) -> Any:
    return value


def script_exchange(sha: str, source: str, keys: list[Any], args: list[Any],
                    settle: Callable[[Any], Any]) -> Exchange:
    """``settle`` of the reply of ``EVALSHA`` of script *sha* (source *source*, loaded
    again if Redis lost it)."""
    command = hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))
    try:  # _sent(command), without a generator of its own on every script call's path
        reply = yield command
    except Broken:
        reply = yield command  # on a new connection
    if isinstance(reply, exceptions.NoScriptError):
        loaded = yield from _sent(hiredis.pack_command(("SCRIPT", "LOAD", source)))
        if isinstance(loaded, Exception):
            raise loaded
        reply = yield from _sent(command)
    if isinstance(reply, Exception):
        raise reply
    return settle(reply)


def command_exchange(parts: tuple) -> Exchange:
    """A command whose repetition does no harm (it is sent again on a broken
    connection)."""
    reply = yield from _sent(hiredis.pack_command(parts))
    if isinstance(reply, Exception):
        raise reply
    return reply


def _sent(command: bytes) -> Exchange:
    """*command*'s reply, sent once more on a new connection when the connection, which
    had served a call before, turns out broken. redis-py's TimeoutError is not a
    ConnectionError: a timed-out command may have run, so it is never sent again."""
    try:
        return (yield command)
    except Broken:
        return (yield command)  # on a new connection


def new_reader(conn: Connection) -> Any:
    """A reader of replies whose error replies are redis-py's exceptions."""
    return hiredis.Reader(protocolError=exceptions.InvalidResponse,
                          replyError=conn._parser.parse_error)


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
