"""Where an audit's message store is, and opening it for reading.

The Spark driver and every executor open their own driver from the same
``StoreLocation``: it is plain data, pickled into each input partition, so executors on
other machines need delayq installed, the configuration file at the same path (or the URI
valid from there), and network access to the backend. ``absolute`` makes a location mean
the same store from every working directory before it is handed to Spark.

Errors name the store's address (``address``: a path, a URI without its credentials,
Swift's auth URL) and the cause.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq import encryption, errors
from delayq.conf import DRIVERS_GROUP, TRANSPORT_GROUP
from delayq.storage.mongo.options import GROUP as MONGO_GROUP
from delayq.storage.redis.options import GROUP as REDIS_GROUP
from delayq.storage.registry import conf_for_uri, load_driver
from delayq.storage.sqlite.options import GROUP as SQLITE_GROUP
from delayq.storage.swift.options import GROUP as SWIFT_GROUP
from delayq.synchronous import Synchronous

CONFIG_FILE = "config_file"
URI = "uri"
SQLITE_SCHEME = "sqlite://"
# The drivers' warnings are written for a server's log: the Redis driver's about the
# server's persistence settings on connect (the operator's concern, not an audit's,
# which only reads; every Spark task connecting would repeat it), a store that does not
# answer (which the audit reports itself, with the cause, once).
QUIET_LOGGERS = ("delayq.storage",)


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
        assert self.uri is not None  # exactly one of the two is given (__post_init__)
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
        assert location.uri is not None  # exactly one of the two is given
        conf = conf_for_uri(location.uri)
    # An audit only reads: it must not start a background reaper, which would expire
    # messages (and write their events) from every Spark task.
    for group in (REDIS_GROUP, MONGO_GROUP, SWIFT_GROUP):
        conf.set_override("reap_interval", 0, group=group)
    return conf


def driver_name(conf: cfg.ConfigOpts) -> str:
    """The ``[drivers] message_store`` of *conf*."""
    return conf[DRIVERS_GROUP].message_store


def absolute(location: StoreLocation) -> StoreLocation:
    """*location* as it reads from any working directory: the configuration file's
    absolute path, and a SQLite database named by a relative path (in a ``sqlite://``
    URI or the configuration file) as an absolute ``sqlite:///`` URI, taken from this
    process's working directory.

    Raises ValueError when the configuration file is missing or invalid.
    """
    if location.uri is not None:
        if location.uri.startswith(SQLITE_SCHEME):
            path = location.uri[len(SQLITE_SCHEME):]
            if path and not os.path.isabs(path):
                return StoreLocation(uri=SQLITE_SCHEME + os.path.abspath(path))
        return location
    assert location.config_file is not None  # exactly one of the two is given
    config_file = os.path.abspath(location.config_file)
    conf = load_conf(StoreLocation(config_file=config_file))
    if driver_name(conf) == "sqlite" and not os.path.isabs(conf[SQLITE_GROUP].path):
        return StoreLocation(uri=SQLITE_SCHEME + os.path.abspath(conf[SQLITE_GROUP].path))
    return StoreLocation(config_file=config_file)


def _without_credentials(uri: str) -> str:
    """*uri* with any user name and password left out."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def address(conf: cfg.ConfigOpts) -> str:
    """Where the store of *conf* is, for messages: never a password."""
    name = driver_name(conf)
    if name == "sqlite":
        return os.path.abspath(conf[SQLITE_GROUP].path)
    if name == "swift":
        return _without_credentials(conf[SWIFT_GROUP].auth_url)
    group = REDIS_GROUP if name == "redis" else MONGO_GROUP
    return _without_credentials(conf[group].uri)


def cause(exc: BaseException) -> str:
    """What *exc* says went wrong, with its type."""
    if isinstance(exc, errors.StorageUnavailable):
        return exc.detail
    said = str(exc).strip()
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


# The option that keeps deployments sharing one backend apart, per driver.
SEPARATORS = {"redis": (REDIS_GROUP, "namespace"), "mongo": (MONGO_GROUP, "database"),
              "swift": (SWIFT_GROUP, "container_prefix")}


def identity(location: StoreLocation) -> str:
    """The store of *location* however it is named (a configuration file or a URI):
    its driver, its address and what keeps deployments on one backend apart (Redis'
    namespace, MongoDB's database, Swift's container prefix). Never a password."""
    conf = load_conf(location)
    name = driver_name(conf)
    where = address(conf)
    # One SQLite file has one name: through links, and '//x' being '/x'.
    found = f"{name} {os.path.realpath(where) if name == 'sqlite' else where}"
    if name in SEPARATORS:
        group, option = SEPARATORS[name]
        found += f" {option}={conf[group][option]}"
    return found


def describe(location: StoreLocation) -> str:
    """"the <driver> store at <address>" of *location*, for messages."""
    conf = load_conf(location)
    return f"the {driver_name(conf)} store at {address(conf)}"


def body_cipher(location: StoreLocation) -> encryption.BodyCipher | None:
    """The cipher of the ``[transport] message_encryption_key`` of *location*'s
    configuration, which opens the encrypted bodies the audits read; None without keys
    (a location given as a URI has none)."""
    return encryption.from_keys(load_conf(location)[TRANSPORT_GROUP].message_encryption_key)


def _quiet_store_logs() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def open_driver(location: StoreLocation) -> Synchronous:
    """A connected driver of the store at *location*, called blocking
    (``delayq.synchronous``); the caller closes it.

    Raises ValueError for a bad location, StoreError (naming the store's address and
    the cause) when the store cannot be opened or does not answer.
    """
    conf = load_conf(location)
    name, where = driver_name(conf), address(conf)
    if name == "sqlite" and not os.path.isfile(where):
        # Opening a missing SQLite file would create an empty store: a typo, not an audit.
        raise StoreError(f"no SQLite database at {where}")
    _quiet_store_logs()
    try:
        driver = Synchronous(load_driver(conf))
    except ValueError:
        raise
    except Exception as exc:  # drivers raise their client library's errors
        raise StoreError(f"cannot open the {name} store at {where}: {cause(exc)}") from exc
    try:
        # The clock is what an audit asks first; a store that does not answer says why.
        driver.now()
        answers = driver.ping()
    except Exception as exc:
        driver.close()
        raise StoreError(f"the {name} store at {where} does not answer: {cause(exc)}"
                         ) from exc
    if not answers:
        driver.close()
        raise StoreError(f"the {name} store at {where} does not answer")
    return driver
