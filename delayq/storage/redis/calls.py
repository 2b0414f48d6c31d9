"""The Redis driver's calls, awaited on the running loop: one script call, one plain
command, or plain commands sent together, each made with the loop's ``redis.asyncio``
client (``client.Clients``); on one server a script call takes the fast path instead
(``fastpath.py``), under the same rules.

The rules of every call:

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
from typing import Any

from redis.exceptions import ConnectionError as BrokenConnection
from redis.exceptions import NoScriptError

from delayq.storage.redis.client import AsyncClient, Clients, Connection


async def _sent(clients: Clients, send: Callable[[Any], Awaitable[Any]]) -> Any:
    """``await send(client)`` with the running loop's client, once more after a broken
    connection when the client does not resend itself."""
    client, limit = clients.on_loop()
    if limit is None:  # one server: the client's retry sends once more
        return await send(client)
    async with limit:
        try:
            return await send(client)
        except BrokenConnection:
            return await send(client)


class Calls:
    """Calls to the Redis of *connection*, which connects at the first."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def script(self, sha: str, source: str, keys: list[Any], args: list[Any]
                     ) -> Any:
        """The reply of script *source* (SHA1 *sha*) called with *keys* and *args*."""
        clients = await self.connection.clients()
        if clients.fast is not None:  # one server
            return await clients.fast.on_loop().script(sha, source, keys, args)

        async def send(client: Any) -> Any:
            try:
                return await client.evalsha(sha, len(keys), *keys, *args)
            except NoScriptError:
                await client.script_load(source)
                return await client.evalsha(sha, len(keys), *keys, *args)

        return await _sent(clients, send)

    async def command(self, *parts: Any) -> Any:
        """redis-py's reply to one plain command; only for a command that may run
        twice."""
        clients = await self.connection.clients()
        return await _sent(clients, lambda client: client.execute_command(*parts))

    async def batch(self, *commands: tuple) -> list[Any]:
        """The replies, in order, of plain commands sent together (a pipeline, not a
        transaction); only for commands that may run twice."""
        clients = await self.connection.clients()

        def send(client: Any) -> Awaitable[list[Any]]:
            pipe = client.pipeline(transaction=False)
            for parts in commands:
                pipe.execute_command(*parts)
            return pipe.execute()

        return await _sent(clients, send)

    async def client(self) -> AsyncClient:
        """The running loop's client, for the reaper's scans of whole structures, which
        redis-py pages itself."""
        return (await self.connection.clients()).on_loop()[0]
