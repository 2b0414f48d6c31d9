"""The yardstick of ``benchmarks/throughput.py``: a Falcon ASGI app that does nothing,
served exactly as ``delayq-server`` serves delayq.

One route, ``/v2/{rest:path}``, takes the benchmark's requests: ``GET`` answers 204 (so
the same readiness check, ``GET /v2/ping``, works), ``POST`` reads the body and answers
a small JSON document, ``DELETE`` answers 204. Whatever it costs per request is the price
of gunicorn, uvicorn, HTTP parsing and Falcon alone, which delayq cannot go below.

It runs through ``delayq.server.Server`` with only ``load`` replaced, so the worker class,
its HTTP protocol and limits, keep-alive and every other gunicorn setting are delayq's own
(their defaults).

Usage::

    python benchmarks/trivial_app.py --port 8890 [--workers 2] [--bind 127.0.0.1]
"""

from __future__ import annotations

import argparse

import falcon
import falcon.asgi

from delayq import conf
from delayq.server import Server


class Anything:
    async def on_get(self, req: falcon.Request, resp: falcon.Response, rest: str) -> None:
        resp.status = falcon.HTTP_204

    async def on_post(self, req: falcon.Request, resp: falcon.Response, rest: str) -> None:
        await req.stream.read()
        resp.media = {"ok": True}

    async def on_delete(self, req: falcon.Request, resp: falcon.Response, rest: str) -> None:
        resp.status = falcon.HTTP_204


def create_app() -> falcon.asgi.App:
    app = falcon.asgi.App()
    app.add_route("/v2/{rest:path}", Anything())
    return app


class TrivialServer(Server):
    """delayq's gunicorn set-up serving the trivial app."""

    def load_config(self) -> None:
        # The hook tidies delayq's shared metrics files, which the trivial app has none of.
        self.settings.pop("child_exit", None)
        super().load_config()

    def load(self) -> falcon.asgi.App:
        return create_app()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    TrivialServer(conf.load(), f"{args.bind}:{args.port}", args.workers).run()


if __name__ == "__main__":
    main()
