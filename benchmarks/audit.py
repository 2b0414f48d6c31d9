"""The audits at scale: ``delayq-audit`` on Spark beside a plain Python pass, one store.

Fills a SQLite store through the driver with ``--messages`` messages, on a clock that
starts a day before the real one and moves forward as the fill goes (so every time rule
applies: delays come due, claims lapse, dead-letter queues expire what stays):

* ``orders-0`` .. ``orders-3`` (up to 2 claims, then ``orders-dlq``, where messages live
  600 s): each batch of 1,000 posted, 1 in 20 popped, the rest claimed; 11 in 12 of
  those deleted, the others released, claimed again and moved to ``orders-dlq`` by the
  claim after that. ``orders-dlq`` is claimed each round: half of what it returns is
  deleted, now and then a quarter redriven, the rest expires;
* ``delayed-0`` and ``delayed-1`` (delay 30 s): each batch posted, 1 in 50 edited to a
  delay of 60 s, then claimed when due and deleted.

About 3.2 events per message. Then, in one run, on the same machine:

1. ``delayq-audit all`` on the store (the console script, a process of its own: Spark's
   start included), with ``--master`` (``local[2]``) and ``--as-of`` fixed;
2. the plain pass (``plain_audit``): the same events read through the driver into
   Python dicts and every figure worked out in this one process;
3. ``delayq-audit all`` on an empty store (no queue: it says so without starting Spark)
   and on a store of 10 messages (Spark started, the trail read and audited).

The audit's rows must equal the plain pass's (the script exits 1 otherwise). Prints the
wall times, the ratio, events per second, the CPU time of each (the audit's counts every
process it starts: Python, the JVM, the Python workers), and writes
``benchmarks/results/audit.json``.

Usage::

    python benchmarks/audit.py [--messages 1000000] [--master local[2]] [--workdir DIR]
                               [--keep]

``--workdir`` keeps the filled store there and reuses it when it already holds the same
``--messages`` (the fill of 1,000,000 takes minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

try:
    import backlog
    import plain_audit
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog
    import plain_audit

from delayq.message import NewMessage
from delayq.queue import DeadLetterPolicy
from delayq.storage.sqlite.driver import Driver
from delayq.synchronous import Synchronous

PROJECT = "bench"
SOURCES = tuple(f"orders-{n}" for n in range(4))
DELAYED = ("delayed-0", "delayed-1")
DLQ = "orders-dlq"
BATCH = 1000
TTL = 3600
DELAY = 30
POLICY = DeadLetterPolicy(2, DLQ, 600)
AUDIT = Path(sys.executable).parent / "delayq-audit"
RESULTS = Path(__file__).resolve().parent / "results" / "audit.json"
FIGURE_DIGITS = 1e-6  # figures are rounded to 6 decimals on both sides
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


class Clock:
    """The fill's clock: starts a day back, moved forward by the fill."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def body(rnd: random.Random, n: int) -> dict[str, Any]:
    return {"job": rnd.choice(("charge", "refund", "notify")), "n": n,
            "meta": {"shard": n % 7, "region": rnd.choice(("eu", "us"))}}


