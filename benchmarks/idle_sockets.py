"""What idle sockets do to the other clients of a server: the idle-socket attack.

Starts ``delayq-server`` (``--workers`` workers, SQLite, default options unless
``--max-connections`` is given) from each ``--tree`` in turn (a delayq source tree put
first on ``PYTHONPATH``; by default this one), on a free loopback port, and for each
runs two phases of ``--seconds`` each:

1. **without**: well-behaved clients only;
2. **during**: the same clients while an attacker process holds ``--connections``
   silent TCP connections (more than all workers' caps together: by default one and a
   half times ``--workers`` × the cap), opening another as soon as the server closes
   one. Its connections are all open before the clients start; the attack ends with
   the phase.

The well-behaved clients, each a thread of this process, one request at a time with
10 ms between two: ``new connection`` pings (``GET /v2/ping``) on a new connection
each time, as a client arriving during the attack does; ``keep-alive`` posts a message
to a queue of its own on one kept-alive connection (opened again if the server closes
it). Reported per tree, phase and client: the requests, those not answered 2xx (a 503,
a connection closed without an answer, a 10 s timeout), and the median, 99th percentile
and longest latency; for the attack, the connections it opened and saw closed.

Comparing trees at two commits on one machine in one run gives the effect of a change,
e.g.::

    git -C /path/to/delayq archive main | tar -x -C /tmp/before
    python benchmarks/idle_sockets.py --tree /tmp/before --tree .

Everything stays on the loopback interface, and each phase lasts ``--seconds``. The
open-file limit of this process (which the server and the attacker inherit) is raised
to its hard limit when the attack needs more.

Usage::

    python benchmarks/idle_sockets.py [--tree DIR]... [--workers 2]
        [--max-connections N] [--connections N] [--seconds 10] [--output PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from served import free_port, sqlite_section, start_server, stop_server

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
# The attacker, a process of its own: its loop shares no interpreter lock with the
# clients it is measured against. The test suite runs the same program.
ATTACKER = HERE.parent / "tests" / "idle_attack.py"
# delayq's default [drivers:transport:wsgi] max_connections.
DEFAULT_MAX_CONNECTIONS = 1000
PAUSE = 0.01
CLIENT_TIMEOUT = 10.0


def start(tree: Path, workdir: Path, port: int, workers: int,
          max_connections: int | None) -> subprocess.Popen:
    """*workers* workers on SQLite in *workdir*, with *max_connections* if given."""
    wsgi = f"workers = {workers}\n"
    if max_connections is not None:
        wsgi += f"max_connections = {max_connections}\n"
    return start_server(tree, workdir, f"[drivers:transport:wsgi]\n{wsgi}\n"
                        + sqlite_section(workdir), port)


# The well-behaved clients


class Client(threading.Thread):
    def __init__(self, port: int, kind: str) -> None:
        super().__init__(daemon=True)
        self.port, self.kind = port, kind
        self.results: list[tuple[bool, float]] = []  # (answered 2xx, seconds)
        self.stop = threading.Event()
        self.queue = f"idle-bench-{uuid.uuid4().hex[:8]}"
        self.headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "idle-bench"}

    def run(self) -> None:
        conn = None
        body = json.dumps({"messages": [{"body": "work", "ttl": 300}]})
        while not self.stop.is_set():
            if conn is None:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=CLIENT_TIMEOUT)
            start = time.monotonic()
            try:
                if self.kind == "new connection":
                    conn.request("GET", "/v2/ping", headers={"Connection": "close"})
                else:
                    conn.request("POST", f"/v2/queues/{self.queue}/messages", body=body,
                                 headers={**self.headers,
                                          "Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                ok = 200 <= response.status < 300
                if response.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = None
            self.results.append((ok, time.monotonic() - start))
            time.sleep(PAUSE)
        if conn is not None:
            conn.close()


def run_clients(port: int, seconds: float) -> dict[str, dict]:
    clients = [Client(port, kind) for kind in ("new connection", "keep-alive")]
    for client in clients:
        client.start()
    time.sleep(seconds)
    for client in clients:
        client.stop.set()
    for client in clients:
        client.join(CLIENT_TIMEOUT + 5)
    return {client.kind: summarize(client.results) for client in clients}


def summarize(results: list[tuple[bool, float]]) -> dict:
    times = sorted(seconds for _, seconds in results)
    return {"requests": len(results), "not_2xx": sum(1 for ok, _ in results if not ok),
            "median_ms": statistics.median(times) * 1000,
            "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
            "max_ms": times[-1] * 1000}


def measure(tree: Path, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="delayq-idle-") as tmp:
        port = free_port()
        proc = start(tree, Path(tmp), port, args.workers, args.max_connections)
        try:
            without = run_clients(port, args.seconds)
            attacker = subprocess.Popen(
                [sys.executable, str(ATTACKER), "--port", str(port), "--connections",
                 str(args.connections), "--seconds", str(args.seconds)],
                stdout=subprocess.PIPE, text=True)
            try:
                if attacker.stdout.readline().strip() != "ready":
                    raise RuntimeError("the attacker did not open its connections")
                during = run_clients(port, args.seconds)
                counts = json.loads(attacker.communicate(timeout=args.seconds + 60)[0])
            finally:
                if attacker.poll() is None:
                    attacker.kill()
                    attacker.wait()
        finally:
            stop_server(proc)
        log = (Path(tmp) / "server.log").read_text(errors="replace").splitlines()
    return {"tree": str(tree), "without": without, "during": during, "attack": counts,
            "log_lines": len(log)}


def raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        sys.exit(f"the open-file limit's hard limit ({hard}) is below the {needed} the "
                 "attack needs: lower --connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append",
                        help="delayq source tree to serve from (repeatable; default: this "
                             "one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-connections", type=int,
                        help="[drivers:transport:wsgi] max_connections (default: the "
                             "server's own)")
    parser.add_argument("--connections", type=int,
                        help="silent connections of the attack (default: 1.5 × workers × "
                             "max_connections)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of each phase (default: 10)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    cap = args.max_connections or DEFAULT_MAX_CONNECTIONS
    if args.connections is None:
        args.connections = args.workers * cap * 3 // 2
    raise_open_file_limit(args.connections + args.workers * cap + 1000)
    print(f"{args.workers} workers of {cap} connections; attack: {args.connections} silent "
          f"connections; phases of {args.seconds:g} s", flush=True)
    print("| tree | phase | client | requests | not 2xx | median | p99 | max |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    results = []
    for tree in args.tree or [HERE.parent]:
        row = measure(tree.resolve(), args)
        results.append(row)
        for phase in ("without", "during"):
            for kind, r in row[phase].items():
                print(f"| {row['tree']} | {phase} | {kind} | {r['requests']:,} | "
                      f"{r['not_2xx']:,} | {r['median_ms']:.1f} ms | {r['p99_ms']:.1f} ms | "
                      f"{r['max_ms']:,.1f} ms |", flush=True)
        print(f"  attack: {row['attack']['opened']:,} connections opened, "
              f"{row['attack']['closed_by_server']:,} closed by the server; server log: "
              f"{row['log_lines']:,} lines", flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
