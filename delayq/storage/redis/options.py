"""Options of the Redis driver, in ``[drivers:message_store:redis]``."""

from oslo_config import cfg

GROUP = "drivers:message_store:redis"

OPTS = [
    cfg.StrOpt("uri", default="redis://127.0.0.1:6379/0", secret=True,
               help="Where Redis is: redis://[:password@]host:port[/db] for one server "
                    "(rediss:// for TLS); for a Redis Cluster, several seed nodes "
                    "separated by commas, redis://host1:port1,host2:port2 (a single seed "
                    "of a cluster works too: cluster mode is detected)."),
    cfg.StrOpt("namespace", default="dq",
               help="Prefix of every key delayq writes, so several deployments can share "
                    "one Redis."),
    cfg.FloatOpt("socket_timeout", default=5.0, min=0.1,
                 help="Seconds to wait for a Redis reply before the request fails "
                      "with 503."),
    cfg.FloatOpt("connect_timeout", default=2.0, min=0.1,
                 help="Seconds to wait for a connection to Redis."),
    cfg.IntOpt("max_connections", default=64, min=1,
               help="Most connections each API worker process opens (per cluster node)."),
    cfg.IntOpt("reap_interval", default=10, min=0,
               help="Seconds between passes of the background reaper, which removes "
                    "expired messages of queues nobody touches and completes dead-letter "
                    "moves a crashed process left half done. One worker of the deployment "
                    "runs each pass. 0 disables it (requests still reap the queues they "
                    "touch)."),
    cfg.IntOpt("move_marker_ttl", default=3600, min=60,
               help="Seconds a dead-letter queue remembers a move received from a queue in "
                    "another cluster slot, so a move repeated after a crash is not applied "
                    "twice. Must exceed the longest time an API process can stall between "
                    "two Redis calls."),
]
