"""Configuration options, registered with oslo.config.

Option names, groups and defaults follow OpenStack Zaqar so that an operator's
existing ``zaqar.conf`` knowledge (and much of the file itself) carries over.
Every option of delayq is declared here, each default written once (the storage
drivers' in their ``options.py``); ``list_opts`` feeds ``oslo-config-generator`` (see
``etc/delayq-config-generator.conf``). This module imports no other part of delayq but
those option lists and ``delayq.events``' retention default.
"""

from __future__ import annotations

import ipaddress

from oslo_config import cfg, types
from oslo_policy import opts as policy_opts

from delayq.events import DEFAULT_RETENTION, OFF, Settings
from delayq.storage.mongo import options as mongo_options
from delayq.storage.redis import options as redis_options
from delayq.storage.sqlite import options as sqlite_options
from delayq.storage.swift import options as swift_options

DEFAULT_GROUP = "DEFAULT"
SIGNED_URL_GROUP = "signed_url"
TRANSPORT_GROUP = "transport"
DRIVERS_GROUP = "drivers"
WSGI_GROUP = "drivers:transport:wsgi"
WEBSOCKET_GROUP = "drivers:transport:websocket"
NOTIFICATION_GROUP = "notification"
EVENTS_GROUP = "events"
QUOTAS_GROUP = "quotas"

KEYSTONE = "keystone"
# [transport] client_id_uuid_safe: Zaqar's two settings.
CLIENT_ID_STRICT = "strict"
CLIENT_ID_OFF = "off"

# ``[drivers] message_store`` name -> the driver's option group, and its options.
DRIVER_OPTIONS = {"sqlite": sqlite_options, "redis": redis_options,
                  "mongodb": mongo_options, "swift": swift_options}
DRIVER_GROUPS = {name: module.GROUP for name, module in DRIVER_OPTIONS.items()}

class Network(types.ConfigType):
    """An IP network in CIDR notation (``10.20.0.0/16``, ``fd00::/8``); a bare address is
    a network of one. Host bits set (``10.20.1.5/16``) are refused: the operator meant
    either the host or the network."""

    def __init__(self) -> None:
        super().__init__(type_name="IP network value")

    def __call__(self, value: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
            return value
        try:
            return ipaddress.ip_network(str(value).strip())
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IP network in CIDR notation: {exc}"
                             ) from None

    def __repr__(self) -> str:
        return "Network"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def _formatter(self, value: object) -> str:
        return str(value)


auth_opts = [
    cfg.StrOpt("auth_strategy", default="",
               choices=[("", "No authentication: the X-Project-ID header names the "
                             "project, as sent. Only behind a proxy that sets it."),
                        (KEYSTONE, "Keystone tokens (X-Auth-Token), validated by "
                                   "keystonemiddleware with the [keystone_authtoken] "
                                   "options; the project is the token's, and the "
                                   "[oslo_policy] policy decides what it may do.")],
               help="How requests are authenticated, as in Zaqar."),
]

message_opts = [
    cfg.BoolOpt("enable_checksum", default=False,
                help="Give every message a checksum of its body, as Zaqar's option "
                     "does: \"checksum\": \"MD5:<hex>\" on each message that a get, "
                     "a listing, a get by ids, a claim (made or read) or a pop returns, "
                     "the MD5 of the body as json.dumps writes it (\", \" and \": \" "
                     "separators, ASCII escapes), so a client can tell a body changed on "
                     "the way. Computed as the message is read, not stored: it also "
                     "covers messages posted before it was turned on, and bodies "
                     "changed since (PATCH). A null body has none, as in Zaqar."),
]

signed_url_opts = [
    cfg.StrOpt("secret_key", secret=True,
               help="Key of the HMAC that signs pre-signed URLs (POST "
                    "/v2/queues/{name}/share), the same as Zaqar's. Unset, no URL can be "
                    "signed and no signed request is accepted. Every API host of a "
                    "deployment needs the same key."),
    cfg.IntOpt("max_expires", default=604800, min=60,
               help="Longest lifetime of a pre-signed URL, in seconds (default 7 days): "
                    "a share whose expires is further ahead is refused (400), and a "
                    "signed request whose URL-Expires is further ahead is refused (404), "
                    "so lowering it also cuts short the URLs already handed out. A share "
                    "without expires lives a day, or this long if it is shorter."),
]

