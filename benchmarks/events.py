"""Event trail cost on the hot path: the same requests with the trail on and off.

Starts the real ``delayq-server`` twice on the same driver and machine, one with
``[events] enabled = true`` and one with ``enabled = false``, each on a store of its own
(SQLite: a file each; Redis: one private ``redis-server``, a namespace each), and times,
through the HTTP API only, on one keep-alive connection per server:

* ``POST messages`` of 1 message, and of 10 messages;
* ``POST claims?limit=1`` (takes 1 message), then ``POST claims?limit=10`` (takes 10);
* ``DELETE`` of the one claimed message with its ``claim_id``.

Each round runs these steps in that order on a queue that starts empty, and ends by
deleting the 10 other claimed messages with one untimed ``DELETE messages?ids=``, so
every round starts from the same state. The two servers are interleaved step by step, in
a random order for each step, so each pair of samples shares the machine's noise.

Two server processes differ by a few percent even when configured alike (where their
memory landed, which core they run on): ``--control`` measures that. So the rounds are
split into ``--blocks`` blocks, each on a freshly started pair of servers (in a random
start order, after ``--warmup`` unmeasured rounds), and the samples of all blocks pooled.

Afterwards the trail is read back through the driver: the server with the trail on must
have written exactly 33 events a round (11 posted, 11 claimed, 11 deleted), the other none.

Reported per operation: median and p90 with the trail off and on, the on/off ratio of
the medians with a 95% bootstrap interval, and the difference of the medians.
``--control`` is an A/A run: both servers with the trail off, the same requests, so the
ratios show what the setup itself contributes (they should be 1.00; the interval only
covers sampling noise, not a difference between two server processes).

Usage::

    python benchmarks/events.py [--driver sqlite|redis] [--samples 2000] [--blocks 4]
                                [--warmup 50] [--workers 1] [--seed 1] [--output PATH]
                                [--control] [--keep]

Results are printed as a table and written to ``benchmarks/results/events-<driver>.json``
(``events-<driver>-control.json`` with ``--control``).
``--driver redis`` starts a ``redis-server`` of its own (a free loopback port, never
6379, no persistence), as ``benchmarks/backlog.py`` does, whose helpers (servers, client,
configuration, statistics) this script imports.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

QUEUE = "bench-events"
VARIANTS = ("off", "on")
MESSAGE_TTL = 3600
CLAIM_BODY = json.dumps({"ttl": 300, "grace": 60}).encode()
EVENTS_PER_ROUND = 33  # 11 posted, 11 claimed, 1 deleted under its claim, 10 by ids
BOOTSTRAP_RESAMPLES = 2000

OPERATIONS = (
    ("post_1", "post 1 message (201)"),
    ("post_10", "post 10 messages (201)"),
    ("claim_1", "claim limit=1 (201, 1 message)"),
    ("claim_10", "claim limit=10 (201, 10 messages)"),
    ("delete", "delete by id + claim_id (204)"),
)
DRIVERS = ("sqlite", "redis")

Sections = backlog.Sections


# Stores: one per variant, the same kind of store for both ----------------------------------


def store_sections(driver: str, workdir: Path) -> tuple[Sections, dict[str, Sections]]:
    """The sections of the store's service, and each variant's driver sections."""
    if driver == "sqlite":
        per_variant = {}
        for variant in VARIANTS:
            (workdir / variant).mkdir(parents=True, exist_ok=True)
            per_variant[variant] = backlog.sqlite_sections(workdir / variant)
        return {}, per_variant
    if driver == "redis":
        shared = backlog.redis_sections(workdir)  # one redis-server, a namespace each
        per_variant = {}
        for variant in VARIANTS:
            sections = copy.deepcopy(shared)
            sections[backlog.REDIS_GROUP]["namespace"] = f"dq-events-{variant}"
            per_variant[variant] = sections
        return shared, per_variant
    raise ValueError(f"unknown driver {driver}")


def open_store(driver: str, sections: Sections) -> Any:
    """A storage driver on a variant's store (to read its trail back)."""
    if driver == "sqlite":
        from delayq.storage.sqlite.driver import Driver
        from delayq.synchronous import Synchronous

        return Synchronous(Driver(sections["drivers:message_store:sqlite"]["path"]))
    from delayq.storage.redis.driver import Driver
    from delayq.synchronous import Synchronous

    group = sections[backlog.REDIS_GROUP]
    return Synchronous(Driver(group["uri"], namespace=group["namespace"]))


