"""Options of the MongoDB driver, in ``[drivers:message_store:mongodb]``."""

from oslo_config import cfg

GROUP = "drivers:message_store:mongodb"

OPTS = [
    cfg.StrOpt("uri", default="mongodb://127.0.0.1:27017/?replicaSet=rs0", secret=True,
               help="MongoDB connection string of a replica set (or of the mongos routers "
                    "of a sharded cluster): mongodb://[user:password@]host1:port1,"
                    "host2:port2/?replicaSet=NAME, or mongodb+srv://. Options in the "
                    "string (tls, authSource, ...) are passed to pymongo; the options "
                    "below win over the same ones in the string."),
    cfg.StrOpt("database", default="delayq",
               help="Database holding delayq's collections: queues, messages, claims, "
                    "subscriptions, events, tallies, clock and locks."),
    cfg.FloatOpt("server_selection_timeout", default=5.0, min=0.1,
                 help="Seconds a request waits for a usable primary (during an election, "
                      "or while MongoDB is down) before failing with 503."),
    cfg.FloatOpt("connect_timeout", default=5.0, min=0.1,
                 help="Seconds to wait for a new connection to a MongoDB server."),
    cfg.FloatOpt("socket_timeout", default=10.0, min=0.1,
                 help="Seconds to wait for a MongoDB reply before the request fails "
                      "with 503."),
    cfg.IntOpt("max_pool_size", default=100, min=1,
               help="Most connections each API worker process opens to each server."),
    cfg.StrOpt("write_concern", default="majority",
               help="Write concern 'w' of every write: 'majority' (a write acknowledged "
                    "to a producer survives the loss of the primary), or a number of "
                    "members, e.g. 1 (faster; an acknowledged write can be rolled back "
                    "by a failover)."),
    cfg.BoolOpt("journal", default=True,
                help="Writes are acknowledged only once in the on-disk journal."),
    cfg.FloatOpt("write_timeout", default=10.0, min=0,
                 help="Seconds to wait for the write concern to be satisfied before the "
                      "request fails with 503 (0 waits for ever). The write may still "
                      "apply."),
    cfg.FloatOpt("clock_sync_interval", default=30.0, min=1.0,
                 help="Seconds between readings of the primary's clock. Each API process "
                      "keeps time by the primary's clock, read this often and advanced "
                      "by the process's monotonic clock in between."),
    cfg.IntOpt("reap_interval", default=10, min=0,
               help="Seconds between passes of the background reaper, which removes the "
                    "expired messages of every queue and counts each as expired (the "
                    "/metrics counter and the event trail). One worker of the deployment "
                    "runs each pass. 0 disables it: only requests then remove, and "
                    "count, the expired messages they meet (claims, pops, deletes by id), "
                    "and MongoDB drops the others unseen after expired_retention."),
    cfg.IntOpt("expired_retention", default=3600, min=0,
               help="Seconds an expired message stays stored for delayq's reaper to "
                    "remove and count it, before MongoDB's TTL monitor drops it unseen "
                    "(uncounted, no expired event): the expireAfterSeconds of the "
                    "messages' TTL index, changed in place (collMod) when a worker starts "
                    "with another value. Keep it well above reap_interval. With "
                    "reap_interval 0 only what requests meet is counted."),
]