transport_opts = [
    cfg.IntOpt("default_message_ttl", default=3600, min=60,
               help="Seconds a message lives when the producer gives no ttl and its queue "
                    "sets no _default_message_ttl."),
    cfg.IntOpt("default_message_delay", default=0, min=0,
               help="Delay applied to queues that do not set _default_message_delay. "
                    "Above 0, every such queue is a delayed queue."),
    cfg.IntOpt("default_claim_ttl", default=300, min=60,
               help="Seconds a claim lasts when the consumer gives no ttl."),
    cfg.IntOpt("default_claim_grace", default=60, min=60,
               help="Seconds a claimed message outlives its claim when the consumer "
                    "gives no grace."),
    cfg.IntOpt("max_queues_per_page", default=20, min=1,
               help="Largest page of a queue listing."),
    cfg.IntOpt("max_messages_per_page", default=20, min=1,
               help="Largest page of a message listing, and most ids in one ?ids= "
                    "request (a post is bounded by max_messages_post_size alone)."),
    cfg.IntOpt("max_messages_per_claim_or_pop", default=20, min=1,
               help="Most messages one claim or one pop may take."),
    cfg.IntOpt("max_queue_metadata", default=65536, min=1,
               help="Largest queue metadata document, in bytes of JSON."),
    cfg.IntOpt("max_messages_post_size", default=262144, min=1,
               help="Largest message-post request body, in bytes."),
    cfg.IntOpt("max_message_ttl", default=1209600, min=60,
               help="Longest message ttl a producer may ask for, in seconds."),
    cfg.IntOpt("max_message_delay", default=900, min=0,
               help="Longest delay a producer or a queue may ask for, in seconds. May be "
                    "raised to days or years; nothing else caps a delay."),
    cfg.IntOpt("max_claim_ttl", default=43200, min=60,
               help="Longest claim ttl a consumer may ask for, in seconds."),
    cfg.IntOpt("max_claim_grace", default=43200, min=60,
               help="Longest claim grace a consumer may ask for, in seconds."),
    cfg.IntOpt("default_subscription_ttl", default=3600, min=60,
               help="Seconds a subscription lives when its creator gives no ttl."),
    cfg.IntOpt("max_subscriptions_per_page", default=20, min=1,
               help="Largest page of a subscription listing."),
    cfg.IntOpt("idempotency_window", default=300, min=1,
               help="Seconds a message post's Idempotency-Key is kept: a post repeating "
                    "the key within them, to the same queue of the same project, stores "
                    "nothing and is answered as the first post was (with a different "
                    "body, a 422). The default is SQS FIFO's deduplication interval. "
                    "Deleting or purging the queue forgets its keys."),
    cfg.StrOpt("client_id_uuid_safe", default=CLIENT_ID_STRICT,
               choices=[(CLIENT_ID_STRICT, "Client-ID must be a UUID."),
                        (CLIENT_ID_OFF, "Client-ID may be any string of "
                                        "min_length_client_id to max_length_client_id "
                                        "characters.")],
               help="What a Client-ID header may hold, as in Zaqar. A UUID is taken in "
                    "its canonical form either way, so a client is the same client "
                    "whatever the setting."),
    cfg.IntOpt("min_length_client_id", default=10, min=1,
               help="Shortest Client-ID accepted when client_id_uuid_safe is off."),
    cfg.IntOpt("max_length_client_id", default=36, min=1,
               help="Longest Client-ID accepted when client_id_uuid_safe is off."),
    cfg.BoolOpt("message_delete_with_claim_id", default=False,
                help="Deleting messages by id needs the claim that holds them, as in "
                     "Zaqar: DELETE of one message without claim_id, and DELETE "
                     "?ids= without claim_ids (or claim_ids without ids), are a 400; "
                     "?ids= deletes only messages that a live claim of claim_ids holds, "
                     "and refuses the request whole otherwise. Pops are allowed. Keeps "
                     "a message from being deleted before a consumer claimed and "
                     "handled it."),
    cfg.StrOpt("message_encryption_algorithms", default="AES256",
               choices=[("AES256", "AES-256 in GCM mode, the key the SHA-256 of a "
                                   "message_encryption_key.")],
               help="The cipher of encrypted message bodies, with Zaqar's name and "
                    "value: AES-256, keyed with the SHA-256 of a "
                    "message_encryption_key, in GCM mode (authenticated: a body altered "
                    "in the store, or sealed with another key, is refused rather than "
                    "decrypted into garbage). Zaqar's RSA is not offered."),
    cfg.ListOpt("message_encryption_key", default=[], secret=True,
                help="Keys of encrypted message bodies (Zaqar's option; a "
                     "comma-separated list here, for rotation). The first seals the "
                     "bodies posted to (or edited in) a queue whose "
                     "_enable_encrypt_messages is true; any of them opens a stored body "
                     "on every read (get, list, claim, pop, push, the audits). To rotate, "
                     "put a new key first and keep the old ones after it until the "
                     "messages they sealed are gone (their ttl, or a dead-letter queue's). "
                     "Unset (the default, unlike Zaqar's fixed default key), no queue may "
                     "set _enable_encrypt_messages (400). Every API host, and every "
                     "delayq-audit run, needs the same keys. A key may hold no comma."),
]

