"""CPU per request of the ASGI app itself, without HTTP: delayq's own share of a request.

``benchmarks/throughput.py`` measures whole requests through gunicorn and uvicorn, where
HTTP parsing and the event loop cost as much as the app. This hands the same cycle of
requests (post one message, claim it, delete it with its claim id) straight to the ASGI
app, with a real store, and reports the process CPU time per request (user and system
apart too), beside the trivial app of ``benchmarks/trivial_app.py`` given the same
requests. Each target runs in a fresh process, alternating, ``--rounds`` times, so drift
on a shared machine shows.

``--trivial-ping`` adds the trivial app with one blocking Redis ``PING`` after each
request: the same work, plus a wait on another process like the one each delayq request
on Redis makes. Its user time beyond the trivial app's (the PING itself costs about a
microsecond of it) is what a wait costs the code that runs after it: the caches and
branch predictors it finds cold.

Usage::

    python benchmarks/in_process.py [--driver redis --driver sqlite] [--requests 3000]
                                    [--rounds 3] [--trivial-ping] [--keyed]
                                    [--tree DIR ...]

``--keyed`` adds each driver with every post under an ``Idempotency-Key`` of its own
(``redis+key``): what a key costs a post, beside the same cycle without one. ``--tree
DIR`` (repeatable) adds each driver run from that delayq source tree (``redis@1``), a
checkout of another commit say, alternating with this one's in the same rounds.

To compare two versions of delayq, give the other one's source tree with ``--tree``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

CLIENT_ID = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
TRIVIAL = "trivial"
# The trivial app with one blocking Redis round trip (PING) after each request: what a
# wait on another process does to the CPU time of the same work (--trivial-ping).
TRIVIAL_PING = "trivial+ping"
# benchmarks/bare_app.py on the run's Redis: a request's Redis work and no more.
BARE = "bare"
WARMUP_CYCLES = 200


# A driver's target with every post under an Idempotency-Key of its own (--keyed).
KEYED = "+key"
TREE_SEPARATOR = "@"  # "redis@1": the driver run from the first --tree


def headers(length: int, extra: list[tuple[bytes, bytes]] | None = None
            ) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"bench"), (b"client-id", CLIENT_ID.encode()),
            (b"x-project-id", b"bench"), (b"content-type", b"application/json"),
            (b"content-length", str(length).encode()), *(extra or ())]


async def call(app: Any, method: str, path: str, query: str = "", body: bytes = b"",
               extra: list[tuple[bytes, bytes]] | None = None) -> tuple[int, bytes]:
    """One request handed to *app* as uvicorn would, with *extra* headers: its status
    and body."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": method, "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": headers(len(body), extra), "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    status, parts = 0, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


async def cycle(app: Any, trivial: bool, key: bytes | None = None) -> None:
    """Post one message (under Idempotency-Key *key*, when given), claim it, delete it
    (3 requests)."""
    queue = "/v2/queues/bench"
    status, _ = await call(app, "POST", f"{queue}/messages",
                           body=b'{"messages": [{"body": 1, "ttl": 300}]}',
                           extra=None if key is None else [(b"idempotency-key", key)])
    assert status in (200, 201), status
    status, body = await call(app, "POST", f"{queue}/claims", "limit=1",
                              b'{"ttl": 60, "grace": 60}')
    if trivial:
        await call(app, "DELETE", f"{queue}/messages/x", "claim_id=y")
        return
    assert status == 201, (status, body)
    path, _, query = json.loads(body)["messages"][0]["href"].partition("?")
    status, _ = await call(app, "DELETE", path, query)
    assert status == 204, status


async def start_lifespan(app: Any) -> asyncio.Task:
    """Run the app's ASGI lifespan startup, as uvicorn does before the first request
    (delayq batches its metrics from then on); the task stays until the loop ends."""
    events: asyncio.Queue = asyncio.Queue()
    await events.put({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message)

    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}},
                                   events.get, send))
    await started.wait()
    return task


def build_app(target: str, sections: dict[str, dict[str, Any]]) -> Any:
    """The ASGI app of *target*: the trivial app, the bare app (on the Redis of
    *sections*), or delayq on driver *target* configured with *sections*
    (``{group: {option: value}}``)."""
    if target == TRIVIAL:
        import trivial_app
        return trivial_app.create_app()
    if target == BARE:
        import bare_app
        redis_section = sections[backlog.REDIS_GROUP]
        return bare_app.create_app(redis_section["uri"], redis_section["namespace"])
    from delayq import conf as delayq_conf
    from delayq.api.app import create_app
    conf = delayq_conf.load([])
    conf.set_override("message_store", target, group="drivers")
    for group, options in sections.items():
        for name, value in options.items():
            conf.set_override(name, value, group=group)
    if target == "redis":  # no background reaper passes in the measured process
        conf.set_override("reap_interval", 0, group="drivers:message_store:redis")
    return create_app(conf)


