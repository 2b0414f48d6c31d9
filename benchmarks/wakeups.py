"""Wake-ups: how soon a post reaches a consumer waiting in another process, and a webhook.

Starts the real ``delayq-server`` on a store of its own (as ``benchmarks/backlog.py``
starts them), in one of three layouts: one server with ``2w`` or ``4w`` uvicorn workers,
or ``2s``, two servers (one worker each, on two ports) sharing the store, as two API
hosts behind a load balancer would. Then, through the HTTP API only, ``--trials`` times:

* **long-poll**: a consumer sends ``POST .../claims?limit=1&wait=10`` on a new
  connection and, once it waits, a producer posts one message on another new connection
  (in ``2s``, to the other server); the wake-up is from the post's sending to the claim's
  answer. gunicorn hands a new connection to whichever worker accepts it first, so
  across trials the post lands in the waiter's process about ``1/workers`` of the time;
  ``2s`` never does.
* **push**: a new queue is subscribed to a webhook receiver in this process, and one
  message posted at once, each on a new connection (in ``2s``, the subscription through
  one server and the post through the other); the delay is from the post's sending to
  the push's arrival.

Reported per layout: median, p99 and max of each. Then the cost of a post: the CPU
seconds of every server process and of the store's (redis-server; SQLite has none of
its own) over ``--cost-posts`` posts, in turn through each server on keep-alive
connections, per post; once to a queue nobody waits on, once to a queue on which long-
poll claims wait in every worker (three per worker through each server) for messages
that are not yet due, so that each post costs the wake-ups it causes and no claim.

With ``--tree DIR`` (repeatable) every layout is measured once per tree, a delayq source
tree put first on ``PYTHONPATH`` (a checkout of another commit, say): two commits in one
run give the cost of what changed between them, such as the signals a post sends to the
other processes.

Results are printed and written as JSON to ``benchmarks/results/wakeups-<driver>.json``
(or ``--output``).

Usage::

    python benchmarks/wakeups.py [--driver sqlite|redis] [--layout 2w --layout 4w
                                 --layout 2s] [--trials 20] [--push-trials 10]
                                 [--cost-posts 3000] [--tree DIR ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

try:
    import backlog
    import push
    import throughput
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog
    import push
    import throughput

RESULTS = Path(__file__).resolve().parent / "results"
LAYOUTS = {"2w": (1, 2), "4w": (1, 4), "2s": (2, 1)}  # servers, workers each
WAIT = 10  # seconds a consumer waits for a message
SETTLE = 0.3  # seconds between a consumer's claim and the post: the claim waits by then
CLAIM_BODY = json.dumps({"ttl": 60, "grace": 60}).encode()
PUSH_TIMEOUT = 30.0  # seconds a push may take before the trial fails
COST_DELAY = 600  # seconds: the delay of the messages posted to measure a post's cost
COST_WAIT = 20  # seconds the claims of that queue wait: the posts end well within it


@contextmanager
def servers(driver: str, layout: str, sections: backlog.Sections, workdir: Path,
            scan_interval: float, tree: Path | None) -> Iterator[list[backlog.Server]]:
    """The layout's servers on the store of *sections*, serving *tree*'s code (None:
    this checkout's)."""
    count, workers = LAYOUTS[layout]
    with ExitStack() as stack:
        started = []
        for n in range(count):
            port = backlog.free_port()
            config = workdir / f"delayq-{layout}-{n}.conf"
            backlog.write_config(config, driver, port, workers, sections, extra={
                "notification": {"push_scan_interval": str(scan_interval),
                                 # The receiver is on loopback.
                                 "allowed_webhook_networks": "127.0.0.0/8"}})
            server = backlog.Server(config, port, workdir / f"server-{layout}-{n}.log",
                                    tree=tree)
            stack.callback(server.stop)
            server.wait_ready()
            started.append(server)
        yield started


def long_poll_trial(consumer_port: int, producer_port: int, queue: str) -> float:
    """Seconds from a post's sending to the answer of a claim waiting for it."""
    answer: dict[str, Any] = {}

    def consume() -> None:
        client = backlog.Client(consumer_port)
        try:
            answer["claim"] = client.request(
                "POST", f"/v2/queues/{queue}/claims?limit=1&wait={WAIT}", CLAIM_BODY)
            answer["at"] = time.perf_counter()
        finally:
            client.close()

    waiter = threading.Thread(target=consume)
    waiter.start()
    time.sleep(SETTLE)
    producer = backlog.Client(producer_port)
    try:
        sent = time.perf_counter()
        backlog.post_ready(producer, queue)
        waiter.join(WAIT + 5)
        status, document, _ = answer["claim"]
        if status != 201:
            raise RuntimeError(f"the waiting claim answered {status}: {document}")
        # Taken and deleted, so that the next trial's claim waits again.
        href = document["messages"][0]["href"]
        producer.expect(204, "DELETE", href)
    finally:
        producer.close()
    return answer["at"] - sent


def push_trial(subscribe_port: int, post_port: int, hook: push.Receiver) -> float:
    """Seconds from a post's sending, right after its queue was subscribed, to its push."""
    queue = f"push-{uuid.uuid4().hex[:10]}"
    client = backlog.Client(subscribe_port)
    try:
        client.expect(201, "POST", f"/v2/queues/{queue}/subscriptions",
                      json.dumps({"subscriber": hook.url, "ttl": 3600}).encode())
    finally:
        client.close()
    client = backlog.Client(post_port)
    try:
        sent = time.time()  # the receiver notes arrivals on the wall clock
        document, _ = client.expect(201, "POST", f"/v2/queues/{queue}/messages",
                                    json.dumps({"messages": [{"body": {"bench": "push"},
                                                              "ttl": 3600}]}).encode())
    finally:
        client.close()
    message_id = document["resources"][0].rsplit("/", 1)[1]
    hook.wait_for({message_id}, PUSH_TIMEOUT)
    return hook.arrivals[message_id] - sent


def post_cost(ports: list[int], server_pids: list[int], store_pids: list[int], posts: int,
              waiters: int) -> dict[str, float]:
    """CPU milliseconds per post of the servers and of the store, over *posts* posts
    sent in turn through each port, to a queue on which *waiters* long-poll claims wait
    through each port (0: a queue nobody waits on).

    Waited on, the queue delays every message by ``COST_DELAY``: each post wakes the
    watchers of the processes that follow the queue, which ask the store when the next
    message is due and wait again, so the posts cost what a wake-up costs and no claim.
    """
    queue = f"cost-{uuid.uuid4().hex[:10]}"
    clients = [backlog.Client(port) for port in ports]
    metadata = {"_default_message_delay": COST_DELAY} if waiters else {}
    clients[0].expect(201, "PUT", f"/v2/queues/{queue}", json.dumps(metadata).encode())
    waiting = [threading.Thread(target=wait_in_vain, args=(port, queue), daemon=True)
               for port in ports for _ in range(waiters)]
    for thread in waiting:
        thread.start()
    body = json.dumps({"messages": [{"body": {"bench": "cost"}, "ttl": 300}]}).encode()
    path = f"/v2/queues/{queue}/messages"
    try:
        for client in clients:  # every connection is open
            client.expect(201, "POST", path, body)
        time.sleep(SETTLE if waiters else 0)
        servers_before = throughput.cpu_seconds(server_pids)
        store_before = throughput.cpu_seconds(store_pids)
        for n in range(posts):
            clients[n % len(clients)].expect(201, "POST", path, body)
        servers_used = throughput.cpu_seconds(server_pids) - servers_before
        store_used = throughput.cpu_seconds(store_pids) - store_before
    finally:
        for client in clients:
            client.close()
    for thread in waiting:
        thread.join()
    return {"server_cpu_ms": round(1000 * servers_used / posts, 4),
            "store_cpu_ms": round(1000 * store_used / posts, 4), "posts": posts}


def wait_in_vain(port: int, queue: str) -> None:
    """A long-poll claim of *queue* that finds nothing (its messages are not due)."""
    client = backlog.Client(port)
    try:
        status, document, _ = client.request(
            "POST", f"/v2/queues/{queue}/claims?limit=1&wait={COST_WAIT}", CLAIM_BODY)
        if status != 204:
            raise RuntimeError(f"a claim of {queue} found a message: {status} {document}")
    finally:
        client.close()


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(1000 * statistics.median(ordered), 1),
            "p99_ms": round(1000 * push.percentile(ordered, 0.99), 1),
            "max_ms": round(1000 * ordered[-1], 1), "trials": len(ordered)}