drivers_opts = [
    cfg.StrOpt("transport", default="wsgi", choices=["wsgi"],
               help="Transport driver: HTTP (wsgi), which also serves Zaqar's WebSocket "
                    "API ([drivers:transport:websocket])."),
    cfg.StrOpt("message_store", default="sqlite",
               help="Storage driver for queues and messages: sqlite (embedded), redis, "
                    "mongodb or swift."),
]

wsgi_opts = [
    cfg.HostAddressOpt("bind", default="127.0.0.1",
                       help="Address the HTTP server listens on."),
    cfg.PortOpt("port", default=8888, help="Port the HTTP server listens on."),
    cfg.IntOpt("workers", default=1, min=1,
               help="Number of gunicorn worker processes. Every worker serves the same "
                    "storage backend; none keeps state of its own."),
    cfg.FloatOpt("claim_wait_poll_interval", default=1.0, min=0.05, max=20,
                 help="Long-poll claims (POST .../claims?wait=S): longest time between "
                      "two checks of a queue that has waiting claims, in seconds. Each "
                      "worker process checks each such queue with one cheap backend read, "
                      "whatever the number of waiters. Posts and releases wake the "
                      "waiters of every worker and host at once through the store's "
                      "signals (sqlite, redis, mongodb on a replica set); this interval "
                      "bounds how late a change is seen where a signal is lost or the "
                      "store has none (swift, a standalone mongod). A message known to "
                      "come due sooner is claimed when due."),
    cfg.StrOpt("storage_calls", default="auto", choices=["auto", "inline", "threads"],
               help="How a worker makes the calls of a store whose client library "
                    "blocks (sqlite, mongodb, swift; Redis's calls are always awaited "
                    "on the event loop). threads: each in a pool thread, so a slow store "
                    "never stalls the worker's event loop, at the CPU cost of a thread "
                    "hand-off per call. inline: on the event loop, without that cost; a "
                    "slow store stalls every request of the worker. auto: the store's "
                    "own choice: for sqlite, inline while calls stay brief, moving to "
                    "threads for 5 seconds whenever a call finds the store unavailable "
                    "or takes over 0.1 s; threads for mongodb and swift."),
    cfg.IntOpt("max_request_line", default=8190, min=64,
               help="Longest request line (method, path and query string, HTTP version), "
                    "in bytes. A longer one is answered 414 and the connection closed."),
    cfg.IntOpt("max_header_field_size", default=8190, min=64,
               help="Longest request header field, its name and value together, in "
                    "bytes. A longer one is answered 431 and the connection closed."),
    cfg.IntOpt("max_header_fields", default=100, min=1,
               help="Most header fields in one request. More are answered 431 and the "
                    "connection closed."),
    cfg.IntOpt("max_header_size", default=32768, min=1024,
               help="Largest request head (the request line and every header field, "
                    "with their separators), in bytes. A larger one is answered 431 and "
                    "the connection closed, without waiting for its end: a client sending "
                    "a huge header costs the worker the parsing of this many bytes and of "
                    "two reads (up to 256 KB each) at most."),
    cfg.FloatOpt("request_timeout", default=60.0, min=0.1,
                 help="Seconds a client has to send a whole request (head and body), from "
                      "its first byte, or from the opening of the connection for its first "
                      "request. A request still incomplete then is answered 408 and the "
                      "connection closed; a connection that sent nothing is closed. A "
                      "request received whole is not timed: a long-poll claim waits as "
                      "long as it asks."),
    cfg.FloatOpt("first_byte_timeout", default=5.0, min=0.1,
                 help="Seconds a new connection has to begin its first request (to send "
                      "its first byte, blank lines aside); one that has not is closed "
                      "without an answer. At most request_timeout takes effect."),
    cfg.IntOpt("keepalive_timeout", default=30, min=1,
               help="Seconds an idle keep-alive connection (its last response sent, no "
                    "byte of a next request received) is kept open before the worker "
                    "closes it."),
    cfg.IntOpt("max_connections", default=1000, min=1,
               help="Most client connections one worker process holds. At the cap, a new "
                    "connection makes room by closing one with no request under way: "
                    "first one answered with a refusal, then the oldest that has had no "
                    "response yet, then the longest idle between requests. Only when none "
                    "can be closed are the new connection's requests answered 503 and it "
                    "closed. Each connection takes a file "
                    "descriptor: the worker's open file limit (ulimit -n) must exceed it, "
                    "with room for its storage connections and files."),
    cfg.StrOpt("access_log",
               help="Where the workers write one line per response: a file path (appended "
                    "to), or - for standard output. Unset: no access log."),
]

