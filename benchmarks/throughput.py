"""Throughput: requests per second and server CPU per request, beside a trivial app.

Each target is served by gunicorn with uvicorn workers (``--workers``, default 2):

* ``trivial``: ``benchmarks/trivial_app.py``, a Falcon app that answers without doing
  anything, run through delayq's own gunicorn set-up — the floor of what a request costs;
* with ``--bare``, ``bare``: ``benchmarks/bare_app.py``, a Falcon app that makes
  each request's Redis script call as delayq does and nothing else (no validation,
  rules or metrics), on a Redis store of its own started as the ``redis`` driver's is —
  about the least this API on Redis can cost on this stack;
* each ``--driver``: the real ``delayq-server`` on that store. The stores are started as
  ``benchmarks/backlog.py`` starts them (its ``BACKENDS``): SQLite a file, Redis a private
  ``redis-server``, Swift the test suite's ``SwiftCluster``. MongoDB needs a real replica
  set named by ``DELAYQ_TEST_MONGODB_URI`` and is skipped without one. That Redis keeps
  no AOF unless ``--redis-appendfsync`` turns it on (``appendonly yes`` with that
  ``appendfsync``, in the run's temporary directory), to measure what durability costs.

The load: ``--concurrency`` threads, each with its own keep-alive connection and queue,
repeating a cycle of three requests for ``--warmup`` and then ``--seconds`` seconds:
``POST .../messages`` (one message), ``POST .../claims?limit=1`` (takes it),
``DELETE`` the message with its ``claim_id``. The trivial app gets the same three
requests (methods, paths and bodies). Only the ``--seconds`` window is measured:

* requests per second: completed requests over wall time;
* server CPU per request: user + system time (``/proc/PID/stat``) of the gunicorn master
  and all its workers over the window, divided by the requests completed in it;
* store CPU per request, where the store is a process of the run (redis-server, Swift's
  servers): the same, for its processes;
* the load generator's own CPU (this process): it runs on the same machine, on the same
  CPUs as the servers unless ``--pin`` keeps it on CPU 0 and them on the others.

The targets run in ``--rounds`` rounds, the trivial app before the first and after each
round: ``trivial, sqlite, redis, trivial, sqlite, redis, trivial, ...``. Each driver's
ratio is its CPU per request over the mean of the two trivial measurements on either side
of its round, so a ratio is always taken between measurements minutes apart; on a shared
machine whose speed drifts, the drift between those two shows how steady the round was.
The summary gives each target's median ratio over the rounds, and the lowest and highest.
Results are printed and written as JSON (``benchmarks/results/throughput.json`` or
``--output``).

With ``--tree DIR`` (repeatable) each driver is measured once per tree, from that
delayq source tree (put first on ``PYTHONPATH``; a checkout of another commit, say):
``redis@1`` is the first tree's. Two commits compared in one run, round by round, give
the change in server CPU per request on the same machine at the same time.

Usage::

    python benchmarks/throughput.py [--driver sqlite --driver redis ...] [--seconds 10]
                                    [--warmup 2] [--concurrency 8] [--workers 2]
                                    [--rounds 5] [--pin] [--bare]
                                    [--redis-appendfsync everysec|always]
                                    [--tree DIR ...]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

if str(backlog.REPO_ROOT) not in sys.path:  # tests.server: /proc helpers
    sys.path.insert(0, str(backlog.REPO_ROOT))
from tests.server import child_pids  # noqa: E402

TRIVIAL = "trivial"
MODE_SEPARATOR = "/"  # "redis/threads": the driver with that storage_calls
TREE_SEPARATOR = "@"  # "redis@1": the driver served from the first --tree
TRIVIAL_APP = Path(__file__).resolve().parent / "trivial_app.py"
BARE = "bare"
BARE_APP = Path(__file__).resolve().parent / "bare_app.py"
RESULTS = Path(__file__).resolve().parent / "results" / "throughput.json"
MONGO_URI_VARIABLE = "DELAYQ_TEST_MONGODB_URI"
MONGO_GROUP = "drivers:message_store:mongodb"
TARGET_RATIO = 1.5
TICKS = os.sysconf("SC_CLK_TCK")
POST_BODY = json.dumps({"messages": [{"body": {"bench": "throughput"}, "ttl": 3600}]}
                       ).encode()
CLAIM_BODY = json.dumps({"ttl": 60, "grace": 60}).encode()


# CPU from /proc --------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds so far of *pids* (a process that ended counts 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            text = Path(f"/proc/{pid}/stat").read_text()
            # After the parenthesised command name: state is field 3, utime 14, stime 15.
            fields = text[text.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


def server_pids(master: int) -> list[int]:
    """The gunicorn master and its workers."""
    return [master, *child_pids(master)]


# The load --------------------------------------------------------------------------------


class Loader(threading.Thread):
    """One keep-alive connection repeating post → claim → delete on a queue of its own."""

    def __init__(self, port: int, queue: str, stop: threading.Event, *,
                 trivial: bool = False) -> None:
        super().__init__(daemon=True)
        self.client = backlog.Client(port)
        self.queue = queue
        self.stop = stop
        self.trivial = trivial  # its claims answer no message
        self.requests = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.cycle()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.client.close()

    def cycle(self) -> None:
        base = f"/v2/queues/{self.queue}"
        self.send("POST", f"{base}/messages", POST_BODY)
        claimed = self.send("POST", f"{base}/claims?limit=1", CLAIM_BODY)
        # delayq's claim names the message's href with its claim_id; the trivial app's
        # answer has none, so it gets a path of the same shape.
        messages = (claimed or {}).get("messages")
        if not messages and not self.trivial:
            # A claim that took nothing, and a delete of nothing, cost less than the
            # cycle measured: a run with them would flatter the target.
            raise RuntimeError(f"POST {base}/claims took no message right after a post")
        href = messages[0]["href"] if messages else f"{base}/messages/m?claim_id=c"
        self.send("DELETE", href)

    def send(self, method: str, path: str, body: bytes | None = None) -> Any:
        status, document, _ = self.client.request(method, path, body)
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path}: {status} {document}")
        self.requests += 1
        return document


@dataclass
class Measurement:
    target: str
    requests: int
    seconds: float
    server_cpu: float
    store_cpu: float | None
    client_cpu: float
    loadavg: tuple[float, float, float] = field(default_factory=os.getloadavg)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def server_ms(self) -> float:
        return 1000 * self.server_cpu / self.requests

    @property
    def store_ms(self) -> float | None:
        return None if self.store_cpu is None else 1000 * self.store_cpu / self.requests


def load(target: str, port: int, master: int, store_pids: list[int],
         args: argparse.Namespace) -> Measurement:
    """Run the load on a serving target; measure its ``--seconds`` window."""
    stop = threading.Event()
    loaders = [Loader(port, f"bench-tp-{i}", stop, trivial=target == TRIVIAL)
               for i in range(args.concurrency)]
    for loader in loaders:
        loader.client.headers["Client-ID"] = str(uuid.uuid4())
        loader.start()
    try:
        time.sleep(args.warmup)
        pids = server_pids(master)  # now: the first answer came from one worker
        start = (time.perf_counter(), sum(x.requests for x in loaders), cpu_seconds(pids),
                 cpu_seconds(store_pids), time.process_time())
        time.sleep(args.seconds)
        end = (time.perf_counter(), sum(x.requests for x in loaders), cpu_seconds(pids),
               cpu_seconds(store_pids), time.process_time())
    finally:
        stop.set()
        for loader in loaders:
            loader.join(timeout=30)
    errors = [x.error for x in loaders if x.error is not None]
    if errors:
        raise RuntimeError(f"{target}: {len(errors)} connection(s) failed: {errors[0]}")
    if child_pids(master) != pids[1:]:
        raise RuntimeError(f"{target}: a worker restarted during the run")
    return Measurement(target, end[1] - start[1], end[0] - start[0], end[2] - start[2],
                       end[3] - start[3] if store_pids else None, end[4] - start[4])


# Targets ---------------------------------------------------------------------------------

LOAD_CPUS = {0}  # --pin: the load generator's CPU; the servers and stores get the others


def server_cpus() -> set[int]:
    return os.sched_getaffinity(0) - LOAD_CPUS


@contextlib.contextmanager
def on_cpus(cpus: set[int]) -> Iterator[None]:
    """Run this process (and what it starts meanwhile) on *cpus* only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def mongodb_backend() -> backlog.Backend | None:
    """A database of its own on the MongoDB of DELAYQ_TEST_MONGODB_URI, if it is set."""
    uri = os.environ.get(MONGO_URI_VARIABLE)
    if not uri:
        return None
    database = f"delayq_bench_{uuid.uuid4().hex[:12]}"

    @contextlib.contextmanager
    def service(sections: backlog.Sections, workdir: Path) -> Iterator[None]:
        import pymongo

        try:
            yield
        finally:
            with pymongo.MongoClient(uri) as client:
                client.drop_database(database)

    return backlog.Backend(sections=lambda workdir: {MONGO_GROUP: {"uri": uri,
                                                                   "database": database}},
                           fill=lambda *a: None, service=service)


