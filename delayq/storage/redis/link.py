"""Script calls on a connection of the calling thread's own (single Redis server).

Every transition of the driver is one ``EVALSHA``, and a request usually makes one. Sent
through redis-py's command machinery (the pool's lock and bookkeeping, the retry
wrapper, argument filtering, health checks), that call costs about three times the CPU
of the round trip itself: ~80 µs against ~30 µs on the machine of docs/performance.md,
a sixth of what a whole request costs the server. A ``ScriptLink`` keeps one redis-py
``Connection`` per thread (of the client's pool's class and settings, so host,
password, TLS and database are the client's) and writes the packed command to it
directly; replies and errors are still read and mapped by redis-py. The API's threads
live as long as its worker, so these connections are as many as the threads that call
scripts; one whose thread has ended is closed when another thread makes its own.

What the client's own path did is kept:

- a connection error on a connection that served a call before (Redis restarted, an
  idle connection cut by a firewall) is retried once on a new connection, as the
  client's ``Retry`` did; a timeout is not (the script may have run);
- a script Redis no longer knows (``NOSCRIPT``, after a restart without persistence or
  a ``SCRIPT FLUSH``) is loaded and called again.

A Redis Cluster routes each call by its key's slot: its clients keep redis-py's path.
"""

from __future__ import annotations

import threading
from typing import Any

import hiredis
import redis
from redis.connection import Connection, ConnectionPool
from redis.exceptions import NoScriptError

# How these connections show in CLIENT LIST (set once, as each connects).
CLIENT_NAME = "delayq-scripts"


class ScriptLink:
    """``EVALSHA`` calls over per-thread connections of *pool*."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: dict[int, Connection] = {}  # by thread ident

    def _connection(self) -> Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._pool.connection_class(
                **{**self._pool.connection_kwargs, "client_name": CLIENT_NAME})
            with self._lock:
                alive = {thread.ident for thread in threading.enumerate()}
                for ident in [i for i in self._connections if i not in alive]:
                    self._connections.pop(ident).disconnect()
                # An ended thread's ident may be this thread's now.
                replaced = self._connections.pop(threading.get_ident(), None)
                if replaced is not None:
                    replaced.disconnect()
                self._connections[threading.get_ident()] = conn
            self._local.conn = conn
            self._local.used = False
        return conn

    def evalsha(self, sha: str, script: str, keys: list[Any], args: list[Any]) -> Any:
        """The reply of script *sha* (source *script*, loaded again if Redis lost it)."""
        command = hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))
        try:
            return self._call(command)
        except NoScriptError:
            self._call(hiredis.pack_command(("SCRIPT", "LOAD", script)))
            return self._call(command)

    def _call(self, command: bytes) -> Any:
        conn = self._connection()
        try:
            return self._round_trip(conn, command)
        except redis.exceptions.ConnectionError:
            # redis-py's ConnectionError covers timeouts only as its TimeoutError, which
            # is not one: a timed-out script may have run, so it is never sent again.
            if not self._local.used:
                raise
            self._local.used = False
            return self._round_trip(conn, command)  # the connection reconnects itself

    def _round_trip(self, conn: Connection, command: bytes) -> Any:
        conn.send_packed_command([command], check_health=False)
        reply = conn.read_response()
        self._local.used = True
        return reply

    def close(self) -> None:
        """Disconnect every thread's connection (each reconnects if used again)."""
        with self._lock:
            for conn in self._connections.values():
                conn.disconnect()
