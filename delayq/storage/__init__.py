"""Storage drivers, chosen by ``[drivers] message_store``.

Each driver lives in a package of its own with the same file names: ``options.py``
declares its option group, ``driver.py`` its ``Driver`` class.

``DRIVERS`` maps the name operators write in ``message_store`` (Zaqar's names) to the
package.
"""

from __future__ import annotations

import importlib

from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq.conf import DRIVERS_GROUP
from delayq.storage.base import Driver

DRIVERS = {"sqlite": "sqlite", "redis": "redis", "mongodb": "mongo", "swift": "swift"}


def _options_module(name: str):
    return importlib.import_module(f"delayq.storage.{DRIVERS[name]}.options")


def driver_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every driver's option group, for the sample configuration file."""
    return [(mod.GROUP, mod.OPTS) for mod in map(_options_module, DRIVERS)]


def register_driver_opts(conf: cfg.ConfigOpts) -> None:
    for group, opts in driver_opts():
        conf.register_opts(opts, group=group)


def load_driver(conf: cfg.ConfigOpts) -> Driver:
    """The configured driver, connected."""
    name = conf[DRIVERS_GROUP].message_store
    if name not in DRIVERS:
        raise ValueError(f"[{DRIVERS_GROUP}] message_store = {name!r} is not one of "
                         f"{', '.join(DRIVERS)}.")
    module = importlib.import_module(f"delayq.storage.{DRIVERS[name]}.driver")
    return module.Driver.from_conf(conf)


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
    conf.set_override(option, value, group=_options_module(name).GROUP)
    return conf