def run_layout(driver: str, layout: str, sections: backlog.Sections, workdir: Path,
               hook: push.Receiver, store_pids: list[int], tree: Path | None,
               args: argparse.Namespace) -> dict[str, Any]:
    with servers(driver, layout, sections, workdir, args.scan_interval, tree) as started:
        ports = [server.port for server in started]
        pids = [pid for server in started
                for pid in throughput.server_pids(server.proc.pid)]
        consumer, producer = ports[0], ports[-1]
        queue = f"wake-{layout}-{uuid.uuid4().hex[:8]}"
        client = backlog.Client(consumer)
        client.expect(201, "PUT", f"/v2/queues/{queue}", b"{}")
        client.close()
        long_poll = [long_poll_trial(consumer, producer, queue)
                     for _ in range(args.trials)]
        pushed = [push_trial(consumer, producer, hook) for _ in range(args.push_trials)]
        # Waiters through every port: the kernel hands each new connection to one of the
        # server's workers, so several per worker leave few of them without one.
        waiters = 3 * LAYOUTS[layout][1]
        cost = post_cost(ports, pids, store_pids, args.cost_posts, 0)
        watched = post_cost(ports, pids, store_pids, args.cost_posts, waiters)
    return {"long_poll": summary(long_poll), "push": summary(pushed), "post_cost": cost,
            "watched_post_cost": watched}