def backends() -> dict[str, backlog.Backend | None]:
    """The drivers this benchmark can run (None: not configured here)."""
    return {**backlog.BACKENDS, "mongodb": mongodb_backend()}


def store_pids(service: Any) -> list[int]:
    """The processes of a store the run started: redis-server, or Swift's servers."""
    proc = getattr(service, "proc", None)  # backlog.RedisServer
    if proc is not None:
        return [proc.pid]
    processes = getattr(service, "_processes", None)  # tests.swift_server.SwiftCluster
    return [p.pid for p in processes.values()] if processes else []


def run_target(target: str, directory: Path, args: argparse.Namespace,
               log: Callable[[str], None]) -> Measurement:
    """Start the target's store and server (files in *directory*), load it, stop them."""
    directory.mkdir()
    port = backlog.free_port()
    config = directory / "delayq.conf"
    with contextlib.ExitStack() as stack:
        if args.pin:
            # What starts now (store, gunicorn and the workers it forks) inherits this.
            stack.enter_context(on_cpus(server_cpus()))
        service = None
        tree = None  # this checkout's code
        if target == TRIVIAL:
            config.write_text("")
            command = [sys.executable, str(TRIVIAL_APP), "--port", str(port),
                       "--workers", str(args.workers)]
        else:
            served, _, tree_number = target.partition(TREE_SEPARATOR)
            tree = args.tree[int(tree_number) - 1] if tree_number else None
            driver, _, storage_calls = served.partition(MODE_SEPARATOR)
            if target == BARE:  # its own app, on a store started as Redis's is
                driver = "redis"
            backend = backends()[driver]
            assert backend is not None
            if driver == "redis" and args.redis_appendfsync:
                backend = dataclasses.replace(backend, service=functools.partial(
                    backlog.redis_service,
                    extra=["--appendonly", "yes", "--appendfsync", args.redis_appendfsync]))
            sections = backend.sections(directory)
            service = stack.enter_context(backend.service(sections, directory))
            backlog.write_config(config, driver, port, args.workers, sections,
                                 {"storage_calls": storage_calls} if storage_calls else None)
            command = None
            if target == BARE:
                redis_section = sections[backlog.REDIS_GROUP]
                command = [sys.executable, str(BARE_APP), "--port", str(port),
                           "--workers", str(args.workers),
                           "--redis-uri", redis_section["uri"],
                           "--namespace", redis_section["namespace"]]
        server = backlog.Server(config, port, directory / "server.log", command=command,
                                tree=tree)
        stack.callback(server.stop)
        server.wait_ready(timeout=60)
        if target != TRIVIAL:
            client = backlog.Client(port)
            for i in range(args.concurrency):
                client.expect(201, "PUT", f"/v2/queues/bench-tp-{i}")
            client.close()
        log(f"  {target}: serving on port {port}, loading for "
            f"{args.warmup:g} + {args.seconds:g} s")
        if args.pin:
            stack.enter_context(on_cpus(LOAD_CPUS))
        return load(target, port, server.proc.pid, store_pids(service), args)


