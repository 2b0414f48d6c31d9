"""CPU per request of the ASGI app itself, without HTTP: delayq's own share of a request.

``benchmarks/throughput.py`` measures whole requests through gunicorn and uvicorn, where
HTTP parsing and the event loop cost as much as the app. This hands the same cycle of
requests (post one message, claim it, delete it with its claim id) straight to the ASGI
app, with a real store, and reports the process CPU time per request, beside the trivial
app of ``benchmarks/trivial_app.py`` given the same requests. Each target runs in a
fresh process, alternating, ``--rounds`` times, so drift on a shared machine shows.

Usage::

    python benchmarks/in_process.py [--driver redis --driver sqlite] [--requests 3000]
                                    [--rounds 3]

To compare two versions of delayq, run each checkout's copy of this script with
``PYTHONPATH=<checkout>`` (the child processes inherit it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

CLIENT_ID = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
WARMUP_CYCLES = 200


def headers(length: int) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"bench"), (b"client-id", CLIENT_ID.encode()),
            (b"x-project-id", b"bench"), (b"content-type", b"application/json"),
            (b"content-length", str(length).encode())]


async def call(app: Any, method: str, path: str, query: str = "", body: bytes = b""
               ) -> tuple[int, bytes]:
    """One request handed to *app* as uvicorn would: its status and body."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": method, "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": headers(len(body)), "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    status, parts = 0, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(parts)


async def cycle(app: Any, trivial: bool) -> None:
    """Post one message, claim it, delete it (3 requests)."""
    queue = "/v2/queues/bench"
    status, _ = await call(app, "POST", f"{queue}/messages",
                           body=b'{"messages": [{"body": 1, "ttl": 300}]}')
    assert status in (200, 201), status
    status, body = await call(app, "POST", f"{queue}/claims", "limit=1",
                              b'{"ttl": 60, "grace": 60}')
    if trivial:
        await call(app, "DELETE", f"{queue}/messages/x", "claim_id=y")
        return
    assert status == 201, (status, body)
    path, _, query = json.loads(body)["messages"][0]["href"].partition("?")
    status, _ = await call(app, "DELETE", path, query)
    assert status == 204, status


def build_app(target: str, sections: dict[str, dict[str, Any]]) -> Any:
    """The ASGI app of *target*: the trivial app, or delayq on driver *target* configured
    with *sections* (``{group: {option: value}}``)."""
    if target == "trivial":
        import trivial_app
        return trivial_app.create_app()
    from delayq import conf as delayq_conf
    from delayq.api.app import create_app
    conf = delayq_conf.load([])
    conf.set_override("message_store", target, group="drivers")
    for group, options in sections.items():
        for name, value in options.items():
            conf.set_override(name, value, group=group)
    if target == "redis":  # no background reaper passes in the measured process
        conf.set_override("reap_interval", 0, group="drivers:message_store:redis")
    return create_app(conf)


def measure(target: str, requests: int, sections: dict[str, dict[str, Any]]) -> float:
    """CPU milliseconds per request of *target* ('trivial' or a driver), in this process."""
    app = build_app(target, sections)
    cycles = max(1, requests // 3)

    async def run() -> float:
        for _ in range(WARMUP_CYCLES):
            await cycle(app, target == "trivial")
        started = time.process_time()
        for _ in range(cycles):
            await cycle(app, target == "trivial")
        return (time.process_time() - started) / (3 * cycles) * 1000

    return asyncio.run(run())


def child(target: str, requests: int, sections_json: str) -> None:
    print(json.dumps({"cpu_ms": measure(target, requests, json.loads(sections_json))}))


def run_child(target: str, requests: int, sections: dict[str, Any]) -> float:
    result = subprocess.run(
        [sys.executable, __file__, "--child", target, "--requests", str(requests),
         "--sections", json.dumps(sections)],
        check=True, capture_output=True, text=True, env=os.environ.copy())
    return json.loads(result.stdout.strip().splitlines()[-1])["cpu_ms"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append", choices=["sqlite", "redis"],
                        help="a driver to measure (repeatable; default: redis)")
    parser.add_argument("--requests", type=int, default=3000,
                        help="requests measured per target and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times each target is measured, alternating")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sections", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.requests, args.sections)
        return
    drivers = args.driver or ["redis"]
    results: dict[str, list[float]] = {target: [] for target in ["trivial", *drivers]}
    with tempfile.TemporaryDirectory(prefix="delayq-in-process-") as tmp, \
            contextlib.ExitStack() as services:
        sections: dict[str, dict[str, Any]] = {}
        for name in drivers:  # each store started as backlog.py starts it
            backend, directory = backlog.BACKENDS[name], Path(tmp) / name
            directory.mkdir()
            sections[name] = backend.sections(directory)
            services.enter_context(backend.service(sections[name], directory))
        for _ in range(args.rounds):
            for target in results:
                results[target].append(
                    run_child(target, args.requests, sections.get(target, {})))
    print("| target | CPU ms/request, each round | mean | ratio to trivial |")
    print("|---|---|---:|---:|")
    trivial = sum(results["trivial"]) / len(results["trivial"])
    for target, values in results.items():
        mean = sum(values) / len(values)
        print(f"| {target} | {' / '.join(f'{v:.3f}' for v in values)} | {mean:.3f} | "
              f"{mean / trivial:.1f} |")


if __name__ == "__main__":
    main()
