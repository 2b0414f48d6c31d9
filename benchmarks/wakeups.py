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

Reported per layout: median, p99 and max of each. Results are printed and written as
JSON to ``benchmarks/results/wakeups-<driver>.json`` (or ``--output``).

Usage::

    python benchmarks/wakeups.py [--driver sqlite|redis] [--layout 2w --layout 4w
                                 --layout 2s] [--trials 20] [--push-trials 10]
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
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog
    import push

RESULTS = Path(__file__).resolve().parent / "results"
LAYOUTS = {"2w": (1, 2), "4w": (1, 4), "2s": (2, 1)}  # servers, workers each
WAIT = 10  # seconds a consumer waits for a message
SETTLE = 0.3  # seconds between a consumer's claim and the post: the claim waits by then
CLAIM_BODY = json.dumps({"ttl": 60, "grace": 60}).encode()
PUSH_TIMEOUT = 30.0  # seconds a push may take before the trial fails


@contextmanager
def servers(driver: str, layout: str, sections: backlog.Sections, workdir: Path,
            scan_interval: float) -> Iterator[list[int]]:
    """The layout's servers on the store of *sections*; their ports."""
    count, workers = LAYOUTS[layout]
    with ExitStack() as stack:
        ports = []
        for n in range(count):
            port = backlog.free_port()
            config = workdir / f"delayq-{layout}-{n}.conf"
            backlog.write_config(config, driver, port, workers, sections, extra={
                "notification": {"push_scan_interval": str(scan_interval),
                                 # The receiver is on loopback.
                                 "allowed_webhook_networks": "127.0.0.0/8"}})
            server = backlog.Server(config, port, workdir / f"server-{layout}-{n}.log")
            stack.callback(server.stop)
            server.wait_ready()
            ports.append(port)
        yield ports


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


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(1000 * statistics.median(ordered), 1),
            "p99_ms": round(1000 * push.percentile(ordered, 0.99), 1),
            "max_ms": round(1000 * ordered[-1], 1), "trials": len(ordered)}


def run_layout(driver: str, layout: str, sections: backlog.Sections, workdir: Path,
               hook: push.Receiver, args: argparse.Namespace) -> dict[str, Any]:
    with servers(driver, layout, sections, workdir, args.scan_interval) as ports:
        consumer, producer = ports[0], ports[-1]
        queue = f"wake-{layout}"
        client = backlog.Client(consumer)
        client.expect(201, "PUT", f"/v2/queues/{queue}", b"{}")
        client.close()
        long_poll = [long_poll_trial(consumer, producer, queue)
                     for _ in range(args.trials)]
        pushed = [push_trial(consumer, producer, hook) for _ in range(args.push_trials)]
    return {"long_poll": summary(long_poll), "push": summary(pushed)}


def print_table(driver: str, results: dict[str, dict[str, Any]]) -> None:
    print(f"\n{driver}: wake-up after a post (ms)")
    print("layout | long-poll median | p99 | max | push median | p99 | max")
    for layout, result in results.items():
        lp, pu = result["long_poll"], result["push"]
        print(f"{layout:6} | {lp['median_ms']:16.1f} | {lp['p99_ms']:7.1f} | "
              f"{lp['max_ms']:7.1f} | {pu['median_ms']:11.1f} | {pu['p99_ms']:7.1f} | "
              f"{pu['max_ms']:7.1f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=["sqlite", "redis"])
    parser.add_argument("--layout", action="append", choices=sorted(LAYOUTS))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--push-trials", type=int, default=10)
    parser.add_argument("--scan-interval", type=float, default=5.0,
                        help="push_scan_interval of the servers (the default's)")
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
        with backend.service(sections, workdir), push.Receiver() as hook:
            for layout in layouts:
                print(f"  {args.driver} {layout}: {args.trials} long-poll and "
                      f"{args.push_trials} push trials", flush=True)
                results[layout] = run_layout(args.driver, layout, sections, workdir, hook,
                                             args)
    print_table(args.driver, results)
    output = args.output or RESULTS / f"wakeups-{args.driver}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"driver": args.driver, "trials": args.trials,
                                  "push_trials": args.push_trials,
                                  "machine": backlog.machine(), "layouts": results},
                                 indent=2))
    print(f"results: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
