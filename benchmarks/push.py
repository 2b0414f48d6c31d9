"""Push delivery: how late webhooks hear of due messages, how many pushes a second two
workers make, and what a push costs the server beside a consumer's claim and delete.

Starts the real ``delayq-server`` (gunicorn, ``--workers`` uvicorn workers, pushing on)
on a store of its own (as ``benchmarks/backlog.py`` starts them) and a webhook receiver
in this process: an asyncio HTTP server on loopback that answers 204 at once and notes
when each message's push arrived. Then, through the HTTP API only:

1. ``--queues`` queues, each with a subscription to the receiver;
2. **lateness**: ``--lateness-messages`` messages over those queues, each posted with a
   ``deliver_at`` spread over ``--spread`` seconds starting a few seconds ahead; the
   lateness of a message is when its push arrived minus its ``deliver_at`` (its due
   instant, on the store's clock, which is this machine's);
3. **throughput**: ``--backlog`` messages over the same queues, all due at one instant;
   pushes per second is their number over the time from that instant to the last
   arrival, and server CPU per push (user + system of the gunicorn master and workers,
   from ``/proc``) the CPU spent meanwhile over their number;
4. **claim + delete**: as many messages in queues without subscriptions, taken by
   ``--consumers`` client threads, each claiming one at a time (``limit=1``) and
   deleting it with its claim id: the server CPU per message beside a push's.

Usage::

    python benchmarks/push.py [--driver sqlite|redis] [--queues 1000]
                              [--lateness-messages 3000] [--backlog 20000]

Results are printed as a table and written to ``benchmarks/results/push-<driver>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    import backlog
    import throughput
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog
    import throughput

RESULTS = Path(__file__).resolve().parent / "results"
CLAIM_BODY = json.dumps({"ttl": 60, "grace": 60}).encode()
LEAD = 10.0  # seconds between the start of a phase's posts and its first due instant
POSTERS = 8


# The receiver -----------------------------------------------------------------------------


class Receiver:
    """A webhook on loopback noting ``message id -> arrival time``, in a thread of its
    own: an asyncio server that reads each request whole and answers 204."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        self.duplicates = 0
        self.port = backlog.free_port()
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=1024))
        self._ready.set()
        self._loop.run_forever()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length)
                arrived = time.time()
                message_id = json.loads(body)["id"]
                if message_id in self.arrivals:
                    self.duplicates += 1
                else:
                    self.arrivals[message_id] = arrived
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def wait_for(self, ids: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ids <= self.arrivals.keys():
            if time.monotonic() > deadline:
                missing = len(ids - self.arrivals.keys())
                raise RuntimeError(f"{missing} of {len(ids)} pushes missing after {timeout} s")
            time.sleep(0.05)


# Through the API ------------------------------------------------------------------------


def rfc3339(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def in_parallel(port: int, work: list[Any], each) -> list[Any]:
    """``each(client, item)`` for every item, over ``POSTERS`` keep-alive connections."""
    local = threading.local()

    def run(item: Any) -> Any:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = backlog.Client(port)
        return each(client, item)

    with ThreadPoolExecutor(POSTERS) as pool:
        return list(pool.map(run, work))


def subscribe(client: backlog.Client, queue: str, url: str) -> None:
    """A delayed queue (so that its messages' ``deliver_at`` counts) subscribed to *url*."""
    client.expect(201, "PUT", f"/v2/queues/{queue}",
                  json.dumps({"_default_message_delay": 1}).encode())
    body = json.dumps({"subscriber": url, "ttl": 86400}).encode()
    client.expect(201, "POST", f"/v2/queues/{queue}/subscriptions", body)


def post_due(client: backlog.Client, job: tuple[str, list[float]]) -> list[tuple[str, float]]:
    """Post one message per instant to the queue; ``(id, instant)`` of each."""
    queue, instants = job
    body = json.dumps({"messages": [{"body": {"bench": "push"}, "ttl": 3600,
                                     "deliver_at": rfc3339(at)} for at in instants]})
    document, _ = client.expect(201, "POST", f"/v2/queues/{queue}/messages", body.encode())
    ids = [href.rsplit("/", 1)[1] for href in document["resources"]]
    return list(zip(ids, instants, strict=True))


def posted(port: int, jobs: list[tuple[str, list[float]]]) -> dict[str, float]:
    return dict(pair for pairs in in_parallel(port, jobs, post_due) for pair in pairs)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# Phases -----------------------------------------------------------------------------------


def lateness(port: int, hook: Receiver, queues: list[str], args: argparse.Namespace
             ) -> dict[str, Any]:
    rng = random.Random(1)
    start = time.time() + LEAD
    by_queue: dict[str, list[float]] = {q: [] for q in queues}
    for _ in range(args.lateness_messages):
        by_queue[rng.choice(queues)].append(start + rng.uniform(0, args.spread))
    due = posted(port, [(q, sorted(at)) for q, at in by_queue.items() if at])
    if time.time() > start:
        # The posting threads would compete with the receiver for this process and
        # delay its notes of arrival: the figures would not be the server's.
        raise RuntimeError(f"posting took longer than the {LEAD} s lead; raise LEAD")
    hook.wait_for(set(due), timeout=LEAD + args.spread + 60)
    late = [hook.arrivals[i] - at for i, at in due.items()]
    return {"messages": len(late), "median_ms": 1000 * statistics.median(late),
            "p99_ms": 1000 * percentile(late, 0.99), "max_ms": 1000 * max(late),
            "early": sum(1 for x in late if x < 0)}


def push_throughput(port: int, master: int, hook: Receiver, queues: list[str],
                    args: argparse.Namespace) -> dict[str, Any]:
    per_queue = max(1, args.backlog // len(queues))
    at = time.time() + LEAD + args.backlog / 2000  # after the posts are in
    due = posted(port, [(q, [at] * per_queue) for q in queues])
    pids = throughput.server_pids(master)
    while time.time() < at:
        time.sleep(0.001)
    cpu_before = throughput.cpu_seconds(pids)
    hook.wait_for(set(due), timeout=300)
    last = max(hook.arrivals[i] for i in due)
    cpu = throughput.cpu_seconds(pids) - cpu_before
    return {"messages": len(due), "seconds": last - at, "per_second": len(due) / (last - at),
            "server_cpu_ms": 1000 * cpu / len(due)}


def claim_and_delete(port: int, master: int, count: int, args: argparse.Namespace
                     ) -> dict[str, Any]:
    queues = [f"plain-{n}" for n in range(args.consumers)]
    per_queue = count // len(queues)

    def fill(client: backlog.Client, queue: str) -> None:
        body = json.dumps({"messages": [{"body": {"bench": "plain"}, "ttl": 3600}] * 20})
        for _ in range(per_queue // 20):
            client.expect(201, "POST", f"/v2/queues/{queue}/messages", body.encode())

    in_parallel(port, queues, fill)
    pids = throughput.server_pids(master)

    def consume(client: backlog.Client, queue: str) -> int:
        taken = 0
        while True:
            status, document, _ = client.request("POST", f"/v2/queues/{queue}/claims?limit=1",
                                                 CLAIM_BODY)
            if status == 204:
                return taken
            client.expect(204, "DELETE", document["messages"][0]["href"])
            taken += 1

    cpu_before = throughput.cpu_seconds(pids)
    began = time.monotonic()
    taken = sum(in_parallel(port, queues, consume))
    seconds = time.monotonic() - began
    cpu = throughput.cpu_seconds(pids) - cpu_before
    return {"messages": taken, "per_second": taken / seconds,
            "server_cpu_ms": 1000 * cpu / taken}


# The run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec = backlog.BACKENDS[args.driver]
    with tempfile.TemporaryDirectory(prefix="delayq-push-") as tmp:
        workdir = Path(tmp)
        sections = spec.sections(workdir)
        with spec.service(sections, workdir), Receiver() as hook:
            port = backlog.free_port()
            config = workdir / "delayq.conf"
            backlog.write_config(config, args.driver, port, args.workers, sections,
                                 extra={"notification": {
                                     "push_scan_interval": str(args.scan_interval),
                                     # The receiver is on loopback.
                                     "allowed_webhook_networks": "127.0.0.0/8"}})
            server = backlog.Server(config, port, workdir / "server.log")
            try:
                server.wait_ready()
                queues = [f"push-{n}" for n in range(args.queues)]
                in_parallel(port, queues, lambda c, q: subscribe(c, q, hook.url))
                # Every worker learns every subscribed queue by its next round.
                time.sleep(args.scan_interval + 1)
                late = lateness(port, hook, queues, args)
                pushes = push_throughput(port, server.proc.pid, hook, queues, args)
                plain = claim_and_delete(port, server.proc.pid, pushes["messages"], args)
            finally:
                server.stop()
            return {"driver": args.driver, "workers": args.workers, "queues": args.queues,
                    "lateness": late, "push": pushes, "claim_delete": plain,
                    "duplicates": hook.duplicates,
                    "cpu_ratio": pushes["server_cpu_ms"] / plain["server_cpu_ms"],
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "loadavg": os.getloadavg()}}


def rows(result: dict[str, Any]) -> Iterator[str]:
    late, push, plain = result["lateness"], result["push"], result["claim_delete"]
    yield ("| driver | lateness median | lateness p99 | early | pushes/s | "
           "server CPU per push | per claim + delete | ratio |")
    yield "|---|---:|---:|---:|---:|---:|---:|---:|"
    yield (f"| {result['driver']} | {late['median_ms']:.1f} ms | {late['p99_ms']:.1f} ms | "
           f"{late['early']} | {push['per_second']:,.0f} | {push['server_cpu_ms']:.3f} ms | "
           f"{plain['server_cpu_ms']:.3f} ms | {result['cpu_ratio']:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=("sqlite", "redis"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--lateness-messages", type=int, default=3000)
    parser.add_argument("--spread", type=float, default=10.0,
                        help="seconds the lateness messages' due instants spread over")
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--consumers", type=int, default=8,
                        help="client threads of the claim + delete phase")
    parser.add_argument("--scan-interval", type=float, default=5.0)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    result = run(args)
    for line in rows(result):
        print(line)
    print(f"duplicates: {result['duplicates']}; lateness max "
          f"{result['lateness']['max_ms']:.1f} ms over {result['lateness']['messages']} "
          f"messages; {result['push']['messages']} pushes in "
          f"{result['push']['seconds']:.1f} s")
    output = args.output or RESULTS / f"push-{args.driver}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
