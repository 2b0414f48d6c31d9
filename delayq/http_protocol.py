"""The HTTP/1.1 protocol of delayq's uvicorn workers: httptools, within limits and time.

``LimitedHttpToolsProtocol`` is uvicorn's ``HttpToolsProtocol`` (llhttp through
httptools) with what a server facing the open network needs and uvicorn lacks:

- **Header limits.** httptools gathers a header field or a request target that arrives
  in many reads by concatenating bytes objects, so a 100 MB header costs quadratic time
  and stalls the worker's event loop (every other client's request) for seconds. The
  protocol counts the bytes of a request's head as they arrive and refuses it once
  they exceed ``max_header_size``: the parser never holds more than that plus two reads.
  A complete head is checked against every limit: more than ``max_header_fields``
  fields, one field (name and value) longer than ``max_header_field_size``, a request
  line longer than ``max_request_line``, a head larger than ``max_header_size``.
- **Timeouts.** A request must arrive whole (head and body) within
  ``request_timeout`` of its first byte, or, for a connection's first request, of the
  connection's opening; a connection that begins no request within
  ``first_byte_timeout`` of its opening is closed. A request the server has whole is
  never timed: a long-poll claim waits on the server's side as long as it asks. A
  connection idle after a response is closed ``keepalive_timeout`` after it, whatever
  it sends meanwhile short of a request's first byte (uvicorn's keep-alive timer, which
  the protocol replaces, stops at any byte, even a blank line between requests, after
  which nothing would close the connection).
- **Connection cap.** A worker holds ``max_connections`` connections at most
  (``WorkerConnections``). At the cap, a new connection takes the place of one the
  worker closes (evicts): a connection on which the server waits for the client, with
  no request of its own under way. The order, first evicted first:

  1. connections answered with a refusal, read until they close (nothing more is owed);
  2. connections that have had no response yet (silent, or sending their first
     request), oldest first: an attacker opens these for free, and a client's new
     connection, sending its request at once, is the newest;
  3. keep-alive connections between requests (or sending their next one), idle longest
     first: a client in use goes idle after every response and so is among the last.

  A connection whose request the server has whole (a long-poll claim waiting, the app
  at work, its response under way) is never evicted. Nor is one whose bytes are already
  in the kernel, unread (several connections accepted in one turn of the event loop
  would otherwise evict one that has sent its request before the worker reads it).
  Only when no connection can be evicted (none is idle, or the first
  ``MAX_EVICTION_SKIPS + 1`` all have unread bytes) is the new one refused: its
  requests are answered 503 by the protocol's own app (uvicorn's ``limit_concurrency``
  answers in plain text), which closes it. Refusals and evictions are logged at most
  once per ``LOG_INTERVAL`` each, with their count.

Every refusal is a JSON ``{"title", "description"}`` answer like the API's errors, with
``connection: close``, and so is the 400 to a request that is not HTTP/1.1. After a
400, 408, 414 or 431 the connection is half-closed, and what the client still sends is
read and dropped for at most ``LINGER`` seconds, so that a client still writing its
request reads the answer rather than a connection reset. A timed-out connection
that has sent nothing, whose request the app answered before its body was in, or whose
earlier response is under way, is closed without an answer.

The cost on the path of every request stays at a few attribute reads and stores per
read and per request, two clock reads and an ordered-dict removal and insertion per
request: there is no timer per request (uvicorn's keep-alive timer is armed after every
response; this protocol arms none), but one per connection, re-armed when it fires (at
the next deadline, or ``keepalive_timeout`` later, whichever is sooner, so that a
connection going idle is closed on time). Only a head whose reads could hold a field
over its limit (a large head, or a small one read together with a large body) has its
fields measured one by one; only an eviction costs a system call (the check for unread
bytes).

It builds on uvicorn's protocol internals (tested with uvicorn 0.54 and httptools 0.9):
its ``url``, ``headers``, ``cycle``, ``flow``, ``pipeline``, ``timeout_keep_alive`` and
parser callbacks, and ``on_response_complete``, which it replaces.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import itertools
import logging
import math
import struct
import termios
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from delayq import jsontext

LOG = logging.getLogger(__name__)

# Seconds a refused connection is still read (and the bytes dropped) after its answer.
LINGER = 5.0
# How early a timer may fire (the loop's clock counts milliseconds) and still count.
TIMER_SLACK = 0.005
# " HTTP/1.1" after the target and the space after the method, in a request line.
REQUEST_LINE_EXTRA = 10
# ": " between a field's name and value, and its CRLF.
FIELD_EXTRA = 4
# Seconds between two log lines of one kind of event (refusals, evictions) of a worker.
LOG_INTERVAL = 10.0
# Connections an eviction passes over because their bytes wait unread, at most: past
# them, the new connection is refused rather than a request read a moment later lost.
MAX_EVICTION_SKIPS = 16


@dataclass(frozen=True)
class HttpLimits:
    """What one connection may send, and how many connections a worker holds (the
    options of the same names in ``[drivers:transport:wsgi]``)."""

    max_request_line: int
    max_header_field_size: int
    max_header_fields: int
    max_header_size: int
    request_timeout: float
    first_byte_timeout: float
    max_connections: int


class LogTally:
    """Events of one kind, logged at most once per ``LOG_INTERVAL`` with their count:
    the first at once, those after it when its interval ends (one timer per interval,
    none per event), so that a flood of connections writes a few lines, not one each."""

    __slots__ = ("message", "count", "last", "timer")

    def __init__(self, message: str) -> None:
        # Formatted with the count of events since the last line, and the last's peer.
        self.message = message
        self.count = 0
        self.last = "-"
        self.timer: asyncio.TimerHandle | None = None

    def add(self, loop: asyncio.AbstractEventLoop, peer: str) -> None:
        self.count += 1
        self.last = peer
        if self.timer is None:
            self._log(loop)

    def _log(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.count:
            self.timer = None  # a quiet interval: the next event is logged at once
            return
        LOG.warning(self.message, self.count, self.last)
        self.count = 0
        self.timer = loop.call_later(LOG_INTERVAL, self._log, loop)


class WorkerConnections:
    """The connections a worker holds within its cap, shared by its protocols (one
    event loop, so no lock): how many, and those it may evict to make room, in
    eviction order (see the module's docstring). Each ordered dict has its connections
    as keys, oldest first; a connection is in one of them at most."""

    __slots__ = ("admitted", "fresh", "idle", "refusals", "evictions")

    def __init__(self, max_connections: int) -> None:
        self.admitted = 0
        # Tiers 1 and 2: refused-and-lingering at the front, then those with no
        # response yet, by opening.
        self.fresh: OrderedDict[LimitedHttpToolsProtocol, None] = OrderedDict()
        # Tier 3: keep-alive connections, by the end of their last response.
        self.idle: OrderedDict[LimitedHttpToolsProtocol, None] = OrderedDict()
        self.refusals = LogTally(
            f"%d connection(s) refused (answered 503) since the last such line, the last "
            f"from %s: the worker holds its maximum of {max_connections} connections, "
            f"each with a request under way")
        self.evictions = LogTally(
            f"%d idle connection(s) closed to make room for new ones since the last such "
            f"line, the last from %s: the worker holds its maximum of {max_connections} "
            f"connections")


def protocol_factory(limits: HttpLimits) -> Callable[..., LimitedHttpToolsProtocol]:
    """uvicorn's ``http`` setting for one worker: protocols within *limits*, sharing one
    ``WorkerConnections``."""
    return functools.partial(LimitedHttpToolsProtocol, limits=limits,
                             held=WorkerConnections(limits.max_connections))


def unread_bytes(transport: asyncio.Transport) -> int:
    """Bytes the kernel holds for *transport*'s socket, not yet read (0 if unknown)."""
    sock = transport.get_extra_info("socket")
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD,
                                              b"\0\0\0\0"))[0]
    except (OSError, AttributeError, ValueError):
        return 0


