"""FAST PATH (the only one of the Redis driver): script calls awaited on an event loop,
on one Redis server, over an asyncio connection of the loop's own read with a
``hiredis.Reader``.

redis-py's asyncio client costs about 40 % more server CPU per request than this
(``docs/performance.md``, "Redis through redis-py's public clients"), past the 30 % the
project allows before a fast path; every other call uses redis-py. It uses public APIs
only: ``asyncio``'s protocols and transports (TLS included), ``hiredis.Reader`` and
``hiredis.pack_command``, and redis-py's exception classes, so callers see what redis-py
would raise.

Each loop has one connection (``Link``), shared by the script calls of every request it
serves: a call writes its command at once and awaits its reply; Redis answers a
connection's commands in order, so the replies read settle the waiting calls first to
last. The rules of ``calls.py`` hold: a call on a connection that had served a reply
and turns out broken is sent once more on a new connection (``StaleConnection``); ``NOSCRIPT``
loads the script and calls again; when the oldest waiting call has had no reply for
``socket_timeout`` (checked every quarter of it), every waiting call fails with
``TimeoutError``, is never sent again, and the connection is closed, so a late reply is
never read as another call's. A cancelled call's reply is read and dropped.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any

import hiredis
from redis import exceptions

from delayq.storage.redis.per_loop import PerLoop

# Error replies redis-py raises as their own classes (by the reply's first word); any
# other is a ResponseError.
ERRORS: dict[str, type[exceptions.RedisError]] = {
    "NOSCRIPT": exceptions.NoScriptError, "LOADING": exceptions.BusyLoadingError,
    "READONLY": exceptions.ReadOnlyError, "OOM": exceptions.OutOfMemoryError,
    "NOAUTH": exceptions.AuthenticationError, "WRONGPASS": exceptions.AuthenticationError,
    "NOPERM": exceptions.NoPermissionError}


class StaleConnection(exceptions.ConnectionError):
    """A connection that had served a call failed: the call is sent once more, on a new
    connection."""


def pack(*parts: Any) -> bytes:
    """The RESP command of *parts*."""
    return hiredis.pack_command(parts)


def reply_error(text: str) -> exceptions.RedisError:
    return ERRORS.get(text.partition(" ")[0], exceptions.ResponseError)(text)


@dataclass(frozen=True)
class Server:
    """Where the one Redis server is, and how to talk to it."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool
    socket_timeout: float
    connect_timeout: float


class Connection(asyncio.Protocol):
    """One connection of a loop: commands written in order, replies matched to the
    calls waiting for them, first to last."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader(protocolError=exceptions.InvalidResponse,
                                     replyError=reply_error)
        self.waiting: deque[asyncio.Future] = deque()  # unanswered calls, oldest first
        self.used = False  # a reply was read
        self.closed = False
        self.watchdog: asyncio.TimerHandle | None = None
        self.oldest: asyncio.Future | None = None  # the oldest call at the last look
        self.looks = 0  # looks in a row that found it still waiting

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        reader, waiting = self.reader, self.waiting
        reader.feed(data)
        try:
            reply = reader.gets()
            while reply is not False:  # RESP2 has no booleans: False is "no more yet"
                self.used = True
                future = waiting.popleft()
                if not future.done():  # a cancelled call's reply is dropped
                    future.set_result(reply)
                reply = reader.gets()
        except Exception as exc:  # a protocol error, or a reply nobody waits for
            self.fail(exceptions.ConnectionError(f"Error reading from Redis: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail((StaleConnection if self.used else exceptions.ConnectionError)(
            f"Error talking to Redis: {exc or 'connection closed by server'}"))

    def send(self, command: bytes) -> asyncio.Future:
        """Write *command*; the future of its reply (an error reply as a value)."""
        transport = self.transport
        if self.closed or transport is None:
            raise (StaleConnection if self.used else exceptions.ConnectionError)(
                "Error talking to Redis: connection closed")
        future = self.loop.create_future()
        self.waiting.append(future)
        if self.watchdog is None:
            self.looks = 0
            self.watchdog = self.loop.call_later(self.timeout / 4, self._watch)
        transport.write(command)
        return future

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
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self.closed = True
        waiting, self.waiting = self.waiting, deque()
        if self.transport is not None and not self.loop.is_closed():
            self.transport.abort()
        for future in waiting:
            if not future.done():
                # One exception each: a shared one would gather every call's traceback.
                future.set_exception(type(exc)(*exc.args))


class Link:
    """One loop's connection to *server*, opened at the loop's first call and again
    after it was lost."""

    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop
        self.connection: Connection | None = None
        self.opening: asyncio.Future | None = None

    async def script(self, sha: str, source: str, keys: list[Any], args: list[Any]
                     ) -> Any:
        """The reply of ``EVALSHA`` of script *sha* (loaded first if Redis lost it)."""
        command = pack("EVALSHA", sha, len(keys), *keys, *args)
        reply = await self.exchange(command)
        if isinstance(reply, exceptions.NoScriptError):
            loaded = await self.exchange(pack("SCRIPT", "LOAD", source))
            if isinstance(loaded, Exception):
                raise loaded
            reply = await self.exchange(command)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def exchange(self, command: bytes) -> Any:
        """*command*'s reply, sent once more on a new connection when its connection,
        which had served a call before, turns out broken. A timeout (not a
        ConnectionError) is never sent again."""
        connection = self.connection
        if connection is None or connection.closed:
            connection = await self.open()
        try:
            return await connection.send(command)
        except StaleConnection:
            return await (await self.open()).send(command)

    async def open(self) -> Connection:
        """The open connection, opening one if need be (once, for every call waiting
        for it)."""
        connection = self.connection
        if connection is not None and not connection.closed:
            return connection
        if self.opening is None:
            self.opening = self.loop.create_task(self._connect())
            self.opening.add_done_callback(self._opened)
        return await asyncio.shield(self.opening)

    def _opened(self, opening: asyncio.Future) -> None:
        self.opening = None
        if not opening.cancelled() and opening.exception() is None:
            self.connection = opening.result()

    async def _connect(self) -> Connection:
        server = self.server
        context = ssl.create_default_context() if server.tls else None
        try:
            async with asyncio.timeout(server.connect_timeout):
                _, connection = await self.loop.create_connection(
                    lambda: Connection(self.loop, server.socket_timeout), server.host,
                    server.port, ssl=context)
        except (OSError, TimeoutError) as exc:
            raise exceptions.ConnectionError(
                f"Error connecting to Redis at {server.host}:{server.port}: {exc!r}"
            ) from exc
        handshake: list[tuple[Any, ...]] = []
        if server.password is not None:
            handshake.append(("AUTH", *filter(None, (server.username, server.password))))
        if server.db:
            handshake.append(("SELECT", server.db))
        for parts in handshake:
            reply = await connection.send(pack(*parts))
            if isinstance(reply, Exception):
                connection.fail(exceptions.ConnectionError(str(reply)))
                raise reply
        connection.used = False  # the handshake's replies do not make it "used"
        return connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.fail(exceptions.ConnectionError("The Redis link was closed."))


class FastPath:
    """Script calls awaited on the running loop, on its ``Link`` to *server*."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._links: PerLoop[Link] = PerLoop(lambda loop: Link(server, loop))

    def on_loop(self) -> Link:
        return self._links.get()

    def close(self) -> None:
        """Close every loop's connection (each opens again if used again)."""
        for loop, link in self._links.take_all().items():
            if loop.is_closed():
                continue
            if loop.is_running():
                loop.call_soon_threadsafe(link.close)
            else:
                link.close()
