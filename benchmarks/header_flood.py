"""What one client sending a huge header costs the other clients of a worker.

Starts ``delayq-server`` (one worker, SQLite, default options) from each ``--tree`` in
turn (a delayq source tree put first on ``PYTHONPATH``; by default this one), and for
each:

1. a pinger repeats ``GET /v2/ping`` back to back on one keep-alive connection;
2. a flooder opens another connection and sends the head of ``GET /v2/ping`` with one
   ``X-Flood`` field of ``--megabytes`` MB (1 MiB writes), then the blank line, while
   reading whatever the server answers;
3. once the flooder has an answer and has sent everything it could, and half a second
   more, the pinger stops.

Reported per tree: the flooder's answer (status line) and how long it took, how long its
sending took, the pings that overlapped the flood (how many, their median and their
longest latency), whether the pinger's connection failed, and whether gunicorn killed
the worker for not reporting within its timeout (``WORKER TIMEOUT`` in the server's log).
Comparing trees at two commits on one machine in one run gives the stall before and after
a change, e.g.::

    git archive e92b91c | tar -x -C /tmp/before
    python benchmarks/header_flood.py --tree /tmp/before --tree .

Usage::

    python benchmarks/header_flood.py [--tree DIR]... [--megabytes 100] [--output PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from served import free_port, sqlite_section, start_server, stop_server

HERE = Path(__file__).resolve().parent
HEAD = b"GET /v2/ping HTTP/1.1\r\nHost: delayq\r\nX-Flood: "


def start_one_worker(tree: Path, workdir: Path, port: int) -> subprocess.Popen:
    """One worker on SQLite in *workdir*."""
    return start_server(tree, workdir, "[drivers:transport:wsgi]\nworkers = 1\n\n"
                        + sqlite_section(workdir), port)


def ping_loop(port: int, pings: list[tuple[float, float]], stop: threading.Event,
              failures: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        start = time.monotonic()
        try:
            conn.request("GET", "/v2/ping")
            conn.getresponse().read()
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"{exc!r} after {time.monotonic() - start:.1f} s")
            break
        pings.append((start, time.monotonic()))
    conn.close()


def flood(port: int, megabytes: int) -> dict:
    """Send the huge head while reading the answer; times from the first byte sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=300)
    result: dict = {}
    start = time.monotonic()

    def read() -> None:
        try:
            data = sock.recv(65536)
        except OSError as exc:
            data = repr(exc).encode()
        result["answered"] = time.monotonic() - start
        result["answer"] = data.split(b"\r\n", 1)[0].decode("latin-1") or "(closed)"

    reader = threading.Thread(target=read)
    reader.start()
    chunk = b"a" * (1 << 20)
    try:
        sock.sendall(HEAD)
        for _ in range(megabytes):
            sock.sendall(chunk)
        sock.sendall(b"\r\n\r\n")
        result["sent"] = "all"
    except OSError as exc:
        result["sent"] = f"cut short: {exc.__class__.__name__}"
    result["sending"] = time.monotonic() - start
    reader.join(300)
    sock.close()
    result["start"] = start
    return result


def measure(tree: Path, megabytes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="delayq-flood-") as tmp:
        port = free_port()
        proc = start_one_worker(tree, Path(tmp), port)
        try:
            pings: list[tuple[float, float]] = []
            failures: list[str] = []
            stop = threading.Event()
            pinger = threading.Thread(target=ping_loop, args=(port, pings, stop, failures))
            pinger.start()
            while len(pings) < 20:
                time.sleep(0.01)
            result = flood(port, megabytes)
            time.sleep(0.5)
            stop.set()
            pinger.join(120)
        finally:
            stop_server(proc)
        # gunicorn's arbiter kills a worker that has not reported for its timeout.
        killed = [line for line in (Path(tmp) / "server.log").read_text().splitlines()
                  if "WORKER TIMEOUT" in line]
    start = result.pop("start")
    end = start + max(result["answered"], result["sending"]) + 0.5
    during = [e - s for s, e in pings if e >= start and s <= end]
    return {"tree": str(tree), **result, "pings_during": len(during),
            "ping_median": statistics.median(during), "ping_max": max(during),
            "pinger_failed": failures[0] if failures else None,
            "worker_timeout": killed[0] if killed else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append",
                        help="delayq source tree to serve from (repeatable; default: this "
                             "one)")
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--output", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = []
    for tree in args.tree or [HERE.parent]:
        row = measure(tree.resolve(), args.megabytes)
        results.append(row)
        print(f"{row['tree']}: answer {row['answer']!r} after {row['answered']:.3f} s; "
              f"sending {row['sent']} in {row['sending']:.2f} s; pings during the flood: "
              f"{row['pings_during']}, median {row['ping_median'] * 1000:.1f} ms, longest "
              f"{row['ping_max'] * 1000:.1f} ms", flush=True)
        for key in ("pinger_failed", "worker_timeout"):
            if row[key]:
                print(f"  {key.replace('_', ' ')}: {row[key]}", flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
