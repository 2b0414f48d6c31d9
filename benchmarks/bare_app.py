"""delayq's Redis work bare: a Falcon app making a request's Redis script call and no more.

``benchmarks/trivial_app.py`` measures what gunicorn, uvicorn and Falcon cost a request.
This measures what the Redis work of delayq's post, claim and delete costs on top: each
request makes the one ``EVALSHA`` delayq makes (the same Lua scripts, with the same
arguments), as delayq's driver makes it on the event loop
(``delayq/storage/redis/calls.py``: its fast path on one server), reads the JSON body
and answers JSON of the same shape, both with delayq's encoder and decoder
(``delayq/jsontext.py``). It skips everything else delayq does:
validation (it trusts the benchmark's requests), the broker's rules, metrics, the 503
mapping, long-poll waiting, the driver's bookkeeping. So it is not a usable server: it is
about the least an implementation of this API on this stack (Python, Falcon, uvicorn, one
script per transition) can cost a request, since what it skips delayq must do in some
form. delayq's ratio to the trivial app can approach this app's, not pass it;
``benchmarks/throughput.py --bare`` and ``benchmarks/instructions.py --bare`` measure it
beside delayq in one run.

Routes: ``PUT /v2/queues/{name}`` (creates the queue through the real driver),
``POST .../messages``, ``POST .../claims``, ``DELETE .../messages/{id}``, ``GET /v2/ping``.

Usage::

    python benchmarks/bare_app.py --port 8890 --redis-uri redis://127.0.0.1:6379/0 \
        [--namespace dq] [--workers 2] [--bind 127.0.0.1]
"""

from __future__ import annotations

import argparse
from typing import Any

import falcon
import falcon.asgi
import falcon.media

from delayq import conf, jsontext
from delayq.server import Server
from delayq.storage.redis import layout
from delayq.storage.redis.driver import Driver
from delayq.storage.redis.layout import TOKEN_LENGTH, US, new_nonce, new_tokens
from delayq.storage.redis.messages import NO_KEY
from delayq.storage.redis.scripts import (
    CLAIM_BUDGET,
    NO_BACKOFF,
    WRITE_REAP_BUDGET,
    CountedScript,
)

PROJECT_HEADER = "X-Project-ID"
CLIENT_HEADER = "Client-ID"


def script_reply(reply: list) -> Any:
    """The script's own reply: delayq's scripts put their ended-counts before it."""
    return reply[-1]


class Store:
    """delayq's Redis driver, for connecting, creating queues and loading scripts;
    requests call its scripts directly, as its controllers do."""

    def __init__(self, uri: str, namespace: str) -> None:
        self.driver = Driver(uri, namespace=namespace)
        context = self.driver.context
        self.calls = context.calls
        self.post = context.scripts.post
        self.claim = context.scripts.claim
        self.delete = context.scripts.delete
        self.tokens: dict[str, bytes] = {}  # queue key -> its metadata as stored

    async def call(self, script: CountedScript, key: str, args: list) -> list:
        """The script's own reply (delayq's scripts put their ended-counts first)."""
        return script_reply(await self.calls.script(script.sha, script.source, [key], args))

    async def key(self, project: str, name: str) -> tuple[str, bytes]:
        """The queue's state key and metadata token, read once per queue."""
        key = self.driver.key_names.queue(project, name)
        token = self.tokens.get(key)
        if token is None:
            _, stored = await self.driver.queues.for_write(project, name)
            token = self.tokens[key] = stored or b""
        return key, token


class Resource:
    def __init__(self, store: Store) -> None:
        self.store = store


