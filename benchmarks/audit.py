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

The fill's clock starts so that it ends a day before the real one.

About 3.2 events per message. A store of a multiple of 1,000,000 messages beyond it is
the 1,000,000-message store's trail copied under more projects (``replicate``). Then, in
one run, on the same machine:

0. ``delayq-audit all`` on a store of 10 messages, to warm up: the first audit on a
   machine writes the JVM's class archive as it exits (docs/audits.md), and every
   measured run then starts from it;
1. ``delayq-audit all`` on the store (the console script, a process of its own: Spark's
   start included), with ``--master`` (``local[2]``) and ``--as-of`` fixed;
2. the plain pass (``plain_audit``), in a process of its own: the same events read
   through the driver into Python dicts and every figure worked out in that process;
3. ``delayq-audit all`` on an empty store (no queue: it says so without starting Spark)
   and on a store of 10 messages (Spark started, the trail read and audited): the fixed
   cost;
4. unless ``--no-incremental``, on a copy of the store: ``delayq-audit all --state``,
   1 % more messages, the re-audit with that state, and a full audit as of the same
   time.

The audit's rows must equal the plain pass's, and the re-audit's a full audit's (the
script exits 1 otherwise). Prints the wall times, the CPU time of each (the audit's
counts every process it starts: Python, the JVM, the Python workers), the CPU per event
of each (the audit's beyond the 10-message audit's), every kind of process's peak
memory (the JVM's heap is ``--driver-memory``, through ``PYSPARK_SUBMIT_ARGS``), what
the re-audit read from the store, and writes ``benchmarks/results/audit.json``.

Usage::

    python benchmarks/audit.py [--messages 1000000] [--master local[2]] [--workdir DIR]
                               [--driver-memory 3g] [--no-incremental] [--keep]

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
import sqlite3
import subprocess
import sys
import tempfile
import threading
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

from delayq.events import FIELDS
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
# Stores of a multiple of this many messages beyond it copy its trail (replicate).
REPLICATED_FROM = 1_000_000
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


# Seconds the fill's clock moves on per round of one batch per queue (see fill).
ROUND_SECONDS = 6 * 0.5 + (2 * DELAY + 1) + 6 * 0.5 + 5


def fill_span(messages: int) -> float:
    """About how many seconds of the store's clock a fill of *messages* covers."""
    return math.ceil(messages / (BATCH * (len(SOURCES) + len(DELAYED)))) * ROUND_SECONDS


def fill(path: Path, messages: int, progress: bool = True, start: float | None = None,
         seed: int = 27) -> None:
    """*messages* messages through the SQLite driver (module docstring), on a clock that
    starts at *start* (default: so that the fill ends a day before now)."""
    if start is None:
        start = time.time() - 86400 - fill_span(messages)
    clock = Clock(start)
    driver = Synchronous(Driver(str(path), clock=clock))
    client = str(uuid.uuid4())
    rnd = random.Random(seed)
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


class PeakMemory:
    """The peak resident memory (the kernel's VmHWM) and the CPU time of every
    descendant process, by kind, sampled from /proc while a run lasts (Linux; empty
    elsewhere). CPU a process spends in its last interval is missed: the split between
    kinds is approximate, the total of run_audit is not."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peaks: dict[int, tuple[str, int, float]] = {}  # pid -> (kind, kB, CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            for pid in descendants(os.getpid()):
                found = peak_of(pid)
                if found is not None:
                    self.peaks[pid] = found
            if self._stop.wait(self.interval):
                return

    def by_kind(self) -> dict[str, dict[str, float]]:
        """Per kind of process: how many ran, the largest peak and the sum of the peaks
        (MB)."""
        kinds: dict[str, list[tuple[int, float]]] = {}
        for kind, kilobytes, cpu in self.peaks.values():
            kinds.setdefault(kind, []).append((kilobytes, cpu))
        return {kind: {"processes": len(found),
                       "max_mb": round(max(kb for kb, _ in found) / 1024),
                       "sum_mb": round(sum(kb for kb, _ in found) / 1024),
                       "cpu_seconds": round(sum(cpu for _, cpu in found), 1)}
                for kind, found in sorted(kinds.items())}


def descendants(root: int) -> list[int]:
    """The processes below *root* now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def peak_of(pid: int) -> tuple[str, int, float] | None:
    """(kind, VmHWM kB, CPU seconds so far) of *pid*, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    hwm = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmHWM:")), None)
    cpu = (int(stat[11]) + int(stat[12])) / TICKS  # utime, stime
    return None if hwm is None else (process_kind(command), hwm, cpu)


def process_kind(command: str) -> str:
    if "java" in command.split(" ", 1)[0]:
        return "JVM (Spark driver and executor)"
    if "pyspark" in command or "daemon" in command:
        return "Spark Python workers"
    if "delayq-audit" in command:
        return "delayq-audit (Python)"
    return "other"


def run_audit(config: Path, output: Path, master: str, as_of: float | None,
              extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One ``delayq-audit all`` run: its wall time, CPU time (of every process it
    started; None where adopt_orphans cannot make that count), peak memory per kind of
    process, exit status and progress lines."""
    argv = [str(AUDIT), "all", "--config-file", str(config), "--output", str(output),
            "--master", master, *extra]
    if as_of is not None:
        argv += ["--as-of", repr(as_of)]
    whole_tree = adopt_orphans()
    cpu = children_cpu()
    started = time.perf_counter()
    with PeakMemory() as memory:
        done = subprocess.run(argv, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        reap_descendants()
    cpu = round(children_cpu() - cpu, 2) if whole_tree else None
    said = [line for line in done.stderr.replace("\r", "\n").splitlines()
            if line.startswith("delayq-audit:")]
    if done.returncode not in (0, 3):
        raise RuntimeError(f"delayq-audit exited {done.returncode}:\n{done.stderr}")
    return {"seconds": round(wall, 2), "cpu_seconds": cpu, "memory": memory.by_kind(),
            "status": done.returncode, "progress": said}


def plain_pass(database: Path, as_of: float, workdir: Path, memory_limit: int | None
               ) -> dict[str, Any]:
    """The plain pass in a process of its own: its rows, wall time, CPU time and peak
    memory (opening the store included). Under *memory_limit* bytes of address space
    when given: the pass holds every event in memory, and a store too large for the
    machine must not take it down; ``rows`` is None when it ran out."""
    out = workdir / "plain.json"
    out.unlink(missing_ok=True)

    def limited() -> None:
        if memory_limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(plain_audit.__file__)),
                             str(database), repr(as_of), str(out)],
                            stdin=subprocess.DEVNULL, preexec_fn=limited)
    _, status, used = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    finished = os.waitstatus_to_exitcode(status) == 0
    return {"rows": json.loads(out.read_text()) if finished else None,
            "seconds": round(wall, 2), "cpu_seconds": round(used.ru_utime + used.ru_stime, 2),
            "peak_mb": round(used.ru_maxrss / 1024), "finished": finished}


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
    """The store of *messages* in *workdir*, filled unless it already is; a multiple of
    REPLICATED_FROM beyond it is made of copies (``replicate``)."""
    database = workdir / f"audit-{messages}.sqlite"
    marker = database.with_suffix(".filled")
    if not marker.exists():
        database.unlink(missing_ok=True)
        started = time.perf_counter()
        if messages > REPLICATED_FROM and messages % REPLICATED_FROM == 0:
            base = filled_store(workdir, REPLICATED_FROM)
            replicate(base, database, messages // REPLICATED_FROM)
        else:
            fill(database, messages)
        marker.write_text(f"{time.perf_counter() - started:.1f}\n")
    return database


def replicate(base: Path, database: Path, copies: int) -> None:
    """*database*: the trail of store *base* *copies* times over, each copy but the
    first under a project of its own (``bench-2``, ``bench-3`` ...).

    Filling ten million messages through the driver takes hours; the copies' events are
    the driver's own, only their project differs (and a message is its project and id,
    so each copy's messages are others). The copies hold no live messages: the audits
    read the trail alone.
    """
    shutil.copyfile(base, database)
    columns = ", ".join(FIELDS)
    chosen = ", ".join("?" if name == "project" else name for name in FIELDS)
    with contextlib.closing(sqlite3.connect(database)) as db:
        for copy in range(2, copies + 1):
            print(f"\r  replicating the trail: copy {copy} of {copies}", end="", flush=True)
            with db:
                db.execute(f"INSERT INTO events ({columns}) SELECT {chosen} FROM events "
                           "WHERE project = ?", (f"{PROJECT}-{copy}", PROJECT))
    print()


def last_event_time(database: Path) -> float:
    """The time of the latest event of a SQLite store (its trail's table)."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        return db.execute("SELECT max(time) FROM events").fetchone()[0]


def same_figures(doc: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Where two audit.json documents' rows and event counts differ."""
    found = differences(doc, {section: other[section]["queues"]
                              for section in ("delay", "dead_letter")})
    if doc["events"] != other["events"]:
        found.append(f"events {doc['events']} != {other['events']}")
    return found


def incremental_runs(workdir: Path, database: Path, messages: int, master: str
                     ) -> dict[str, Any]:
    """On a copy of the store: an audit with a fresh --state, 1 % more messages, the
    re-audit with that state and a full audit as of the same time, whose figures it
    must equal."""
    directory = workdir / "incremental"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    copy = directory / "delayq.sqlite"
    shutil.copyfile(database, copy)
    config = store_config(directory, copy)
    state = ("--state", str(directory / "state"))
    # As of the store's last event: the watermark is there, and the messages added
    # next come after it (the fill's clock is a day behind the store's).
    last = last_event_time(copy)
    first = run_audit(config, directory / "out-first", master, last, state)
    added = max(1, messages // 100)
    fill(copy, added, progress=False, start=last + 1, seed=41)
    as_of = time.time()
    again = run_audit(config, directory / "out-again", master, as_of, state)
    full = run_audit(config, directory / "out-full", master, as_of)
    again_doc = json.loads((directory / "out-again" / "audit.json").read_text())
    full_doc = json.loads((directory / "out-full" / "audit.json").read_text())
    read = again_doc["state"]["events_read_from_store"]
    return {"messages_added": added, "first_seconds": first["seconds"],
            "first_cpu_seconds": first["cpu_seconds"],
            "seconds": again["seconds"], "cpu_seconds": again["cpu_seconds"],
            "events": again_doc["events"], "events_read_from_store": read,
            "share_read_from_store": round(read / again_doc["events"], 4),
            "full_seconds": full["seconds"], "full_cpu_seconds": full["cpu_seconds"],
            "figures_agree": not same_figures(again_doc, full_doc),
            "differences": same_figures(again_doc, full_doc)[:20],
            "progress": again["progress"], "memory": again["memory"]}


def bound_heap(driver_memory: str) -> None:
    """Bound the heap of the JVM each delayq-audit run starts (with a local master the
    driver's JVM is the executor too), through the arguments PySpark hands
    spark-submit: a ``SPARK_CONF_DIR`` holding a ``spark-defaults.conf`` would put a
    directory of files on the JVM's class path, with which it archives no class
    (docs/audits.md, "The class archive")."""
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {driver_memory} pyspark-shell"


def parse_size(text: str) -> int | None:
    """Bytes of a size such as ``16g`` or ``512m``; None for ``0``."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    number, unit = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "")
    size = int(float(number) * units.get(unit, 1))
    return size or None


def micros(seconds: float | None, events: int) -> float | None:
    return None if seconds is None or not events else round(seconds / events * 1e6, 2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000,
                        help="messages to fill the store with (default 1,000,000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--driver-memory", default="3g",
                        help="the heap of delayq-audit's JVM, spark.driver.memory (3g)")
    parser.add_argument("--plain-memory-limit", default="16g",
                        help="address space the plain pass may use (16g; 0: no limit)")
    parser.add_argument("--incremental", action=argparse.BooleanOptionalAction,
                        default=True, help="also time a re-audit with --state after 1 %% "
                                           "more messages, on a copy of the store")
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
    bound_heap(args.driver_memory)
    info = backlog.machine()
    print(f"delayq audit benchmark: {args.messages:,} messages, master {args.master}, "
          f"heap {args.driver_memory}, {info['cpus']} CPUs, "
          f"load {info.get('loadavg_start')}")
    try:
        database = filled_store(workdir, args.messages)
        config = store_config(workdir, database)
        # The first audit on a machine writes the JVM's class archive as it exits
        # (docs/audits.md); every measured run starts from it.
        warm_up = run_audit(small_store(workdir / "tiny", 10), workdir / "out-tiny",
                            args.master, None)
        as_of = time.time()
        audit = run_audit(config, workdir / "out", args.master, as_of)
        spark_doc = json.loads((workdir / "out" / "audit.json").read_text())
        plain = plain_pass(database, as_of, workdir, parse_size(args.plain_memory_limit))
        disagree = (differences(spark_doc, plain["rows"]) if plain["finished"]
                    else ["the plain pass ran out of memory: nothing to compare"])

        empty = run_audit(small_store(workdir / "empty", 0), workdir / "out-empty",
                          args.master, None)
        tiny = run_audit(small_store(workdir / "tiny", 10), workdir / "out-tiny",
                         args.master, None)
        incremental = (incremental_runs(workdir, database, args.messages, args.master)
                       if args.incremental else None)
    finally:
        if args.workdir is None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.workdir is None:
            print(f"kept: {workdir}")

    events = spark_doc["events"]
    variable_cpu = (None if audit["cpu_seconds"] is None or tiny["cpu_seconds"] is None
                    else audit["cpu_seconds"] - tiny["cpu_seconds"])
    result = {
        "messages": args.messages, "events": events, "master": args.master,
        "driver_memory": args.driver_memory,
        "audit_seconds": audit["seconds"], "plain_seconds": plain["seconds"],
        "plain_over_audit": round(plain["seconds"] / audit["seconds"], 2),
        "plain_finished": plain["finished"],
        "audit_events_per_second": round(events / audit["seconds"]),
        "plain_events_per_second": round(events / plain["seconds"]),
        "audit_cpu_seconds": audit["cpu_seconds"],
        "plain_cpu_seconds": plain["cpu_seconds"],
        "audit_variable_cpu_us_per_event": micros(variable_cpu, events),
        "plain_cpu_us_per_event": micros(plain["cpu_seconds"], events),
        "audit_memory": audit["memory"], "plain_peak_mb": plain["peak_mb"],
        "empty_store_seconds": empty["seconds"], "empty_store_status": empty["status"],
        "warm_up_seconds": warm_up["seconds"], "warm_up_cpu_seconds": warm_up["cpu_seconds"],
        "tiny_store_seconds": tiny["seconds"],
        "tiny_store_cpu_seconds": tiny["cpu_seconds"],
        "figures_agree": not disagree,
        "incremental": incremental,
        "audit_progress": audit["progress"], "machine": info,
    }
    with contextlib.suppress(OSError):
        info["loadavg_end"] = os.getloadavg()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    report(result, audit, plain, empty, tiny, disagree)
    print(f"results: {args.output}")
    agree = (plain["finished"] and not disagree
             and (incremental is None or incremental["figures_agree"]))
    return 0 if agree else 1


def report(result: dict[str, Any], audit: dict[str, Any], plain: dict[str, Any],
           empty: dict[str, Any], tiny: dict[str, Any], disagree: list[str]) -> None:
    """Print the figures of one run."""
    events = result["events"]
    print("\n".join(f"  {line}" for line in audit["progress"]))
    print(f"events: {events:,} ({events / result['messages']:.2f} per message)")
    print(f"delayq-audit all:     {audit['seconds']:7.1f} s wall  "
          f"({result['audit_events_per_second']:,} events/s)")
    print(f"plain Python pass:    {plain['seconds']:7.1f} s wall  "
          f"({result['plain_events_per_second']:,} events/s)"
          + ("" if plain["finished"] else "  RAN OUT OF MEMORY"))
    print(f"plain / audit:        {result['plain_over_audit']:7.2f}")
    if audit["cpu_seconds"] is not None:
        print(f"CPU, delayq-audit:    {audit['cpu_seconds']:7.1f} s  (every process it started)")
    print(f"CPU, plain pass:      {plain['cpu_seconds']:7.1f} s")
    print(f"CPU per event:        audit {result['audit_variable_cpu_us_per_event']} µs "
          f"(beyond the 10-message audit's), plain pass "
          f"{result['plain_cpu_us_per_event']} µs")
    for kind, peak in audit["memory"].items():
        print(f"peak memory, {kind}: {peak['max_mb']:,} MB "
              f"({peak['processes']} process(es), {peak['sum_mb']:,} MB summed, "
              f"about {peak['cpu_seconds']} s CPU)")
    print(f"peak memory, plain pass: {plain['peak_mb']:,} MB")
    print(f"empty store:          {empty['seconds']:7.1f} s wall (exit {empty['status']})")
    print(f"store of 10 messages: {tiny['seconds']:7.1f} s wall"
          + (f", {tiny['cpu_seconds']:.1f} s CPU" if tiny["cpu_seconds"] is not None else "")
          + f" (the warm-up: {result['warm_up_seconds']:.1f} s wall)")
    print(f"figures agree:        {'yes' if not disagree else 'NO'}")
    for line in disagree[:20]:
        print(f"  {line}")
    incremental = result["incremental"]
    if incremental is not None:
        print(f"re-audit with --state after {incremental['messages_added']:,} more messages: "
              f"{incremental['seconds']:.1f} s wall, {incremental['cpu_seconds']} s CPU, "
              f"{incremental['events_read_from_store']:,} of {incremental['events']:,} events "
              f"read from the store ({incremental['share_read_from_store']:.2%}); "
              f"full audit then {incremental['full_seconds']:.1f} s; first audit with "
              f"--state {incremental['first_seconds']:.1f} s; over the 10-message audit: "
              f"{incremental['seconds'] - tiny['seconds']:+.1f} s; figures agree: "
              f"{'yes' if incremental['figures_agree'] else 'NO'}")
        for line in incremental["differences"]:
            print(f"  {line}")


if __name__ == "__main__":
    sys.exit(main())
