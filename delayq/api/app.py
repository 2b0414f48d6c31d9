"""The ASGI application: routes, error handling, and the broker behind them."""

from __future__ import annotations

import falcon
import falcon.asgi
import falcon.media
from oslo_config import cfg

from delayq import jsontext
from delayq.api import auth, claims, errors, home, messages, queues, share
from delayq.api import metrics as metrics_api
from delayq.api.runner import Runner
from delayq.api.waiting import Waiting
from delayq.broker import Broker
from delayq.conf import SIGNED_URL_GROUP, WSGI_GROUP
from delayq.metrics import Metrics
from delayq.storage import load_driver
from delayq.storage.base import Driver
from delayq.validation import Limits, Quotas


class _Shutdown:
    """Closes the driver's connections when the worker stops.

    The driver reconnects if used again, so an ASGI host that runs the lifespan more
    than once (as Falcon's test client does per request) keeps working.
    """

    def __init__(self, run: Runner) -> None:
        self.run = run

    async def process_shutdown(self, scope: dict, event: dict) -> None:
        self.run.broker.driver.close()


def create_app(conf: cfg.ConfigOpts, driver: Driver | None = None) -> falcon.asgi.App:
    """The API over *driver*, or over the driver *conf* selects."""
    metrics = Metrics()
    broker = Broker(driver or load_driver(conf), Limits.from_conf(conf), metrics,
                    quotas=Quotas.from_conf(conf))
    broker.driver.endings = metrics.count_endings
    run = Runner(broker, mode=conf[WSGI_GROUP].storage_calls)
    waiting = Waiting(run, poll_interval=conf[WSGI_GROUP].claim_wait_poll_interval)
    middleware: list[object] = [metrics_api.RequestTimer(metrics), _Shutdown(run)]
    authentication = auth.from_conf(conf, run)
    if authentication is not None:
        middleware.append(authentication)
    app = falcon.asgi.App(request_type=metrics_api.Request, middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = True
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = falcon.media.JSONHandler(
        dumps=jsontext.response)
    errors.install(app)

    # Falcon's router tests sibling segments in the order routes are added: the message
    # and claim routes, which nearly every request takes, go first.
    app.add_route("/v2/queues/{name}/messages", messages.MessageCollection(run, waiting))
    app.add_route("/v2/queues/{name}/messages/{message_id}", messages.Message(run, waiting))
    app.add_route("/v2/queues/{name}/claims", claims.ClaimCollection(run, waiting))
    app.add_route("/v2/queues/{name}/claims/{claim_id}", claims.Claim(run, waiting))
    app.add_route("/v2/queues", queues.QueueCollection(run))
    app.add_route("/v2/queues/{name}", queues.Queue(run))
    app.add_route("/v2/queues/{name}/stats", queues.QueueStats(run))
    app.add_route("/v2/queues/{name}/purge", queues.QueuePurge(run))
    app.add_route("/v2/queues/{name}/redrive", queues.QueueRedrive(run))
    app.add_route("/v2/queues/{name}/share",
                  share.QueueShare(conf[SIGNED_URL_GROUP].secret_key))
    app.add_route("/v2", home.Home())
    app.add_route("/v2/ping", home.Ping(run))
    app.add_route("/v2/health", home.Health(run))
    app.add_route(metrics_api.PATH, metrics_api.MetricsResource(run, metrics))
    return app
