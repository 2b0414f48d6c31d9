"""What idle long-poll claims cost the backend: Redis commands per second with waiters.

Starts a private ``redis-server`` (a free loopback port, never 6379, no persistence, as
``benchmarks/backlog.py`` does, whose helpers this script imports) and the real
``delayq-server`` on it, then, through the HTTP API only:

1. **baseline**: with no request in flight, counts the commands Redis processes during
   ``--measure`` seconds (``INFO stats`` ``total_commands_processed``, and ``INFO
   commandstats`` per command; the counting client's own ``INFO`` calls are taken out);
2. **idle waiters**: opens ``--waiters`` concurrent ``POST /claims?wait=--wait`` requests
   on ``--queues`` empty queues (round robin), each on its own connection, lets their
   first claims pass (``--settle`` seconds, then until a second in which Redis ran no
   more than twice what the watchers need), and counts again for ``--measure`` seconds;
3. **one message**: posts one message to the first queue while every waiter still waits,
   and counts the commands until one waiter has it and ``--settle`` seconds more: the
   price of waking 1,000 waiters for one message is a handful of commands, not a claim
   each;
4. checks that every other waiter ends with 204 once its wait is over.

Reported: commands per second in each phase, the difference the waiters make (absolute
and per waiter), the per-command breakdown, and the expected rate — one ``available_in``
script call per queue, worker and poll interval. Written as JSON to
``benchmarks/results/longpoll.json`` (or ``--output``).

Usage::

    python benchmarks/longpoll.py [--waiters 1000] [--queues 1] [--workers 2]
                                  [--poll-interval 1.0] [--wait 20] [--measure 6]
                                  [--settle 2] [--output PATH] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

PROJECT = "delayq-bench"
QUEUE_PREFIX = "bench-wait"
RESULTS = Path(__file__).resolve().parent / "results" / "longpoll.json"
# The INFO calls of one count: `INFO stats` and `INFO commandstats` at its start (those
# at its end are counted by the next snapshot, not this one).
INFO_CALLS = 2
CLAIM_LIMIT = 1
# Redis commands of one available_in check: the script call, TIME and three ZRANGEs
# (Redis counts the commands a script runs as well as the script call itself).
COMMANDS_PER_CHECK = 5


# Counting Redis commands -----------------------------------------------------------------


def snapshot(client: Any) -> tuple[int, dict[str, int]]:
    """``total_commands_processed`` and the calls of each command so far."""
    total = client.info("stats")["total_commands_processed"]
    per_command = {name.removeprefix("cmdstat_"): stats["calls"]
                   for name, stats in client.info("commandstats").items()}
    return total, per_command


def difference(before: tuple[int, dict[str, int]], after: tuple[int, dict[str, int]],
               seconds: float) -> dict[str, Any]:
    """Commands per second between two snapshots, this script's INFO calls excluded."""
    total = after[0] - before[0] - INFO_CALLS
    per_command = {name: calls - before[1].get(name, 0) for name, calls in after[1].items()}
    per_command["info"] = per_command.get("info", 0) - INFO_CALLS
    busy = {name: round(calls / seconds, 2) for name, calls in sorted(per_command.items())
            if calls > 0}
    return {"seconds": round(seconds, 3), "commands": total,
            "commands_per_second": round(total / seconds, 2), "by_command": busy}


def checks_per_second(args: argparse.Namespace) -> float:
    """``available_in`` calls per second at most: each worker that holds a waiter of a
    queue checks that queue once per poll interval."""
    return args.queues * args.workers / args.poll_interval


async def settled(client: Any, checks: float, deadline: float) -> float:
    """When the waiters' first claims are done: the first second in which Redis ran no
    more than twice what the watchers need. Their arrival is no idle cost, and on a
    busy machine 1,000 first claims take seconds."""
    quiet = 2 * checks * COMMANDS_PER_CHECK + INFO_CALLS
    while time.monotonic() < deadline:
        before = snapshot(client)[0]
        await asyncio.sleep(1)
        if snapshot(client)[0] - before - INFO_CALLS <= quiet:
            return time.monotonic()
    raise RuntimeError("the waiters' first claims were still running when the measurement "
                       "had to start: fewer --waiters, or a longer --wait")


async def count_for(client: Any, seconds: float) -> dict[str, Any]:
    before = snapshot(client)
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after = snapshot(client)
    return difference(before, after, time.monotonic() - started)


# The delayq-server on Redis --------------------------------------------------------------


def write_config(path: Path, port: int, workers: int, poll_interval: float, waiters: int,
                 driver_sections: backlog.Sections) -> None:
    sections: backlog.Sections = {
        "drivers": {"message_store": "redis"},
        # Every waiter holds a connection, and one worker may accept them all.
        "drivers:transport:wsgi": {"bind": "127.0.0.1", "port": str(port),
                                   "workers": str(workers),
                                   "claim_wait_poll_interval": str(poll_interval),
                                   "max_connections": str(waiters + 100)},
        **driver_sections,
    }
    lines = []
    for name, options in sections.items():
        lines += [f"[{name}]", *(f"{key} = {value}" for key, value in options.items()), ""]
    path.write_text("\n".join(lines))