@dataclass(eq=False)
class Refusal(Exception):
    """An answer the protocol gives in the app's place; raised in a parser callback to
    stop the parser. *request* is the request line for the access log, when known."""

    status: int
    title: str
    description: str
    request: str = "-"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header limits, timeouts and a connection cap
    (see the module's docstring)."""

    # In slots, not in the instance's dict: uvicorn's protocol keeps about 28 attributes
    # there, and past 30 CPython (3.11) stops sharing the dict's keys between instances,
    # which slows every attribute access of every request, uvicorn's own included.
    __slots__ = ("limits", "held", "_small_head", "_first_byte_timeout", "_timer",
                 "_request_began", "_idle_since", "_admitted", "_waiting", "_in_head",
                 "_read_size", "_head_read", "_head_first_read", "_refusal", "_lingering")

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *,
                 limits: HttpLimits, held: WorkerConnections) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.held = held
        # A head no larger than this cannot break any size limit: no need to measure it.
        self._small_head = min(limits.max_request_line, limits.max_header_field_size,
                               limits.max_header_size)
        # A connection that has not begun a request by request_timeout is timed out then.
        self._first_byte_timeout = min(limits.first_byte_timeout, limits.request_timeout)
        self._timer: asyncio.TimerHandle | None = None
        # When the last request began: its first byte, or for the connection's first
        # request the connection's opening.
        self._request_began = 0.0
        # When the last response ended.
        self._idle_since = 0.0
        # Whether the connection counts in held.admitted (within the cap), and the ordered
        # dict of held it waits in (it may be evicted), if any.
        self._admitted = False
        self._waiting: OrderedDict[LimitedHttpToolsProtocol, None] | None = None
        self._in_head = False
        # Size of the read being parsed; bytes read since the head began, counting the
        # whole read it began in (at least the head's size so far), and that first read.
        self._read_size = 0
        self._head_read = 0
        self._head_first_read = 0
        self._refusal: Refusal | None = None
        self._lingering = False

    # Connection events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        held = self.held
        if held.admitted < self.limits.max_connections or self._make_room():
            held.admitted += 1
            self._admitted = True
            self._wait(held.fresh)
        else:
            held.refusals.add(self.loop, self._peer())
            self.app = self._service_unavailable
        now = self._request_began = self.loop.time()
        self._timer = self.loop.call_at(
            now + min(self._first_byte_timeout, self.timeout_keep_alive), self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._release()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        # The connection passes to another protocol, which keeps no count of it.
        self._cancel_timer()
        self._release()
        super().handle_websocket_upgrade()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer is sent: the rest of the request is dropped
        self._read_size = size = len(data)
        if self._in_head:
            self._head_read += size
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if self._refusal is None:
                # llhttp's reason names the fault; a callback's error names only the callback.
                reason = "" if isinstance(exc, httptools.HttpParserCallbackError) else f" ({exc})"
                self._refusal = Refusal(400, "Invalid HTTP request",
                                        f"The request is not valid HTTP/1.1{reason}.")
            self._answer(self._refusal)
            return
        if self._in_head and self._head_too_large_so_far():
            self._answer(self._head_refusal())

    # Parser callbacks (the base class's called directly: cheaper than super() on the
    # path of every request)

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        if self.cycle is not None:  # not the connection's first request
            self._request_began = self.loop.time()
        self._in_head = True
        self._head_read = self._head_first_read = self._read_size

    def on_headers_complete(self) -> None:
        self._in_head = False
        if len(self.headers) > self.limits.max_header_fields:
            self._refuse(self._too_many_fields())
        if self._head_read > self._small_head:
            self._check_head_sizes()
        HttpToolsProtocol.on_headers_complete(self)

    def on_message_complete(self) -> None:
        # The request is whole: the server, not the client, is now the one to act,
        # unless the request is answered already. A WebSocket handshake has no cycle:
        # the connection passes to the WebSocket protocol (handle_websocket_upgrade).
        cycle = self.cycle
        if self._waiting is not None and cycle is not None and not cycle.response_complete:
            self._stop_waiting()
        HttpToolsProtocol.on_message_complete(self)

    def on_response_complete(self) -> None:
        """uvicorn's, arming no keep-alive timer: the connection's own timer closes it
        once idle for ``keepalive_timeout``."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._admitted:
            self._wait(self.held.idle)

    # Connection cap

    def _wait(self, tier: OrderedDict[LimitedHttpToolsProtocol, None]) -> None:
        """Make the connection evictable, the last of *tier*."""
        if self._waiting is not None:
            del self._waiting[self]
        tier[self] = None
        self._waiting = tier

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            del self._waiting[self]
            self._waiting = None

    def _release(self) -> None:
        """Give the connection's place within the cap up."""
        if self._admitted:
            self._admitted = False
            self.held.admitted -= 1
            self._stop_waiting()

    def _make_room(self) -> bool:
        """Evict the first evictable connection (the module's docstring gives the
        order) whose bytes are not waiting unread; whether there was one among the
        first ``MAX_EVICTION_SKIPS + 1``."""
        held = self.held
        for victim in itertools.islice(itertools.chain(held.fresh, held.idle),
                                       MAX_EVICTION_SKIPS + 1):
            # Unread bytes are the loop's to read, not the client's to send: the
            # connection is not idle. A refused one lingering has nothing more to say.
            if victim._lingering or not unread_bytes(victim.transport):
                break
        else:
            return False
        victim._release()
        transport = victim.transport
        if transport.get_write_buffer_size():
            transport.abort()  # a client not reading its response would hold the close
        else:
            transport.close()
        held.evictions.add(self.loop, victim._peer())
        return True

    # Limits

    def _head_too_large_so_far(self) -> bool:
        """Whether the head still arriving breaks a limit already: counted in reads after
        the one it began in, which held nothing else, its bytes exceed max_header_size,
        or it has too many fields."""
        return (self._head_read - self._head_first_read > self.limits.max_header_size
                or len(self.headers) > self.limits.max_header_fields)

    def _head_refusal(self) -> Refusal:
        """The answer to a head found too large before its end."""
        if len(self.headers) > self.limits.max_header_fields:
            return self._too_many_fields()
        if len(self.url) > self.limits.max_request_line:
            return self._line_too_long()
        return self._head_too_large()

    def _check_head_sizes(self) -> None:
        """Refuse a complete head with an over-long request line or field, or too large."""
        limits = self.limits
        line = len(self.parser.get_method()) + len(self.url) + REQUEST_LINE_EXTRA
        if line > limits.max_request_line:
            self._refuse(self._line_too_long())
        total = line + 2
        for name, value in self.headers:
            size = len(name) + len(value)
            if size > limits.max_header_field_size:
                self._refuse(Refusal(
                    431, "Request header fields too large",
                    f"A header field ({name.decode('latin-1')[:64]}) is longer than "
                    f"{limits.max_header_field_size} bytes, name and value together."))
            total += size + FIELD_EXTRA
        if total + 2 > limits.max_header_size:
            self._refuse(self._head_too_large())

    def _too_many_fields(self) -> Refusal:
        return Refusal(431, "Request header fields too large",
                       f"The request has more than {self.limits.max_header_fields} "
                       "header fields.")

    def _line_too_long(self) -> Refusal:
        return Refusal(414, "URI too long",
                       f"The request line is longer than {self.limits.max_request_line} "
                       "bytes.")

    def _head_too_large(self) -> Refusal:
        return Refusal(431, "Request header fields too large",
                       "The request line and header fields are larger than "
                       f"{self.limits.max_header_size} bytes.")

    def _refuse(self, refusal: Refusal) -> None:
        """Stop the parser (from ``on_headers_complete``); ``data_received`` answers."""
        refusal.request = self._request_line()
        self._refusal = refusal
        raise refusal

    def _request_line(self) -> str:
        """The request line of a complete head, for the access log."""
        if len(self.url) > self.limits.max_request_line:
            return "-"
        method = self.parser.get_method().decode("ascii")
        return f"{method} {self.url.decode('latin-1')} HTTP/{self.parser.get_http_version()}"

    # Timeouts

    def _on_timer(self) -> None:
        """Time the connection out if its deadline has passed; otherwise look again at
        the deadline, or ``keepalive_timeout`` from now if sooner: the connection may go
        idle meanwhile, and must then be closed ``keepalive_timeout`` after that.

        A request arriving (its head, or a body its cycle still wants; the cycle of a
        request answered before its body ended keeps wanting more) has until
        ``request_timeout`` after its beginning; a connection that has begun no request
        since its opening, ``first_byte_timeout`` after it; one idle after a response,
        ``keepalive_timeout`` after it. A request received whole has no deadline.
        """
        if self.transport.is_closing():
            self._timer = None
            return
        now = self.loop.time()
        cycle = self.cycle
        if self._in_head or (cycle is not None and cycle.more_body):
            if self.flow.read_paused:
                # The server, not the client, holds the request up (a pipelined request
                # waits its turn, or the app has yet to read the body): its time restarts.
                self._request_began = now
            deadline = self._request_began + self.limits.request_timeout
        elif cycle is None:
            deadline = self._request_began + self._first_byte_timeout
        elif cycle.response_complete:
            deadline = self._idle_since + self.timeout_keep_alive
        else:
            deadline = math.inf
        if now < deadline - TIMER_SLACK:
            self._timer = self.loop.call_at(min(deadline, now + self.timeout_keep_alive),
                                            self._on_timer)
            return
        self._timer = None
        if not self._in_head and (cycle is None or cycle.response_complete):
            # Nothing was asked, or the request is answered already (the rest of its body
            # was late): no request waits for an answer.
            self.transport.close()
        else:
            timeout = self.limits.request_timeout
            self._answer(Refusal(408, "Request timeout",
                                 f"The request was not complete within {timeout:g} seconds."))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # Answers

    def _answer(self, refusal: Refusal) -> None:
        """Answer *refusal* and close the connection, lingering; just close it when an
        earlier response (or this request's own) is under way."""
        self._cancel_timer()
        self._in_head = False
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started or cycle.scope is not self.scope:
                LOG.warning("%s: connection closed, a response under way: %s",
                            self._peer(), refusal.description)
                self.transport.close()
                return
            # The app is reading this request's body: it sees the client gone.
            cycle.disconnected = True
            cycle.message_event.set()
        LOG.warning("%s: answered %d: %s", self._peer(), refusal.status, refusal.description)
        if self.access_log:
            self.access_logger.info('%s - "%s" %d', self._peer(), refusal.request,
                                    refusal.status)
        self.transport.write(self._response(refusal))
        self._lingering = True
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._timer = self.loop.call_later(LINGER, self.transport.close)
        if self._admitted:  # first to make room: nothing more is owed to it
            self._wait(self.held.fresh)
            self.held.fresh.move_to_end(self, last=False)

    def _response(self, refusal: Refusal) -> bytes:
        body = jsontext.response({"title": refusal.title, "description": refusal.description})
        content = [STATUS_LINE[refusal.status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([b"content-type: application/json\r\n",
                        b"content-length: ", str(len(body)).encode("ascii"), b"\r\n",
                        b"connection: close\r\n\r\n", body])
        return b"".join(content)

    async def _service_unavailable(self, scope: dict, receive: Any, send: Any) -> None:
        """The ASGI app of a connection over the cap: every request answered 503."""
        body = jsontext.response({
            "title": "Service temporarily unavailable",
            "description": f"This server process holds its maximum of "
                           f"{self.limits.max_connections} connections; retry shortly."})
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode("ascii")),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "-"
