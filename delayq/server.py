"""``delayq-server``: the API served by gunicorn with uvicorn workers.

Settings come from ``[drivers:transport:wsgi]`` in the configuration file; ``--bind``,
``--port`` and ``--workers`` on the command line win over it. Each worker process builds
its own app and storage connections after the fork, and serves HTTP with
``delayq.http_protocol`` (uvicorn's httptools protocol within the header limits,
timeouts and connection cap of those options).

delayq's own log records (INFO and up) go to standard error in gunicorn's error-log
format, with the logger's name: gunicorn and uvicorn set up only their own loggers.

Workers share their Prometheus counters through files in one directory
(``delayq.metrics``): ``--metrics-dir`` or ``PROMETHEUS_MULTIPROC_DIR`` names it, else a
temporary directory is made and removed at exit. It is emptied at start either way.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import sys
import tempfile

from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from oslo_config import cfg
from uvicorn_worker import UvicornWorker

from delayq import conf as delayq_conf
from delayq.conf import WEBSOCKET_GROUP, WSGI_GROUP
from delayq.http_protocol import HttpLimits, protocol_factory
from delayq.validation import MAX_CLAIM_WAIT

# delayq.metrics.MULTIPROC_ENV, spelled out: importing delayq.metrics (and so
# prometheus_client) here, before the variable is set, would fix every forked worker in
# single-process mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# By name, so that gunicorn's log says which ("Using worker: delayq.server.Worker").
WORKER_CLASS = "delayq.server.Worker"
LOGGER_CLASS = "delayq.server.Logger"

# gunicorn's error-log format (glogging.CONFIG_DEFAULTS), with the logger's name added.
LOG_FORMAT = "%(asctime)s [%(process)d] [%(levelname)s] %(name)s: %(message)s"
LOG_DATE_FORMAT = "[%Y-%m-%d %H:%M:%S %z]"
# An access-log line: uvicorn's message (client, request line, status) after the time
# and the worker's pid.
ACCESS_LOG_FORMAT = "%(asctime)s [%(process)d] %(message)s"


class Worker(UvicornWorker):
    """uvicorn's gunicorn worker, serving HTTP with ``LimitedHttpToolsProtocol`` and the
    limits of the ``Server`` that runs it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # self.app is the gunicorn application: the Server. uvicorn loads self.config
        # (and its protocol) later, in the worker's event loop. Made in the arbiter, the
        # factory's count of connections is the worker's own after the fork.
        self.config.http = protocol_factory(self.app.http_limits)
        for name, value in self.app.ws_settings.items():
            setattr(self.config, name, value)

    async def callback_notify(self) -> None:
        """Tell the master the worker lives; stop, as gunicorn's own workers do, once the
        master is gone (killed with SIGKILL, it signals no worker): an orphan would go on
        serving the port, and pushing, with nobody to stop it."""
        if os.getppid() != self.ppid:
            self.log.info("Parent changed, shutting down: %s", self)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.notify()


class Logger(glogging.Logger):
    """gunicorn's logger, with the time and the pid on each access-log line."""

    def setup(self, cfg) -> None:
        super().setup(cfg)
        formatter = logging.Formatter(ACCESS_LOG_FORMAT, LOG_DATE_FORMAT)
        for handler in self.access_log.handlers:
            handler.setFormatter(formatter)


def http_limits(conf: cfg.ConfigOpts) -> HttpLimits:
    """The HTTP limits ``[drivers:transport:wsgi]`` sets."""
    wsgi = conf[WSGI_GROUP]
    return HttpLimits(
        max_request_line=wsgi.max_request_line,
        max_header_field_size=wsgi.max_header_field_size,
        max_header_fields=wsgi.max_header_fields,
        max_header_size=wsgi.max_header_size,
        request_timeout=wsgi.request_timeout,
        first_byte_timeout=wsgi.first_byte_timeout,
        max_connections=wsgi.max_connections)


def ws_settings(conf: cfg.ConfigOpts) -> dict[str, object]:
    """uvicorn's WebSocket settings from ``[drivers:transport:websocket]``: it enforces the
    frame size and the pings before a frame reaches the app (``delayq.websocket``)."""
    group = conf[WEBSOCKET_GROUP]
    if not group.enabled:
        return {"ws": "none"}  # an Upgrade is then answered as plain HTTP
    return {
        # websockets' Sans-I/O protocol, which uvicorn's "auto" does not pick yet: it
        # stops reading a socket until the app has taken its last frame, so a flood
        # waits in the peer's buffers, not the worker's.
        "ws": "websockets-sansio",
        "ws_max_size": group.max_frame_size,
        "ws_ping_interval": group.ping_interval,
        "ws_ping_timeout": group.ping_timeout,
        # Compression would let a small frame inflate to max_frame_size at the
        # worker's cost, and Zaqar's clients do not ask for it.
        "ws_per_message_deflate": False,
    }