# Zaqar's WebSocket transport, served by the same workers as HTTP (delayq.websocket).
websocket_opts = [
    cfg.BoolOpt("enabled", default=True,
                help="Serve Zaqar's WebSocket API on path, on the HTTP port. Zaqar serves "
                     "it from a process and port of its own (its bind, port and "
                     "external_port options, which delayq does not have)."),
    cfg.StrOpt("path", default="/v2/ws", regex=r"^/[A-Za-z0-9_./-]*$",
               help="Path of the WebSocket endpoint (ws://host:port/v2/ws). It must not "
                    "be one of the HTTP API's paths. A proxy in front must pass the "
                    "Upgrade and Connection headers on it."),
    cfg.IntOpt("max_frame_size", default=1048576, min=1024,
               help="Largest frame (message) a client may send, in bytes; a larger one "
                    "closes the socket (code 1009). It must leave room for a message "
                    "post of max_messages_post_size and its JSON envelope."),
    cfg.FloatOpt("max_frames_per_second", default=100.0, min=0.1,
                 help="Frames one socket may send per second, on average; a burst of as "
                      "many again is allowed. A socket going faster is closed (code "
                      "1008), so that a flood on one socket does not take the worker's "
                      "time from the others."),
    cfg.FloatOpt("idle_timeout", default=600.0, min=1,
                 help="Seconds a socket may go without sending a frame (pings aside) "
                      "before the server closes it (code 1000)."),
    cfg.FloatOpt("ping_interval", default=20.0, min=1,
                 help="Seconds between the server's pings on an open socket."),
    cfg.FloatOpt("ping_timeout", default=20.0, min=1,
                 help="Seconds a client has to answer a ping (pong) before the socket is "
                      "closed as dead."),
    cfg.IntOpt("max_sockets", default=1000, min=1,
               help="Most WebSocket connections one worker process holds; a handshake "
                    "beyond it is refused (HTTP 403) until one closes. Sockets do not "
                    "count in [drivers:transport:wsgi] max_connections once upgraded."),
]

