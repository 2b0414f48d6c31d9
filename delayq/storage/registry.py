"""The storage driver ``[drivers] message_store`` names, loaded and connected.

``DRIVERS`` maps the name operators write in ``message_store`` (Zaqar's names) to the
driver's package.
"""

from __future__ import annotations

import importlib

from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq.conf import DRIVER_GROUPS, DRIVERS_GROUP
from delayq.storage.base import Driver, Endings, ignore_endings

DRIVERS = {"sqlite": "sqlite", "redis": "redis", "mongodb": "mongo", "swift": "swift"}


def load_driver(conf: cfg.ConfigOpts, *, endings: Endings = ignore_endings) -> Driver:
    """The configured driver, connected, telling *endings* of the messages leaving
    queues."""
    name = conf[DRIVERS_GROUP].message_store
    if name not in DRIVERS:
        raise ValueError(f"[{DRIVERS_GROUP}] message_store = {name!r} is not one of "
                         f"{', '.join(DRIVERS)}.")
    module = importlib.import_module(f"delayq.storage.{DRIVERS[name]}.driver")
    return module.Driver.from_conf(conf, endings=endings)


def conf_for_uri(uri: str) -> cfg.ConfigOpts:
    """A configuration whose message store is the backend named by *uri*.

    ``sqlite:///absolute/path.sqlite`` (``sqlite://relative.sqlite``), ``redis://`` or
    ``rediss://`` as the Redis driver's ``uri``, ``mongodb://`` or ``mongodb+srv://`` as
    the MongoDB driver's. Swift needs credentials: use a configuration file.
    """
    scheme, sep, rest = uri.partition("://")
    conf = delayq_conf.load([])
    if not sep:
        raise ValueError("a store URI looks like sqlite:///path, redis://host:port or "
                         "mongodb://host:port")
    if scheme == "sqlite":
        name, option, value = "sqlite", "path", rest
    elif scheme in ("redis", "rediss"):
        name, option, value = "redis", "uri", uri
    elif scheme in ("mongodb", "mongodb+srv"):
        name, option, value = "mongodb", "uri", uri
    else:
        raise ValueError(f"no driver serves {scheme}:// URIs (sqlite, redis, rediss, "
                         "mongodb, mongodb+srv); for Swift use a configuration file")
    if not value:
        raise ValueError(f"{scheme}:// needs a location")
    conf.set_override("message_store", name, group=DRIVERS_GROUP)
    conf.set_override(option, value, group=DRIVER_GROUPS[name])
    return conf