def trail_counts(driver: str, sections: Sections) -> dict[str, int]:
    """How many events of each kind the variant's store holds for the benchmark queue."""
    store = open_store(driver, sections)
    try:
        counts: dict[str, int] = {}
        for event in store.read_events(backlog.PROJECT, QUEUE):
            counts[event.kind] = counts.get(event.kind, 0) + 1
        return counts
    finally:
        store.close()


# Servers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(driver: str, per_variant: dict[str, Sections], workdir: Path, workers: int,
            order: list[str], control: bool = False) -> Iterator[dict[str, backlog.Client]]:
    """Both delayq-servers, started in *order*, ready, and a client of each; stopped on
    exit. With *control*, the "on" server has the trail off too."""
    started: dict[str, backlog.Server] = {}
    clients: dict[str, backlog.Client] = {}
    try:
        for variant in order:
            directory = workdir / variant  # its own config dir: gunicorn's control socket
            directory.mkdir(parents=True, exist_ok=True)
            port = backlog.free_port()
            config = directory / "delayq.conf"
            enabled = "true" if variant == "on" and not control else "false"
            backlog.write_config(config, driver, port, workers,
                                 {**per_variant[variant], "events": {"enabled": enabled}})
            started[variant] = backlog.Server(config, port, directory / "server.log")
            started[variant].wait_ready()
            clients[variant] = backlog.Client(port)
        yield clients
    except BaseException:
        for variant, server in started.items():
            print(f"\n{variant} server log (tail):\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        for client in clients.values():
            client.close()
        for server in started.values():
            server.stop()


# Measurement ------------------------------------------------------------------------------


def messages_body(count: int, round_index: int) -> bytes:
    return json.dumps({"messages": [
        {"body": {"bench": "events", "round": round_index, "n": n}, "ttl": MESSAGE_TTL}
        for n in range(count)]}).encode()


def post(client: backlog.Client, count: int, round_index: int) -> float:
    document, elapsed = client.expect(201, "POST", f"/v2/queues/{QUEUE}/messages",
                                      messages_body(count, round_index))
    if len(document["resources"]) != count:
        raise RuntimeError(f"post of {count} returned {document!r}")
    return elapsed


def claim(client: backlog.Client, limit: int) -> tuple[list[dict[str, Any]], float]:
    document, elapsed = client.expect(201, "POST", f"/v2/queues/{QUEUE}/claims?limit={limit}",
                                      CLAIM_BODY)
    messages = document["messages"]
    if len(messages) != limit:
        raise RuntimeError(f"claim of {limit} took {len(messages)} messages")
    return messages, elapsed


class Round:
    """One variant's state within a round: what its claims returned."""

    def __init__(self, client: backlog.Client, index: int) -> None:
        self.client = client
        self.index = index
        self.one: list[dict[str, Any]] = []
        self.ten: list[dict[str, Any]] = []

    def step(self, op: str) -> float:
        if op == "post_1":
            return post(self.client, 1, self.index)
        if op == "post_10":
            return post(self.client, 10, self.index)
        if op == "claim_1":
            self.one, elapsed = claim(self.client, 1)
            return elapsed
        if op == "claim_10":
            self.ten, elapsed = claim(self.client, 10)
            return elapsed
        if op == "delete":
            _, elapsed = self.client.expect(204, "DELETE", self.one[0]["href"])  # ?claim_id=
            return elapsed
        raise ValueError(op)

    def clean_up(self) -> None:
        """Delete the rest of the round's messages (untimed): the queue is empty again."""
        ids = ",".join(m["id"] for m in self.ten)
        self.client.expect(204, "DELETE", f"/v2/queues/{QUEUE}/messages?ids={ids}")


def measure(clients: dict[str, backlog.Client], rounds: int, warmup: int, seed: int
            ) -> dict[str, dict[str, list[float]]]:
    """Interleaved rounds: each step on both servers, in a random order each time."""
    rng = random.Random(seed)
    results = {variant: {op: [] for op, _ in OPERATIONS} for variant in VARIANTS}
    gc.collect()
    gc.disable()  # a collection in the client would land in one sample
    try:
        for index in range(warmup + rounds):
            state = {variant: Round(clients[variant], index) for variant in VARIANTS}
            for op, _ in OPERATIONS:
                order = list(VARIANTS)
                rng.shuffle(order)
                for variant in order:
                    elapsed = state[variant].step(op)
                    if index >= warmup:
                        results[variant][op].append(elapsed)
            # In a random order too: the server that served the last request starts the
            # next round warm (its first step, post_1, is measurably faster).
            order = list(VARIANTS)
            rng.shuffle(order)
            for variant in order:
                state[variant].clean_up()
            if index % 64 == 63:
                gc.enable()
                gc.collect()
                gc.disable()
    finally:
        gc.enable()
    return results


# Statistics and report -------------------------------------------------------------------


def ratio_interval(on: list[float], off: list[float], seed: int) -> tuple[float, float]:
    """A 95% bootstrap interval of median(on) / median(off)."""
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(on, k=len(on)))
        / statistics.median(rng.choices(off, k=len(off)))
        for _ in range(BOOTSTRAP_RESAMPLES))
    return ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]