def print_table(driver: str, results: dict[str, dict[str, Any]]) -> None:
    print(f"\n{driver}: wake-up after a post (ms), and CPU per post (ms) to a queue "
          "nobody waits on and to one waited on in every process")
    print("layout | long-poll median | p99 | max | push median | p99 | max "
          "| server CPU | store CPU | waited: server | store")
    for layout, result in results.items():
        lp, pu = result["long_poll"], result["push"]
        cost, watched = result["post_cost"], result["watched_post_cost"]
        print(f"{layout:10} | {lp['median_ms']:16.1f} | {lp['p99_ms']:7.1f} | "
              f"{lp['max_ms']:7.1f} | {pu['median_ms']:11.1f} | {pu['p99_ms']:7.1f} | "
              f"{pu['max_ms']:7.1f} | {cost['server_cpu_ms']:10.3f} | "
              f"{cost['store_cpu_ms']:9.3f} | {watched['server_cpu_ms']:14.3f} | "
              f"{watched['store_cpu_ms']:5.3f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=["sqlite", "redis"])
    parser.add_argument("--layout", action="append", choices=sorted(LAYOUTS))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--push-trials", type=int, default=10)
    parser.add_argument("--scan-interval", type=float, default=5.0,
                        help="push_scan_interval of the servers (the default's)")
    parser.add_argument("--cost-posts", type=int, default=3000,
                        help="posts over which the CPU per post is measured")
    parser.add_argument("--tree", type=Path, action="append",
                        help="a delayq source tree to serve from; repeatable: every layout "
                             "is measured once per tree (layout@1 is the first tree's)")
    parser.add_argument("--output", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    layouts = args.layout or ["2w", "4w", "2s"]
    backend = backlog.BACKENDS[args.driver]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="delayq-wakeups-") as tmp:
        workdir = Path(tmp)
        sections = backend.sections(workdir)
        trees: list[Path | None] = [tree.resolve() for tree in args.tree or []] or [None]
        with backend.service(sections, workdir) as service, push.Receiver() as hook:
            store_pids = throughput.store_pids(service)
            for layout in layouts:
                for number, tree in enumerate(trees, 1):
                    label = layout if tree is None else f"{layout}@{number}"
                    print(f"  {args.driver} {label}: {args.trials} long-poll and "
                          f"{args.push_trials} push trials", flush=True)
                    results[label] = run_layout(args.driver, layout, sections, workdir,
                                                hook, store_pids, tree, args)
    print_table(args.driver, results)
    output = args.output or RESULTS / f"wakeups-{args.driver}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"driver": args.driver, "trials": args.trials,
                                  "push_trials": args.push_trials,
                                  "trees": [str(tree) for tree in args.tree or []],
                                  "machine": backlog.machine(), "layouts": results},
                                 indent=2))
    print(f"results: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