def fill(path: Path, messages: int, progress: bool = True) -> None:
    """*messages* messages through the SQLite driver (module docstring)."""
    clock = Clock(time.time() - 86400)
    driver = Synchronous(Driver(str(path), clock=clock))
    client = str(uuid.uuid4())
    rnd = random.Random(27)
    try:
        for queue in SOURCES:
            driver.queues.create(PROJECT, queue, {"_max_claim_count": 2,
                                 "_dead_letter_queue": DLQ})
        for queue in DELAYED:
            driver.queues.create(PROJECT, queue, {"_default_message_delay": DELAY})
        driver.queues.create(PROJECT, DLQ, {"_dead_letter_queue_messages_ttl": 600})
        posted = 0
        while posted < messages:
            for queue in (*SOURCES, *DELAYED):
                count = min(BATCH, messages - posted)
                if count <= 0:
                    break
                delay = DELAY if queue in DELAYED else 0
                ids = driver.messages.post(PROJECT, queue, client, [
                    NewMessage(body(rnd, posted + i), TTL, delay) for i in range(count)])
                posted += count
                clock.now += 0.5
                if delay:
                    for message_id in ids[::50]:
                        driver.messages.edit(PROJECT, queue, message_id, delay=2 * DELAY)
                else:
                    driver.messages.pop(PROJECT, queue, count // 20)
            clock.now += 2 * DELAY + 1
            for queue in (*SOURCES, *DELAYED):
                held = driver.claims.create(PROJECT, queue, ttl=60, grace=60, limit=3 * BATCH,
                                            dead_letter=POLICY if queue in SOURCES else None)
                if held is None:
                    continue
                fresh = [m.id for m in held.messages if m.claim_count == 1]
                kept = set(fresh[:len(fresh) // 12]) if queue in SOURCES else set()
                driver.messages.delete_many(PROJECT, queue, [m for m in fresh if m not in kept])
                driver.claims.release(PROJECT, queue, held.id)
                clock.now += 0.5
            held = driver.claims.create(PROJECT, DLQ, ttl=60, grace=60, limit=BATCH,
                                        dead_letter=None)
            if held is not None:
                ids = [m.id for m in held.messages]
                driver.messages.delete_many(PROJECT, DLQ, ids[:len(ids) // 2])
                driver.claims.release(PROJECT, DLQ, held.id)
            if rnd.random() < 0.2:
                driver.messages.redrive(PROJECT, DLQ, destination=None, limit=BATCH // 4)
            clock.now += 5
            if progress:
                print(f"\r  fill: {posted:,} of {messages:,} messages", end="", flush=True)
        if progress:
            print()
    finally:
        driver.close()


def store_config(directory: Path, database: Path) -> Path:
    config = directory / "delayq.conf"
    config.write_text(f"[drivers]\nmessage_store = sqlite\n\n"
                      f"[drivers:message_store:sqlite]\npath = {database}\n")
    return config


def adopt_orphans() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux), so that the
    CPU time of the JVM and its Python workers, which outlive the audit's own process,
    is counted among its children's. False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children_cpu() -> float:
    """CPU seconds (user and system) of the descendants reaped so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def reap_descendants() -> None:
    """Wait for every remaining descendant (the orphans adopt_orphans gave us)."""
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)


def run_audit(config: Path, output: Path, master: str, as_of: float | None
              ) -> dict[str, Any]:
    """One ``delayq-audit all`` run: its wall time, CPU time (of every process it
    started; None where adopt_orphans cannot make that count), exit status and progress
    lines."""
    argv = [str(AUDIT), "all", "--config-file", str(config), "--output", str(output),
            "--master", master]
    if as_of is not None:
        argv += ["--as-of", repr(as_of)]
    whole_tree = adopt_orphans()
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    reap_descendants()
    cpu = round(children_cpu() - cpu, 2) if whole_tree else None
    said = [line for line in done.stderr.replace("\r", "\n").splitlines()
            if line.startswith("delayq-audit:")]
    if done.returncode not in (0, 3):
        raise RuntimeError(f"delayq-audit exited {done.returncode}:\n{done.stderr}")
    return {"seconds": round(wall, 2), "cpu_seconds": cpu,
            "status": done.returncode, "progress": said}


def plain_pass(database: Path, as_of: float) -> tuple[dict[str, Any], float, float]:
    """The plain pass's rows, its wall time and its CPU time (opening the store
    included)."""
    cpu = time.process_time()
    started = time.perf_counter()
    driver = Synchronous(Driver(str(database)))
    try:
        rows = plain_audit.audit(driver, as_of)
    finally:
        driver.close()
    return rows, time.perf_counter() - started, time.process_time() - cpu


def small_store(directory: Path, messages: int) -> Path:
    """The configuration of a fresh store of *messages* (0: no queue at all)."""
    directory.mkdir(parents=True, exist_ok=True)
    database = directory / "delayq.sqlite"
    database.unlink(missing_ok=True)
    if messages:
        fill(database, messages, progress=False)
    else:
        Synchronous(Driver(str(database))).close()
    return store_config(directory, database)


def differences(spark: dict[str, Any], plain: dict[str, Any]) -> list[str]:
    """Where the audit's rows and the plain pass's differ (empty when they agree)."""
    found = []
    for section in ("delay", "dead_letter"):
        got, want = spark[section]["queues"], plain[section]
        if len(got) != len(want):
            found.append(f"{section}: {len(got)} rows, plain pass {len(want)}")
        for row, other in zip(got, want, strict=False):
            for key, value in other.items():
                if not same(row.get(key), value):
                    found.append(f"{section} {row['queue']}: {key} {row.get(key)!r} "
                                 f"!= {value!r}")
    return found


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return (a is not None and b is not None
                and math.isclose(a, b, rel_tol=0, abs_tol=FIGURE_DIGITS))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def filled_store(workdir: Path, messages: int) -> Path:
    """The store of *messages* in *workdir*, filled unless it already is."""
    database = workdir / f"audit-{messages}.sqlite"
    marker = database.with_suffix(".filled")
    if not marker.exists():
        database.unlink(missing_ok=True)
        started = time.perf_counter()
        fill(database, messages)
        marker.write_text(f"{time.perf_counter() - started:.1f}\n")
    return database


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="messages to fill the store with (default 1,000,000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--workdir", type=Path,
                        help="where the store is kept and reused (default: a temporary "
                             "directory, removed at the end)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="delayq-audit-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    info = backlog.machine()
    print(f"delayq audit benchmark: {args.messages:,} messages, master {args.master}, "
          f"{info['cpus']} CPUs, load {info.get('loadavg_start')}")
    try:
        database = filled_store(workdir, args.messages)
        config = store_config(workdir, database)
        as_of = time.time()
        audit = run_audit(config, workdir / "out", args.master, as_of)
        spark_doc = json.loads((workdir / "out" / "audit.json").read_text())
        plain_rows, plain_seconds, plain_cpu = plain_pass(database, as_of)
        disagree = differences(spark_doc, plain_rows)

        empty = run_audit(small_store(workdir / "empty", 0), workdir / "out-empty",
                          args.master, None)
        tiny = run_audit(small_store(workdir / "tiny", 10), workdir / "out-tiny",
                         args.master, None)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.workdir is None:
            print(f"kept: {workdir}")

    events = spark_doc["events"]
    result = {
        "messages": args.messages, "events": events, "master": args.master,
        "audit_seconds": audit["seconds"], "plain_seconds": round(plain_seconds, 2),
        "plain_over_audit": round(plain_seconds / audit["seconds"], 2),
        "audit_events_per_second": round(events / audit["seconds"]),
        "plain_events_per_second": round(events / plain_seconds),
        "audit_cpu_seconds": audit["cpu_seconds"],
        "plain_cpu_seconds": round(plain_cpu, 2),
        "empty_store_seconds": empty["seconds"], "empty_store_status": empty["status"],
        "tiny_store_seconds": tiny["seconds"],
        "tiny_store_cpu_seconds": tiny["cpu_seconds"],
        "figures_agree": not disagree,
        "audit_progress": audit["progress"], "machine": info,
    }
    with contextlib.suppress(OSError):
        info["loadavg_end"] = os.getloadavg()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(f"  {line}" for line in audit["progress"]))
    print(f"events: {events:,} ({events / args.messages:.2f} per message)")
    print(f"delayq-audit all:     {audit['seconds']:7.1f} s wall  "
          f"({result['audit_events_per_second']:,} events/s)")
    print(f"plain Python pass:    {plain_seconds:7.1f} s wall  "
          f"({result['plain_events_per_second']:,} events/s)")
    print(f"plain / audit:        {result['plain_over_audit']:7.2f}")
    if audit["cpu_seconds"] is not None:
        print(f"CPU, delayq-audit:    {audit['cpu_seconds']:7.1f} s  (every process it started)")
    print(f"CPU, plain pass:      {plain_cpu:7.1f} s")
    print(f"empty store:          {empty['seconds']:7.1f} s wall (exit {empty['status']})")
    print(f"store of 10 messages: {tiny['seconds']:7.1f} s wall"
          + (f", {tiny['cpu_seconds']:.1f} s CPU" if tiny["cpu_seconds"] is not None else ""))
    print(f"figures agree:        {'yes' if not disagree else 'NO'}")
    for line in disagree[:20]:
        print(f"  {line}")
    print(f"results: {args.output}")
    return 0 if not disagree else 1


if __name__ == "__main__":
    sys.exit(main())