def report(samples: dict[str, dict[str, list[float]]], seed: int) -> dict[str, Any]:
    table = {}
    for op, _ in OPERATIONS:
        off = backlog.summary(samples["off"][op])
        on = backlog.summary(samples["on"][op])
        low, high = ratio_interval(samples["on"][op], samples["off"][op], seed)
        table[op] = {"off": off, "on": on,
                     "ratio_median": on["median_ms"] / off["median_ms"],
                     "ratio_median_95ci": [low, high],
                     "ratio_p90": on["p90_ms"] / off["p90_ms"],
                     "added_median_us": (on["median_ms"] - off["median_ms"]) * 1000}
    return table


def print_table(table: dict[str, Any]) -> None:
    head = (f"{'operation':34} | {'events off':^19} | {'events on':^19} | "
            f"{'on/off':>6} {'95% interval':>13} | {'added':>8}")
    sub = (f"{'':34} | {'median':>9} {'p90':>9} | {'median':>9} {'p90':>9} | "
           f"{'median':>6} {'':>13} | {'median':>8}")
    print(head)
    print(sub)
    print("-" * len(head))
    for op, label in OPERATIONS:
        row = table[op]
        low, high = row["ratio_median_95ci"]
        print(f"{label:34} | {row['off']['median_ms']:7.3f}ms {row['off']['p90_ms']:7.3f}ms"
              f" | {row['on']['median_ms']:7.3f}ms {row['on']['p90_ms']:7.3f}ms"
              f" | {row['ratio_median']:6.2f} {f'{low:.2f}-{high:.2f}':>13}"
              f" | {row['added_median_us']:6.0f}us")


def git_commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, check=True).stdout.strip()
    return None


