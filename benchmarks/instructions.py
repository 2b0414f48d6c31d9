"""Instructions per served request, counted by valgrind: a ratio no noisy machine moves.

``benchmarks/throughput.py`` measures CPU time, which on a shared machine moves with
what the neighbours and the scheduler do: the trivial app alone swings by 40% between
runs minutes apart (docs/performance.md, "Throughput"). This counts the instructions the
server process executes per request instead, under ``valgrind --tool=callgrind``. The
count is the same run after run on the same versions, whatever else the machine does, so
it shows how much work delayq adds to a request, and a change's effect on it, exactly.

What it does not show: time. Instructions that miss the caches, and the kernel's work
(system calls, the wake-up after a Redis round trip), cost CPU time that no instruction
count of the process sees; throughput.py's ratio is the one that includes them.

Each target is served by one uvicorn process, set up as a ``delayq-server`` worker runs
it (uvicorn with ``loop`` on ``auto``, delayq's HTTP protocol with its default limits,
prometheus_client in multiprocess mode), without gunicorn's master, which does no
per-request work. ``--http uvicorn`` serves with uvicorn's own httptools protocol
instead: the difference is what delayq's HTTP limits cost a request. The trivial app is
``benchmarks/trivial_app.py``; each driver's store is started as ``benchmarks/backlog.py``
starts it. One keep-alive connection makes the requests of ``benchmarks/throughput.py``
(post a message, claim it, delete it, on a queue of its own), so requests never overlap
and the count does not depend on timing. The server runs twice under valgrind, once for
``--cycles`` cycles and once for ``2 × --cycles`` more; the difference of the two totals,
divided by the difference in requests, is the count per request, with start-up, imports
and shutdown cancelled out. Background expiry passes are off: they cost per second, not
per request, and a run under valgrind lasts about fifty times longer than without.

Needs valgrind (Debian: ``apt install valgrind``). About a minute per target.

Usage::

    python benchmarks/instructions.py [--driver redis --driver sqlite ...] [--cycles 200]
                                      [--bare] [--http delayq|uvicorn]

``--bare`` adds ``benchmarks/bare_app.py`` (a request's Redis work and nothing else) on
Redis, the least delayq's Redis count could come down to.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

import in_process  # noqa: E402
import throughput  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "instructions.json"
TRIVIAL = throughput.TRIVIAL
BARE = throughput.BARE
REQUESTS_PER_CYCLE = 3
READY_TIMEOUT = 300.0  # seconds: imports under valgrind take a while
SUMMARY_PREFIX = "summary:"  # callgrind's total of the whole run, in its output file
# Seconds delayq's metrics wait before they are written (1 s when served): longer than
# any run, so they are written once, at shutdown, in both runs alike (see hold_metrics).
METRICS_HELD = 24 * 3600.0


# The server, run under valgrind ---------------------------------------------------------


def serve(target: str, port: int, sections: dict[str, dict[str, Any]], http: str) -> None:
    """Serve *target* on *port* with uvicorn, as a delayq-server worker would (with
    uvicorn's own HTTP protocol if *http* is ``uvicorn``)."""
    import uvicorn

    from delayq import conf as delayq_conf
    from delayq.http_protocol import protocol_factory
    from delayq.server import http_limits

    app = in_process.build_app(target, sections)
    hold_metrics(METRICS_HELD)
    protocol = "httptools" if http == "uvicorn" else protocol_factory(
        http_limits(delayq_conf.load([])))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="auto", http=protocol,
                            lifespan="on", log_level="warning", access_log=False)
    uvicorn.Server(config).run()


def hold_metrics(seconds: float) -> None:
    """Make every delayq ``Metrics`` of this process write its counts after *seconds*.

    A worker writes its request metrics once a second, whatever the number of requests.
    Under valgrind a second holds some 50 requests instead of a thousand or more, so a
    write each second would be charged to 20 or more times fewer requests than when
    served at speed, and the count per request would move with how fast valgrind runs
    on a machine busy or idle (by 25,000 instructions, between runs of one version).
    Held, the counts are written once, at shutdown, in the short and the long run
    alike, and the difference of the two leaves them out. Not in the figure, then: a
    write costs about as much as two requests (0.4 ms in process), so about 0.2 % of
    each request at a thousand requests a second, a worker's pace in throughput.py.
    """
    from delayq.metrics import Metrics

    for thing in gc.get_objects():
        if isinstance(thing, Metrics):
            thing.flush_interval = seconds


