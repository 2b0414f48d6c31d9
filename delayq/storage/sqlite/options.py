"""Options of the SQLite driver, in ``[drivers:message_store:sqlite]``."""

from oslo_config import cfg

GROUP = "drivers:message_store:sqlite"

OPTS = [
    cfg.StrOpt("path", default="delayq.sqlite",
               help="Database file; a relative path is taken from the server's working "
                    "directory. Every worker process and host must see the same file on a "
                    "local disk (SQLite's WAL mode does not work over network filesystems)."),
    cfg.IntOpt("busy_timeout", default=30000, min=0,
               help="Milliseconds a write waits for another process's write transaction "
                    "before failing."),
    cfg.StrOpt("synchronous", default="NORMAL", choices=["OFF", "NORMAL", "FULL", "EXTRA"],
               help="SQLite's synchronous pragma. NORMAL (with WAL) survives a crash of "
                    "the server; FULL also survives a power loss, at a cost per write."),
    cfg.IntOpt("expiry_batch", default=64, min=1,
               help="Most expired messages and claims removed by one write request."),
]
