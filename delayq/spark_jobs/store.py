"""Where an audit's message store is, and opening it for reading.

The Spark driver and every executor open their own driver from the same
``StoreLocation``: it is plain data, pickled into each input partition, so executors on
other machines need delayq installed, the configuration file at the same path (or the URI
valid from there), and network access to the backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq.conf import DRIVERS_GROUP
from delayq.storage.base import Driver
from delayq.storage.mongo.options import GROUP as MONGO_GROUP
from delayq.storage.redis.options import GROUP as REDIS_GROUP
from delayq.storage.registry import conf_for_uri, load_driver
from delayq.storage.sqlite.options import GROUP as SQLITE_GROUP
from delayq.storage.swift.options import GROUP as SWIFT_GROUP

CONFIG_FILE = "config_file"
URI = "uri"


class StoreError(Exception):
    """The store could not be opened, or does not answer."""


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """A message store named by exactly one of a configuration file and a driver URI."""

    config_file: str | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        if (self.config_file is None) == (self.uri is None):
            raise ValueError(f"give exactly one of {CONFIG_FILE} and {URI}")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StoreLocation:
        """The location named by data source options ``config_file`` or ``uri``."""
        return cls(config_file=options.get(CONFIG_FILE) or None, uri=options.get(URI) or None)

    def as_options(self) -> dict[str, str]:
        """Data source options naming this location."""
        if self.config_file is not None:
            return {CONFIG_FILE: self.config_file}
        return {URI: self.uri}


def load_conf(location: StoreLocation) -> cfg.ConfigOpts:
    """The configuration of the store at *location*, set up for reading only.

    Raises ValueError when the file is missing or invalid, or the URI malformed.
    """
    if location.config_file is not None:
        if not os.path.isfile(location.config_file):
            raise ValueError(f"no configuration file at {location.config_file}")
        try:
            conf = delayq_conf.load(config_files=[location.config_file])
        except cfg.Error as exc:
            raise ValueError(f"{location.config_file}: {exc}") from exc
    else:
        conf = conf_for_uri(location.uri)
    # An audit only reads: it must not start a background reaper, which would expire
    # messages (and write their events) from every Spark task.
    for group in (REDIS_GROUP, MONGO_GROUP, SWIFT_GROUP):
        conf.set_override("reap_interval", 0, group=group)
    return conf


def driver_name(conf: cfg.ConfigOpts) -> str:
    """The ``[drivers] message_store`` of *conf*."""
    return conf[DRIVERS_GROUP].message_store


def open_driver(location: StoreLocation) -> Driver:
    """A connected driver of the store at *location*; the caller closes it.

    Raises ValueError for a bad location, StoreError when the store cannot be opened or
    does not answer.
    """
    conf = load_conf(location)
    if driver_name(conf) == "sqlite":
        # Opening a missing SQLite file would create an empty store: a typo, not an audit.
        path = conf[SQLITE_GROUP].path
        if not os.path.isfile(path):
            raise StoreError(f"no SQLite database at {path}")
    try:
        driver = load_driver(conf)
    except ValueError:
        raise
    except Exception as exc:  # drivers raise their client library's errors
        raise StoreError(f"cannot open the {driver_name(conf)} store: {exc}") from exc
    try:
        answers = driver.ping()
    except Exception:  # a ping that raises is a store that does not answer
        answers = False
    if not answers:
        driver.close()
        raise StoreError(f"the {driver_name(conf)} store does not answer")
    return driver