def count(target: str, sections: dict[str, dict[str, Any]], cycles: int,
          workdir: Path, http: str) -> int:
    """Instructions the server executed serving *cycles* cycles, start-up included."""
    port = backlog.free_port()
    run = f"{target}-{cycles}"
    out = workdir / f"callgrind-{run}.out"
    metrics_dir = workdir / f"metrics-{run}"
    metrics_dir.mkdir()
    command = ["env", "PYTHONHASHSEED=0", f"PROMETHEUS_MULTIPROC_DIR={metrics_dir}",
               "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               sys.executable, __file__, "--serve", target, "--port", str(port),
               "--sections", json.dumps(sections), "--http", http]
    server = backlog.Server(workdir / "delayq.conf", port, workdir / f"server-{run}.log",
                            command=command)
    try:
        server.wait_ready(timeout=READY_TIMEOUT)
        loader = throughput.Loader(port, f"bench-in-{uuid.uuid4().hex[:8]}",
                                   threading.Event(), trivial=target == TRIVIAL)
        for _ in range(cycles):
            loader.cycle()
        loader.client.close()
    finally:
        server.stop()  # uvicorn shuts down on SIGTERM; valgrind then writes its file
    # uvicorn raises the signal it caught again once shut down: -SIGTERM is its clean exit.
    if server.proc.returncode not in (0, -signal.SIGTERM):
        raise RuntimeError(f"{target}: the server exited with {server.proc.returncode}:\n"
                           f"{server.log_tail()}")
    for line in out.read_text().splitlines():
        if line.startswith(SUMMARY_PREFIX):
            return int(line[len(SUMMARY_PREFIX):])
    raise RuntimeError(f"{out}: no {SUMMARY_PREFIX!r} line")


def per_request(target: str, sections: dict[str, dict[str, Any]], cycles: int,
                workdir: Path, http: str) -> float:
    """Instructions per request: the difference of a short and a long run."""
    short = count(target, sections, cycles, workdir, http)
    long = count(target, sections, 3 * cycles, workdir, http)
    return (long - short) / (2 * cycles * REQUESTS_PER_CYCLE)


# Report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append", choices=["sqlite", "redis"],
                        help="a driver to measure; repeatable (default: sqlite and redis)")
    parser.add_argument("--cycles", type=int, default=200,
                        help="cycles (3 requests each) of the shorter run; the longer "
                             "makes three times as many (default 200)")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="JSON results (default benchmarks/results/instructions.json)")
    parser.add_argument("--bare", action="store_true",
                        help="count benchmarks/bare_app.py on Redis too")
    parser.add_argument("--http", choices=["delayq", "uvicorn"], default="delayq",
                        help="HTTP protocol: delayq's (as delayq-server serves) or "
                             "uvicorn's own httptools one (default delayq)")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sections", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, json.loads(args.sections), args.http)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt install valgrind)", file=sys.stderr)
        return 2
    drivers = args.driver or ["sqlite", "redis"]
    results: dict[str, float] = {}
    workdir = Path(tempfile.mkdtemp(prefix="delayq-instructions-"))
    try:
        for target in [TRIVIAL, *([BARE] if args.bare else []), *drivers]:
            directory = workdir / target
            directory.mkdir()
            with contextlib.ExitStack() as stack:
                sections: dict[str, dict[str, Any]] = {}
                if target != TRIVIAL:
                    # The bare app runs on a Redis store started as Redis's is.
                    backend = backlog.BACKENDS[
                        "redis" if target == BARE else target]
                    sections = backend.sections(directory)
                    stack.enter_context(backend.service(sections, directory))
                print(f"  {target}: counting {args.cycles} and {3 * args.cycles} cycles",
                      flush=True)
                results[target] = per_request(target, sections, args.cycles, directory,
                                              args.http)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    trivial = results[TRIVIAL]
    rows = [{"target": target, "instructions_per_request": round(value),
             "ratio": round(value / trivial, 2)} for target, value in results.items()]
    print()
    print("| target | instructions per request | ratio to trivial |")
    print("|---|---:|---:|")
    for row in rows:
        print(f"| {row['target']} | {row['instructions_per_request']:,} | "
              f"{row['ratio']:.2f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": backlog.machine(), "options": {"cycles": args.cycles,
                                                   "drivers": drivers,
                                                   "bare": args.bare,
                                                   "http": args.http},
        "rows": rows}, indent=2))
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