# Report ----------------------------------------------------------------------------------


def table(measurements: list[Measurement]) -> list[dict[str, Any]]:
    """A row per measurement; a driver's ratio is to the trivial runs around its round."""
    trivial = [i for i, m in enumerate(measurements) if m.target == TRIVIAL]
    rows = []
    for i, m in enumerate(measurements):
        before = max(j for j in trivial if j <= i)
        after = min(j for j in trivial if j >= i)
        floor = (measurements[before].server_ms + measurements[after].server_ms) / 2
        rows.append({"target": m.target, "round": len([j for j in trivial if j < i]),
                     "requests": m.requests, "seconds": round(m.seconds, 2),
                     "rps": round(m.rps, 1), "server_cpu_ms": round(m.server_ms, 3),
                     "trivial_cpu_ms": round(floor, 3), "ratio": round(m.server_ms / floor, 2),
                     "store_cpu_ms": None if m.store_ms is None else round(m.store_ms, 3),
                     "client_cpu_ms": round(1000 * m.client_cpu / m.requests, 3),
                     "loadavg": [round(x, 2) for x in m.loadavg]})
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each driver target's median, lowest and highest ratio over the rounds."""
    targets = dict.fromkeys(r["target"] for r in rows if r["target"] != TRIVIAL)
    result = []
    for target in targets:
        ratios = [r["ratio"] for r in rows if r["target"] == target]
        result.append({"target": target, "rounds": len(ratios),
                       "median_ratio": round(statistics.median(ratios), 2),
                       "lowest_ratio": min(ratios), "highest_ratio": max(ratios),
                       "median_server_cpu_ms": round(statistics.median(
                           r["server_cpu_ms"] for r in rows if r["target"] == target), 3),
                       "median_rps": round(statistics.median(
                           r["rps"] for r in rows if r["target"] == target), 1)})
    return result