def raise_open_files(wanted: int) -> None:
    """Room for *wanted* sockets here and in the server (it inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


# The waiters -----------------------------------------------------------------------------


async def wait_claims(url: str, queues: list[str], waiters: int, wait: int
                      ) -> list[asyncio.Task[httpx.Response]]:
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    # One connection per waiter, as that many consumers would hold.
    client = httpx.AsyncClient(base_url=url, timeout=wait + 30,
                               limits=httpx.Limits(max_connections=waiters + 8))
    tasks = [asyncio.ensure_future(client.post(
        f"/v2/queues/{queues[i % len(queues)]}/claims",
        params={"wait": wait, "limit": CLAIM_LIMIT}, headers=headers, json={}))
        for i in range(waiters)]
    asyncio.ensure_future(close_after(client, tasks))
    return tasks


async def close_after(client: httpx.AsyncClient, tasks: list[asyncio.Task]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.aclose()


async def run(args: argparse.Namespace, url: str, redis_client: Any) -> dict[str, Any]:
    queues = [f"{QUEUE_PREFIX}-{i}" for i in range(args.queues)]
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    async with httpx.AsyncClient(base_url=url, timeout=30) as control:
        for queue in queues:
            (await control.put(f"/v2/queues/{queue}", headers=headers)).raise_for_status()
        await asyncio.sleep(args.settle)
        baseline = await count_for(redis_client, args.measure)

        started = time.monotonic()
        tasks = await wait_claims(url, queues, args.waiters, args.wait)
        await asyncio.sleep(args.settle)
        arrival = await settled(redis_client, checks_per_second(args),
                                started + args.wait - args.measure - args.settle)
        early = [t for t in tasks if t.done()]
        if early:
            outcome = early[0].exception() or early[0].result().text
            raise RuntimeError(f"{len(early)} waiters answered before any message, the "
                               f"first with {outcome!r}")
        idle = await count_for(redis_client, args.measure)

        before = snapshot(redis_client)
        posted_at = time.monotonic()
        (await control.post(f"/v2/queues/{queues[0]}/messages", headers=headers,
                            json={"messages": [{"body": "wake"}]})).raise_for_status()
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        woken_after = time.monotonic() - posted_at
        await asyncio.sleep(args.settle)
        one_message = difference(before, snapshot(redis_client), time.monotonic() - posted_at)
        if time.monotonic() - started > args.wait:
            raise RuntimeError("the waits ended before the measurements: raise --wait or "
                               "lower --measure/--settle")
        answers = await asyncio.gather(*tasks)

    statuses: dict[int, int] = {}
    for answer in answers:
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
    extra = idle["commands_per_second"] - baseline["commands_per_second"]
    return {
        "waiters": args.waiters, "queues": args.queues, "workers": args.workers,
        "poll_interval": args.poll_interval, "wait": args.wait,
        "baseline": baseline, "arrival_seconds": round(arrival - started, 2),
        "idle_waiters": idle,
        "extra_commands_per_second": round(extra, 2),
        "extra_commands_per_second_per_waiter": round(extra / args.waiters, 5),
        "expected_at_most": round(checks_per_second(args) * COMMANDS_PER_CHECK, 2),
        "one_message": {**one_message, "first_answer_after": round(woken_after, 3),
                        "answered": [t.result().status_code for t in done]},
        "final_statuses": statuses,
    }


def report(result: dict[str, Any]) -> None:
    print(f"{result['waiters']} idle waiters on {result['queues']} queue(s), "
          f"{result['workers']} worker(s), poll interval {result['poll_interval']} s")
    for label, key in (("baseline (no waiters)", "baseline"),
                       ("idle waiters", "idle_waiters")):
        phase = result[key]
        print(f"  {label:24} {phase['commands_per_second']:8.2f} commands/s  "
              f"{phase['by_command']}")
    print(f"  waiters add              {result['extra_commands_per_second']:8.2f} commands/s "
          f"({result['extra_commands_per_second_per_waiter']} per waiter; at most "
          f"{result['expected_at_most']} expected)")
    one = result["one_message"]
    print(f"  one message posted: first waiter answered after {one['first_answer_after']} s; "
          f"{one['commands']} commands in {one['seconds']} s {one['by_command']}")
    print(f"  final statuses: {result['final_statuses']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=1000,
                        help="concurrent waiting claims (default 1000)")
    parser.add_argument("--queues", type=int, default=1,
                        help="queues the waiters are spread over (default 1)")
    parser.add_argument("--workers", type=int, default=2,
                        help="delayq-server worker processes (default 2)")
    parser.add_argument("--poll-interval", type=float, default=1.0,
                        help="[drivers:transport:wsgi] claim_wait_poll_interval (default 1)")
    parser.add_argument("--wait", type=int, default=20, help="each claim's ?wait= (20)")
    parser.add_argument("--measure", type=float, default=6.0,
                        help="seconds each count lasts (default 6)")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds before counting, for requests in flight (default 2)")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="JSON results (default benchmarks/results/longpoll.json)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (server logs, Redis log)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.settle * 2 + args.measure >= args.wait:
        sys.exit("--wait must outlast two --settle and one --measure")
    raise_open_files(args.waiters * 2 + 256)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-longpoll-"))
    try:
        sections = backlog.redis_sections(workdir)
        with backlog.redis_service(sections, workdir):
            port = backlog.free_port()
            config = workdir / "delayq.conf"
            write_config(config, port, args.workers, args.poll_interval, args.waiters,
                         sections)
            server = backlog.Server(config, port, workdir / "server.log")
            redis_client = backlog.redis_client(sections)
            try:
                server.wait_ready()
                result = asyncio.run(run(args, f"http://127.0.0.1:{port}", redis_client))
            finally:
                redis_client.close()
                server.stop()
        report(result)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n")
        print(f"written to {args.output}")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