def redis_pinger(sections: dict[str, dict[str, Any]]) -> Any:
    """A function making one blocking ``PING`` round trip to the run's Redis."""
    uri = urlsplit(sections[backlog.REDIS_GROUP]["uri"])
    sock = socket.create_connection((uri.hostname, uri.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def ping() -> None:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        if not sock.recv(64).startswith(b"+PONG"):
            raise RuntimeError("Redis did not answer PING")

    return ping


def measure(target: str, requests: int, sections: dict[str, dict[str, Any]]
            ) -> dict[str, float]:
    """CPU milliseconds per request of *target* in this process: user + system
    (``cpu_ms``), and each apart (``user_ms``, ``system_ms``)."""
    keyed = target.endswith(KEYED)
    app = build_app(TRIVIAL if target == TRIVIAL_PING else target.removesuffix(KEYED),
                    sections)
    trivial = target in (TRIVIAL, TRIVIAL_PING)
    ping = redis_pinger(sections) if target == TRIVIAL_PING else None
    cycles = max(1, requests // 3)
    posts = iter(range(10**9))
    run_id = os.urandom(8).hex()  # keys of their own: rounds share the store

    async def one_cycle() -> None:
        await cycle(app, trivial,
                    f"{run_id}-{next(posts)}".encode() if keyed else None)
        if ping is not None:  # one round trip a request, between requests
            ping()
            ping()
            ping()

    async def run() -> dict[str, float]:
        lifespan = await start_lifespan(app)
        for _ in range(WARMUP_CYCLES):
            await one_cycle()
        # getrusage, not os.times: clock ticks (10 ms) are coarse beside a trivial run.
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(cycles):
            await one_cycle()
        after = resource.getrusage(resource.RUSAGE_SELF)
        user = after.ru_utime - before.ru_utime
        system = after.ru_stime - before.ru_stime
        per_request = 1000 / (3 * cycles)
        lifespan.cancel()
        return {"cpu_ms": (user + system) * per_request, "user_ms": user * per_request,
                "system_ms": system * per_request}

    return asyncio.run(run())


def child(target: str, requests: int, sections_json: str) -> None:
    print(json.dumps(measure(target, requests, json.loads(sections_json))))


def run_child(target: str, requests: int, sections: dict[str, Any],
              tree: Path | None = None) -> dict[str, float]:
    """*target* measured in a fresh process, on delayq from *tree* (put first on
    ``PYTHONPATH``) when given."""
    env = os.environ.copy()
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree),
                                                          env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, __file__, "--child", target, "--requests", str(requests),
         "--sections", json.dumps(sections)],
        check=True, capture_output=True, text=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append", choices=["sqlite", "redis"],
                        help="a driver to measure (repeatable; default: redis)")
    parser.add_argument("--requests", type=int, default=3000,
                        help="requests measured per target and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times each target is measured, alternating")
    parser.add_argument("--trivial-ping", action="store_true",
                        help="also the trivial app with one Redis PING round trip after "
                             "each request (needs --driver redis)")
    parser.add_argument("--keyed", action="store_true",
                        help="also each driver with every post under an Idempotency-Key "
                             "of its own (target DRIVER+key)")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="a delayq source tree to measure each driver (without key) "
                             "from as well, as DRIVER@N for the N-th tree; repeatable")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sections", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.requests, args.sections)
        return
    drivers = args.driver or ["redis"]
    if args.trivial_ping and "redis" not in drivers:
        parser.error("--trivial-ping needs --driver redis (its Redis answers the PINGs)")
    trees = [tree.resolve() for tree in args.tree]
    targets = [TRIVIAL, *([TRIVIAL_PING] if args.trivial_ping else []), *drivers,
               *([driver + KEYED for driver in drivers] if args.keyed else []),
               *(f"{driver}{TREE_SEPARATOR}{number}" for driver in drivers
                 for number in range(1, len(trees) + 1))]
    for number, tree in enumerate(trees, 1):
        print(f"tree {number}: {tree}")
    results: dict[str, list[dict[str, float]]] = {target: [] for target in targets}
    with tempfile.TemporaryDirectory(prefix="delayq-in-process-") as tmp, \
            contextlib.ExitStack() as services:
        sections: dict[str, dict[str, Any]] = {}
        for name in drivers:  # each store started as backlog.py starts it
            backend, directory = backlog.BACKENDS[name], Path(tmp) / name
            directory.mkdir()
            sections[name] = backend.sections(directory)
            services.enter_context(backend.service(sections[name], directory))
        sections[TRIVIAL_PING] = sections.get("redis", {})
        for name in drivers:
            sections[name + KEYED] = sections[name]
        for _ in range(args.rounds):
            for target in results:
                served, _, number = target.partition(TREE_SEPARATOR)
                results[target].append(run_child(
                    served, args.requests, sections.get(served, {}),
                    trees[int(number) - 1] if number else None))
    print("| target | CPU ms/request, each round | mean | user | system | ratio to trivial |")
    print("|---|---|---:|---:|---:|---:|")

    def mean(values: list[dict[str, float]], key: str) -> float:
        return sum(v[key] for v in values) / len(values)

    trivial = mean(results[TRIVIAL], "cpu_ms")
    for target, values in results.items():
        each = " / ".join(f"{v['cpu_ms']:.3f}" for v in values)
        print(f"| {target} | {each} | {mean(values, 'cpu_ms'):.3f} | "
              f"{mean(values, 'user_ms'):.3f} | {mean(values, 'system_ms'):.3f} | "
              f"{mean(values, 'cpu_ms') / trivial:.1f} |")


if __name__ == "__main__":
    main()