def print_table(rows: list[dict[str, Any]]) -> None:
    print()
    print("| round | target | requests | RPS | server CPU ms/request | ratio to trivial "
          "| store CPU ms/request | load generator CPU ms/request |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        store = "—" if row["store_cpu_ms"] is None else f"{row['store_cpu_ms']:.3f}"
        print(f"| {row['round']} | {row['target']} | {row['requests']:,} | {row['rps']:,.0f} "
              f"| {row['server_cpu_ms']:.3f} | {row['ratio']:.2f} | {store} "
              f"| {row['client_cpu_ms']:.3f} |")


def print_summary(results: list[dict[str, Any]]) -> None:
    print()
    print("| target | rounds | median ratio to trivial | lowest | highest "
          "| median server CPU ms/request | median RPS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['target']} | {r['rounds']} | **{r['median_ratio']:.2f}** "
              f"| {r['lowest_ratio']:.2f} | {r['highest_ratio']:.2f} "
              f"| {r['median_server_cpu_ms']:.3f} | {r['median_rps']:,.0f} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append", choices=sorted(backends()),
                        help="a driver to measure; repeatable (default: sqlite and redis)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="measured seconds per target (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="unmeasured seconds of load first (default 2)")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="connections, each looping on a queue of its own (default 8)")
    parser.add_argument("--workers", type=int, default=2,
                        help="gunicorn workers of every target (default 2)")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="JSON results (default benchmarks/results/throughput.json)")
    parser.add_argument("--storage-calls", action="append", choices=("auto", "inline", "threads"),
                        help="[drivers:transport:wsgi] storage_calls of the drivers' servers; "
                             "repeatable: each driver is measured with each (default: the "
                             "server's default)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the drivers, each followed by the trivial app "
                             "(default 5)")
    parser.add_argument("--pin", action="store_true",
                        help="load generator on CPU 0, servers and stores on the other CPUs "
                             "(they otherwise share them all)")
    parser.add_argument("--redis-appendfsync", choices=("everysec", "always"),
                        help="run the Redis store with appendonly yes and this appendfsync "
                             "(default: no AOF)")
    parser.add_argument("--bare", action="store_true",
                        help="measure benchmarks/bare_app.py on Redis too, in every round")
    parser.add_argument("--tree", type=Path, action="append",
                        help="a delayq source tree to serve the drivers from; repeatable: "
                             "each driver is measured from each (default: this one)")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when Redis's median ratio exceeds {TARGET_RATIO}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pin and not os.sched_getaffinity(0) > LOAD_CPUS:
        print("--pin needs CPU 0 and at least one more", file=sys.stderr)
        return 2
    drivers = args.driver or ["sqlite", "redis"]
    available = backends()
    skipped = [d for d in drivers if available[d] is None]
    for driver in skipped:
        print(f"skipping {driver}: set {MONGO_URI_VARIABLE} to a replica set to measure it")
    modes = [f"{MODE_SEPARATOR}{mode}" for mode in args.storage_calls or []] or [""]
    measured = [d + mode for d in drivers if d not in skipped for mode in modes]
    if args.tree:
        args.tree = [tree.resolve() for tree in args.tree]
        measured = [f"{target}{TREE_SEPARATOR}{number}" for target in measured
                    for number in range(1, len(args.tree) + 1)]
        for number, tree in enumerate(args.tree, 1):
            print(f"tree {number}: {tree}")
    if args.bare:
        measured.insert(0, BARE)
    targets = [TRIVIAL]
    for _ in range(args.rounds):
        targets += [*measured, TRIVIAL]
    info = backlog.machine()
    print(f"delayq throughput benchmark: {', '.join(targets)}; {args.concurrency} "
          f"connections, {args.workers} workers, {info['cpus']} CPUs "
          + ("with the load generator alone on CPU 0" if args.pin
             else "shared with the load generator")
          + (f"; Redis with appendfsync {args.redis_appendfsync}"
             if args.redis_appendfsync else ""))
    workdir = Path(tempfile.mkdtemp(prefix="delayq-throughput-"))
    try:
        measurements = [
            run_target(t, workdir / "{}-{}".format(
                i, t.replace(MODE_SEPARATOR, "-").replace(TREE_SEPARATOR, "-")), args, print)
            for i, t in enumerate(targets)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = table(measurements)
    results = summary(rows)
    print_table(rows)
    print_summary(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": info,
        "options": {k: v for k, v in vars(args).items() if k != "output"},
        "summary": results, "rows": rows}, indent=2, default=str))
    print(f"written to {args.output}")
    redis = [r for r in results if r["target"] in ("redis", f"redis{MODE_SEPARATOR}auto")]
    if args.check and redis and redis[0]["median_ratio"] > TARGET_RATIO:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
