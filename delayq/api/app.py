"""The ASGI application: routes, error handling, and what each resource is handed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import falcon
import falcon.asgi
import falcon.media
from oslo_config import cfg

from delayq import encryption, jsontext, signed_urls
from delayq.api import (
    auth,
    claims,
    errors,
    home,
    messages,
    queues,
    share,
    subscriptions,
    topic_messages,
    topic_subscriptions,
    topics,
)
from delayq.api import metrics as metrics_api
from delayq.api.longpoll import LongPoll
from delayq.api.request import Request
from delayq.api.request_ids import RequestIds
from delayq.api.wakeups import Wakeups
from delayq.broker import Broker
from delayq.conf import NOTIFICATION_GROUP, TRANSPORT_GROUP, WEBSOCKET_GROUP, WSGI_GROUP
from delayq.metrics import Metrics
from delayq.offload import AUTO, THREADS, Offload
from delayq.push import mail
from delayq.push.confirmations import Confirmations
from delayq.push.pusher import Pusher
from delayq.push.settings import PushSettings
from delayq.push.sockets import SocketPushes
from delayq.storage.base import Driver
from delayq.storage.base.offloaded import OffloadedDriver
from delayq.storage.registry import load_driver
from delayq.topics import Topics
from delayq.validation import Limits, Quotas
from delayq.websocket import endpoint as websocket
from delayq.websocket.limits import SocketLimits


class _Lifespan:
    """Starts the store's reaper, the listener of its signals and the pusher (when the
    worker pushes) on the worker's event loop when it starts; stops them and closes the
    driver's connections when the worker stops.

    The driver reconnects if used again, so an ASGI host that runs the lifespan more
    than once (as Falcon's test client does per request) keeps working.
    """

    def __init__(self, driver: Driver, wakeups: Wakeups, pusher: Pusher, push: bool,
                 offload: Offload, confirmations: Confirmations) -> None:
        self.driver = driver
        self.confirmations = confirmations
        self.wakeups = wakeups
        self.pusher = pusher
        self.push = push
        self.offload = offload

    async def process_startup(self, scope: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        self.driver.start_reaper()
        await self.wakeups.start()
        if self.push:
            await self.pusher.start()

    async def process_shutdown(self, scope: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        if self.push:
            await self.pusher.stop()
        await self.confirmations.close()
        await self.wakeups.stop()
        await self.driver.close()
        self.offload.shutdown()


def create_app(conf: cfg.ConfigOpts, driver: Driver | None = None,
               metrics: Metrics | None = None) -> falcon.asgi.App:
    """The API over *driver*, or over the driver *conf* selects, counting in *metrics*.

    A driver made by the caller (tests, embedding) reports its endings to whatever it
    was made with: for /metrics to count them, make it with ``endings=`` the
    ``count_endings`` of the *metrics* passed here.
    """
    metrics = metrics if metrics is not None else Metrics()
    if driver is None:
        driver = load_driver(conf, endings=metrics.count_endings)
    limits = Limits.from_conf(conf)
    broker = Broker(driver, limits, metrics, quotas=Quotas.from_conf(conf),
                    cipher=encryption.from_keys(
                        conf[TRANSPORT_GROUP].message_encryption_key),
                    require_confirmation=conf[NOTIFICATION_GROUP].require_confirmation)
    wsgi = conf[WSGI_GROUP]
    if isinstance(driver, OffloadedDriver) and wsgi.storage_calls != AUTO:
        driver.offload.set_mode(wsgi.storage_calls)
    # Blocking work of the API's own (a Keystone token check, reading the metric files
    # of the other workers), always in threads.
    offload = Offload(THREADS)
    longpoll = LongPoll(broker, poll_interval=wsgi.claim_wait_poll_interval,
                        signals=driver.signals)
    push_settings = PushSettings.from_conf(conf)
    pusher = Pusher(broker, push_settings, signals=driver.signals)
    confirmations = Confirmations(signed_urls.Settings.from_conf(conf), push_settings.targets,
                                  push_settings.timeout, mail.confirmation_settings(conf))
    wakeups = Wakeups(driver.signals, longpoll, pusher)

    timer = metrics_api.RequestTimer(metrics)
    lifespan = _Lifespan(driver, wakeups, pusher, conf[NOTIFICATION_GROUP].push, offload,
                         confirmations)
    authentication = auth.from_conf(conf, offload)
    # Tuples, not a list: mypy checks each item against Falcon's middleware protocols,
    # where a list of unlike components would be a list of objects.
    ids = RequestIds()
    app = falcon.asgi.App(request_type=Request, middleware=(
        (ids, timer, lifespan) if authentication is None
        else (ids, timer, lifespan, authentication)))
    app.req_options.strip_url_path_trailing_slash = True
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = falcon.media.JSONHandler(
        dumps=jsontext.response)
    errors.install(app)

    on_messages: dict[str, Any] = {"broker": broker, "limits": limits,
                                   "longpoll": longpoll, "pusher": pusher,
                                   "checksums": conf.enable_checksum}
    on_queues: dict[str, Any] = {"broker": broker, "limits": limits}
    on_subscriptions: dict[str, Any] = {"broker": broker, "limits": limits,
                                        "pusher": pusher,
                                        "targets": push_settings.targets,
                                        "confirmations": confirmations}
    topic_rules = Topics(broker)
    on_topics: dict[str, Any] = {"topics": topic_rules, "limits": limits}
    on_topic_messages: dict[str, Any] = {**on_topics, "pusher": pusher,
                                         "checksums": conf.enable_checksum}
    on_topic_subscriptions: dict[str, Any] = {**on_topics, "pusher": pusher,
                                              "targets": push_settings.targets,
                                              "confirmations": confirmations}
    # Falcon's router tests sibling segments in the order routes are added: the message
    # and claim routes, which nearly every request takes, go first.
    app.add_route("/v2/queues/{name}/messages", messages.MessageCollection(**on_messages))
    app.add_route("/v2/queues/{name}/messages/{message_id}",
                  messages.MessageResource(**on_messages))
    app.add_route("/v2/queues/{name}/claims", claims.ClaimCollection(**on_messages))
    app.add_route("/v2/queues/{name}/claims/{claim_id}",
                  claims.ClaimResource(**on_messages))
    app.add_route("/v2/queues", queues.QueueCollection(**on_queues))
    app.add_route("/v2/queues/{name}", queues.QueueResource(**on_queues))
    app.add_route("/v2/queues/{name}/stats", queues.QueueStatsResource(**on_queues))
    app.add_route("/v2/queues/{name}/purge", queues.QueuePurgeResource(**on_queues))
    app.add_route("/v2/queues/{name}/redrive", queues.QueueRedriveResource(**on_queues))
    app.add_route("/v2/queues/{name}/subscriptions",
                  subscriptions.SubscriptionCollection(**on_subscriptions))
    app.add_route("/v2/queues/{name}/subscriptions/{subscription_id}",
                  subscriptions.SubscriptionResource(**on_subscriptions))
    app.add_route("/v2/queues/{name}/subscriptions/{subscription_id}/confirm",
                  subscriptions.SubscriptionConfirmResource(**on_subscriptions))
    app.add_route("/v2/queues/{name}/share",
                  share.QueueShareResource(
                      signed_urls.Settings.from_conf(conf),
                      rules=authentication.rules if authentication is not None else None))
    app.add_route("/v2/topics", topics.TopicCollection(**on_topics))
    app.add_route("/v2/topics/{name}", topics.TopicResource(**on_topics))
    app.add_route("/v2/topics/{name}/stats", topics.TopicStatsResource(**on_topics))
    app.add_route("/v2/topics/{name}/purge", topics.TopicPurgeResource(**on_topics))
    app.add_route("/v2/topics/{name}/messages",
                  topic_messages.TopicMessageCollection(**on_topic_messages))
    app.add_route("/v2/topics/{name}/messages/{message_id}",
                  topic_messages.TopicMessageResource(**on_topic_messages))
    app.add_route("/v2/topics/{name}/subscriptions",
                  topic_subscriptions.TopicSubscriptionCollection(**on_topic_subscriptions))
    app.add_route("/v2/topics/{name}/subscriptions/{subscription_id}",
                  topic_subscriptions.TopicSubscriptionResource(**on_topic_subscriptions))
    app.add_route("/v2/topics/{name}/subscriptions/{subscription_id}/confirm",
                  topic_subscriptions.TopicSubscriptionConfirmResource(
                      **on_topic_subscriptions))
    app.add_route("/", home.VersionsResource())
    app.add_route("/v2", home.HomeResource())
    app.add_route("/v2/ping", home.PingResource(broker=broker))
    app.add_route("/v2/health", home.HealthResource(broker=broker, store=driver.name))
    app.add_route(metrics_api.PATH, metrics_api.MetricsResource(
        broker=broker, offload=offload, metrics=metrics))
    if conf[WEBSOCKET_GROUP].enabled:
        add_websocket(app, conf, authentication, offload, pusher.sockets)
    return app


def add_websocket(app: falcon.asgi.App, conf: cfg.ConfigOpts,
                  authentication: auth.Authentication | None, offload: Offload,
                  socket_pushes: SocketPushes) -> None:
    """Zaqar's WebSocket API on its path, served by this app's own routes
    (``delayq.websocket``)."""
    websocket.install_media_handlers(app)
    app.add_route(conf[WEBSOCKET_GROUP].path, websocket.WebSocketEndpoint(
        app=app, socket_limits=SocketLimits.from_conf(conf),
        tokens=authentication.tokens if authentication is not None else None,
        offload=offload, socket_pushes=socket_pushes))
