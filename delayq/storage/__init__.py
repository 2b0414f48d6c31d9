"""Storage drivers, chosen by ``[drivers] message_store``.

Each driver lives in a package of its own with the same file names: ``options.py``
declares its option group, ``driver.py`` its ``Driver`` class.

``DRIVERS`` maps the name operators write in ``message_store`` (Zaqar's names) to the
package.
"""

from __future__ import annotations

import importlib

from oslo_config import cfg

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
