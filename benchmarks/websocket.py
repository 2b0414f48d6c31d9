"""Zaqar's WebSocket API against HTTP: how many messages a second one socket posts, and
how late messages pushed down a socket arrive after they come due.

Starts the real ``delayq-server`` (gunicorn, ``--workers`` uvicorn workers, pushing on)
on a store of its own (as ``benchmarks/backlog.py`` starts them), its socket limit
``max_frames_per_second`` raised out of the way (its default, 100, would close a socket
posting faster), and measures from this process:

1. **posts per second**, ``--posts`` messages each way, one message per request, on a
   queue of its own each:

   - *HTTP*: ``POST /v2/queues/<q>/messages`` on one keep-alive connection, each post
     sent once the last is answered;
   - *WebSocket, one at a time*: ``message_post`` frames on one socket, each sent once
     the last is answered, as a client waiting for its answer would;
   - *WebSocket, pipelined*: the same, with up to ``--window`` frames in flight (the
     server still serves one socket's frames one at a time, in order);

2. **push lateness**: a socket subscribes itself to a delayed queue
   (``subscription_create`` without a subscriber); ``--push-messages`` messages are then
   posted over HTTP with ``deliver_at`` spread over ``--spread`` seconds starting a few
   seconds ahead. The lateness of a message is when its pushed frame arrived minus its
   ``deliver_at`` (its due instant, on the store's clock, which is this machine's). Each
   pushed frame is acknowledged at once (``message_delete`` with its ``message_id`` and
   ``claim_id``), as a client would.

Usage::

    python benchmarks/websocket.py [--driver sqlite|redis|both] [--posts 2000]
                                   [--window 16] [--push-messages 500] [--spread 10]

Results are printed as a table and written to ``benchmarks/results/websocket-<driver>.json``
(``--output``: one file holding every driver's run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

try:
    import backlog
    import push
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog
    import push

RESULTS = Path(__file__).resolve().parent / "results"
WS_PATH = "/v2/ws"
LEAD = 5.0  # seconds between the start of the lateness posts and the first due instant
POST_BATCH = 20  # messages per HTTP post of the lateness phase
WARMUP = 100  # posts each way before the timed ones
MESSAGE = {"body": {"bench": "websocket"}, "ttl": 3600}


def frame_headers() -> dict[str, str]:
    return {"X-Project-ID": backlog.PROJECT, "Client-ID": str(uuid.uuid4())}


def post_frame(queue: str, headers: dict[str, str]) -> str:
    return json.dumps({"action": "message_post", "headers": headers,
                       "body": {"queue_name": queue, "messages": [MESSAGE]}})


def expect_status(answer: str | bytes, status: int) -> dict[str, Any]:
    frame = json.loads(answer)
    if frame.get("headers", {}).get("status") != status:
        raise RuntimeError(f"expected {status}: {frame}")
    return frame


# Posts per second ------------------------------------------------------------------------


def http_posts(port: int, queue: str, count: int) -> float:
    """Seconds *count* one-message posts take on one keep-alive connection."""
    client = backlog.Client(port)
    body = json.dumps({"messages": [MESSAGE]}).encode()
    path = f"/v2/queues/{queue}/messages"
    for _ in range(WARMUP):
        client.expect(201, "POST", path, body)
    began = time.perf_counter()
    for _ in range(count):
        client.expect(201, "POST", path, body)
    seconds = time.perf_counter() - began
    client.close()
    return seconds


async def ws_one_at_a_time(ws: ClientConnection, queue: str, count: int) -> float:
    frame = post_frame(queue, frame_headers())
    for _ in range(WARMUP):
        await ws.send(frame)
        expect_status(await ws.recv(), 201)
    began = time.perf_counter()
    for _ in range(count):
        await ws.send(frame)
        expect_status(await ws.recv(), 201)
    return time.perf_counter() - began


async def ws_pipelined(ws: ClientConnection, queue: str, count: int, window: int) -> float:
    """Seconds *count* posts take with up to *window* frames unanswered at a time."""
    frame = post_frame(queue, frame_headers())
    room = asyncio.Semaphore(window)

    async def send_all() -> None:
        for _ in range(count):
            await room.acquire()
            await ws.send(frame)

    began = time.perf_counter()
    sender = asyncio.create_task(send_all())
    for _ in range(count):
        expect_status(await ws.recv(), 201)
        room.release()
    await sender
    return time.perf_counter() - began


async def post_rates(port: int, args: argparse.Namespace) -> dict[str, Any]:
    url = f"ws://127.0.0.1:{port}{WS_PATH}"
    seconds: dict[str, float] = {}
    seconds["http"] = await asyncio.to_thread(http_posts, port, "rate-http", args.posts)
    async with connect(url, ping_interval=None, max_size=None) as ws:
        seconds["ws_one_at_a_time"] = await ws_one_at_a_time(ws, "rate-ws", args.posts)
    async with connect(url, ping_interval=None, max_size=None) as ws:
        frame = post_frame("rate-ws-pipelined", frame_headers())
        for _ in range(WARMUP):
            await ws.send(frame)
            expect_status(await ws.recv(), 201)
        seconds["ws_pipelined"] = await ws_pipelined(ws, "rate-ws-pipelined", args.posts,
                                                     args.window)
    return {mode: {"messages": args.posts, "seconds": s, "per_second": args.posts / s}
            for mode, s in seconds.items()}


# Push lateness ---------------------------------------------------------------------------


async def subscribe_socket(ws: ClientConnection, queue: str) -> None:
    await ws.send(json.dumps({"action": "subscription_create", "headers": frame_headers(),
                              "body": {"queue_name": queue, "ttl": 3600}}))
    expect_status(await ws.recv(), 201)


def post_due(port: int, queue: str, instants: list[float]) -> dict[str, float]:
    """Post one message per instant over HTTP; ``id -> instant``."""
    client = backlog.Client(port)
    due: dict[str, float] = {}
    for start in range(0, len(instants), POST_BATCH):
        due.update(push.post_due(client, (queue, instants[start:start + POST_BATCH])))
    client.close()
    return due


async def lateness(port: int, args: argparse.Namespace) -> dict[str, Any]:
    queue = "push-ws"
    setup = backlog.Client(port)
    setup.expect(201, "PUT", f"/v2/queues/{queue}",
                 json.dumps({"_default_message_delay": 1}).encode())
    setup.close()
    arrivals: dict[str, float] = {}
    duplicates = 0
    acks = {"sent": 0, "answered": 0}
    async with connect(f"ws://127.0.0.1:{port}{WS_PATH}", ping_interval=None,
                       max_size=None) as ws:
        await subscribe_socket(ws, queue)
        # Every worker learns the subscribed queue by its next round.
        await asyncio.sleep(args.scan_interval + 1)
        headers = frame_headers()

        async def receive() -> None:
            nonlocal duplicates
            async for raw in ws:
                arrived = time.time()
                frame = json.loads(raw)
                if "request" in frame:  # the answer to an acknowledgement
                    if frame["headers"].get("status") != 204:
                        raise RuntimeError(f"acknowledgement refused: {frame}")
                    acks["answered"] += 1
                    continue
                if frame["id"] in arrivals:
                    duplicates += 1
                else:
                    arrivals[frame["id"]] = arrived
                await ws.send(json.dumps({"action": "message_delete", "headers": headers,
                                          "body": {"queue_name": frame["queue_name"],
                                                   "message_id": frame["id"],
                                                   "claim_id": frame["claim_id"]}}))
                acks["sent"] += 1

        receiver = asyncio.create_task(receive())
        start = time.time() + LEAD
        step = args.spread / max(1, args.push_messages - 1)
        instants = [start + n * step for n in range(args.push_messages)]
        due = await asyncio.to_thread(post_due, port, queue, instants)
        if time.time() > start:
            raise RuntimeError(f"posting took longer than the {LEAD} s lead; raise LEAD")
        deadline = time.monotonic() + LEAD + args.spread + 60
        while len(arrivals.keys() & due.keys()) < len(due):
            if receiver.done():
                receiver.result()  # raises what ended it
                raise RuntimeError("the socket closed")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(due.keys() - arrivals.keys())} of {len(due)} "
                                   "pushes missing")
            await asyncio.sleep(0.05)
        while acks["answered"] < acks["sent"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        receiver.cancel()
    late = [arrivals[i] - at for i, at in due.items()]
    return {"messages": len(late), "median_ms": 1000 * statistics.median(late),
            "p99_ms": 1000 * push.percentile(late, 0.99), "max_ms": 1000 * max(late),
            "early": sum(1 for x in late if x < 0), "duplicates": duplicates,
            "acknowledged": acks["answered"]}


# The run ---------------------------------------------------------------------------------


def run(driver: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = backlog.BACKENDS[driver]
    with tempfile.TemporaryDirectory(prefix="delayq-websocket-") as tmp:
        workdir = Path(tmp)
        sections = spec.sections(workdir)
        with spec.service(sections, workdir):
            port = backlog.free_port()
            config = workdir / "delayq.conf"
            backlog.write_config(config, driver, port, args.workers, sections, extra={
                "drivers:transport:websocket": {"path": WS_PATH,
                                                "max_frames_per_second": "1000000"},
                "notification": {"push_scan_interval": str(args.scan_interval)}})
            server = backlog.Server(config, port, workdir / "server.log")
            try:
                server.wait_ready()
                rates = asyncio.run(post_rates(port, args))
                late = asyncio.run(lateness(port, args))
            except Exception:
                print(server.log_tail(), file=sys.stderr)
                raise
            finally:
                server.stop()
    return {"driver": driver, "workers": args.workers, "window": args.window,
            "posts": rates, "lateness": late,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "loadavg": os.getloadavg()}}


def rows(results: list[dict[str, Any]]) -> Iterator[str]:
    yield ("| store | HTTP posts/s | WS posts/s, one at a time | WS posts/s, pipelined | "
           "push lateness median | p99 | max |")
    yield "|---|---:|---:|---:|---:|---:|---:|"
    for result in results:
        posts, late = result["posts"], result["lateness"]
        yield (f"| {result['driver']} | {posts['http']['per_second']:,.0f} | "
               f"{posts['ws_one_at_a_time']['per_second']:,.0f} | "
               f"{posts['ws_pipelined']['per_second']:,.0f} | {late['median_ms']:.1f} ms | "
               f"{late['p99_ms']:.1f} ms | {late['max_ms']:.1f} ms |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="both", choices=("sqlite", "redis", "both"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--posts", type=int, default=2000,
                        help="messages posted each way (HTTP, WS one at a time, pipelined)")
    parser.add_argument("--window", type=int, default=16,
                        help="frames in flight on the pipelined socket")
    parser.add_argument("--push-messages", type=int, default=500)
    parser.add_argument("--spread", type=float, default=10.0,
                        help="seconds the pushed messages' due instants spread over")
    parser.add_argument("--scan-interval", type=float, default=1.0)
    parser.add_argument("--output", type=Path,
                        help="one JSON file for the whole run, instead of one per driver")
    args = parser.parse_args(argv)
    drivers = ["sqlite", "redis"] if args.driver == "both" else [args.driver]
    results = []
    for driver in drivers:
        result = run(driver, args)
        results.append(result)
        if args.output is None:
            output = RESULTS / f"websocket-{driver}.json"
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps(result, indent=2))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2))
    for line in rows(results):
        print(line)
    for result in results:
        late = result["lateness"]
        print(f"{result['driver']}: {late['messages']} pushes, {late['early']} early, "
              f"{late['duplicates']} twice, {late['acknowledged']} acknowledged; "
              f"load average {result['machine']['loadavg'][0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
