"""Do quotas hold under a burst? Counts what a burst of requests leaves behind.

Starts ``delayq-server`` (``--workers`` workers) from each ``--tree`` in turn (a delayq
source tree put first on ``PYTHONPATH``; by default this one) on each ``--driver``
(``sqlite``, ``redis``: a ``redis-server`` this script starts on a free loopback port;
``swift``: the Swift named by ``--swift-auth-url``/``--swift-user``/``--swift-key``),
with ``max_queues_per_project = --queues`` and ``max_messages_per_queue = --messages``.
Then, ``--rounds`` times, each round in a project of its own:

- **queues**: ``--burst`` ``PUT /v2/queues/qN`` (distinct names) released at once, each
  on a connection of its own; then the project's queues are counted;
- **messages**: ``--burst`` posts of one message to one queue, released at once; then
  the queue's messages are counted.

Reported per tree and driver: the quota, the fewest, median and most queues (messages)
a round ended with, and in how many rounds the quota was passed. A quota that holds
ends every round exactly at the quota.

Comparing two commits in one run::

    git -C /path/to/delayq archive <commit> | tar -x -C /tmp/before
    python benchmarks/quota_burst.py --tree /tmp/before --tree . --driver sqlite \\
        --driver redis

Usage::

    python benchmarks/quota_burst.py [--tree DIR]... [--driver NAME]... [--workers 2]
        [--burst 500] [--rounds 20] [--queues 3] [--messages 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
from served import HOST, free_port, sqlite_section, start_server, stop_server

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A throwaway ``redis-server`` on a free loopback port; its URI."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", HOST,
                             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), 1):
                break
            time.sleep(0.05)
        yield f"redis://{HOST}:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def store_section(driver: str, args: argparse.Namespace, workdir: Path,
                  redis_uri: str | None) -> str:
    """The config file's lines that choose and open *driver*."""
    if driver == "sqlite":
        return sqlite_section(workdir)
    if driver == "redis":
        return (f"[drivers]\nmessage_store = redis\n"
                f"[drivers:message_store:redis]\nuri = {redis_uri}\n"
                f"namespace = b{uuid.uuid4().hex[:8]}\n")
    return (f"[drivers]\nmessage_store = swift\n"
            f"[drivers:message_store:swift]\nauth_url = {args.swift_auth_url}\n"
            f"user = {args.swift_user}\nkey = {args.swift_key}\n"
            f"container_prefix = b{uuid.uuid4().hex[:8]}\n")


def start(tree: Path, workdir: Path, config: str) -> tuple[subprocess.Popen, int]:
    """The server from *tree* with *config*, on a free port; it and the port."""
    port = free_port()
    return start_server(tree, workdir, config, port), port


async def released_together(url: str, project: str, requests: list[tuple[str, str, dict]]
                            ) -> None:
    """Send each ``(method, path, json)`` on a connection of its own, all at once."""
    limits = httpx.Limits(max_connections=len(requests), max_keepalive_connections=0)
    headers = {"X-Project-ID": project, "Client-ID": str(uuid.uuid4())}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120,
                                 headers=headers) as client:
        start = asyncio.Event()

        async def one(method: str, path: str, body: dict) -> None:
            await start.wait()
            with contextlib.suppress(httpx.HTTPError):
                await client.request(method, path, json=body)

        tasks = [asyncio.create_task(one(*r)) for r in requests]
        await asyncio.sleep(0)
        start.set()
        await asyncio.gather(*tasks)


def count_queues(url: str, project: str) -> int:
    headers = {"X-Project-ID": project, "Client-ID": str(uuid.uuid4())}
    names: set[str] = set()
    params: dict = {"limit": 20}
    while True:
        page = httpx.get(f"{url}/v2/queues", params=params, headers=headers).json()
        if not page["queues"]:
            return len(names)
        names.update(q["name"] for q in page["queues"])
        params["marker"] = page["queues"][-1]["name"]


def count_messages(url: str, project: str) -> int:
    headers = {"X-Project-ID": project, "Client-ID": str(uuid.uuid4())}
    stats = httpx.get(f"{url}/v2/queues/q/stats", headers=headers).json()
    return stats["messages"]["total"]


def summary(quota: int, ends: list[int]) -> str:
    passed = sum(end > quota for end in ends)
    return (f"{quota} | {min(ends)} | {statistics.median(ends):g} | {max(ends)} | "
            f"{passed} of {len(ends)}")


def measure(tree: Path, driver: str, args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        redis_uri = stack.enter_context(redis_server(workdir)) if driver == "redis" else None
        config = (f"[drivers:transport:wsgi]\nworkers = {args.workers}\n"
                  f"[quotas]\nmax_queues_per_project = {args.queues}\n"
                  f"max_messages_per_queue = {args.messages}\n"
                  + store_section(driver, args, workdir, redis_uri))
        proc, port = start(tree, workdir, config)
        url = f"http://{HOST}:{port}"
        queues, messages = [], []
        try:
            for _ in range(args.rounds):
                project = f"p{uuid.uuid4().hex[:10]}"
                asyncio.run(released_together(url, project, [
                    ("PUT", f"/v2/queues/q{i}", {}) for i in range(args.burst)]))
                queues.append(count_queues(url, project))
                project = f"p{uuid.uuid4().hex[:10]}"
                post = ("POST", "/v2/queues/q/messages",
                        {"messages": [{"body": 1, "ttl": 3600}]})
                asyncio.run(released_together(url, project, [post] * args.burst))
                messages.append(count_messages(url, project))
        finally:
            stop_server(proc)
    return [f"| {tree} | {driver} | queues | {summary(args.queues, queues)} |",
            f"| {tree} | {driver} | messages | {summary(args.messages, messages)} |"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, action="append",
                        help="delayq source tree to serve from (repeatable; default: this "
                             "one)")
    parser.add_argument("--driver", action="append",
                        choices=["sqlite", "redis", "swift"],
                        help="storage driver (repeatable; default: sqlite)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--queues", type=int, default=3, help="max_queues_per_project")
    parser.add_argument("--messages", type=int, default=40, help="max_messages_per_queue")
    parser.add_argument("--swift-auth-url")
    parser.add_argument("--swift-user")
    parser.add_argument("--swift-key")
    args = parser.parse_args(argv)
    if "swift" in (args.driver or []) and not args.swift_auth_url:
        parser.error("--driver swift needs --swift-auth-url, --swift-user and --swift-key")
    print(f"burst {args.burst}, {args.rounds} rounds, {args.workers} workers")
    print("| tree | driver | quota of | quota | fewest | median | most | rounds past it |")
    print("|---|---|---|---|---|---|---|---|")
    for tree in args.tree or [HERE.parent]:
        for driver in args.driver or ["sqlite"]:
            for line in measure(tree.resolve(), driver, args):
                print(line, flush=True)


if __name__ == "__main__":
    main()