notification_opts = [
    cfg.BoolOpt("push", default=True,
                help="Whether this API process pushes messages to the webhooks of "
                     "subscriptions. Every process that pushes shares the work of every "
                     "subscription through claims; turn it off on hosts that should "
                     "only serve the API."),
    cfg.IntOpt("max_notifier_workers", default=20, min=1,
               help="Most pushes one API worker process has in flight at once, over all "
                    "subscriptions."),
    cfg.IntOpt("max_pushes_per_subscription", default=4, min=1,
               help="Most pushes one API worker process has in flight at once to one "
                    "subscription, so that a slow or dead subscriber holds up no more "
                    "than these."),
    cfg.FloatOpt("push_timeout", default=10.0, min=0.1, max=600,
                 help="Seconds a webhook has to answer a push; a later answer counts as "
                      "a failed delivery. A push's claim lasts this long plus 10 s: a "
                      "pusher that dies mid-push delays its message that much."),
    cfg.FloatOpt("push_scan_interval", default=5.0, min=0.1, max=3600,
                 help="Seconds between two rounds in which a pushing process reads every "
                      "subscribed queue's next due time. Messages posted through any "
                      "process, subscriptions made through any, and retries this process "
                      "scheduled, are pushed when due without waiting for a round (on a "
                      "store that signals; on swift or a standalone mongod, only what "
                      "this process served); a round finds the rest: claims that "
                      "expired, changes whose signal was lost."),
    cfg.BoolOpt("require_confirmation", default=False,
                help="Whether a new subscription must be confirmed before it is pushed "
                     "anything, as in Zaqar. On, a subscription starts unconfirmed and its "
                     "subscriber is sent a confirmation request (a POST of Message_Type "
                     "SubscriptionConfirmation carrying a pre-signed URL of PUT "
                     ".../subscriptions/{id}/confirm, so [signed_url] secret_key must be "
                     "set); no message is claimed for it until a PUT of "
                     "{\"confirmed\": true} there. A change of its subscriber makes it "
                     "unconfirmed again. Off, subscriptions are created confirmed and "
                     "the confirmed flag does not hold pushes back."),
    # mailto: subscribers (delayq.push.mail), under Zaqar's option names.
    cfg.StrOpt("smtp_mode", default="self_local", choices=["self_local"],
               help="How mail to mailto: subscribers is sent. Only self_local (SMTP to "
                    "smtp_host:smtp_port) is offered: Zaqar's third_part runs "
                    "smtp_command, a process per mail."),
    cfg.HostAddressOpt("smtp_host", default="127.0.0.1",
                       help="SMTP server mail to mailto: subscribers goes through."),
    cfg.PortOpt("smtp_port", default=25, help="Port of smtp_host."),
    cfg.StrOpt("smtp_user_name", help="User to log in to the SMTP server as; unset, "
                                      "no login."),
    cfg.StrOpt("smtp_user_password", secret=True, help="Password of smtp_user_name."),
    cfg.StrOpt("external_confirmation_url",
               help="Page a mailto: subscriber's confirmation mail links to, with the "
                    "signed values as query parameters (Zaqar's)."),
    cfg.DictOpt("subscription_confirmation_email_template",
                default={"topic": "Zaqar Notification - Subscription Confirmation",
                         "body": "You have chosen to subscribe to the queue: {0}. This "
                                 "queue belongs to project: {1}. To confirm this "
                                 "subscription, click or visit this link below: {2}",
                         "sender": "Zaqar Notifications <no-reply@openstack.org>"},
                help="Subject (topic), body and sender of a subscription's confirmation "
                     "mail; in body, {0} is the queue, {1} the project, {2} the link."),
    cfg.DictOpt("unsubscribe_confirmation_email_template",
                default={"topic": "Zaqar Notification - Unsubscribe Confirmation",
                         "body": "You have unsubscribed successfully to the queue: {0}. "
                                 "This queue belongs to project: {1}. To resubscribe this "
                                 "subscription, click or visit this link below: {2}",
                         "sender": "Zaqar Notifications <no-reply@openstack.org>"},
                help="As subscription_confirmation_email_template, for the mail sent "
                     "when a subscription is unconfirmed."),
    cfg.ListOpt("allowed_webhook_networks", default=[],
                item_type=Network(),
                help="Networks (CIDR, e.g. 10.20.0.0/16 or fd00::/8; a bare address is one "
                     "host) that subscribers may be in besides the public internet. By "
                     "default a subscriber whose host is or resolves to a loopback, "
                     "private, link-local, multicast, reserved or otherwise non-public "
                     "address is refused (400) when a subscription is created or changed, "
                     "and a push to such an address is refused as a failed delivery. An "
                     "address in one of these networks is allowed whatever its kind; "
                     "0.0.0.0/0 and ::/0 allow every address."),
]