class Queue(Resource):
    async def on_put(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        await self.store.driver.queues.create(req.get_header(PROJECT_HEADER), name, {})
        resp.status = falcon.HTTP_201


class Messages(Resource):
    async def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        key, token = await self.store.key(req.get_header(PROJECT_HEADER), name)
        client = req.get_header(CLIENT_HEADER).encode()
        document = jsontext.loads((await req.stream.readall()).decode())
        # A nonce, in case the queue is new; no message quota, no queue fence, no
        # idempotency key; an id token per message.
        posted = document["messages"]
        tokens = new_tokens(len(posted))
        args = ["", new_nonce(), WRITE_REAP_BUDGET, token, 0, "", *NO_KEY, tokens]
        for message in posted:
            args += [jsontext.dumps_compact(message["body"]), client,
                     message.get("ttl", 3600), message.get("delay", 0)]
        reply = await self.store.call(self.store.post, key, args)
        nonce = reply[0]
        ids = [(nonce + seq + tokens[n * TOKEN_LENGTH:(n + 1) * TOKEN_LENGTH]).decode()
               for n, seq in enumerate(reply[2:])]
        resp.status = falcon.HTTP_201
        resp.media = {"resources": [f"/v2/queues/{name}/messages/{id_}" for id_ in ids]}


class Message(Resource):
    async def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str,
                        message_id: str) -> None:
        key, _ = await self.store.key(req.get_header(PROJECT_HEADER), name)
        await self.store.call(self.store.delete, key,
                              ["", message_id, req.get_param("claim_id") or ""])
        resp.status = falcon.HTTP_204


class Claims(Resource):
    async def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        key, token = await self.store.key(req.get_header(PROJECT_HEADER), name)
        document = jsontext.loads((await req.stream.readall()).decode())
        ttl, grace = document.get("ttl", 60), document.get("grace", 60)
        reply = await self.store.call(self.store.claim, key, [
            "", ttl, grace, int(req.get_param("limit") or 10), "", "", "", "", CLAIM_BUDGET,
            name, WRITE_REAP_BUDGET, token, *NO_BACKOFF, new_tokens(1)])
        nonce, as_of, claim_id = reply[:3]
        if not claim_id:
            resp.status = falcon.HTTP_204
            return
        claim_id = claim_id.decode()
        messages = [{
            "id": m.id, "href": f"/v2/queues/{name}/messages/{m.id}?claim_id={claim_id}",
            "ttl": m.ttl, "age": int(as_of / US - m.created), "body": m.body}
            for m in layout.messages(nonce, reply[6:], as_of)]
        resp.status = falcon.HTTP_201
        resp.location = f"/v2/queues/{name}/claims/{claim_id}"
        resp.media = {"messages": messages}


class Ping:
    async def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_204


def create_app(uri: str, namespace: str) -> falcon.asgi.App:
    store = Store(uri, namespace)
    app = falcon.asgi.App()
    # delayq's JSON in and out (delayq/jsontext.py), the cheapest this stack has.
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = falcon.media.JSONHandler(
        dumps=jsontext.dumps)
    app.add_route("/v2/queues/{name}/messages", Messages(store))
    app.add_route("/v2/queues/{name}/messages/{message_id}", Message(store))
    app.add_route("/v2/queues/{name}/claims", Claims(store))
    app.add_route("/v2/queues/{name}", Queue(store))
    app.add_route("/v2/ping", Ping())
    return app


class BareServer(Server):
    """delayq's gunicorn set-up serving the bare app."""

    def __init__(self, bind: str, workers: int, uri: str, namespace: str) -> None:
        super().__init__(conf.load(), bind, workers)
        self.uri, self.namespace = uri, namespace

    def load_config(self) -> None:
        # The hook tidies delayq's shared metrics files, which this app has none of.
        self.settings.pop("child_exit", None)
        super().load_config()

    def load(self) -> falcon.asgi.App:
        return create_app(self.uri, self.namespace)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--redis-uri", required=True)
    parser.add_argument("--namespace", default="dq")
    args = parser.parse_args(argv)
    BareServer(f"{args.bind}:{args.port}", args.workers, args.redis_uri,
                args.namespace).run()


if __name__ == "__main__":
    main()
