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
- **Request timeout.** A request must arrive whole (head and body) within
  ``request_timeout`` of its first byte, or, for a connection's first request, of the
  connection's opening. A request the server has whole is never timed: a long-poll claim
  waits on the server's side as long as it asks.
- **Connection cap.** A connection opened while the worker already holds
  ``max_connections`` has its requests answered 503 by the protocol's own app (uvicorn's
  ``limit_concurrency`` answers in plain text), which closes it.

Every refusal is a JSON ``{"title", "description"}`` answer like the API's errors, with
``connection: close``, and so is the 400 to a request that is not HTTP/1.1. After a
400, 408, 414 or 431 the connection is half-closed, and what the client still sends is
read and dropped for at most ``LINGER`` seconds, so that a client still writing its
request reads the answer rather than a connection reset. A timed-out connection
that has sent nothing, whose request the app answered before its body was in, or whose
earlier response is under way, is closed without an answer.

The cost on the path of every request stays at a few attribute reads and stores per
read and per request, and a clock read per request: there is no timer per request, but
one per connection, re-armed when it fires (at most once per ``request_timeout``). Only
a head whose reads could hold a field over its limit (a large head, or a small one read
together with a large body) has its fields measured one by one.

It builds on uvicorn's protocol internals (tested with uvicorn 0.54 and httptools 0.9):
its ``url``, ``headers``, ``cycle``, ``flow``, ``connections`` and parser callbacks.
"""

from __future__ import annotations

import asyncio
import logging
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


@dataclass(frozen=True)
class HttpLimits:
    """What one connection may send, and how many connections a worker holds (the
    options of the same names in ``[drivers:transport:wsgi]``)."""

    max_request_line: int
    max_header_field_size: int
    max_header_fields: int
    max_header_size: int
    request_timeout: float
    max_connections: int


@dataclass(eq=False)
class Refusal(Exception):
    """An answer the protocol gives in the app's place; raised in a parser callback to
    stop the parser. *request* is the request line for the access log, when known."""

    status: int
    title: str
    description: str
    request: str = "-"


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header limits, a request timeout and a
    connection cap (see the module's docstring)."""

    # In slots, not in the instance's dict: uvicorn's protocol keeps about 28 attributes
    # there, and past 30 CPython (3.11) stops sharing the dict's keys between instances,
    # which slows every attribute access of every request, uvicorn's own included.
    __slots__ = ("limits", "_small_head", "_timer", "_request_began", "_in_head",
                 "_read_size", "_head_read", "_head_first_read", "_refusal", "_lingering")

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *,
                 limits: HttpLimits) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        # A head no larger than this cannot break any size limit: no need to measure it.
        self._small_head = min(limits.max_request_line, limits.max_header_field_size,
                               limits.max_header_size)
        self._timer: asyncio.TimerHandle | None = None
        # When the last request began: its first byte, or for the connection's first
        # request the connection's opening.
        self._request_began = 0.0
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
        if len(self.connections) > self.limits.max_connections:
            LOG.warning("%s: over the cap of %d connections: answered 503", self._peer(),
                        self.limits.max_connections)
            self.app = self._service_unavailable
        self._request_began = self.loop.time()
        self._timer = self.loop.call_later(self.limits.request_timeout, self._on_timer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the answer is sent: the rest of the request is dropped
        self._unset_keepalive_if_required()
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

    # Request timeout

    def _request_incomplete(self) -> bool:
        """Whether a request has begun (or the connection opened) and not arrived whole.

        A request's body is incomplete while its cycle wants more; the cycle of a request
        answered before its body ended keeps wanting more once the body is in, and so is
        timed from that request's beginning too: uvicorn keeps no keep-alive timer then.
        """
        cycle = self.cycle
        return self._in_head or cycle is None or cycle.more_body

    def _on_timer(self) -> None:
        """Time out the request not received whole in time; otherwise look again when
        its time is up, or one timeout from now."""
        if self.transport.is_closing():
            self._timer = None
            return
        timeout = self.limits.request_timeout
        now = self.loop.time()
        if not self._request_incomplete():
            self._timer = self.loop.call_at(now + timeout, self._on_timer)
            return
        if self.flow.read_paused:
            # The server, not the client, holds the request up (a pipelined request
            # waits its turn, or the app has yet to read the body): its time restarts.
            self._request_began = now
        if now < self._request_began + timeout - TIMER_SLACK:
            self._timer = self.loop.call_at(self._request_began + timeout, self._on_timer)
            return
        self._timer = None
        if not self._in_head and (self.cycle is None or self.cycle.response_complete):
            # Nothing was sent, or the request is answered already (the rest of its body
            # was late): no request waits for an answer.
            self.transport.close()
        else:
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
