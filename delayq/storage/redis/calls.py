"""The Redis driver's store calls (``delayq.operations.StoreCall``): one script call, one
plain command, or plain commands sent together, each made with redis-py's public
clients (``client.Clients``).

``wait()`` makes the call with the blocking client, in the calling thread (pool
threads, the reaper, the audits, the tests); ``awaited()`` with the running loop's
asyncio client, so the loop serves other requests while the call waits for Redis. On
one server, a script call awaited takes the fast path instead (``fastpath.py``), under
the same rules.

The rules of every call, whichever way it waits:

- a connection that turns out broken (Redis restarted, a firewall cut an idle
  connection) is replaced and the call sent once more: by redis-py's retry on one
  server (``client._retries``), by the call itself on a cluster, whose clients would
  retry a timeout too;
- a timeout is never sent again: the script may have run. redis-py closes the
  connection, so a late reply is never read as the answer to another command;
- a script Redis no longer knows (``NOSCRIPT``: a restart without persistence, ``SCRIPT
  FLUSH``) is loaded and called again.

Errors are redis-py's exceptions, which ``client.unavailable`` maps to 503.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as BrokenConnection
from redis.exceptions import NoScriptError

from delayq.storage.redis.client import Clients


def blocking(clients: Clients, send: Callable[[Any], Any]) -> Any:
    """``send(client)`` with the blocking client, once more after a broken connection
    when the client does not."""
    try:
        return send(clients.blocking)
    except BrokenConnection:
        if not clients.resend:
            raise
        return send(clients.blocking)


async def awaited(clients: Clients, send: Callable[[Any], Awaitable[Any]]) -> Any:
    """``await send(client)`` with the running loop's client, as ``blocking``."""
    client, limit = clients.on_loop()
    if limit is None:  # one server: the client's retry sends once more
        return await send(client)
    async with limit:
        try:
            return await send(client)
        except BrokenConnection:
            return await send(client)


@dataclass(slots=True)
class ScriptCall:
    """One call of the script *source* (SHA1 *sha*); ``settle`` of its reply."""

    clients: Clients
    sha: str
    source: str
    settle: Callable[[Any], Any]
    keys: list[Any]
    args: list[Any]

    def wait(self) -> Any:
        return self.settle(blocking(self.clients, self._send))

    async def awaited(self) -> Any:
        fast = self.clients.fast
        if fast is not None:  # one server
            return self.settle(await fast.on_loop().script(self.sha, self.source,
                                                           self.keys, self.args))
        return self.settle(await awaited(self.clients, self._send_async))

    def _send(self, client: Any) -> Any:
        try:
            return client.evalsha(self.sha, len(self.keys), *self.keys, *self.args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(self.keys), *self.keys, *self.args)

    async def _send_async(self, client: Any) -> Any:
        try:
            return await client.evalsha(self.sha, len(self.keys), *self.keys, *self.args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(self.keys), *self.keys, *self.args)


@dataclass(slots=True)
class CommandCall:
    """One plain command; redis-py's reply to it. Only for a command that may run
    twice."""

    clients: Clients
    parts: tuple

    def wait(self) -> Any:
        return blocking(self.clients, self._send)

    def awaited(self) -> Awaitable[Any]:
        return awaited(self.clients, self._send_async)

    def _send(self, client: Any) -> Any:
        return client.execute_command(*self.parts)

    def _send_async(self, client: Any) -> Awaitable[Any]:
        return client.execute_command(*self.parts)


@dataclass(slots=True)
class BatchCall:
    """Plain commands sent together (a pipeline, not a transaction); their replies in
    order. Only for commands that may run twice."""

    clients: Clients
    commands: tuple[tuple, ...]

    def wait(self) -> list[Any]:
        return blocking(self.clients, self._send)

    def awaited(self) -> Awaitable[list[Any]]:
        return awaited(self.clients, self._send_async)

    def _send(self, client: Any) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for parts in self.commands:
            pipe.execute_command(*parts)
        return pipe.execute()

    def _send_async(self, client: Any) -> Awaitable[list[Any]]:
        pipe = client.pipeline(transaction=False)
        for parts in self.commands:
            pipe.execute_command(*parts)
        return pipe.execute()


class Commands:
    """Plain commands, for an operation to yield: ``commands.call(*parts)``, or
    ``commands.batch(*commands)`` for several sent together."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    def call(self, *parts: Any) -> CommandCall:
        return CommandCall(self.clients, parts)

    def batch(self, *commands: tuple) -> BatchCall:
        return BatchCall(self.clients, commands)