events_opts = [
    cfg.BoolOpt("enabled", default=True,
                help="Record the event trail (posted, claimed, popped, deleted, "
                     "dead_lettered, expired, purged) in the message store, for "
                     "delayq-audit."),
    cfg.IntOpt("retention", default=DEFAULT_RETENTION, min=60,
               help="Seconds events are kept; older ones are removed as new ones are "
                    "written (Redis, SQLite) or by the backend's own expiry (MongoDB, "
                    "Swift). On Redis every event costs memory (about 75 bytes): size "
                    "it as events per second x 75 x retention."),
]

quotas_opts = [
    cfg.IntOpt("max_queues_per_project", default=0, min=0,
               help="Most queues a project may have; 0 sets no limit. A PUT that would "
                    "create a queue, a message post that would create its queue and a "
                    "redrive to a destination queue that does not exist are refused (403) "
                    "once the project has this many. A dead-letter move creates its "
                    "dead-letter queue regardless, and so does a redrive sending a message "
                    "back to a source queue deleted since. Checked before the creation: "
                    "concurrent creations of different queues may together pass it."),
    cfg.IntOpt("max_messages_per_queue", default=0, min=0,
               help="Most live messages a queue may hold (free, delayed and claimed; "
                    "expired ones do not count); 0 sets no limit. A post that would take "
                    "the queue past it is refused whole (403), storing none of its "
                    "messages. Dead-letter moves and redrives are never refused. Exact on "
                    "sqlite and redis (checked in the post's transaction or script); on "
                    "mongodb and swift checked against the queue's tallies just before "
                    "the write, so concurrent posts may together pass it by up to the "
                    "messages of all of them but one (on swift also by other processes' "
                    "posts of the last tally_flush_interval)."),
]


def events_settings(conf: cfg.ConfigOpts) -> Settings:
    """The event-trail settings a driver is built with."""
    group = conf[EVENTS_GROUP]
    return Settings(retention=group.retention) if group.enabled else OFF


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register every option of delayq on *conf*.

    oslo.policy's ``[oslo_policy]`` options are registered too, so that they can be set
    before the policy is built; keystonemiddleware registers ``[keystone_authtoken]``
    itself when ``auth_strategy = keystone`` builds it.
    """
    policy_opts.set_defaults(conf)
    conf.register_opts(auth_opts)
    conf.register_opts(message_opts)
    conf.register_opts(signed_url_opts, group=SIGNED_URL_GROUP)
    conf.register_opts(transport_opts, group=TRANSPORT_GROUP)
    conf.register_opts(drivers_opts, group=DRIVERS_GROUP)
    conf.register_opts(wsgi_opts, group=WSGI_GROUP)
    conf.register_opts(websocket_opts, group=WEBSOCKET_GROUP)
    conf.register_opts(events_opts, group=EVENTS_GROUP)
    conf.register_opts(notification_opts, group=NOTIFICATION_GROUP)
    conf.register_opts(quotas_opts, group=QUOTAS_GROUP)
    for module in DRIVER_OPTIONS.values():
        conf.register_opts(module.OPTS, group=module.GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option, by group, for ``oslo-config-generator``."""
    return [
        (DEFAULT_GROUP, auth_opts + message_opts),
        (SIGNED_URL_GROUP, signed_url_opts),
        (TRANSPORT_GROUP, transport_opts),
        (DRIVERS_GROUP, drivers_opts),
        (WSGI_GROUP, wsgi_opts),
        (WEBSOCKET_GROUP, websocket_opts),
        (EVENTS_GROUP, events_opts),
        (NOTIFICATION_GROUP, notification_opts),
        (QUOTAS_GROUP, quotas_opts),
        *((module.GROUP, module.OPTS) for module in DRIVER_OPTIONS.values()),
    ]


def load(argv: list[str] | None = None, config_files: list[str] | None = None
         ) -> cfg.ConfigOpts:
    """Build a fresh ``ConfigOpts`` with every delayq option registered and parsed."""
    conf = cfg.ConfigOpts()
    register_opts(conf)
    conf(args=argv or [], project="delayq", default_config_files=config_files or [],
         validate_default_values=True)
    return conf