class Server(BaseApplication):
    """gunicorn, configured from delayq's options rather than gunicorn's own CLI."""

    def __init__(self, conf: cfg.ConfigOpts, bind: str, workers: int) -> None:
        self.conf = conf
        self.http_limits = http_limits(conf)
        self.ws_settings = ws_settings(conf)
        wsgi = conf[WSGI_GROUP]
        self.settings = {
            "bind": bind, "workers": workers, "worker_class": WORKER_CLASS,
            "logger_class": LOGGER_CLASS, "accesslog": wsgi.access_log or None,
            "errorlog": "-", "loglevel": "info",
            # A stopping worker answers its long-poll claims (each waits at most
            # MAX_CLAIM_WAIT) before it exits, rather than cutting their connections.
            "graceful_timeout": MAX_CLAIM_WAIT + 5,
            # uvicorn's worker takes it as its keep-alive timeout.
            "keepalive": wsgi.keepalive_timeout,
            # gunicorn's control socket sits at one per-user path, so several servers on
            # one host would unlink each other's; delayq has no use for it.
            "control_socket_disable": True,
            "child_exit": child_exit,
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.settings.items():
            if key in self.cfg.settings:  # older gunicorn lacks some settings
                self.cfg.set(key, value)

    def load(self):
        from delayq.api.app import create_app

        return create_app(self.conf)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="delayq-server",
        description="Serve the delayq API (Zaqar v2) with gunicorn.")
    parser.add_argument("--config-file", action="append", default=[], metavar="FILE",
                        help="oslo.config file; may be given more than once.")
    parser.add_argument("--bind", help="Listen address (default: [drivers:transport:wsgi] "
                                       "bind, 127.0.0.1).")
    parser.add_argument("--port", type=int, help="Listen port (default: "
                                                 "[drivers:transport:wsgi] port, 8888).")
    parser.add_argument("--metrics-dir", metavar="DIR",
                        help="Directory the workers share Prometheus values in; emptied "
                             "at start (default: $PROMETHEUS_MULTIPROC_DIR, else a new "
                             "temporary directory).")
    parser.add_argument("--workers", type=int, help="Worker processes (default: "
                                                    "[drivers:transport:wsgi] workers, 1).")
    return parser.parse_args(argv), [arg for f in parser.parse_args(argv).config_file
                                     for arg in ("--config-file", f)]


def main(argv: list[str] | None = None) -> None:
    args, oslo_args = parse_args(sys.argv[1:] if argv is None else argv)
    conf = delayq_conf.load(oslo_args)
    wsgi = conf[WSGI_GROUP]
    host = args.bind or wsgi.bind
    port = args.port if args.port is not None else wsgi.port
    workers = args.workers if args.workers is not None else wsgi.workers
    if workers < 1:
        sys.exit("delayq-server: --workers must be at least 1")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    use_metrics_dir(args.metrics_dir or os.environ.get(MULTIPROC_ENV))
    use_logging()
    Server(conf, address, workers).run()


def use_logging() -> None:
    """Send the ``delayq`` loggers' records, INFO and up, to standard error.

    Set in the master before gunicorn forks, so every worker inherits it. Without it a
    worker's warnings reached standard error bare (Python's last-resort handler: no time,
    no process, no level) and its INFO records nowhere.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
    logger = logging.getLogger("delayq")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def use_metrics_dir(directory: str | None) -> None:
    """Make *directory* (or a new temporary one) the workers' shared metrics directory.

    Set in the environment before gunicorn forks, so that every worker's
    prometheus_client, imported after the fork with the app, starts in multiprocess mode.
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix="delayq-metrics-")
        atexit.register(shutil.rmtree, directory, True)
    os.environ[MULTIPROC_ENV] = directory
    from delayq.metrics import prepare_multiprocess_dir

    prepare_multiprocess_dir(directory)


def child_exit(server, worker) -> None:
    """gunicorn hook, in the arbiter: a worker is gone; let its metric files rest."""
    from delayq.metrics import mark_worker_dead

    mark_worker_dead(worker.pid)


if __name__ == "__main__":
    main()