# Main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=DRIVERS)
    parser.add_argument("--samples", type=int, default=2000,
                        help="measured rounds (each operation once per server; default 2000)")
    parser.add_argument("--blocks", type=int, default=4,
                        help="server restarts: the rounds are split into this many blocks, "
                             "each on a freshly started pair of servers (default 4)")
    parser.add_argument("--warmup", type=int, default=50,
                        help="unmeasured rounds at the start of each block (default 50)")
    parser.add_argument("--workers", type=int, default=1,
                        help="gunicorn worker processes of each server (default 1)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the interleaving order and of the bootstrap")
    parser.add_argument("--output", type=Path,
                        help="JSON results (default benchmarks/results/events-DRIVER.json)")
    parser.add_argument("--control", action="store_true",
                        help="an A/A run: the trail off on both servers, so that the "
                             "ratios show the benchmark's own bias (should be 1.00)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (configs, data, server logs)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output = args.output or Path(__file__).resolve().parent / "results" / \
        f"events-{args.driver}{'-control' if args.control else ''}.json"
    workdir = Path(tempfile.mkdtemp(prefix="delayq-events-"))
    service_sections, per_variant = store_sections(args.driver, workdir)
    info = backlog.machine()
    print(f"delayq event trail benchmark: driver={args.driver} samples={args.samples} "
          f"warmup={args.warmup} workers={args.workers}, {info['cpus']} CPUs"
          + (" (control: the trail off on both servers)" if args.control else ""))
    service = (backlog.redis_service(service_sections, workdir) if args.driver == "redis"
               else backlog.no_service(service_sections, workdir))
    samples = {variant: {op: [] for op, _ in OPERATIONS} for variant in VARIANTS}
    rng = random.Random(args.seed)
    measure_seconds = 0.0
    print(f"  measuring: {args.samples} rounds in {args.blocks} blocks, each block on a "
          f"fresh pair of servers after {args.warmup} warm-up rounds; the two servers "
          "interleaved step by step")
    try:
        with service:
            for block in range(args.blocks):
                rounds = args.samples // args.blocks + (block < args.samples % args.blocks)
                order = list(VARIANTS)
                rng.shuffle(order)  # which server starts first: no steady advantage
                with servers(args.driver, per_variant, workdir, args.workers, order,
                             args.control) as clients:
                    for client in clients.values():
                        status, document, _ = client.request(
                            "PUT", f"/v2/queues/{QUEUE}", b"{}")
                        if status not in (201, 204):
                            raise RuntimeError(f"PUT queue: {status} {document}")
                    started = time.perf_counter()
                    measured = measure(clients, rounds, args.warmup,
                                       args.seed * 1000 + block)
                    measure_seconds += time.perf_counter() - started
                for variant in VARIANTS:
                    for op, _ in OPERATIONS:
                        samples[variant][op] += measured[variant][op]
                print(f"  block {block + 1}/{args.blocks}: {rounds} rounds "
                      f"(servers started {' then '.join(order)})")
            # The servers have stopped; the store (Redis) still runs.
            trails = {variant: trail_counts(args.driver, per_variant[variant])
                      for variant in VARIANTS}
    except BaseException:
        print(f"kept for inspection: {workdir}", file=sys.stderr)
        raise

    expected = EVENTS_PER_ROUND * (args.warmup * args.blocks + args.samples)
    written = {variant: sum(counts.values()) for variant, counts in trails.items()}
    if written != {"off": 0, "on": 0 if args.control else expected}:
        print(f"kept for inspection: {workdir}", file=sys.stderr)
        raise RuntimeError(f"events written {trails}, expected {expected} with the trail "
                           "on and none with it off")
    with contextlib.suppress(OSError):
        info["loadavg_end"] = os.getloadavg()
    table = report(samples, args.seed)
    print()
    print_table(table)
    print(f"\ntrail: {written['on']:,} events written with it on ({trails['on']}), "
          f"none with it off; {measure_seconds:.1f}s of measurement")

    result = {
        "benchmark": "events",
        "driver": args.driver,
        "samples": args.samples,
        "warmup": args.warmup,
        "blocks": args.blocks,
        "workers": args.workers,
        "seed": args.seed,
        "control": args.control,
        "measure_seconds": round(measure_seconds, 2),
        "operations": dict(OPERATIONS),
        "results": table,
        "trail_events": trails,
        "machine": info,
        "commit": git_commit(),
        "command": "python benchmarks/events.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {output}")
    if args.keep:
        print(f"kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
